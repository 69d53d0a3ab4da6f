"""``tracing/``: the tracefs files of the ftrace tracer (``tracer_init_tracefs``,
``event_trace_add_tracer``), with modes and semantics of the 6.18 kernel
(``fixtures/tracefs/``) and the ``kmemtrace`` tracer of the 2.6.29 kmemtrace
ftrace plugin (docs/tracefs.md#the-kmemtrace-tracer).

    tracing/                    0700
      tracing_on                0640  "1\\n"; kstrtoul, nonzero on
      current_tracer            0640  nop | kmemtrace
      available_tracers         0440
      trace                     0640  seq text; O_TRUNC open clears
      trace_pipe                0440  consuming, blocking, pollable
      trace_marker(_raw)        0220  ftrace:print / raw_data entries
      trace_options, options/*  0640  global flags + the current tracer's
      trace_clock               0640  "[local] global ..."
      buffer_size_kb            0640  buffer_total_size_kb 0440
      buffer_subbuf_size_kb     0640  sub-buffer (trace_pipe_raw page) size, 4-512 KiB
      saved_cmdlines, printk_formats, available_events  0440
      set_event, set_event_pid, tracing_cpumask, error_log, dynamic_events ...
      events/{enable,header_page,header_event}, events/<sys>/{enable,filter},
      events/<sys>/<ev>/{enable,filter,format,id,trigger} for kmem, sched,
      raw_syscalls and events defined at run time; events/ftrace/<entry>/format
      per_cpu/cpuN/{trace,trace_pipe,trace_pipe_raw,stats,buffer_size_kb}

The files' operations by concern: ``events/`` and the event files
(:mod:`.tracing_events`), ``options/`` (:mod:`.tracing_options`),
``trace_marker`` (:mod:`.tracing_marker`), ``trace``, ``trace_pipe`` and
``trace_pipe_raw`` (:mod:`.tracing_pipes`).
"""

from __future__ import annotations

import errno
import os
import stat

from fakedebugfs.engine.ftrace.control import (bitmap_parse, nsecs_write, percent,
    saved_cmdlines_size, subbuf_order)
from fakedebugfs.engine.ftrace.ctype import TEXT_SPACES
from fakedebugfs.engine.ftrace.kstrto import kstrtoul_from_user
from fakedebugfs.engine.ftrace.event_list import listed
from fakedebugfs.engine.ftrace.tracer import Ftrace
from fakedebugfs.engine.ftrace.trace_dynevent import dyn_events, removed_listeners
from fakedebugfs.engine.ftrace.trace_probe import probe_facts
from fakedebugfs.fs.fops import OpenFile, SeqFile, ValueFile, WriteFile, fail
from fakedebugfs.fs.tree import Dir
from fakedebugfs.fs.waitqueue import WaitQueue
from fakedebugfs.trees.readme import readme_text
from fakedebugfs.trees.tracing_events import HEADER_EVENT, HEADER_PAGE, EventsDir
from fakedebugfs.trees.tracing_hist import add_cpu_files, add_top_files
from fakedebugfs.trees.tracing_functions import add_function_files, remove_functions
from fakedebugfs.trees.tracing_marker import Marker
from fakedebugfs.trees.tracing_options import OptionsDir
from fakedebugfs.trees.tracing_pipes import TracePipe, TracePipeRaw, TraceText
from fakedebugfs.trees.tracing_task import as_writer

RW, RO, WO = 0o640, 0o440, 0o220
MAX_TRACER_SIZE = 100
# files of the top-level directory only (tracer_init_tracefs, not
# init_tracer_tracefs); an instance has the rest
TOP_ONLY = ("README", "available_events", "dynamic_events", "instances", "printk_formats",
            "saved_cmdlines", "saved_cmdlines_size", "saved_tgids", "tracing_thresh",
            "uprobe_events", "uprobe_profile", "kprobe_events", "kprobe_profile",
            "synthetic_events", "stack_trace", "stack_max_size", "stack_trace_filter",
            "available_filter_functions", "available_filter_functions_addrs",
            "dyn_ftrace_total_info", "enabled_functions", "touched_functions")


def kstrtoul(data: bytes) -> int:
    """``kstrtoul_from_user`` base 10 (:mod:`..engine.ftrace.kstrto`)."""
    return kstrtoul_from_user(data)


class CountFile(ValueFile):
    """A value file whose *store* returns the count the kernel's write
    answers (None: all of it); its text may be bytes."""

    def __init__(self, show, store=None, on_trunc=None):
        super().__init__(show, store)
        self.on_trunc = on_trunc

    def write_nowait(self, f: OpenFile, off: int, data: bytes) -> int:
        if self.store is None:
            raise fail(errno.EINVAL)
        n = self.store(data)
        return len(data) if n is None else n

    def truncate(self, f):
        if self.on_trunc is not None and (f is None or not f.flags & os.O_APPEND):
            self.on_trunc()


