"""The ``function`` tracer (kernel/trace/trace_functions.c, 6.12) and the
dynamic ftrace state it runs on (kernel/trace/ftrace.c).

:class:`FunctionTrace` is what a kernel with ``CONFIG_DYNAMIC_FTRACE`` has
once: the records (:class:`~.ftrace.FtraceRecords`), the calls
(:class:`~.calltree.FunctionCalls`), each trace array's ``ftrace_ops``
(its hashes, ``:mod:`` lists, probes, function pid lists), the graph
filter (``set_graph_function``/``set_graph_notrace``,
``max_graph_depth``) and what ``enabled_functions``/``touched_functions``
show.  :func:`attach` makes it for a top-level trace array whose profile
lists the tracers, and gives each trace array the tracers it allows
(:func:`add_tracers`).

:class:`FunctionTracer` is ``function_trace``: an ``ftrace:function``
entry per call its trace array's ops hooks, for the tasks its pid lists
let through (``ftrace_trace_task``), with the ``func_stack_trace`` (a
``kernel_stack`` entry of the callers after each) and ``func-no-repeats``
(a ``func_repeats`` entry for a run of the same call) flags, which, as
the kernel's ``func_flags``, all trace arrays share.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Optional

from fakedebugfs.engine.core.profile_files import has_profile_file, profile_file, read_profile_file
from fakedebugfs.engine.ftrace.calltree import FunctionCalls, parse_calltrees
from fakedebugfs.engine.ftrace.calltree_batch import WHOLE_TREE
from fakedebugfs.engine.ftrace.events import FTRACE_EVENTS
from fakedebugfs.engine.ftrace.ftrace import FtraceOps, FtraceRecords
from fakedebugfs.engine.ftrace.ftrace_probe import COMMANDS, clear_probes
from fakedebugfs.engine.ftrace.output import timestamp
from fakedebugfs.engine.ftrace.register_tracer import place_tracers

TRACE_FN, TRACE_STACK, TRACE_FUNC_REPEATS = 1, 4, 19
FTRACE_STACK_ENTRIES = 8
FTRACE_TRAMPOLINE_MARKER = 0x7FFFFFFF  # (unsigned long) INT_MAX
TRAMPOLINE_CALL = 5  # the return address of the traced function's call of its trampoline
U16_MAX = 0xFFFF
TRAMPOLINE_BASE = 0xFFFFFFFFC0200000  # ops trampolines: module-area pages
# the callbacks enabled_functions names (their sizes: the profile's kallsyms)
LIST_FUNC = "arch_ftrace_ops_list_func"


class FunctionTrace:
    """Dynamic ftrace for one kernel (the top-level trace array *top*)."""

    def __init__(self, top):
        self.top = top
        path = top.profile.path
        self.records = FtraceRecords(path)
        trees = path / "calltrees"
        text = trees.read_text() if trees.is_file() else ""
        self.calls = FunctionCalls(top.engine, self.records, parse_calltrees(text),
                                   top.on_enable_change)
        self.graph_ops = FtraceOps(self.records)  # set_graph_function / set_graph_notrace
        self.max_graph_depth = 0
        self.func_flags = {"func_stack_trace": False, "func-no-repeats": False}
        self.touched = bytearray()  # FTRACE_FL_TOUCHED per record
        self.users: list = []  # (ops, callback) registered
        self._tramps = 0
        self._sizes: Optional[dict] = None
        self._fork = None

    # --- the ops of a trace array -------------------------------------------------------

    def ops(self, tr) -> FtraceOps:
        """``tr->ops``: made with the trace array (``ftrace_allocate_ftrace_ops``)."""
        ops = tr.__dict__.get("ftrace_ops")
        if ops is None:
            ops = tr.ftrace_ops = FtraceOps(self.records, tr, COMMANDS)
            tr.ftrace_pids = None  # set_ftrace_pid (None: "no pid")
            tr.ftrace_no_pids = None  # set_ftrace_notrace_pid
            ops.on_change.append(lambda: self._probes_changed(ops))
        return ops

    def _probes_changed(self, ops) -> None:
        """Function probes are ``ftrace_ops`` of their own: registered while
        one hooks a function (``ftrace_startup``)."""
        user = ops.__dict__.get("probe_user")
        live = any(p.funcs for p in ops.probes)
        if live and user is None:
            user = ops.probe_user = self._probe_user(ops)
            self.register(None, user)
        elif not live and user is not None:
            self.unregister(user)
            ops.probe_user = None
        if live:
            for p in ops.probes:
                self.touch(p.funcs)

    def _probe_user(self, ops):
        def user(tree, cpu, pid, ts):
            recs = tree.recs
            for k, node in enumerate(tree.nodes):
                i = recs[k]
                if i is None:
                    continue
                for p in tuple(ops.probes):
                    if i in p.funcs:
                        p.hit(ops.tr, i, cpu, pid, ts + node[1])
        user.hooks = lambda: {i for p in ops.probes for i in p.funcs}
        return user

    # --- registration ------------------------------------------------------------------

    def register(self, hooks, user, func: str = "function_trace_probe_call") -> None:
        """``register_ftrace_function``: *user* sees every call; *hooks*
        (an ops, or None when the user says itself) says what it hooks;
        *func* is the ops' callback, which its trampoline calls (a new
        trampoline page in the module area, ``create_trampoline``)."""
        if hooks is not None:
            user.hooks = hooks.hooked
        user.func = func
        self._tramps += 1
        user.tramp = TRAMPOLINE_BASE + 0x1000 * self._tramps
        self.users.append(user)
        self.calls.register(user)
        self.touch(user.hooks())

    def unregister(self, user) -> None:
        if user in self.users:
            self.users.remove(user)
        self.calls.unregister(user)

    def touch(self, recs) -> None:
        if len(self.touched) != len(self.records):
            self.touched = bytearray(len(self.records))
        for i in recs:
            self.touched[i] = 1

    # --- pid lists (set_ftrace_pid, set_ftrace_notrace_pid) ------------------------------

    def trace_task(self, tr, pid: int) -> bool:
        """``ftrace_trace_task``: not in ``set_ftrace_notrace_pid``, and in
        ``set_ftrace_pid`` when it has pids."""
        no = tr.__dict__.get("ftrace_no_pids")
        if no and pid in no:
            return False
        pids = tr.__dict__.get("ftrace_pids")
        return pids is None or pid in pids

    def follow_fork(self) -> None:
        """``ftrace_pid_follow_fork``: with ``function-fork`` a child joins
        the function pid lists its parent is in, an exiting task leaves
        them (probes on the process tracepoints, checked per trace array)."""
        if self._fork is not None:
            return
        eng = self.top.engine
        fork = eng.tracepoints.get("sched:sched_process_fork")
        gone = eng.tracepoints.get("sched:sched_process_exit")
        if fork is None or gone is None:
            return
        pi, ci, xi = fork.index("parent_pid"), fork.index("child_pid"), gone.index("pid")

        def on_fork(cpu, pid, ts, values):
            for tr in self.top.arrays():
                if tr.options.get("function-fork"):
                    for pids in (tr.__dict__.get("ftrace_pids"), tr.__dict__.get("ftrace_no_pids")):
                        if pids and values[pi] in pids:
                            pids.add(values[ci])

        def on_exit(cpu, pid, ts, values):
            for tr in self.top.arrays():
                if tr.options.get("function-fork"):
                    for pids in (tr.__dict__.get("ftrace_pids"), tr.__dict__.get("ftrace_no_pids")):
                        if pids:
                            pids.discard(values[xi])
        self._fork = (on_fork, on_exit)
        for probe in self._fork:  # a batch needs them one by one only while they act
            probe.batch_owner = self
        fork.register(on_fork)
        gone.register(on_exit)

    def _following(self) -> bool:
        return any(tr.options.get("function-fork") and (tr.__dict__.get("ftrace_pids")
                                                        or tr.__dict__.get("ftrace_no_pids"))
                   for tr in self.top.arrays())

    def batch_ok(self, batch, kinds) -> bool:
        """The fork probes' side of the engine's batch path: nothing to do
        while no trace array follows forks in its function pid lists."""
        return not self._following()

    def write_batch(self, batch, kinds) -> None:
        pass

    # --- what the files show ----------------------------------------------------------------

    def enabled_functions(self, touched: bool = False) -> list:
        """``enabled_functions`` (records hooked now, with how many ops hook
        each) or ``touched_functions`` (records ever hooked): ``name (n)``
        and the flag columns (``t_show``)."""
        counts = [0] * len(self.records) if self.users else []
        owner: dict = {}
        for user in self.users:
            for i in user.hooks():
                counts[i] += 1
                owner[i] = user
        out = []
        show = self.records.show
        for i, n in enumerate(counts if not touched else self.touched):
            if not n:
                continue
            n = counts[i] if counts else 0
            out.append(f"{show(i)} ({n})" + " " * 11 + self._tramp_text(n, owner.get(i)) + "\n")
        return out

    def _tramp_text(self, n: int, user) -> str:
        """What calls a record's hooks: one ops' trampoline (``tramp: ...``
        and the callback it calls), else what ``ftrace_caller`` calls
        (``update_ftrace_function``): ``ftrace_stub`` with no ops, the one
        ops' callback when it is the non-dynamic ``global_ops`` (the top
        level's function tracer), else the list function."""
        if n == 1 and user is not None:
            func = self._sym(user.func)
            return f"\ttramp: 0x{user.tramp:x} ({func}) ->{func}"
        if not self.users:
            return " ->" + self._sym("ftrace_stub")
        if len(self.users) == 1 and getattr(self.users[0], "global_ops", False):
            return " ->" + self._sym(self.users[0].func)
        return " ->" + self._sym(LIST_FUNC)

    def _sym(self, name: str) -> str:
        """``%pS`` of a tracer callback at its start: its size from the
        profile's kallsyms (the distance to the next symbol)."""
        if self._sizes is None:
            self._sizes = _callback_sizes(profile_file(self.top.profile.path, "kallsyms"))
        return f"{name}+0x0/0x{self._sizes.get(name, 0x100):x}"

    def remove_instance(self, tr) -> None:
        """An instance goes: its probes and tracer with it."""
        tr.tracer.reset(tr)
        tr.tracer = tr.tracers["nop"]
        ops = tr.__dict__.get("ftrace_ops")
        if ops is not None:
            clear_probes(ops)
            # (ftrace_free_ftrace_ops) the ops and its change hook hold each
            # other and the array: freed by reference counting now, not left
            # in the collector's frozen generation with the array
            ops.on_change.clear()
            ops.tr = None


