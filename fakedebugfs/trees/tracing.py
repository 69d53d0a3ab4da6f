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
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Optional

from fakedebugfs.engine.ftrace.control import (EVENT_BUF_SIZE,
    bitmap_parse, bool_write, nsecs_write, percent, pid_write, saved_cmdlines_size, subbuf_order,
    trace_get_user)
from fakedebugfs.engine.ftrace.ctype import TEXT_SPACES
from fakedebugfs.engine.ftrace.kstrto import kstrtoul_from_user
from fakedebugfs.engine.ftrace.tracer import Ftrace
from fakedebugfs.engine.ftrace.trace_dynevent import dyn_events, removed_listeners
from fakedebugfs.engine.core.layouts import PAGE_SIZE
from fakedebugfs.fs.fops import (FileOperations, OpenFile, SeqFile, ValueFile, WriteFile, fail,
    writer_pid)
from fakedebugfs.fs.tree import Dir
from fakedebugfs.fs.waitqueue import WaitQueue
from fakedebugfs.trees.readme import readme_text
from fakedebugfs.trees.tracing_pipes import TracePipe, TracePipeRaw, TraceText

HEADER_PAGE = (
    "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
    "\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
    "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
    "\tfield: char data;\toffset:16;\tsize:{data_size};\tsigned:0;\n"
)
HEADER_EVENT = (
    "# compressed entry header\n"
    "\ttype_len    :    5 bits\n"
    "\ttime_delta  :   27 bits\n"
    "\tarray       :   32 bits\n"
    "\n"
    "\tpadding     : type == 29\n"
    "\ttime_extend : type == 30\n"
    "\ttime_stamp : type == 31\n"
    "\tdata max type_len  == 28\n"
)
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
# TOP_LEVEL_TRACE_FLAGS: options an instance has no file for
TOP_LEVEL_TRACE_FLAGS = ("trace_printk", "printk-msg-only", "record-cmd")


def kstrtoul(data: bytes) -> int:
    """``kstrtoul_from_user`` base 10 (:mod:`..engine.ftrace.kstrto`)."""
    return kstrtoul_from_user(data)


class CountFile(ValueFile):
    """A value file whose *store* returns the count the kernel's write
    answers (None: all of it); its text may be bytes."""

    def __init__(self, show, store=None, on_trunc=None):
        super().__init__(show, store)
        self.on_trunc = on_trunc

    async def write(self, f: OpenFile, off: int, data: bytes) -> int:
        if self.store is None:
            raise fail(errno.EINVAL)
        n = self.store(data)
        return len(data) if n is None else n

    def truncate(self, f):
        if self.on_trunc is not None and (f is None or not f.flags & os.O_APPEND):
            self.on_trunc()