class TracingTree(EventsDir, OptionsDir):
    """Builds ``tracing/`` for one trace array and keeps readers woken: the
    top level (:class:`Ftrace`) or, with *tr*, one of its instances
    (``instances/<name>``, laid out as ``init_tracer_tracefs`` makes an
    instance: without the top-level-only files).  The table of the top
    level and ``per_cpu/`` and the stores of ``trace.c``'s files are here;
    ``events/`` and the event files' stores come from
    :class:`~fakedebugfs.trees.tracing_events.EventsDir`, ``options/`` from
    :class:`~fakedebugfs.trees.tracing_options.OptionsDir`."""

    def __init__(self, kernel, ft: Ftrace, tr=None):
        self.kernel = kernel
        self.top = ft
        self.ft = ft if tr is None else tr
        self.is_instance = tr is not None
        self.trace_wait = WaitQueue()
        self._seen = self.ft.written
        self.root = self.create_tree()
        if self.is_instance:
            self.root.name, self.root.mode = tr.name, stat.S_IFDIR | 0o750
            for name in TOP_ONLY:
                self.root.children.pop(name, None)
        self.ft.on_tracer_change.append(self._tracer_changed)
        self.ft.on_event_added.append(self._event_added)
        removed_listeners(self.ft).append(self._event_removed)
        self.ft.engine.listeners.append(self.wake)

    def detach(self) -> None:
        """The instance is gone: stop waking its readers."""
        if self.wake in self.ft.engine.listeners:
            self.ft.engine.listeners.remove(self.wake)
        self.trace_wait.wake()

    def wake(self) -> None:
        """After a workload batch: wake readers if entries were written."""
        if self.ft.written != self._seen:
            self._seen = self.ft.written
            self.trace_wait.wake()

    # --- the table ----------------------------------------------------------

    def create_tree(self) -> Dir:
        ft = self.ft
        root = Dir("tracing", 0o700)
        # tracing_readme_read: simple_read_from_buffer (one record, read whole)
        root.file("README", RO, SeqFile(lambda: [readme_text(_kernel_readme(ft),
                                                             set(root.children))]),
                  static=True)
        root.file("available_events", RO, SeqFile(
            lambda: "".join(k + "\n" for k in listed(ft, ft.event_keys()))), static=True)
        root.file("available_tracers", RO, SeqFile(lambda: " ".join(ft.tracers) + "\n"),
                  static=True)
        root.file("buffer_percent", RW, ValueFile(lambda: f"{ft.buffer_percent}\n",
                                                  self._buffer_percent))
        root.file("buffer_size_kb", RW, ValueFile(ft.buffer_size_kb, self._resize(None)))
        root.file("buffer_subbuf_size_kb", RW, ValueFile(
            lambda: f"{4 << ft.subbuf_order}\n", self._subbuf_size))
        root.file("buffer_total_size_kb", RO, ValueFile(lambda: f"{sum(ft.buffer_kb)}\n"))
        root.file("current_tracer", RW, CountFile(lambda: ft.tracer.name + "\n",
                                                  self._set_tracer))
        dyn = dyn_events(self.top, _dyn_kinds(self.top), _stat_path, probe_facts(self.top.profile))
        root.file("dynamic_events", RW, CountFile(dyn.show, as_writer(self.top.engine, dyn.write),
                                                  dyn.release_all))
        root.file("error_log", RW, CountFile(lambda: b"".join(ft.error_log), lambda d: None,
                                             ft.error_log.clear))
        root.file("free_buffer", 0o200, FreeBuffer(ft))
        root.mkdir("instances", 0o750).dir_ops = Instances(self)
        self.options = root.mkdir("options", 0o750)
        self._add_option_files()
        root.file("printk_formats", RO, SeqFile(lambda: self.top.printk_formats),
                  static=True)
        root.file("saved_cmdlines", RO, SeqFile(ft.saved_cmdlines))
        root.file("saved_cmdlines_size", RW, ValueFile(
            lambda: f"{ft.cmdlines_size}\n",
            self._cmdlines_size))
        if _profile_has(self.top, "saved_tgids"):  # trace_sched_switch.c's tgid_map
            root.file("saved_tgids", RO, SeqFile(lambda: self.top.tgids.show()))
        root.file("set_event", RW, CountFile(
            lambda: "".join(k + "\n" for k in listed(ft, ft.event_keys()) if k in ft.enabled),
            self._set_event, lambda: [ft.set_event(k, False) for k in list(ft.enabled)]))
        root.file("set_event_pid", RW, CountFile(
            lambda: "".join(f"{p}\n" for p in sorted(ft.event_pids)),
            self._pid_write("event_pids"), ft.event_pids.clear))
        root.file("set_event_notrace_pid", RW, CountFile(
            lambda: "".join(f"{p}\n" for p in sorted(ft.notrace_pids)),
            self._pid_write("notrace_pids"), ft.notrace_pids.clear))
        root.file("timestamp_mode", RO, SeqFile(lambda: "[delta] absolute\n"))
        root.file("trace", RW, TraceText(self, None))
        root.file("trace_clock", RW, ValueFile(ft.trace_clock, self._set_clock))
        root.file("trace_marker", WO, Marker(self, raw=False))
        root.file("trace_marker_raw", WO, Marker(self, raw=True))
        root.file("trace_options", RW, ValueFile(ft.trace_options, self._trace_options))
        root.file("trace_pipe", RO, TracePipe(self, None))
        root.file("tracing_cpumask", RW, ValueFile(lambda: f"{ft.cpumask:x}\n", self._cpumask))
        root.file("tracing_on", RW, ValueFile(lambda: f"{int(ft.tracing_on)}\n", self._tracing_on))
        for kind in _probe_files(self.top):  # trace_[ku]probe.c's files, where the kernel has them
            root.file(f"{kind}_events", RW, CountFile(
                lambda kind=kind: dyn.show(kind),
                as_writer(self.top.engine, lambda data, kind=kind: dyn.write(data, kind)),
                lambda kind=kind: dyn.release_all(kind)))
            root.file(f"{kind}_profile", RO, SeqFile(lambda kind=kind: dyn.profile(kind)))
        root.file("tracing_thresh", RW, ValueFile(
            lambda: f"{self.top.thresh_ns // 1000}\n", self._thresh))
        add_top_files(self, root)  # synthetic_events, snapshot, ... (the profile's)
        add_function_files(self, root)  # the function tracer's, where the profile has them
        root.add(self.create_events())
        root.add(self.create_per_cpu())
        return root

    def create_per_cpu(self) -> Dir:
        """``tracing_init_tracefs_percpu`` for each CPU."""
        per_cpu = Dir("per_cpu", 0o750)
        for cpu in range(len(self.ft.buffers)):
            d = per_cpu.mkdir(f"cpu{cpu}", 0o750)
            d.file("buffer_size_kb", RW, ValueFile(
                lambda cpu=cpu: f"{self.ft.buffer_kb[cpu]}\n", self._resize(cpu)))
            d.file("stats", RO, SeqFile(lambda cpu=cpu: self.ft.stats(cpu)))
            d.file("trace", RW, TraceText(self, cpu))
            d.file("trace_pipe", RO, TracePipe(self, cpu))
            d.file("trace_pipe_raw", RO, TracePipeRaw(self, cpu))
            add_cpu_files(self, d, cpu)  # snapshot, snapshot_raw (the profile's)
        return per_cpu

    # --- writes ----------------------------------------------------------------

    def _tracing_on(self, data: bytes) -> None:
        """``rb_simple_write``: nonzero turns the buffers on; a change
        starts or stops the current tracer where it has a ``start`` or
        ``stop`` (blk, mmiotrace)."""
        ft, on = self.ft, kstrtoul(data) != 0
        if on != ft.tracing_on:
            ft.tracing_on = on
            hook = getattr(ft.tracer, "start" if on else "stop", None)
            if hook is not None:
                hook(ft)
        self.trace_wait.wake()

    def _set_tracer(self, data: bytes) -> int:
        """``tracing_set_trace_write``: the first 100 bytes, stripped; the
        count answered is of those bytes."""
        cnt = min(len(data), MAX_TRACER_SIZE)
        self.ft.set_tracer(_cstr(data[:cnt]).strip(TEXT_SPACES))  # strstrip (lib/ctype)
        self.trace_wait.wake()
        return cnt

    def _trace_options(self, data: bytes) -> None:
        """``tracing_trace_options_write``: under 64 bytes."""
        if len(data) >= 64:
            raise fail(errno.EINVAL)
        self.ft.write_trace_options(_cstr(data).strip(TEXT_SPACES))  # strstrip (lib/ctype)

    def _set_clock(self, data: bytes) -> None:
        """``tracing_clock_write``: under 64 bytes, stripped, an exact name."""
        if len(data) >= 64:
            raise fail(errno.EINVAL)
        self.ft.set_clock(_cstr(data).strip(TEXT_SPACES))  # strstrip (lib/ctype)

    def _resize(self, cpu):
        def store(data: bytes) -> None:
            self.ft.resize(kstrtoul(data), cpu)
        return store

    def _buffer_percent(self, data: bytes) -> None:
        self.ft.buffer_percent = percent(data)

    def _subbuf_size(self, data: bytes) -> None:
        """``buffer_subbuf_size_write``: the buffers are made anew of
        sub-buffers of the size asked (:meth:`TraceArray.set_subbuf_order`)."""
        self.ft.set_subbuf_order(subbuf_order(data))

    def _thresh(self, data: bytes) -> None:
        self.top.thresh_ns = nsecs_write(data)

    def _cmdlines_size(self, data: bytes) -> None:
        self.ft.cmdlines_size = saved_cmdlines_size(data)

    def _cpumask(self, data: bytes) -> None:
        """``tracing_cpumask_write``: ``bitmap_parse_user`` over the CPUs."""
        self.ft.cpumask = bitmap_parse(data, len(self.ft.buffers))