def _callback_sizes(path) -> dict:
    """The sizes of the tracer callbacks in a ``/proc/kallsyms`` text."""
    want = {LIST_FUNC, "ftrace_stub", "function_trace_call", "function_stack_trace_call",
            "function_no_repeats_trace_call", "function_stack_no_repeats_trace_call",
            "function_trace_probe_call", "ftrace_graph_func", "stack_trace_call"}
    out: dict = {}
    if path is None:  # no kallsyms (nor kallsyms.xz)
        return out
    prev = None
    for line in read_profile_file(path).decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        addr = int(parts[0], 16)
        if prev is not None and addr > prev[1]:
            out[prev[0]] = addr - prev[1]
            prev = None
        if parts[2] in want:
            prev = (parts[2], addr)
    return out


def attach(top) -> Optional[FunctionTrace]:
    """The kernel's dynamic ftrace, when the profile's kernel has it (its
    ``available_filter_functions``)."""
    prof = top.profile
    if prof is None:
        return None
    have = top.__dict__.get("function_trace")
    if have is not None:
        return have
    if not ((prof.path / "available_filter_functions").is_file()
            or has_profile_file(prof.path, "available_filter_functions_addrs")):
        return None
    ft = top.function_trace = FunctionTrace(top)
    _profile_entries(top)
    if "kprobe_events" in prof.modes():  # kprobes at function entries fire from the trees
        from fakedebugfs.engine.ftrace.kprobe_ftrace import attach as attach_kprobes

        attach_kprobes(ft)
    return ft