class TracingTree:
    """Builds ``tracing/`` for one trace array and keeps readers woken: the
    top level (:class:`Ftrace`) or, with *tr*, one of its instances
    (``instances/<name>``, laid out as ``init_tracer_tracefs`` makes an
    instance: without the top-level-only files)."""

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
        root.file("README", RO, SeqFile(lambda: readme_text(_kernel_readme(ft), set(root.children))),
                  static=True)
        root.file("available_events", RO, SeqFile(
            lambda: "".join(k + "\n" for k in ft.event_keys())), static=True)
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
        dyn = dyn_events(self.top, _dyn_kinds(self.top), _stat_path)
        root.file("dynamic_events", RW, CountFile(dyn.show, dyn.write, dyn.release_all))
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
        root.file("set_event", RW, CountFile(
            lambda: "".join(k + "\n" for k in ft.event_keys() if k in ft.enabled),
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
        for kind in _dyn_kinds(self.top):  # trace_uprobe.c's files, where the kernel has them
            root.file(f"{kind}_events", RW, CountFile(
                lambda kind=kind: dyn.show(kind), lambda data, kind=kind: dyn.write(data, kind),
                lambda kind=kind: dyn.release_all(kind)))
            root.file(f"{kind}_profile", RO, SeqFile(lambda kind=kind: dyn.profile(kind)))
        root.file("tracing_thresh", RW, ValueFile(
            lambda: f"{self.top.thresh_ns // 1000}\n", self._thresh))
        root.add(self.create_events())
        root.add(self.create_per_cpu())
        return root

    def create_events(self) -> Dir:
        """``event_trace_add_tracer``: ``events/`` and one directory per
        event, made the first time ``events/`` is looked into (eventfs; its
        ~100 systems took ~15 ms of a mount's start)."""
        self.events_dir = Dir("events", populate=self._events_files)
        return self.events_dir

    def _events_files(self, events: Dir) -> None:
        ft = self.ft
        events.file("enable", RW, ValueFile(lambda: ft.enable_state(ft.event_keys()) + "\n",
                                            self._enable(None, None)))
        # ring_buffer_print_page_header(buffer, s): the data size of this
        # trace array's sub-buffers
        events.file("header_page", RO, SeqFile(
            lambda: HEADER_PAGE.format(data_size=ft.subbuf_data_size)), static=True)
        events.file("header_event", RO, SeqFile(lambda: HEADER_EVENT), static=True)
        ftrace_dir = events.mkdir("ftrace")
        for key in ft.events:
            if key.startswith("ftrace:"):
                self._ftrace_entry_dir(ftrace_dir, key)
        by_system: dict = {}
        for key in ft.event_keys():  # one pass: 2,305 events in ~100 systems
            by_system.setdefault(key.split(":", 1)[0], []).append(key)
        for system in sorted(by_system):  # eventfs: made when first looked into
            self._system_dir(events, system, by_system[system])

    def _ftrace_entry_dir(self, ftrace_dir: Dir, key: str) -> None:
        """``events/ftrace/<entry>/``: ``format``, and the ``id`` (and
        ``trigger``) the profile's kernel shows for it (6.18: ``function``
        has an id, ``print`` an id and a trigger)."""
        ft, name = self.ft, key[7:]
        edir = ftrace_dir.mkdir(name)
        edir.file("format", RO, SeqFile(lambda: ft.events[key].format()), static=True)
        prof = ft.top.profile
        modes = prof.modes() if prof is not None else {}
        if f"events/ftrace/{name}/id" in modes:
            edir.file("id", RO, SeqFile(lambda: f"{ft.events[key].id}\n"), static=True)
        if f"events/ftrace/{name}/trigger" in modes:
            edir.file("trigger", RW, TriggerFile(ft, key))  # trace_marker's triggers

    def _system_dir(self, events: Dir, system: str, keys=()) -> Dir:
        """``event_subsystem_dir``: ``enable`` and ``filter`` over the
        system's events, whichever exist when they are read or written, and
        a directory for each of *keys*: all made when the directory is first
        looked into (eventfs)."""
        def populate(sdir: Dir) -> None:
            self._system_files(sdir, system)
            for key in keys:
                self._event_dir(sdir, key)

        return events.mkdir(system, populate=populate)

    def _system_files(self, sdir: Dir, system: str) -> None:
        ft = self.ft
        sdir.file("enable", RW, ValueFile(
            lambda: ft.enable_state(ft.keys_matching(system, None)) + "\n",
            self._enable(system, None)))
        sdir.file("filter", RW, ValueFile(
            lambda: "### global filter ###\n# Use this to set filters for multiple events.\n"
                    "# Only events with the given fields will be affected.\n"
                    "# If no events are modified, an error message will be displayed here\n",
            self._system_filter(system)))

    def _event_added(self, ev) -> None:
        """A dynamic event (``Ftrace.define_event``): its directory, and its
        system's if new, appear while mounted (``event_add_file``)."""
        sdir = self.events_dir.children.get(ev.system)
        if sdir is None:
            sdir = self._system_dir(self.events_dir, ev.system)
        if ev.name not in sdir.children:
            self._event_dir(sdir, ev.key)

    def _event_removed(self, key: str) -> None:
        """A dynamic event removed (``trace_remove_event_call``): its
        directory goes, and its system's once no event is left there."""
        events = vars(self).get("events_dir")
        if events is None or events._populate is not None:
            return  # events/ not looked into yet: made from the registry then
        system, name = key.split(":", 1)
        sdir = events.children.get(system)
        if sdir is None:
            return
        left = self.ft.keys_matching(system, None)
        if sdir._populate is not None or not left:  # not looked into: made anew
            events.remove(system)
            if left:
                self._system_dir(events, system, left)
        elif name in sdir.children:
            sdir.remove(name)

    def _event_dir(self, sdir: Dir, key: str) -> None:
        # the event (profile events are parsed on first use) is looked up
        # when a file is read, never while the tree is built
        system, name = key.split(":", 1)
        sdir.mkdir(name, populate=lambda edir: self._event_files(edir, key))

    def _event_files(self, edir: Dir, key: str) -> None:
        """An event's files (``event_create_dir``), made on first look."""
        ft = self.ft
        system, name = key.split(":", 1)
        edir.file("enable", RW, ValueFile(lambda: ft.event_enable_show(key),
                                          self._enable(system, name)))
        edir.file("filter", RW, ValueFile(
            lambda: (ft.filters.get(key, "none") + "\n").encode(errors="surrogateescape"),
            self._filter([key])))
        # neither builds the event (parsing its format: ~0.5 ms each, the most
        # of reading every format, as trace-cmd record and stream first do)
        edir.file("format", RO, SeqFile(lambda: ft.events.format_text(key)), static=True)
        edir.file("id", RO, SeqFile(lambda: f"{ft.events.event_id(key)}\n"), static=True)
        edir.file("trigger", RW, TriggerFile(ft, key))

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
        return per_cpu

    # --- options/ ------------------------------------------------------------------

    def _add_option_files(self) -> None:
        for name in self.ft.option_names():
            if self.is_instance and name in TOP_LEVEL_TRACE_FLAGS:
                continue
            if name not in self.options.children:
                self.options.file(name, RW, ValueFile(
                    lambda name=name: f"{int(self._option(name))}\n", self._option_write(name)))

    def _option(self, name: str) -> bool:
        ft = self.ft
        if name in ft.options:
            return ft.options[name]
        if name in ft.tracer.flags:
            return ft.tracer.flags[name]
        raise fail(errno.EINVAL)

    def _option_write(self, name):
        def store(data: bytes) -> None:
            value = kstrtoul(data)
            if value > 1:
                raise fail(errno.EINVAL)
            if bool(value) != self._option(name):  # trace_options_write: no change, no call
                self.ft.set_option(name, bool(value))
        return store

    def _tracer_changed(self) -> None:
        """Tracer flags' files come and go with their tracer (2.6.29's
        ``create_trace_option_files``/``destroy_trace_option_files``)."""
        wanted = set(self.ft.option_names())
        for name in list(self.options.children):
            if name not in wanted:
                self.options.remove(name)
        self._add_option_files()

    # --- writes ----------------------------------------------------------------

    def _tracing_on(self, data: bytes) -> None:
        """``rb_simple_write``: nonzero turns the buffers on."""
        self.ft.tracing_on = kstrtoul(data) != 0
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

    def _enable(self, system, name):
        """``event_enable_write``/``system_enable_write``: 0 or 1, else EINVAL."""
        def store(data: bytes) -> None:
            value = bool_write(data)
            for key in self.ft.keys_matching(system, name):
                self.ft.set_event(key, value)
        return store

    def _system_filter(self, system: str):
        def store(data: bytes) -> None:
            if len(data) >= PAGE_SIZE:
                raise fail(errno.EINVAL)
            self.ft.set_filter(self.ft.keys_matching(system, None), data, True)
        return store

    def _filter(self, keys, system=False):
        """``event_filter_write``: under a page, the rest in the engine."""
        def store(data: bytes) -> None:
            if len(data) >= PAGE_SIZE:
                raise fail(errno.EINVAL)
            self.ft.set_filter(keys, data, system)
        return store

    def _set_event(self, data: bytes) -> int:
        """``ftrace_event_write``: one word per write (``trace_get_user``),
        the count consumed answered; ``[!][system:]event``."""
        used, token = trace_get_user(data, EVENT_BUF_SIZE + 1)
        if token is not None:
            line = token.decode(errors="surrogateescape")
            on = not line.startswith("!")
            system, sep, name = (line if on else line[1:]).partition(":")
            # one event named in full: its key, not a walk of 2,305 events
            # (set_event_line would find the same one, ~5 ms later)
            named = sep and system not in ("", "*") and name not in ("", "*")
            keys = self.ft.keys_matching(system, name) if named else []
            if keys:
                self.ft.set_event(keys[0], on)
            else:
                self.ft.set_event_line(line)
        return used

    def _pid_write(self, attr: str):
        """``ftrace_event_pid_write``/``ftrace_event_npid_write``."""
        def store(data: bytes) -> int:
            used, pids = pid_write(data, getattr(self.ft, attr))
            target = getattr(self.ft, attr)
            target.clear()
            target.update(pids)
            return used
        return store


def writer_cpu(pid: int, nr_cpus: int) -> Optional[int]:
    """The CPU task *pid* runs on (``/proc/PID/stat`` field 39,
    ``processor``: a writer blocked in write(2) is where it wrote from),
    folded into the fake's CPUs; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fp:
            stat = fp.read()
        return int(stat[stat.rindex(b")") + 2:].split()[36]) % nr_cpus
    except (OSError, ValueError, IndexError):
        return None


class Marker(FileOperations):
    """``tracing_mark_fops``/``tracing_mark_raw_fops``."""

    def __init__(self, tree: TracingTree, raw: bool):
        self.tree = tree
        self.raw = raw

    async def write(self, f: OpenFile, off: int, data: bytes) -> int:
        pid = writer_pid(f)  # tracing_mark_write records current, the writer
        _learn_comm(self.tree.ft.engine, pid)
        cpu = writer_cpu(pid, self.tree.ft.engine.nr_cpus)  # on current's CPU
        n = self.tree.ft.marker(pid, data, raw=self.raw, cpu=cpu)
        self.tree.wake()
        return n


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


class TriggerFile(FileOperations):
    """``event_trigger_fops``: the trigger list (newest first) or the
    available commands; a write of one command (``event_trigger_regex_write``:
    EINVAL from PAGE_SIZE bytes on, the buffer ``strim``-ed; 0 bytes: 0)."""

    def __init__(self, tr, key: str):
        self.tr, self.key = tr, key

    def open(self, f: OpenFile) -> None:
        f.private = self.tr.trigger_state(self.key).show().encode() if f.readable else b""

    def read_nowait(self, f: OpenFile, off: int, size: int) -> bytes:
        return f.private[off:off + size]

    async def write(self, f: OpenFile, off: int, data: bytes) -> int:
        if not data:
            return 0
        if len(data) >= PAGE_SIZE:
            raise fail(errno.EINVAL)
        self.tr.write_trigger(self.key, data.split(b"\0", 1)[0])
        return len(data)


class Instances:
    """``instances/``: ``mkdir`` makes a trace array and its directory
    (``instance_mkdir``), ``rmdir`` removes them (``instance_rmdir``: EBUSY
    while one of its files is open, which the adapter checks)."""

    def __init__(self, tree: TracingTree):
        self.tree = tree
        self.trees: dict[str, TracingTree] = {}

    def mkdir(self, name: str) -> Dir:
        tr = self.tree.top.new_instance(name)  # EEXIST
        sub = TracingTree(self.tree.kernel, self.tree.top, tr)
        self.trees[name] = sub
        return sub.root

    def rmdir(self, name: str) -> None:
        tr = self.tree.top.instances.get(name)
        self.tree.top.remove_instance(name)  # ENOENT, EBUSY
        for buf in tr.buffers:  # its memory back now (ring_buffer_free)
            buf.release()
        sub = self.trees.pop(name, None)
        if sub is not None:
            sub.detach()


def _learn_comm(engine, pid: int) -> None:
    """``tracing_record_cmdline`` for a writer: its comm from /proc."""
    if pid and pid not in engine.comms:
        try:
            with open(f"/proc/{pid}/comm") as fp:
                engine.set_comm(pid, fp.read().strip())
        except OSError:
            pass


def _kernel_readme(ft):
    """The README of the kernel profile the fake serves (None without one)."""
    prof = ft.top.profile
    return prof.files.get("README") if prof is not None else None


def _cstr(data: bytes) -> str:
    """The bytes as the kernel's C string sees them: up to a NUL."""
    return data.split(b"\0", 1)[0].decode(errors="surrogateescape")


def _dyn_kinds(ft) -> tuple:
    """The probe event types of the profile's kernel: those whose
    ``<kind>_events`` file its tracefs has (6.18 here: uprobe)."""
    prof = ft.top.profile
    modes = prof.modes() if prof is not None else {}
    return tuple(k for k in ("uprobe",) if f"{k}_events" in modes or prof is None)


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
