"""The ktrace tracer of the 2009 ktrace RFC (kernel/ktrace.c), without its debugfs files.

Holds the event registry (``struct ktrace_entry`` in a 64-bucket hash table),
the global ``ktrace_enabled`` flag, and one overwrite-mode ring buffer per
CPU served page by page through mmap and the ``KTRACE_BUF_*`` ioctls under
the produced/consumed protocol of docs/ktrace.md#the-buffer-protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

from fakedebugfs.engine.core.lazynp import np

from fakedebugfs.engine.ktrace.format import KtraceFormat
from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.batch import (Strings, fill_records, payload_group, split_per_cpu,
    struct_dtype)
from fakedebugfs.engine.core.ringbuffer import CpuBuffer

# the batch path in compiled code (ktrace_fast.pyx), None: the Python path
_fast = fast.load("fakedebugfs.engine.ktrace.ktrace_fast")

KTRACE_VERSION = "1.0.0"
KTRACE_HASH_BITS = 6
KTRACE_HASH_SIZE = 1 << KTRACE_HASH_BITS
DEFAULT_BUF_SIZE = 65536  # trace_buf_size

# include/linux/ktrace.h: _IOR/_IOW(0xF5, n, __u32)
_IOC_READ, _IOC_WRITE = 2, 1


def _ioc(direction: int, nr: int, size: int = 4, kind: int = 0xF5) -> int:
    return (direction << 30) | (size << 16) | (kind << 8) | nr


KTRACE_BUF_GET_SIZE = _ioc(_IOC_READ, 0x00)
KTRACE_BUF_GET_PRODUCED = _ioc(_IOC_READ, 0x01)
KTRACE_BUF_GET_CONSUMED = _ioc(_IOC_READ, 0x02)
KTRACE_BUF_PUT_PRODUCED = _ioc(_IOC_WRITE, 0x03)
KTRACE_BUF_PUT_CONSUMED = _ioc(_IOC_WRITE, 0x04)

U32 = 0xFFFFFFFF

# Reader pinning (the project's rule, README "Reader pinning"): a reader that
# asked GET_PRODUCED or GET_CONSUMED is copying the pages in
# [consumed, produced) until its PUT_CONSUMED or its close; for that long,
# however long it is, the writer does not recycle them.  Events that find no
# free page are lost and counted in `overflow`, so events read + overflow =
# events traced holds exactly, and GET_CONSUMED never passes a GET_PRODUCED
# the reader has seen.
PIN_FOREVER = math.inf


def jhash(key: bytes, initval: int = 0) -> int:
    """``jhash()`` of include/linux/jhash.h as of 2009 (Bob Jenkins' lookup2)."""

    def mix(a, b, c):
        a = (a - b - c) & U32; a ^= c >> 13
        b = (b - c - a) & U32; b ^= (a << 8) & U32
        c = (c - a - b) & U32; c ^= b >> 13
        a = (a - b - c) & U32; a ^= c >> 12
        b = (b - c - a) & U32; b ^= (a << 16) & U32
        c = (c - a - b) & U32; c ^= b >> 5
        a = (a - b - c) & U32; a ^= c >> 3
        b = (b - c - a) & U32; b ^= (a << 10) & U32
        c = (c - a - b) & U32; c ^= b >> 15
        return a, b, c

    a = b = 0x9E3779B9
    c = initval
    k = key
    while len(k) >= 12:
        a = (a + int.from_bytes(k[0:4], "little")) & U32
        b = (b + int.from_bytes(k[4:8], "little")) & U32
        c = (c + int.from_bytes(k[8:12], "little")) & U32
        a, b, c = mix(a, b, c)
        k = k[12:]
    c = (c + len(key)) & U32
    rest = k + bytes(12 - len(k))
    a = (a + int.from_bytes(rest[0:4], "little")) & U32
    b = (b + int.from_bytes(rest[4:8], "little")) & U32
    c = (c + (int.from_bytes(rest[8:11], "little") << 8)) & U32
    return mix(a, b, c)[2]


@dataclass(frozen=True)
class KtraceSite:
    """One ``DO_TRACE`` call site: event name and format, the tracepoint it
    sits on, and how the tracepoint's values become the event's arguments."""

    name: str
    format: str
    tracepoint: str
    args: Callable[[tuple], tuple] = lambda values: values
    # *args* also maps argument columns (engine.core.batch): the batch path
    columnar: bool = False


@dataclass
class KtraceEntry:
    """``struct ktrace_entry``: one event as ``info`` lists it."""

    name: str
    format: str
    event_id: int
    codec: KtraceFormat
    enabled: bool = False
    sites: list = field(default_factory=list)  # [(KtraceSite, probe)]

    @property
    def bucket(self) -> int:
        return jhash(self.name.encode()) & (KTRACE_HASH_SIZE - 1)


class Ktrace:
    """The ktrace tracer: registry, global switch and per-CPU buffers."""

    def __init__(self, engine, buf_size: int = DEFAULT_BUF_SIZE):
        self.engine = engine
        self.enabled = False
        self.next_id = 0
        self.entries: dict[str, KtraceEntry] = {}
        self.order: list[KtraceEntry] = []  # registration order, newest last
        self.buffers = [CpuBuffer(cpu, buf_size, overwrite=True) for cpu in engine.cpus()]
        self.pins: list[set] = [set() for _ in self.buffers]  # readers holding pages, per CPU
        self._scratch = [None, None, None]  # memory ktrace_fast.pack_batch reuses
        self.on_change: list[Callable[[str, str], None]] = []  # ("add"|"remove", name)
        # produced as readers see it (GET_PRODUCED): every finished page,
        # unless whoever serves the pages shows them later (the FUSE tree
        # counts a page once it is in the mapping)
        self.visible_produced: Callable[[int], int] = lambda cpu: self.buffers[cpu].produced

    # --- registry (add_ktrace / remove_ktrace) ------------------------------

    def add_site(self, site: KtraceSite) -> KtraceEntry:
        """Register a call site; the first site of a name creates the entry
        and its ``events/<name>`` file (``add_ktrace``)."""
        entry = self.entries.get(site.name)
        if entry is not None and entry.format != site.format:
            raise ValueError(
                f"the format of tracepoint '{site.name}' changes from "
                f"'{entry.format}' to '{site.format}'")
        created = entry is None
        if created:
            entry = KtraceEntry(site.name, site.format, self.next_id & 0x7FFFFFFF,
                                KtraceFormat(site.format))
            self.next_id = (self.next_id + 1) & 0xFFFF  # a u16 counter
            self.entries[site.name] = entry
            self.order.append(entry)
        # an entry whose module went away keeps its id; its file comes back
        revived = not created and not entry.sites
        probe = self._make_probe(entry, site)
        entry.sites.append((site, probe))
        if entry.enabled:
            self.engine.tracepoint(site.tracepoint).register(probe)
        if created or revived:
            self._changed("add", entry.name)
        return entry

    def remove_sites(self, tracepoint_keys) -> None:
        """Unregister the sites on *tracepoint_keys* (a module going away);
        an entry left without sites loses its file and is disabled, but stays
        registered: ``info`` still lists it (so events of the module left in
        the buffers can be decoded) and a reload reuses its id, as
        ``remove_ktrace(iter, 0)`` of the module notifier does."""
        keys = set(tracepoint_keys)
        for entry in list(self.order):
            keep = []
            for site, probe in entry.sites:
                if site.tracepoint in keys:
                    tp = self.engine.tracepoints.get(site.tracepoint)
                    if tp is not None:
                        tp.unregister(probe)
                else:
                    keep.append((site, probe))
            if len(keep) == len(entry.sites):
                continue
            entry.sites = keep
            if not keep:
                entry.enabled = False
                self._changed("remove", entry.name)

    def _changed(self, what: str, name: str) -> None:
        for callback in self.on_change:
            callback(what, name)

    def _make_probe(self, entry: KtraceEntry, site: KtraceSite):
        buffers = self.buffers
        pack = entry.codec.pack
        convert = site.args

        def probe(cpu, pid, ts, values):
            if self.enabled:
                buffers[cpu].write(ts, pack(entry.event_id, convert(values)))

        if site.columnar and entry.codec._fixed is not None:
            probe.batch_owner = self  # the batch path (write_batch)
            probe.entry, probe.site = entry, site
        return probe

    # --- the batch path (engine.core.batch) -----------------------------------

    def batch_ok(self, batch, kinds) -> bool:
        """Every argument the records take is a column of numbers."""
        for k, probe in kinds:
            for c in probe.site.args(batch.cols[k]):
                if isinstance(c, Strings) or (isinstance(c, np.ndarray) and c.dtype == object):
                    return False
        return True

    def write_batch(self, batch, kinds) -> None:
        """``ring_buffer_probe`` of every event of *kinds*: the records
        (``u16`` id + packed arguments) built column-wise, each CPU's
        written by :func:`split_per_cpu` (the Python path; with
        ``ktrace_fast`` built, :meth:`_write_batch_fast`)."""
        if not self.enabled:
            return
        if _fast is not None and self._write_batch_fast(batch, kinds):
            return
        groups = []
        for k, probe in kinds:
            pos = batch.where(k)
            codec = probe.entry.codec
            dtype = struct_dtype(codec._fixed.format, align=4)  # rows of whole words
            cols = (probe.entry.event_id & 0xFFFF,) + tuple(probe.site.args(batch.cols[k]))
            groups.append(payload_group(pos, fill_records(dtype, cols, len(pos)),
                                        codec._fixed.size))
        split_per_cpu(self.buffers, batch, groups)

    def _write_batch_fast(self, batch, kinds) -> bool:
        """:meth:`write_batch` with the records packed by
        ``ktrace_fast.pack_batch``: in emission order, one group with a
        length per row; False when a column is not integers (the Python
        path then packs them)."""
        specs = [None] * len(batch.tps)
        for k, probe in kinds:
            entry = probe.entry
            specs[k] = (entry.event_id, entry.codec.sizes, tuple(probe.site.args(batch.cols[k])))
        group = _fast.pack_batch(batch.kind, specs, self._scratch)
        if group is None:
            return False
        split_per_cpu(self.buffers, batch, [group + (None,)])
        return True

    def set_event_enabled(self, name: str, on: bool) -> None:
        """``__ktrace_control_write``: attach or detach the event's probes."""
        entry = self.entries[name]
        if on == entry.enabled:
            return
        entry.enabled = on
        for site, probe in entry.sites:
            tp = self.engine.tracepoint(site.tracepoint)
            (tp.register if on else tp.unregister)(probe)

    def info(self) -> str:
        """The text of ``ktrace/info`` (``tracing_info_show``): hash buckets
        in order, newest entry first within a bucket."""
        lines = [f"version {KTRACE_VERSION}\n"]
        buckets: dict[int, list] = {}
        for entry in self.order:
            buckets.setdefault(entry.bucket, []).insert(0, entry)
        for bucket in sorted(buckets):
            for e in buckets[bucket]:
                state = "enabled" if e.enabled else "disabled"
                lines.append(f"name '{e.name}' format '{e.format}' id {e.event_id} {state}\n")
        return "".join(lines)

    # --- global control -----------------------------------------------------

    def set_enabled(self, on: bool) -> None:
        """``__tracing_control_write``; disabling finishes every tail page so
        readers can drain all that was traced."""
        if on == self.enabled:
            return
        self.enabled = on
        if not on:
            for buf in self.buffers:
                buf.flush()

    def reset(self) -> None:
        """``ring_buffer_reset``: empty every CPU buffer (readers that hold
        pages keep holding the emptied buffer)."""
        for cpu, buf in enumerate(self.buffers):
            buf.reset()
            if self.pins[cpu]:
                buf.pin(PIN_FOREVER)

    def overflow(self) -> int:
        """``ring_buffer_overruns``: events lost, summed over CPUs."""
        return sum(b.overrun + b.dropped for b in self.buffers)

    @property
    def buf_size(self) -> int:
        return self.buffers[0].size

    # --- KTRACE_BUF_* ioctls ----------------------------------------------

    def ioctl(self, cpu: int, cmd: int, arg: Optional[int], reader=None) -> Optional[int]:
        """``trace_data_ioctl`` for *reader* (any hashable naming one open
        file).  Returns the u32 to copy out for GET_*, None for PUT_CONSUMED;
        raises ``LookupError`` for unknown commands (``-ENOIOCTLCMD``, ENOTTY
        to the caller).  GET_* pins the pages until the reader's PUT_CONSUMED
        or :meth:`release`."""
        buf = self.buffers[cpu]
        if cmd == KTRACE_BUF_GET_SIZE:
            return buf.size & U32
        if cmd == KTRACE_BUF_GET_PRODUCED:
            self._pin(cpu, reader)
            return self.visible_produced(cpu) & U32
        if cmd == KTRACE_BUF_GET_CONSUMED:
            self._pin(cpu, reader)
            return buf.consumed & U32
        if cmd == KTRACE_BUF_PUT_CONSUMED:
            delta = (arg - buf.consumed) & U32
            if delta:
                buf.advance_reader(delta)
            self._unpin(cpu, reader)
            return None
        raise LookupError(cmd)

    def release(self, cpu: int, reader=None) -> None:
        """A reader closed its file (or died): it no longer holds pages."""
        self._unpin(cpu, reader)

    def _pin(self, cpu: int, reader) -> None:
        self.pins[cpu].add(reader)
        self.buffers[cpu].pin(PIN_FOREVER)

    def _unpin(self, cpu: int, reader) -> None:
        self.pins[cpu].discard(reader)
        if not self.pins[cpu]:
            self.buffers[cpu].unpin()