def _profile_entries(top) -> None:
    """The ``function`` and ``func_repeats`` entries of the profile's kernel
    printed as trace_output.c prints them (``trace_fn_trace``,
    ``trace_func_repeats_print``).  The registry has made them in the
    profile's layout (``EventRegistry._builtin``: 6.12's ``function`` has
    no ``args``); only their ``show`` is set here.  The fake's own entry,
    which the registry keeps when the profile's format is its own, is
    shared by every kernel of the process: this kernel gets a copy."""
    for name, show in (("function", show_fn), ("func_repeats", show_repeats)):
        key = f"ftrace:{name}"
        if key not in top.profile.formats or key not in top.events:
            continue
        ev = top.events[key]
        if any(ev is own for own in FTRACE_EVENTS):
            top.events[key] = dataclasses.replace(ev, show=show)
        else:
            ev.show = show


def sym_text(tr, addr: int) -> str:
    """``seq_print_ip_sym``: 0, or the symbol (with ``sym-offset``:
    ``+off/size``; with ``sym-addr``: `` <addr>``)."""
    if not addr:
        return "0"
    out = tr.out.sym_offset(addr) if tr.options.get("sym-offset") else tr.out.sym(addr)
    if tr.options.get("sym-addr"):
        out += f" <{addr:016x}>"
    return out


