"""The function tracer's files of ``tracing/`` (kernel/trace/ftrace.c's
``ftrace_init_dyn_tracefs``, ``ftrace_create_filter_files``,
``ftrace_init_tracefs``; trace_functions_graph.c's ``max_graph_depth``;
trace.c's ``dyn_ftrace_total_info``), present when the profile's kernel has
them (its ``modes`` lists them), with the ``function`` and
``function_graph`` tracers its ``available_tracers`` names
(:mod:`fakedebugfs.engine.ftrace.trace_functions`).

    set_ftrace_filter, set_ftrace_notrace     one word per write: a glob,
                                              !glob, glob:mod:m, glob:cmd[:n]
    set_ftrace_pid, set_ftrace_notrace_pid    pids ("no pid" when empty)
    available_filter_functions(_addrs)        the profile's, as captured
    enabled_functions, touched_functions      name (count) and flag columns
    dyn_ftrace_total_info                     records, pages, groups
    set_graph_function, set_graph_notrace     globs for function_graph
    max_graph_depth                           0: no limit
    stack_trace, stack_max_size, stack_trace_filter   the stack tracer

The filter files apply each word as it is written (the kernel applies its
copy of the hash at the file's release, which FUSE sends after close(2)
returns: what a reader sees next would depend on that delay); a word the
writes left unfinished is applied at the release, its error unreported, as
the kernel's.
"""

from __future__ import annotations

import errno
import os

from fakedebugfs.engine.core.profile_files import profile_file, read_profile_file
from fakedebugfs.engine.ftrace.control import pid_write
from fakedebugfs.engine.ftrace.ftrace import TraceParser, hash_order
from fakedebugfs.engine.ftrace.kstrto import kstrtoul_from_user
from fakedebugfs.engine.ftrace.trace_functions import add_tracers, attach
from fakedebugfs.fs.fops import FileOperations, OpenFile, SeqFile, ValueFile, fail
from fakedebugfs.fs.seq_file import seq_open

# kernel.stack_tracer_enabled, served where tracing/ is: a name no tracefs
# has, found by lookup and never listed (``run`` binds it over the sysctl)
STACK_SYSCTL = ".stack_tracer_enabled"
# files of every trace array (ftrace_create_filter_files, ftrace_init_tracefs)
ARRAY_FILES = ("set_ftrace_filter", "set_ftrace_notrace", "set_ftrace_pid",
               "set_ftrace_notrace_pid")


