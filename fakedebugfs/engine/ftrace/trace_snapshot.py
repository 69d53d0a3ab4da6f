"""The snapshot buffer (kernel/trace/trace.c's CONFIG_TRACER_SNAPSHOT and
CONFIG_TRACER_MAX_TRACE parts, trace_events_trigger.c's ``snapshot``
command, 6.12).

A trace array's ``max_buffer``: per-CPU ring buffers the size of the main
ones, allocated on first use (:class:`Snapshot`).  ``snapshot`` takes
(``tracing_snapshot_write``): ``0`` frees it (EINVAL on a per-CPU file),
``1`` allocates it if needed and swaps it with the main buffer
(``update_max_tr``; a per-CPU file swaps that CPU, ``ring_buffer_swap_cpu``),
any other number clears it; a write is EBUSY while a hist trigger's
``snapshot()`` action holds the conditional snapshot.  Reading it is
``trace`` over the snapshot buffer; an empty one shows the help text
(``print_snapshot_help``: allocated or freed, the commands).  The swap is
what the kernel does: nothing is cleared, the main buffer gets what the
snapshot buffer held.

The ``snapshot[:N] [if FILTER]`` trigger allocates the buffer when set
(``register_snapshot_trigger``: ``tracing_arm_snapshot``) and swaps when
its event fires.  ``tracing_max_latency`` is the trace array's max latency
in microseconds (``tracing_nsecs_read``/``write``).
"""

from __future__ import annotations

import errno

from fakedebugfs.engine.core.ringbuffer import CpuBuffer
from fakedebugfs.engine.ftrace.ctype import TEXT_SPACES
from fakedebugfs.engine.ftrace.kstrto import kstrtoul_from_user
from fakedebugfs.engine.ftrace.trace_events_hist import print_key
from fakedebugfs.engine.ftrace.trigger import Trigger, parse

MAIN_HELP = ("# echo 0 > snapshot : Clears and frees snapshot buffer\n"
             "# echo 1 > snapshot : Allocates snapshot buffer, if not already allocated.\n"
             "#                      Takes a snapshot of the main buffer.\n"
             "# echo 2 > snapshot : Clears snapshot buffer (but does not allocate or free)\n"
             "#                      (Doesn't have to be '2' works with any number that\n"
             "#                       is not a '0' or '1')\n")
PERCPU_HELP = ("# echo 0 > snapshot : Invalid for per_cpu snapshot file.\n"
               "{one}"
               "# echo 2 > snapshot : Clears this cpu's snapshot buffer (but does not allocate)\n"
               "#                      (Doesn't have to be '2' works with any number that\n"
               "#                       is not a '0' or '1')\n")
PERCPU_SWAP = ("# echo 1 > snapshot : Allocates snapshot buffer, if not already allocated.\n"
               "#                      Takes a snapshot of the main buffer for this cpu.\n")
PERCPU_NO_SWAP = ("# echo 1 > snapshot : Not supported with this kernel.\n"
                  "#                     Must use main snapshot file to allocate.\n")
# the tracers that select CONFIG_RING_BUFFER_ALLOW_SWAP (per-CPU swaps)
SWAP_TRACERS = ("irqsoff", "preemptoff", "preemptirqsoff")


def allow_swap(tr) -> bool:
    """``CONFIG_RING_BUFFER_ALLOW_SWAP``: a kernel with the irqsoff or
    preemptoff tracer (its ``available_tracers``) swaps one CPU's buffer;
    Debian 6.12 has neither and refuses ``echo 1`` on a per-CPU file."""
    prof = tr.top.profile
    if prof is None:
        return True
    return any(t in SWAP_TRACERS for t in (prof.files.get("available_tracers") or "").split())


