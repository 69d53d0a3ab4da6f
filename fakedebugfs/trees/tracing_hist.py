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

from fakedebugfs.engine.core.ringbuffer import CpuBuffer
from fakedebugfs.engine.ftrace import trace_events_synth, trace_snapshot
from fakedebugfs.fs.fops import OpenFile, SeqFile, ValueFile
from fakedebugfs.trees.tracing_pipes import TracePipeRaw, TraceText, TextState, trace_lines

RW, RO = 0o640, 0o440


class HistFile(SeqFile):
    """An event's ``hist`` (``event_hist_fops``: ``hist_show`` at open, a
    seq_file).  On the kernel it shows every event that fired until the
    open; here a paced workload's owed events (and ``--mirror``'s backlog)
    are fired first, as a write to a control file fires them."""

    catch_up = True


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