def show_fn(rec, tr) -> str:
    """``trace_fn_trace``: ``func <-parent`` (the parent with ``print-parent``)."""
    text = sym_text(tr, rec["ip"])
    if tr.options.get("print-parent") and rec["parent_ip"]:
        text += " <-" + sym_text(tr, rec["parent_ip"])
    return text


LAST_TS = "\0last_ts\0"  # where the time of the last repeat goes (needs the entry's time)


def show_repeats(rec, tr) -> str:
    """``trace_func_repeats_print``: the call, then how often it repeated
    and when last (the entry's time less its delta: filled in by
    :func:`fill_last_ts`)."""
    delta = rec["top_delta_ts"] << 32 | rec["bottom_delta_ts"]
    return show_fn(rec, tr) + f" (repeats: {rec['count']}, last_ts:{LAST_TS}{delta}{LAST_TS})"


def fill_last_ts(text: str, ts: int) -> str:
    """The ``last_ts`` of a ``func_repeats`` line printed at *ts*."""
    head, _, rest = text.partition(LAST_TS)
    delta, _, tail = rest.partition(LAST_TS)
    return f"{head}{timestamp(ts - int(delta or 0))}{tail}"


# select_trace_function: (func_stack_trace, func-no-repeats) -> the ops' callback
_CALLBACKS = {(False, False): "function_trace_call", (True, False): "function_stack_trace_call",
              (False, True): "function_no_repeats_trace_call",
              (True, True): "function_stack_no_repeats_trace_call"}