class FreeBuffer(WriteFile):
    """``tracing_free_buffer_fops``: a write is accepted whole, the release
    frees the buffer (:meth:`~FtraceTracer.free_buffer`).  FUSE sends the
    release after close(2) returns, so a write frees it too: what a reader
    sees after ``echo > free_buffer`` does not depend on that delay."""

    def __init__(self, ft):
        super().__init__(lambda data: ft.free_buffer())
        self.ft = ft

    def release(self, f: OpenFile) -> None:
        self.ft.free_buffer()


class Instances:
    """``instances/``: ``mkdir`` makes a trace array and its directory
    (``instance_mkdir``), ``rmdir`` removes them (``instance_rmdir``: EBUSY
    while one of its files is open, which the adapter checks)."""

    def __init__(self, tree: TracingTree):
        self.tree = tree
        self.trees: dict[str, TracingTree] = {}

    def mkdir(self, name: str) -> Dir:
        # EEXIST; the calls it makes are the task's that made the directory
        tr = as_writer(self.tree.top.engine, self.tree.top.new_instance)(name)
        sub = TracingTree(self.tree.kernel, self.tree.top, tr)
        self.trees[name] = sub
        return sub.root

    def rmdir(self, name: str) -> None:
        tr = self.tree.top.instances.get(name)
        self.tree.top.remove_instance(name)  # ENOENT, EBUSY
        remove_functions(self.tree.top, tr)  # its function tracer and probes
        for buf in tr.buffers:  # its memory back now (ring_buffer_free)
            buf.release()
        sub = self.trees.pop(name, None)
        if sub is not None:
            sub.detach()
        # Their attributes go: the cycles between the array, its tree and
        # their helpers (probes, tracer, output context, wait queue) are
        # broken, and all of it is freed by reference counting now; left to
        # the collector, it stayed in its frozen generation (settle_heap),
        # about 25 KB an instance, never returned.
        for gone in (tr, sub):
            if gone is not None:
                vars(gone).clear()


