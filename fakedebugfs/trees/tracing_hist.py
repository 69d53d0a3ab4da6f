"""The top-level and per-CPU files of hist triggers' kernels: ``synthetic_events``
(trace_events_synth.c's ``synth_events_fops``), ``snapshot``,
``tracing_max_latency``, ``per_cpu/cpuN/snapshot`` and
``per_cpu/cpuN/snapshot_raw`` (trace.c's ``snapshot_fops``,
``snapshot_raw_fops``, ``tracing_max_lat_fops``).  Each is served where the
profile's captured tree has it (the default 6.18 profile has none).
The events' ``hist`` files are :mod:`.tracing_events`', with
:class:`HistFile`."""

from __future__ import annotations

import os
import time
import weakref

from fakedebugfs.engine.core.ringbuffer import CpuBuffer
from fakedebugfs.engine.ftrace import trace_events_synth, trace_snapshot
from fakedebugfs.engine.ftrace.trace_events_hist import hist_show, hist_triggers
from fakedebugfs.fs.fops import OpenFile, SeqFile, ValueFile
from fakedebugfs.fs.slices import slicer
from fakedebugfs.trees.tracing_pipes import TracePipeRaw, TraceText, TextState, trace_lines

RW, RO = 0o640, 0o440


class HistFile(SeqFile):
    """An event's ``hist`` (``event_hist_fops``: ``hist_show`` at open, a
    seq_file).  On the kernel it shows every event that fired until the
    open; here a paced workload's owed events (and ``--mirror``'s backlog)
    are fired first, as a write to a control file fires them.

    One process's reads of one histogram in a row, each within
    ``SAME_READ`` seconds of the one before (a named histogram shared by
    several events, read through each event's file; one file read twice),
    are one *instant* of at most ``INSTANT_MOST``: only its first read
    fires what is owed, and the workload's own turns wait
    (:meth:`Slicer.hold`) for SAME_READ after each read.  On the kernel
    such reads are microseconds apart (``diff`` of two events' ``hist``
    files of one ``name=``, as ftracetest's trigger-multihist.tc does),
    with nothing between them on a quiet machine; here they are FUSE round
    trips, 1-30 ms apart on a loaded host, and each open's catch-up fired
    up to 20 ms of the workload's events, forks and exits among them, so
    the two differed.  The command's own process events still come in
    before each open (the adapter's ``on_open``), a write to a control
    file still fires what is owed, and another process's read starts an
    instant of its own, so what the command did between two reads is in
    the second."""

    catch_up = True
    SAME_READ = 0.05  # seconds from one read to the next of the same instant
    INSTANT_MOST = 0.25  # seconds an instant lasts at most (a process polling)

    def __init__(self, ft, key: str):
        super().__init__(lambda: [hist_show(ft, key)])
        self.ft, self.key = ft, key

    def _shown(self) -> list:
        """The histograms (``hist_data``, shared by a name) this file shows."""
        return [t.hist_data for t in hist_triggers(self.ft, self.key)]

    def _new_instant(self, shown: list, now: float, pid: int) -> bool:
        """A read by *pid* now starts an instant of its own (no histogram
        shown is in one of *pid*'s, or one of them is past it)."""
        for hd in shown:
            start, last, reader = _INSTANT.get(hd, (0.0, 0.0, None))
            if pid != reader or now - last >= self.SAME_READ \
                    or now - start >= self.INSTANT_MOST:
                return True
        return not shown

    def catch_up_now(self, pid: int) -> bool:
        """Only the first read of an instant fires what the workload owes."""
        return self._new_instant(self._shown(), time.perf_counter(), pid)

    def open(self, f: OpenFile) -> None:
        super().open(f)
        if not f.readable:
            return
        shown, now = self._shown(), time.perf_counter()
        if not shown:
            return
        start = now if self._new_instant(shown, now, f.pid) \
            else min(_INSTANT[hd][0] for hd in shown)
        for hd in shown:
            _INSTANT[hd] = (start, now, f.pid)
        slicer.hold(min(now + self.SAME_READ, start + self.INSTANT_MOST))