class RegexFile(FileOperations):
    """``ftrace_filter_fops``/``ftrace_notrace_fops`` (``ftrace_regex_*``),
    and with *graph* the ``set_graph_*`` files (``ftrace_graph_*``)."""

    def __init__(self, ops, enable: bool, graph: bool = False):
        self.ops = ops
        self.enable = enable
        self.graph = graph

    def open(self, f: OpenFile) -> None:
        shown = self._show() if f.readable else []
        f.private = (TraceParser(), seq_open(shown) if f.readable else None)
        if self.graph and f.writable:  # ftrace_graph_open: the hash this open builds
            trunc = f.flags & os.O_TRUNC
            self._seq = [] if trunc else list(self._order())

    def _show(self) -> list:
        if not self.graph:
            return self.ops.show(self.enable)
        h = self.ops.hash(self.enable)
        if not h:
            return ["#### all functions enabled ####\n" if self.enable
                    else "#### no functions disabled ####\n"]
        names = self.ops.records.names
        return [names[i] + "\n" for i in self._order()]  # g_show: the hash's order

    def _order(self) -> list:
        """The graph hash's records in the order it lists them (record
        order for one not written through this file)."""
        h = self.ops.hash(self.enable)
        order = self.ops.__dict__.setdefault("graph_order", {}).get(self.enable, [])
        if set(order) != h:
            order = sorted(h)
        return order

    def _reorder(self) -> None:
        """The order ``__ftrace_hash_move`` gives the hash this open built
        (:func:`~fakedebugfs.engine.ftrace.ftrace.hash_order`)."""
        recs = self.ops.records
        by_ip = {recs.addrs[i]: i for i in self._seq}
        order = hash_order([], [recs.addrs[i] for i in self._seq])
        self.ops.__dict__.setdefault("graph_order", {})[self.enable] = [by_ip[ip] for ip in order]

    def truncate(self, f) -> None:
        """``O_TRUNC``: the hash starts empty (the cached mods dropped)."""
        if f is None or f.flags & os.O_TRUNC:
            self.ops.clear(self.enable)
            if self.graph:
                self._seq = []

    def read_nowait(self, f: OpenFile, off: int, size: int) -> bytes:
        seq = f.private[1] if f.private else None
        if seq is None:
            raise fail(errno.EINVAL)
        return seq.read(off, size)

    def write_nowait(self, f: OpenFile, off: int, data: bytes) -> int:
        """One word a write (``trace_get_user``): the count consumed."""
        if not data:
            return 0
        parser = f.private[0]
        n = parser.get_user(data, off)
        if parser.done:
            word = parser.word()
            parser.buffer.clear()
            parser.done = False
            self._apply(word)
        return n

    def release(self, f: OpenFile) -> None:
        """``ftrace_regex_release``: a word left unfinished is applied now."""
        parser = f.private[0] if f.private else None
        if parser is not None and parser.loaded:
            try:
                self._apply(parser.word())
            except OSError:
                pass

    def _apply(self, word: str) -> None:
        if self.graph:
            self._graph(word)
        else:
            self.ops.process_regex(word, self.enable)

    def _graph(self, word: str) -> None:
        """``ftrace_graph_set_hash``: plain globs only; EINVAL when nothing
        is added or removed."""
        if word[:1].isdigit() or word[1:2].isdigit() and word[:1] == "!":
            raise fail(errno.EINVAL)
        idx, neg = self.ops.records.match(word, None)
        h = self.ops.hash(self.enable)
        seq = self.__dict__.get("_seq")
        if seq is None:
            seq = self._seq = list(self._order())
        if neg:
            gone = h.intersection(idx)
            if not gone:
                raise fail(errno.EINVAL)
            h.difference_update(gone)
            seq[:] = [i for i in seq if i not in gone]
        else:
            if not idx:
                raise fail(errno.EINVAL)
            seq.extend(i for i in idx if i not in h)
            h.update(idx)
        self._reorder()


class PidFile(FileOperations):
    """``ftrace_pid_fops``/``ftrace_no_pid_fops``: ``no pid`` while empty;
    a write of pids adds them (``trace_pid_write``), one of none empties it."""

    def __init__(self, fn, tr, attr: str):
        self.fn, self.tr, self.attr = fn, tr, attr

    def _pids(self):
        return self.tr.__dict__.get(self.attr)

    def open(self, f: OpenFile) -> None:
        pids = self._pids()
        text = "no pid\n" if pids is None else "".join(f"{p}\n" for p in sorted(pids))
        f.private = seq_open(text) if f.readable else None

    def truncate(self, f) -> None:
        setattr(self.tr, self.attr, None)

    def read_nowait(self, f: OpenFile, off: int, size: int) -> bytes:
        if f.private is None:
            raise fail(errno.EINVAL)
        return f.private.read(off, size)

    def write_nowait(self, f: OpenFile, off: int, data: bytes) -> int:
        n, new = pid_write(data, self._pids() or set())
        setattr(self.tr, self.attr, new or None)
        self.fn.follow_fork()
        return n


