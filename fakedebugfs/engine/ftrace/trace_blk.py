"""The ``blk`` tracer (``blk_tracer``, kernel/trace/blktrace.c, 6.12/6.18).

What selecting ``blk`` does in the kernel, and so here:

* ``tracer_init`` resets the buffers; ``blk_tracer_init`` only marks the
  tracer on (``blk_tracer_enabled``); ``tracing_on`` 0/1 stops and starts
  it (``blk_tracer_stop``/``_start``).  The top level only: the tracer has
  no ``allow_instances``, so an instance answers EINVAL and does not list it.
* It records ``TRACE_BLK`` entries only for a request queue whose
  ``blk_trace`` someone set up (``/sys/block/<dev>/trace/enable`` or the
  ``BLKTRACESETUP`` ioctl on the device).  The fake has no block devices,
  so neither exists and the tracer records nothing of its own, as a kernel
  does where no device was set up (the Debian 6.12 guest, which has no
  block device, and this host's 6.18 both show an empty trace).  Other
  entries (events, markers) print as under ``nop``: its ``print_line``
  handles only ``TRACE_BLK``.
* Its flags (``blk_tracer_flags``): ``blk_classic``, and ``blk_cgroup``,
  ``blk_cgname`` where the kernel has ``CONFIG_BLK_CGROUP``; the profile's
  ``options/`` files say which.  ``blk_classic`` turns the trace
  array's ``context-info`` off when set and on when cleared
  (``blk_tracer_set_flag``), current tracer or not (a write to
  ``options/blk_classic`` calls the tracer's ``set_flag`` either way), and
  makes ``trace``'s header the classic one (``blk_tracer_print_header``).
"""

from __future__ import annotations

BLK_OPTS = ("blk_classic", "blk_cgroup", "blk_cgname")  # blk_tracer_opts, in order
CLASSIC_HEADER = ("# DEV   CPU TIMESTAMP     PID ACT FLG\n"
                  "#  |     |     |           |   |   |\n")


class BlkTracer:
    """``blk_tracer`` of the top-level trace array *tr*, with the flags of
    :data:`BLK_OPTS` the profile's kernel has (*names*)."""

    name = "blk"

    def __init__(self, tr, names=BLK_OPTS):
        self.tr = tr
        self.flags = {n: False for n in BLK_OPTS if n in names}
        self.enabled = False  # blk_tracer_enabled

    def set_flag(self, name: str, on: bool) -> None:
        """``blk_tracer_set_flag``: no ``context-info`` for the classic output."""
        self.flags[name] = on
        if name == "blk_classic" and "context-info" in self.tr.options:
            self.tr.options["context-info"] = not on

    def init(self, tr) -> None:
        """``tracer_init`` (the buffers reset) and ``blk_tracer_init``."""
        tr.reset()
        self.enabled = True

    def reset(self, tr) -> None:
        """``blk_tracer_reset``."""
        self.enabled = False

    def start(self, tr) -> None:
        """``blk_tracer_start`` (``tracing_on`` set)."""
        self.enabled = True

    def stop(self, tr) -> None:
        """``blk_tracer_stop`` (``tracing_on`` cleared)."""
        self.enabled = False

    def print_header(self, tr) -> str:
        """``blk_tracer_print_header``: the classic columns, or nothing."""
        return CLASSIC_HEADER if self.flags.get("blk_classic") else ""

    def print_line(self, tr, etype, rec):
        """``blk_tracer_print_line``: ``TRACE_BLK`` entries only, and the
        fake records none."""
        return None


def blk_flag_names(profile) -> tuple:
    """The blk flags whose ``options/`` file the profile's kernel has (all
    of them without a profile)."""
    if profile is None:
        return BLK_OPTS
    modes = profile.modes()
    return tuple(n for n in BLK_OPTS if f"options/{n}" in modes)


__all__ = ["BlkTracer", "blk_flag_names", "BLK_OPTS"]