class Snapshot:
    """``tr->max_buffer`` and ``tr->allocated_snapshot`` of one trace array."""

    def __init__(self, tr):
        self.tr = tr
        self.buffers = None  # CpuBuffer per CPU once allocated
        self.cond = None  # (hist data, action) of a snapshot() action: tr->cond_snapshot
        self.cond_track = None  # track_data of the conditional snapshot
        self.max_latency_ns = 0

    @property
    def allocated(self) -> bool:
        return self.buffers is not None

    def alloc(self) -> None:
        """``tracing_alloc_snapshot_instance``: buffers the main ones' size."""
        if self.buffers is None:
            self.buffers = [CpuBuffer(b.cpu, b.size, overwrite=b.overwrite, page_size=b.page_size,
                                      count_oversized=False, reader_pages=True)
                            for b in self.tr.buffers]

    def free(self) -> None:
        if self.buffers is not None:
            for b in self.buffers:
                b.release()
        self.buffers = None

    def swap(self, cpu=None) -> None:
        """``update_max_tr`` / ``ring_buffer_swap_cpu``: the buffers trade places."""
        main = self.tr.buffers
        for c in range(len(main)) if cpu is None else [cpu]:
            main[c], self.buffers[c] = self.buffers[c], main[c]
        self.tr.written += 1

    def clear(self, cpu=None) -> None:
        for c in range(len(self.buffers)) if cpu is None else [cpu]:
            self.buffers[c].reset()

    def take(self) -> bool:
        """``tracing_snapshot_instance``: a snapshot of the whole buffer, or
        the kernel's notice when none is allocated."""
        if not self.allocated:
            self.tr.tracing_on = False
            return False
        self.swap()
        return True

    # --- the files ---------------------------------------------------------------

    def write(self, data: bytes, cpu=None) -> None:
        """``tracing_snapshot_write``."""
        val = kstrtoul_from_user(data)
        if self.cond is not None:
            raise OSError(errno.EBUSY, "conditional snapshot in use")
        if val == 0:
            if cpu is not None:
                raise OSError(errno.EINVAL, "per-CPU snapshot free")
            self.free()
        elif val == 1:
            if cpu is not None and not allow_swap(self.tr):
                raise OSError(errno.EINVAL, "per-CPU swap not supported")
            self.alloc()
            self.swap(cpu)
        elif self.allocated:
            self.clear(cpu)

    def help_text(self, cpu=None) -> str:
        """``print_snapshot_help``."""
        state = "allocated" if self.allocated else "freed"
        percpu = PERCPU_HELP.format(one=PERCPU_SWAP if allow_swap(self.tr) else PERCPU_NO_SWAP)
        return (f"#\n# * Snapshot is {state} *\n#\n# Snapshot commands:\n"
                + (MAIN_HELP if cpu is None else percpu))


def snapshot_of(tr) -> Snapshot:
    snap = tr.__dict__.get("snapshot")
    if snap is None:
        snap = tr.__dict__["snapshot"] = Snapshot(tr)
        tr.snapshot_cond_enable = lambda hd, data: cond_enable(tr, hd, data)
        tr.snapshot_cond = lambda hd, data, elt, key, ctx: cond_take(tr, hd, data, elt, key)
        tr.snapshot_cond_show = lambda hd: cond_show(tr, hd)
        tr.snapshot_cond_disable = lambda hd: cond_disable(tr, hd)
    return snap


class View:
    """The trace array seen through its snapshot buffer (what ``snapshot``
    reads): every attribute is the trace array's but ``buffers``, and its
    methods run against the view."""

    def __init__(self, tr, buffers):
        object.__setattr__(self, "_tr", tr)
        object.__setattr__(self, "buffers", buffers)

    def __getattr__(self, name):
        tr = object.__getattribute__(self, "_tr")
        attr = getattr(type(tr), name, None)
        if callable(attr) and not isinstance(attr, (staticmethod, classmethod)):
            return attr.__get__(self)
        return getattr(tr, name)


def snapshot_lines(tr, cpu, trace_lines):
    """The text of ``snapshot`` (``per_cpu/cpuN/snapshot`` with *cpu*):
    *trace_lines* over the snapshot buffer, or the help when it is empty."""
    snap = snapshot_of(tr)
    bufs = snap.buffers
    cpus = range(len(tr.buffers)) if cpu is None else [cpu]
    if bufs is None or all(max(0, bufs[c].entries - bufs[c].overrun - bufs[c].consumed_events) == 0
                           for c in cpus):
        return iter([f"# tracer: {tr.tracer.name}\n#\n" + snap.help_text(cpu)])
    return trace_lines(View(tr, bufs), cpu)