def add_function_files(tree, root) -> None:
    """The function tracer's files and tracers for the trace array of
    *tree* (a :class:`~fakedebugfs.trees.tracing.TracingTree`), where the
    profile's kernel has them; nothing otherwise."""
    top = tree.top
    fn = attach(top)
    if fn is None:
        return
    prof = top.profile
    modes = prof.modes()
    tracers = (prof.files.get("available_tracers") or "").split()
    tr = tree.ft
    ops = fn.ops(tr)
    add_tracers(fn, tr, tracers)

    def mode(name: str, default: int) -> int:
        return modes.get(name, (default, "f"))[0]

    def have(name: str) -> bool:
        return name in modes

    if have("set_ftrace_filter"):
        root.file("set_ftrace_filter", mode("set_ftrace_filter", 0o640), RegexFile(ops, True))
        root.file("set_ftrace_notrace", mode("set_ftrace_notrace", 0o640),
                  RegexFile(ops, False))
    if have("set_ftrace_pid"):
        root.file("set_ftrace_pid", mode("set_ftrace_pid", 0o640),
                  PidFile(fn, tr, "ftrace_pids"))
        root.file("set_ftrace_notrace_pid", mode("set_ftrace_notrace_pid", 0o640),
                  PidFile(fn, tr, "ftrace_no_pids"))
    if tree.is_instance:
        return
    path = prof.path
    for name in ("available_filter_functions", "available_filter_functions_addrs"):
        found = profile_file(path, name)  # NAME or NAME.xz
        if have(name) and found is not None:
            root.file(name, mode(name, 0o440),
                      SeqFile(lambda p=found: read_profile_file(p)), static=True)
    if have("enabled_functions"):
        root.file("enabled_functions", mode("enabled_functions", 0o440),
                  SeqFile(lambda: fn.enabled_functions()))
    if have("touched_functions"):
        root.file("touched_functions", mode("touched_functions", 0o440),
                  SeqFile(lambda: fn.enabled_functions(touched=True)))
    if have("dyn_ftrace_total_info"):
        root.file("dyn_ftrace_total_info", mode("dyn_ftrace_total_info", 0o440),
                  ValueFile(fn.records.total_info))
    if have("set_graph_function"):
        root.file("set_graph_function", mode("set_graph_function", 0o640),
                  RegexFile(fn.graph_ops, True, graph=True))
        root.file("set_graph_notrace", mode("set_graph_notrace", 0o640),
                  RegexFile(fn.graph_ops, False, graph=True))
    if have("stack_trace"):
        _stack_files(fn, root, mode)
    if have("max_graph_depth"):
        root.file("max_graph_depth", mode("max_graph_depth", 0o640), ValueFile(
            lambda: f"{_s32(fn.max_graph_depth)}\n",
            lambda data: setattr(fn, "max_graph_depth",
                                 kstrtoul_from_user(data) & 0xFFFFFFFF)))


def _stack_files(fn, root, mode) -> None:
    """trace_stack.c's files, and ``kernel.stack_tracer_enabled`` as a
    hidden file of ``tracing/`` (:data:`STACK_SYSCTL`: what ``run`` binds
    over ``/proc/sys/kernel/stack_tracer_enabled``)."""
    from fakedebugfs.engine.ftrace.trace_stack import StackTracer

    st = fn.__dict__.get("stack_tracer") or StackTracer(fn)
    fn.stack_tracer = st
    root.file("stack_trace", mode("stack_trace", 0o440), SeqFile(st.show))
    root.file("stack_max_size", mode("stack_max_size", 0o640), ValueFile(
        lambda: f"{st.max_size}\n",
        lambda data: setattr(st, "max_size", kstrtoul_from_user(data))))
    root.file("stack_trace_filter", mode("stack_trace_filter", 0o640), RegexFile(st.ops, True))
    node = root.file(STACK_SYSCTL, 0o644, ValueFile(
        lambda: f"{st.__dict__.get('sysctl', int(st.enabled))}\n",
        lambda data: _stack_sysctl(st, _dointvec(data))))
    node.hidden = True


def _stack_sysctl(st, value: int) -> None:
    """``stack_trace_sysctl``: the int as written (``proc_dointvec``: 2
    reads back 2), the ops registered when it turns nonzero."""
    st.sysctl = value
    st.set_enabled(value != 0)


def _dointvec(data: bytes) -> int:
    """``proc_dointvec``: one integer, spaces around it."""
    text = data.split(b"\0", 1)[0].strip()
    try:
        return int(text, 10)
    except ValueError:
        raise fail(errno.EINVAL) from None


def remove_functions(top, tr) -> None:
    """An instance removed: its function tracer stopped, its probes gone."""
    fn = top.__dict__.get("function_trace")
    if fn is not None:
        fn.remove_instance(tr)


def _s32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


__all__ = ["add_function_files", "remove_functions", "RegexFile", "PidFile", "STACK_SYSCTL"]