class FunctionTracer:
    """``function_trace``: allowed in instances."""

    name = "function"

    def __init__(self, fn: FunctionTrace):
        self.fn = fn
        self.flags = fn.func_flags  # func_flags: one for every trace array
        self._user = None

    def set_flag(self, name: str, on: bool) -> None:
        """``func_set_flag``: the callback changes with the flags."""
        self.flags[name] = on
        if self._user is not None:
            self._user.func = _CALLBACKS[self.flags["func_stack_trace"],
                                         self.flags["func-no-repeats"]]

    def init(self, tr) -> None:
        """``function_trace_init``: the buffers reset (``tracer_init``),
        the ops registered."""
        tr.reset()
        ops = self.fn.ops(tr)
        from fakedebugfs.engine.ftrace.calltree_batch import FunctionBatch

        self._user = self._make_user(tr, ops)
        self._user.batch = FunctionBatch(self, tr, ops, self._user)
        self._user.global_ops = tr is tr.top  # the top level's is global_ops (not dynamic)
        self.fn.register(ops, self._user, _CALLBACKS[self.flags["func_stack_trace"],
                                                     self.flags["func-no-repeats"]])
        self.fn.follow_fork()

    def reset(self, tr) -> None:
        if self._user is not None:
            self.fn.unregister(self._user)
            self._user = None

    def start(self, tr) -> None:
        """``function_trace_start``: turning ``tracing_on`` back on empties
        the buffers (``tracing_reset_online_cpus``), as no other tracer does."""
        tr.reset()

    def print_header(self, tr):
        return None

    def print_line(self, tr, etype, rec):
        return None  # the entries' own output (trace_fn_trace); none kept as text

    def text_chunks(self, tr, events, lines: int):
        """``trace``: runs of entries as trace.c prints them; a
        ``func_repeats`` entry alone, its ``last_ts`` from its time."""
        run: list = []
        count = 0
        for item in events:
            if int.from_bytes(item[2][:2], "little") == TRACE_FUNC_REPEATS:
                if run:
                    yield tr.format_lines(run)
                    run = []
                yield fill_last_ts(tr.format_lines((item,)), item[0])
                continue
            run.append(item)
            count += 1
            if count >= lines:
                yield tr.format_lines(run)
                run, count = [], 0
        if run:
            yield tr.format_lines(run)

    def format_event(self, tr, cpu: int, ev) -> str:
        """A ``trace_pipe`` line."""
        text = tr.format_lines(((ev.ts, cpu, ev.payload),))
        return fill_last_ts(text, ev.ts) if LAST_TS in text else text

    def _make_user(self, tr, ops):
        fn = self.fn
        fn_ev = tr.by_id[TRACE_FN]
        pack = struct.Struct("<HBBiQQ").pack
        last: dict = {}  # cpu -> [ip, parent, count, ts] (func-no-repeats)

        def user(tree, cpu, pid, ts):
            if not tr.tracing_on or not fn.trace_task(tr, pid):
                return
            flags = self.flags
            stack = flags["func_stack_trace"]
            norep = flags["func-no-repeats"]
            if not (stack or norep) and len(tree.nodes) >= WHOLE_TREE \
                    and not tr.options.get("record-tgid"):
                user.batch.write_one(tree, cpu, pid, ts)  # the same bytes, at once
                return
            recs, addrs, nodes, pips = tree.recs, tree.addrs, tree.nodes, tree.pips
            for k, node in enumerate(nodes):
                i = recs[k]
                if i is None or not ops.traces(i):
                    continue
                pip = pips[k]
                at = ts + node[1]
                ip = addrs[k]
                if norep:
                    info = last.get(cpu)
                    if info is not None and info[0] == ip and info[1] == pip \
                            and info[2] < U16_MAX:
                        info[2] += 1
                        info[3] = at
                        continue
                    if info is not None and info[2]:
                        self._repeats(tr, cpu, pid, at, info)
                    last[cpu] = [ip, pip, 0, at]
                tr.commit(cpu, at, pack(fn_ev.id, 0, 0, pid, ip, pip))
                if stack:
                    self._stack(tr, tree, k, cpu, pid, at)
        return user

    def _repeats(self, tr, cpu, pid, ts, info) -> None:
        """``trace_last_func_repeats``: the run of the last call."""
        ev = tr.by_id.get(TRACE_FUNC_REPEATS)
        if ev is None or ev.system != "ftrace":
            return
        delta = max(0, ts - info[3])
        tr.commit(cpu, ts, ev.pack(pid, {"ip": info[0], "parent_ip": info[1],
                                         "count": info[2], "top_delta_ts": delta >> 32 & U16_MAX,
                                         "bottom_delta_ts": delta & 0xFFFFFFFF}))

    def _stack(self, tr, tree, k: int, cpu: int, pid: int, ts: int) -> None:
        """The ``kernel_stack`` entry of ``func_stack_trace``: the
        trampoline's frame (``[FTRACE TRAMPOLINE]``), the call and its
        callers, innermost first, then the entry code below them."""
        ev = tr.by_id.get(TRACE_STACK)
        if ev is None:
            return
        chain = [FTRACE_TRAMPOLINE_MARKER, tree.addrs[k] + TRAMPOLINE_CALL]
        while tree.nodes[k][4] >= 0:
            k = tree.nodes[k][4]
            chain.append(tree.rets[k])
        if tree.nodes[k][4] < 0 and k in tree.callers:  # the outermost call's caller
            chain.append(tree.pips[k])
        chain = (chain + tree.tail)[:FTRACE_STACK_ENTRIES]
        caller = b"".join(a.to_bytes(8, "little") for a in chain)
        payload = ev.pack(pid, {"size": len(chain), "caller": caller.ljust(64, b"\0")})
        tr.commit(cpu, ts, payload[:16 + 8 * len(chain)])


def add_tracers(fn: FunctionTrace, tr, names) -> None:
    """The tracers of *names* (the profile's ``available_tracers``, in its
    order) that this module and :mod:`.trace_functions_graph` make, put
    into *tr*'s table in the profile's order among the others."""
    from fakedebugfs.engine.ftrace.trace_functions_graph import GraphTracer

    made = {"function": lambda: FunctionTracer(fn), "function_graph": lambda: GraphTracer(fn)}
    place_tracers(tr, names, made)


__all__ = ["FunctionTrace", "FunctionTracer", "attach", "add_tracers", "show_fn"]