#: (perf_counter() of the instant's first read, of its last read, the pid
#: of its reader) of each histogram read (HistFile)
_INSTANT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _modes(ft) -> dict:
    prof = ft.top.profile
    return prof.modes() if prof is not None else {}


class SynthEventsFile(ValueFile):
    """``synthetic_events``: the definitions; a write runs commands
    (``trace_parse_run_command``); O_TRUNC removes every synthetic event."""

    def __init__(self, ft):
        super().__init__(lambda: trace_events_synth.show(ft))
        self.ft = ft

    def write_nowait(self, f: OpenFile, off: int, data: bytes) -> int:
        return trace_events_synth.write(self.ft, data)

    def truncate(self, f) -> None:
        if f is None or not f.flags & os.O_APPEND:
            try:
                trace_events_synth.release_all(self.ft)
            except trace_events_synth.SynthError as err:
                raise OSError(err.errno, os.strerror(err.errno)) from None


class SnapshotFile(TraceText):
    """``snapshot`` / ``per_cpu/cpuN/snapshot``: the snapshot buffer's text
    (or the help), writes of 0, 1 or another number."""

    def open(self, f: OpenFile) -> None:
        tr = self.tree.ft
        f.private = TextState(trace_snapshot.snapshot_lines(tr, self.cpu, trace_lines)) \
            if f.readable else None

    def truncate(self, f) -> None:
        pass  # O_TRUNC of snapshot: nothing (tracing_snapshot_open resets no buffer)

    async def write(self, f: OpenFile, off: int, data: bytes) -> int:
        trace_snapshot.snapshot_of(self.tree.ft).write(data, self.cpu)
        self.tree.trace_wait.wake()
        return len(data)


class _SnapshotTree:
    """What ``snapshot_raw`` reads: the tree with the snapshot buffer as
    its buffers (an unallocated snapshot reads as empty buffers)."""

    def __init__(self, tree):
        self._tree = tree
        self._empty = None

    def __getattr__(self, name):
        return getattr(self._tree, name)

    @property
    def ft(self):
        tr = self._tree.ft
        bufs = trace_snapshot.snapshot_of(tr).buffers
        if bufs is None:
            if self._empty is None:
                self._empty = [CpuBuffer(b.cpu, 2 * b.page_size, page_size=b.page_size,
                                         count_oversized=False, reader_pages=True)
                               for b in tr.buffers]
            bufs = self._empty
        return trace_snapshot.View(tr, bufs)


def add_top_files(tree, root) -> None:
    """The top-level files of the profile's kernel (``tracer_init_tracefs``)."""
    ft, modes = tree.ft, _modes(tree.ft)
    if "synthetic_events" in modes and not tree.is_instance:
        root.file("synthetic_events", RW, SynthEventsFile(ft))
    if "snapshot" in modes:
        root.file("snapshot", RW, SnapshotFile(tree, None))
    if "tracing_max_latency" in modes:
        root.file("tracing_max_latency", RW, ValueFile(
            lambda: trace_snapshot.max_latency_show(ft),
            lambda data: trace_snapshot.max_latency_write(ft, data)))


def add_cpu_files(tree, d, cpu: int) -> None:
    """``per_cpu/cpuN/snapshot`` and ``snapshot_raw`` (``tracing_init_tracefs_percpu``)."""
    modes = _modes(tree.ft)
    if "per_cpu/cpu0/snapshot" in modes:
        d.file("snapshot", RW, SnapshotFile(tree, cpu))
    if "per_cpu/cpu0/snapshot_raw" in modes:
        d.file("snapshot_raw", RO, TracePipeRaw(_SnapshotTree(tree), cpu))


__all__ = ["add_cpu_files", "add_top_files"]