def _kernel_readme(ft):
    """The README of the kernel profile the fake serves (None without one)."""
    prof = ft.top.profile
    return prof.files.get("README") if prof is not None else None


def _cstr(data: bytes) -> str:
    """The bytes as the kernel's C string sees them: up to a NUL."""
    return data.split(b"\0", 1)[0].decode(errors="surrogateescape")


def _probe_files(ft) -> tuple:
    """The probe event types with a ``<kind>_events`` file in the profile's
    tracefs (6.18 here: uprobe; Debian 6.12: kprobe and uprobe)."""
    prof = ft.top.profile
    modes = prof.modes() if prof is not None else {}
    return tuple(k for k in ("kprobe", "uprobe") if f"{k}_events" in modes
                 or (prof is None and k == "uprobe"))


def _dyn_kinds(ft) -> tuple:
    """The probe event types of the profile's kernel: those with a file,
    and where it has kprobe events, fprobes (its README's ``f[:[<group>/]``
    line) and event probes (built with any probe events up to 6.12;
    docs/dynamic-events.md)."""
    kinds = _probe_files(ft)
    if "kprobe" in kinds:
        prof = ft.top.profile
        readme = prof.files.get("README") or ""
        kinds += ("eprobe",) + (("fprobe",) if "\t           f[:[<group>/]" in readme else ())
    return kinds


def _profile_has(ft, name: str) -> bool:
    """Whether the profile's kernel has this top-level file (no profile:
    the fake's own tree, which has it)."""
    prof = ft.top.profile
    return prof is None or name in prof.modes()


def _stat_path(path: str):
    """``kern_path(LOOKUP_FOLLOW)`` for a uprobe's binary: its stat, or None."""
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def create_tree(kernel) -> Dir:
    """``tracing/`` for *kernel* (a :class:`fakedebugfs.engine.kernel.Kernel`)."""
    return TracingTree(kernel, kernel.ftrace).root


__all__ = ["TracingTree", "create_tree", "HEADER_PAGE", "HEADER_EVENT"]
