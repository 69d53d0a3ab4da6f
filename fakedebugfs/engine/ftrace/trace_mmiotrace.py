"""The ``mmiotrace`` tracer (``mmio_tracer``, kernel/trace/trace_mmiotrace.c
and arch/x86/mm/mmio-mod.c, 6.12), as the Debian 6.12 guest shows it.

* Selecting it (top level only: no ``allow_instances``, so an instance
  answers EINVAL and does not list it) resets the buffers
  (``tracer_init``, ``mmio_reset_data``) and turns MMIO tracing on
  (``enable_mmiotrace``), which takes every CPU but the first offline
  (``enter_uniprocessor``): ``trace``'s header then says ``#P:1``.  Leaving
  it resets the buffers again (``mmio_trace_reset``) and brings the CPUs
  back; ``tracing_on`` set resets them too (``mmio_trace_start``).
* ``trace_pipe``, opened under it, first hands out ``VERSION 20070824``
  (``mmio_pipe_open``), then one ``PCIDEV`` line per PCI device
  (``mmio_read``): the machine's devices, which the profile keeps
  (``pci_devices``, captured in the oracle guest by
  :mod:`fakedebugfs.oracle.pci_devices`; none without it), then the
  entries; a read first reports events the buffers lost since the last
  (``MARK 0.000000 Lost N events.``, ``count_overruns``).
* Its ``print_line`` prints its two entries (``mmiotrace_rw``,
  ``mmiotrace_map``) and markers (``MARK <s.us> <text>``) in the
  mmiotrace text format, and nothing for any other entry.  The fake has no
  ioremapped memory to fault on, so it records no ``mmiotrace_rw`` or
  ``_map`` entry of its own: with no MMIO activity the guest shows only the
  header, the PCI devices and markers, and so does the fake.

The CPUs: the fake's sources keep emitting on every CPU while the tracer
is current (the fake does not take CPUs offline); only the header's
count follows the kernel.
"""

from __future__ import annotations

VERSION_LINE = "VERSION 20070824\n"
# enum mmio_opcode (include/linux/mmiotrace.h)
MMIO_READ, MMIO_WRITE, MMIO_PROBE, MMIO_UNPROBE, MMIO_UNKNOWN_OP = 1, 2, 3, 4, 5


def _secs(ts: int) -> str:
    """``ns2usecs`` (rounded) as ``%u.%06lu``."""
    t = (ts + 500) // 1000
    return f"{t // 1_000_000 & 0xFFFFFFFF}.{t % 1_000_000:06d}"


class MmioTracer:
    """``mmio_tracer`` of the top-level trace array; *pcidev* is the text
    of the machine's ``PCIDEV`` lines."""

    name = "mmiotrace"
    online_cpus = 1  # enter_uniprocessor: the boot CPU alone

    def __init__(self, pcidev: str = ""):
        self.flags: dict = {}
        self.pcidev = pcidev
        self.prev_overruns = 0

    def set_flag(self, name: str, on: bool) -> None:
        self.flags[name] = on

    def _reset_data(self, tr) -> None:
        """``mmio_reset_data``."""
        self.prev_overruns = 0
        tr.reset()

    def init(self, tr) -> None:
        """``tracer_init`` + ``mmio_trace_init``."""
        self._reset_data(tr)

    def reset(self, tr) -> None:
        """``mmio_trace_reset``."""
        self._reset_data(tr)

    def start(self, tr) -> None:
        """``mmio_trace_start`` (``tracing_on`` set)."""
        self._reset_data(tr)

    def print_header(self, tr):
        return None  # the default header

    # --- trace_pipe -----------------------------------------------------------------

    def pipe_open(self, tr) -> bytes:
        """``mmio_pipe_open`` and the ``mmio_read`` calls after it: what an
        open ``trace_pipe`` hands out before its entries (the version, then
        each device; the kernel gives one of them per read)."""
        return (VERSION_LINE + self.pcidev).encode()

    def pipe_note(self, tr) -> bytes:
        """``count_overruns`` at each read: the events lost since the last."""
        over = sum(b.overrun for b in tr.buffers)
        n = over - self.prev_overruns if over > self.prev_overruns else 0
        self.prev_overruns = over
        return f"MARK 0.000000 Lost {n} events.\n".encode() if n else b""

    # --- output -----------------------------------------------------------------------

    def print_line(self, tr, etype, rec) -> str:
        """``mmio_print_line``: ``""`` (nothing) for entries not its own."""
        if etype.system != "ftrace":
            return ""
        if etype.name == "mmiotrace_rw":
            return _rw(rec, tr.iter_ts)
        if etype.name == "mmiotrace_map":
            return _map(rec, tr.iter_ts)
        if etype.name == "print":
            msg = rec["buf"].split(b"\0", 1)[0].decode(errors="surrogateescape")
            return f"MARK {_secs(tr.iter_ts)} {msg}"
        return ""


def _rw(r, ts: int) -> str:
    """``mmio_print_rw``."""
    op = r["opcode"]
    if op in (MMIO_READ, MMIO_WRITE):
        return (f"{'R' if op == MMIO_READ else 'W'} {r['width']} {_secs(ts)} {r['map_id']} "
                f"0x{r['phys']:x} 0x{r['value']:x} 0x{r['pc']:x} 0\n")
    if op == MMIO_UNKNOWN_OP:
        v = r["value"]
        return (f"UNKNOWN {_secs(ts)} {r['map_id']} 0x{r['phys']:x} "
                f"{v >> 16 & 0xFF:02x},{v >> 8 & 0xFF:02x},{v & 0xFF:02x} 0x{r['pc']:x} 0\n")
    return "rw what?\n"


def _map(r, ts: int) -> str:
    """``mmio_print_map``."""
    op = r["opcode"]
    if op == MMIO_PROBE:
        return (f"MAP {_secs(ts)} {r['map_id']} 0x{r['phys']:x} 0x{r['virt']:x} "
                f"0x{r['len']:x} 0x0 0\n")
    if op == MMIO_UNPROBE:
        return f"UNMAP {_secs(ts)} {r['map_id']} 0x0 0\n"
    return "map what?\n"


def pci_devices(profile) -> str:
    """The profile's ``pci_devices`` (empty without one)."""
    path = getattr(profile, "path", None)
    f = path / "pci_devices" if path is not None else None
    return f.read_text() if f is not None and f.is_file() else ""


__all__ = ["MmioTracer", "pci_devices", "VERSION_LINE"]