# --- the snapshot trigger -----------------------------------------------------------

class SnapshotTrigger(Trigger):
    """``snapshot[:N] [if FILTER]`` (``ETT_SNAPSHOT``)."""

    def same(self, other) -> bool:
        return getattr(other, "cmd", None) == "snapshot"

    def fire(self, tr, rec, cpu: int, pid: int, ts: int, vals=None) -> None:
        if not self.count:
            return
        if self.count != -1:
            self.count -= 1
        snapshot_of(tr).take()


def trigger_write(tr, key: str, text: str) -> None:
    """``event_trigger_parse`` of ``snapshot`` with ``register_snapshot_trigger``."""
    body = ("!" if text.startswith("!") else "") + "traceon" + text[text.index("snapshot") + 8:]
    remove, parsed = parse(body, tr, key)
    new = SnapshotTrigger("snapshot", parsed.count, parsed.filter_str, parsed.pred)
    trig = tr.trigger_state(key)
    old = next((t for t in trig.list if getattr(t, "cmd", None) == "snapshot"), None)
    if remove:
        if old is not None:
            trig.list.remove(old)
            tr._trigger_mode(key, False)
        return
    if old is not None:
        raise OSError(errno.EEXIST, "trigger exists")
    snapshot_of(tr).alloc()  # tracing_arm_snapshot
    trig.list.insert(0, new)
    tr._trigger_mode(key, True)


# --- the conditional snapshot of onmax()/onchange().snapshot() ------------------------

class TrackData:
    """``struct track_data``: what the last conditional snapshot saw."""

    def __init__(self, hd, data):
        self.hd, self.data = hd, data
        self.track_val = 0
        self.key = bytes(hd.key_size)
        self.elt = None
        self.updated = False


def cond_enable(tr, hd, data) -> None:
    """``tracing_snapshot_cond_enable``: EBUSY when one is set."""
    snap = snapshot_of(tr)
    if snap.cond is not None:
        raise OSError(errno.EBUSY, "conditional snapshot in use")
    snap.alloc()
    snap.cond = (hd, data)
    snap.cond_track = TrackData(hd, data)


def cond_take(tr, hd, data, elt, key: bytes) -> None:
    """``save_track_data_snapshot`` -> ``cond_snapshot_update``."""
    snap = snapshot_of(tr)
    track = snap.cond_track
    if track is None or snap.cond is None or snap.cond[0] is not hd:
        return
    value = elt.vars[data.track_var.var_idx]
    if not data.changed(track.track_val, value):
        return
    track.track_val, track.key, track.elt, track.updated = value, key, elt, True
    snap.swap()


def cond_disable(tr, hd) -> None:
    snap = tr.__dict__.get("snapshot")
    if snap is not None and snap.cond is not None and snap.cond[0] is hd:
        snap.cond = snap.cond_track = None


def cond_show(tr, hd) -> str:
    """``track_data_snapshot_print``."""
    snap = tr.__dict__.get("snapshot")
    track = snap.cond_track if snap is not None else None
    if track is None or not track.updated or track.hd is not hd:
        return ""
    data = track.data
    return ("\nSnapshot taken (see tracing/snapshot).  Details:\n"
            f"\ttriggering value {{ {data.handler}({data.var_str}) }}: {track.track_val:10d}"
            "\ttriggered by event with key: " + print_key(hd, track.key, track.elt) + "\n")


def max_latency_write(tr, data: bytes) -> None:
    """``tracing_max_lat_write``: microseconds."""
    snapshot_of(tr).max_latency_ns = kstrtoul_from_user(data) * 1000


def max_latency_show(tr) -> str:
    return f"{snapshot_of(tr).max_latency_ns // 1000}\n"


__all__ = ["Snapshot", "SnapshotTrigger", "View", "snapshot_of", "snapshot_lines",
           "trigger_write", "max_latency_show", "max_latency_write", "TEXT_SPACES"]
