"""Where the function tracers' calls come from: call trees of the profile's
kernel, expanded when what the fake does fires (the fake has no kernel
text to hook; docs/function-tracing.md).

A profile's ``calltrees`` file holds trees recorded on its kernel with
``function_graph``, each under the event that starts it::

    ### raw_syscalls:sys_enter id=0
    0 0 2310 __x64_sys_read
    1 95 2104 ksys_read
    2 160 1950 vfs_read

``### <system>:<event> [<arg>=<value> ...]`` names the tracepoint and, if
given, the values its arguments must have (an engine tracepoint's
argument names); the first section that fits a firing is used.  Each line
is ``<depth> <start ns> <duration ns> <function>``: the start from the
event's time, depth 0 the outermost call.

:class:`FunctionCalls` is ``ftrace_ops_list`` with the fake's source of
calls: while some ``ftrace_ops`` is registered (a trace array's function
or graph tracer, a function probe) it attaches to the tracepoints the
trees start at, and each firing hands the tree to every registered user,
with the CPU, the task and the time of the firing (the virtual clock makes
it the same on every run).  :meth:`FunctionCalls.call` runs a tree given
directly (the injection API).
"""

from __future__ import annotations

import re
from typing import Callable, Optional

RETURN_OFFSET = 0x2C  # how far into a caller its call returns (parent_ip), at most
MCOUNT_OFFSET = 4  # where in a function its __fentry__ call is (the record's ip)
# the frames below a tree that no tracer can hook (noinstr entry code), by
# the system of the event that starts it: what stack traces end with
_SYSCALL_ENTRY = ("do_syscall_64", "entry_SYSCALL_64_after_hwframe")
ENTRY_FRAMES = {"raw_syscalls": _SYSCALL_ENTRY, "syscalls": _SYSCALL_ENTRY,
                # fork, exec and exit happen in system calls
                "sched:sched_process_fork": _SYSCALL_ENTRY,
                "sched:sched_process_exec": _SYSCALL_ENTRY,
                "sched:sched_process_exit": _SYSCALL_ENTRY}


def entry_frames(key: str) -> tuple:
    """The untraceable frames below a tree started by *key*: by event,
    else by system."""
    return ENTRY_FRAMES.get(key) or ENTRY_FRAMES.get(key.partition(":")[0], ())


class Tree:
    """One recorded call tree: nodes in call order, each ``(depth, start,
    duration, name, parent)`` (parent: the index of the caller, -1 for an
    outermost call)."""

    __slots__ = ("nodes", "recs", "addrs", "rets", "_ends", "key", "tail", "span", "_gone",
                 "callers", "pips", "starts")

    def __init__(self, nodes, key: str = ""):
        stack: list = []
        out = []
        # what the function tracer showed in the guest as a call's parent
        # when it is not the caller's return address, by node index: an
        # outermost call's caller (``sym+0xoff``), or TAIL_CALL for a call
        # its caller made by a jump (its parent_ip is the caller's own)
        self.callers: dict = {}
        for node in nodes:
            depth, start, dur, name = node[:4]
            del stack[depth:]
            parent = stack[-1] if stack else -1
            if len(node) > 4 and node[4] and (parent >= 0) == (node[4] == TAIL_CALL):
                self.callers[len(out)] = node[4]
            out.append((depth, start, dur, name, parent))
            stack.append(len(out) - 1)
        self.nodes = out
        self.pips: Optional[list] = None  # each call's parent_ip (resolve)
        self.recs: Optional[list] = None  # record index of each node (None: not traceable)
        self.addrs: Optional[list] = None  # its record's ip (in the engine's kallsyms)
        self.starts: Optional[list] = None  # where each function starts
        self.rets: Optional[list] = None  # a return address inside each function
        self.key = key  # the tracepoint that starts it
        self.span = max((n[1] + n[2] for n in out), default=0)  # from its start to its end
        # return addresses of the untraceable callers below the tree (the
        # first: what its outermost calls return to)
        self.tail: list = []
        self._ends = None  # where each subtree ends (function_graph)
        self._gone: Optional[frozenset] = None  # (never_returns)

    def never_returns(self) -> frozenset:
        """The node indices of the calls the task never returns from: in an
        exit's tree (``exit_group`` down to the last switch away, ``do_exit``
        on), the calls still open when the task was gone, which
        :func:`calltrees_from_graph` makes last until the tree's end: each
        ending where its first call ends.  The kernel writes no
        ``funcgraph_exit`` and no kretprobe hit for them (in the guest,
        ``do_exit() {`` is never closed; ``r __x64_sys_exit_group``: 0 hits)."""
        if self._gone is None:
            gone: frozenset = frozenset()
            if self.key == EXIT_KEY and self.nodes:
                end = self.nodes[0][1] + self.nodes[0][2]
                gone = frozenset(k for k, n in enumerate(self.nodes) if n[1] + n[2] == end)
            self._gone = gone
        return self._gone


def parse_calltrees(text: str) -> dict:
    """``{tracepoint key: [(selector dict, Tree), ...]}`` of a ``calltrees``
    text; ValueError names the line that is not one."""
    out: dict = {}
    nodes = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#") and not line.startswith("### "):
            continue
        if line.startswith("### "):
            words = line[4:].split()
            sel = {}
            for w in words[1:]:
                k, _, v = w.partition("=")
                sel[k] = int(v, 0) if v.lstrip("-").isdigit() or v.startswith("0x") else v
            nodes = []
            out.setdefault(words[0], []).append((sel, nodes))
            continue
        parts = line.split()
        if nodes is None or len(parts) not in (4, 5) \
                or len(parts) == 5 and not _CALLER.fullmatch(parts[4]):
            raise ValueError(f"calltrees line {n}: {line!r}")
        nodes.append((int(parts[0]), int(parts[1]), int(parts[2]), parts[3], *parts[4:]))
    return {key: [(sel, Tree(nodes, key)) for sel, nodes in trees] for key, trees in out.items()}


_CALLER = re.compile(r"[\w.$]+\+0x[0-9a-f]+|\^")  # a node's caller: symbol+offset, or ^
TAIL_CALL = "^"

# function_graph's text with funcgraph-abstime and funcgraph-proc:
# "  TS |  CPU)  TASK-PID  |  DURATION  |  FUNCTION"
_GRAPH_LINE = re.compile(r"^\s*(\d+\.\d+) \|\s+(\d+)\)\s+(.*?)\s+\|\s+"
                         r"(?:[ +!#*@$]\s*([\d.]+) us\s+)?\|\s?(.*)$")
# the comments of events that start trees: event name and its text
_TRIGGERS = (
    (re.compile(r"^sys_enter: NR (\d+) "), lambda m: f"raw_syscalls:sys_enter id={m[1]}"),
    (re.compile(r"^sched_switch: "), lambda m: "sched:sched_switch"),
    (re.compile(r"^sched_process_fork: "), lambda m: "sched:sched_process_fork"),
    (re.compile(r"^sched_process_exec: "), lambda m: "sched:sched_process_exec"),
    (re.compile(r"^sched_process_exit: "), lambda m: "sched:sched_process_exit"),
    (re.compile(r"^sched_wakeup: "), lambda m: "sched:sched_wakeup"),
    (re.compile(r"^page_fault_user: "), lambda m: "exceptions:page_fault_user"),
)


class _Open:
    """A tree being read: its section head, start, nodes and open calls."""

    __slots__ = ("head", "t0", "nodes", "stack", "last")

    def __init__(self, head: str, t0: int):
        self.head, self.t0, self.nodes, self.stack, self.last = head, t0, [], [], t0

    def line(self, ts: int, depth: int, body: str, dur, parent=None) -> None:
        self.last = ts
        nodes, stack, at = self.nodes, self.stack, ts - self.t0
        if body.endswith("();"):  # (a module's function: "name [mod]()")
            nodes.append([depth, at, round(float(dur or 0) * 1000), body[:-3].split(" [")[0],
                          parent])
        elif body.endswith("{"):
            node = [depth, at, 0, body[:-4].split(" [")[0], parent]
            nodes.append(node)
            stack.append(node)
        elif body.startswith("}"):
            while stack and stack[-1][0] > depth:  # (never closed in what was shown)
                node = stack.pop()
                node[2] = max(0, at - node[1])
            if stack and stack[-1][0] == depth:
                stack.pop()[2] = round(float(dur or 0) * 1000)

    def close(self, out: dict) -> None:
        for node in self.stack:  # cut by the next event: open until then
            node[2] = max(0, self.last - self.t0 - node[1])
        if self.nodes and self.head not in out:
            out[self.head] = _rebase(self.nodes)


EXIT_KEY = "sched:sched_process_exit"
_PROCESS = ("sched:sched_process_fork", "sched:sched_process_exec", EXIT_KEY)


def calltrees_from_graph(text: str, parents: Optional[dict] = None) -> str:
    """A ``calltrees`` text from a ``function_graph`` ``trace`` recorded
    with ``funcgraph-abstime`` and ``funcgraph-proc`` and the trigger
    events enabled (their lines are ``/* ... */`` comments), with
    ``sys_exit`` too; the first tree of each trigger is kept.  *parents*
    (``{line index: (caller, tail)}``, oracle/calltree_parents.py) gives
    the calls' fifth words: an outermost call's caller, ``^`` on a deeper
    tail call.  Per task:

    * a system call's tree is its calls from its ``sys_enter`` to its
      ``sys_exit``; a fork, exec or exit inside it makes it that event's
      tree (the fake's process events stand for the whole call);
    * another trigger's (a switch, a wake-up, a user page fault) is the
      task's calls after it up to its next event (inside a system call,
      they are the call's too).

    A tree may start inside calls it does not show (a task switched back
    in returns through the scheduler): depths are made relative to its
    shallowest call and never more than one deeper than the call before;
    a ``}`` closes the open call of its own depth; a call still open at
    the tree's end lasts until the tree's last line."""
    out: dict = {}
    calls: dict = {}  # task -> its system call's tree
    other: dict = {}  # task -> the tree of another trigger

    parents = parents or {}
    for index, line in enumerate(text.splitlines()):
        m = _GRAPH_LINE.match(line)
        if not m:
            continue
        ts = round(float(m[1]) * 1e9)
        task, dur, fn = m[3].strip(), m[4], m[5]
        body = fn.strip()
        if body.startswith("/*"):
            got = other.pop(task, None)
            if got is not None:
                got.close(out)
            event = body[2:].rstrip("*/ ").strip()
            if event.startswith("sys_exit:"):
                got = calls.pop(task, None)
                if got is not None:
                    got.close(out)
                continue
            head = next((h(em) for pat, h in _TRIGGERS for em in [pat.match(event)] if em), None)
            if head is None:
                continue
            if head.startswith("raw_syscalls:sys_enter"):
                got = calls.pop(task, None)
                if got is not None:
                    got.close(out)
                calls[task] = _Open(head, ts)
            elif head in _PROCESS and task in calls:
                if calls[task].head not in _PROCESS:
                    calls[task].head = head
            else:
                other[task] = _Open(head, ts)
            continue
        depth = (len(fn) - len(fn.lstrip(" "))) // 2
        for tree in (calls.get(task), other.get(task)):
            if tree is not None:
                tree.line(ts, depth, body, dur, parents.get(index))
    for tree in [*calls.values(), *other.values()]:
        tree.close(out)
    parts = []
    for head, nodes in out.items():
        parts.append(f"### {head}\n")
        parts.extend(f"{d} {max(0, s)} {du} {name}{_word(d, how)}\n"
                     for d, s, du, name, how in nodes)
    return "".join(parts)


def _word(depth: int, how) -> str:
    """A node's fifth word (with its space) from its ``(caller, tail)``."""
    if how is None:
        return ""
    if depth == 0:
        return f" {how[0]}" if how[0] else ""
    return f" {TAIL_CALL}" if how[1] else ""


def graph_entries(text: str):
    """The calls of a ``function_graph`` text (as :func:`calltrees_from_graph`
    reads it): ``(line index, pid, us, depth, function)`` in order."""
    for index, line in enumerate(text.splitlines()):
        m = _GRAPH_LINE.match(line)
        if not m:
            continue
        body = m[5].strip()
        if body.endswith("();"):
            name = body[:-3]
        elif body.endswith("{"):
            name = body[:-4]
        else:
            continue
        depth = (len(m[5]) - len(m[5].lstrip(" "))) // 2
        pid = int(m[3].strip().rpartition("-")[2])
        yield index, pid, round(float(m[1]) * 1e6), depth, name.split(" [")[0]


def _rebase(nodes: list) -> list:
    """Depths from the tree's shallowest call, each at most one deeper
    than the call before it."""
    base = min(n[0] for n in nodes)
    prev = -1
    for n in nodes:
        n[0] = min(n[0] - base, prev + 1)
        prev = n[0]
    return nodes


def check_nodes(nodes, nr_cpus: int, cpu: int) -> None:
    """ValueError naming the first node of an injected tree that is not a
    ``(depth, start ns, duration ns, function)`` whose depth is at most its
    caller's + 1."""
    if type(cpu) is not int or not 0 <= cpu < nr_cpus:
        raise ValueError(f"cpu {cpu!r}: the kernel has CPUs 0-{nr_cpus - 1}")
    if not isinstance(nodes, (list, tuple)) or not nodes:
        raise ValueError("a tree is a non-empty list of [depth, start, duration, function]")
    prev = -1
    for i, n in enumerate(nodes):
        ok = isinstance(n, (list, tuple)) and len(n) == 4 \
            and all(type(v) is int and v >= 0 for v in n[:3]) \
            and isinstance(n[3], str) and n[3] and not any(c.isspace() for c in n[3])
        if not ok or n[0] > prev + 1:
            raise ValueError(f"node #{i + 1} {n!r}: not [depth, start ns, duration ns, "
                             "function] with depth at most its caller's + 1")
        prev = n[0]


class FunctionCalls:
    """``ftrace_ops_list`` and the calls the fake makes: users are
    ``user(tree, cpu, pid, ts)`` callables (one per registered ops)."""

    def __init__(self, engine, records, trees: dict, enable_hooks=()):
        self.engine = engine
        self.enable_hooks = enable_hooks  # the trace arrays' on_enable_change
        self.records = records
        self.trees = trees
        self.users: list[Callable] = []
        self._probes: dict = {}
        self.busy: dict = {}  # cpu -> when its last tree ends
        self._addr: dict = {}
        self._kallsyms_len = -1
        # the event whose tree runs, (key, values): what probes fetch from
        # (probe_fetch); None for an injected tree
        self.firing: Optional[tuple] = None

    # --- registration (register_ftrace_function / unregister_ftrace_function) ----------

    def register(self, user: Callable) -> None:
        if user not in self.users:
            self.users.append(user)
        if len(self.users) == 1:
            self._attach()

    def unregister(self, user: Callable) -> None:
        if user in self.users:
            self.users.remove(user)
        if not self.users:
            self._detach()

    def _attach(self) -> None:
        # every tree's records and addresses now, when the first ops
        # registers (``echo function > current_tracer``), not at its first
        # call: a tree first met while a tool's short command runs (exec,
        # exit: 3,000 calls, 20-40 ms) held the server in that window, and
        # trace-cmd's recorders, still starting, then missed the command
        for trees in self.trees.values():
            for _sel, tree in trees:
                if tree.recs is None:
                    self.resolve(tree)
        for key, trees in self.trees.items():
            tp = self.engine.tracepoints.get(key)
            if tp is None:
                continue
            probe = self._probe(tp, trees)
            self._probes[key] = probe
            tp.register(probe)
            self._tell(key, True)

    def _detach(self) -> None:
        for key, probe in self._probes.items():
            tp = self.engine.tracepoints.get(key)
            if tp is not None:
                tp.unregister(probe)
            self._tell(key, False)
        self._probes = {}

    def _tell(self, key: str, on: bool) -> None:
        """The sources that feed events only while something records them
        (``--mirror``'s perf events, ``run``'s process watcher) hear of the
        tracepoints the trees start at as of an event being enabled."""
        for hook in tuple(self.enable_hooks):
            try:
                hook(key, on)
            except OSError:  # a source that cannot give this event: the trees wait
                pass

    def _probe(self, tp, trees):
        sels = []
        for sel, tree in trees:
            try:
                sels.append(([(tp.index(k), v) for k, v in sel.items()], tree))
            except ValueError:  # a selector on an argument the tracepoint lacks
                continue

        def probe(cpu, pid, ts, values):
            for pairs, tree in sels:
                if all(i < len(values) and values[i] == v for i, v in pairs):
                    self.firing = (tp.key, values)
                    self.run(tree, cpu, pid, ts)
                    self.firing = None
                    return
        probe.batch_owner = self  # the engine's batch path (calltree_batch)
        probe.sels = sels
        return probe

    def batch_ok(self, batch, kinds) -> bool:
        """The batch path when every user writes calls as they come."""
        return all(getattr(u, "batch", None) is not None and u.batch.ok() for u in self.users)

    def write_batch(self, batch, kinds) -> None:
        from fakedebugfs.engine.ftrace.calltree_batch import expand

        expand(self, batch, kinds)

    # --- calls ----------------------------------------------------------------------------

    def run(self, tree: Tree, cpu: int, pid: int, ts: int) -> None:
        """Every registered user sees the calls of *tree*.  A CPU runs one
        tree at a time: one that would start before the CPU's last ended
        starts then, and the virtual clock is moved past its end (the CPU
        was busy with those calls), so each CPU's entries keep the order of
        their times."""
        if tree.recs is None:
            self.resolve(tree)
        ts = max(ts, self.busy.get(cpu, 0))
        end = ts + tree.span
        self.busy[cpu] = end
        clock = self.engine.clock
        if getattr(clock, "deterministic", False) and clock.now() < end:
            clock.advance(end - clock.now())
        for user in tuple(self.users):
            user(tree, cpu, pid, ts)

    def call(self, nodes, cpu: int, pid: int, ts: Optional[int] = None) -> int:
        """A tree given as ``(depth, start, duration, name)`` nodes, at *ts*
        (default: now): the injection of calls.  ValueError, nothing run,
        for a node that is not one (a depth deeper than its caller's + 1,
        a negative time, a CPU the kernel lacks).  Returns the calls."""
        check_nodes(nodes, self.engine.nr_cpus, cpu)
        self.run(Tree([tuple(n) for n in nodes]), cpu, pid,
                 self.engine.clock.now() if ts is None else ts)
        return len(nodes)

    def resolve(self, tree: Tree) -> None:
        """Each node's record and address: its name's address in the
        engine's kallsyms, functions it lacks added to it (the fake's own
        text layout; ``available_filter_functions_addrs`` keeps the
        profile's addresses)."""
        names = [n[3] for n in tree.nodes]
        tree.recs = [self.records.index_of(n) for n in names]
        starts = [self.address(n) for n in names]
        # a record's ip: the function's call of its trampoline, after endbr64
        # when it has one: the record's own address where the profile has it
        # (available_filter_functions_addrs: 7,046 of 6.12's records are at +0)
        exact = self.records.addrs if getattr(self.records, "exact", False) else None
        tree.addrs = [exact[i] if exact is not None and i is not None
                      and 0 <= exact[i] - a <= MCOUNT_OFFSET else a + MCOUNT_OFFSET
                      for i, a in zip(tree.recs, starts)]
        tree.starts = starts
        ks = self.engine.kallsyms
        rets = []  # where a call in each function returns to (a parent_ip)
        for addr in starts:
            found = ks.lookup(addr)
            size = found[2] if found else 0x100
            rets.append(addr + min(RETURN_OFFSET, max(1, size // 2)))
        tree.rets = rets
        tree.tail = [self.address(n) + RETURN_OFFSET for n in entry_frames(tree.key)]
        # parent_ip: where the caller resumes (a tail call: where its
        # caller's caller does); an outermost call's is its recorded
        # caller's, else the first entry frame's
        root = tree.tail[0] if tree.tail else 0
        callers = tree.callers
        pips: list = []
        for k, node in enumerate(tree.nodes):
            how = callers.get(k)
            if node[4] >= 0:
                pips.append(pips[node[4]] if how == TAIL_CALL else rets[node[4]])
            else:
                pips.append(self.caller_address(how) if how else root)
        tree.pips = pips

    def caller_address(self, text: str) -> int:
        """The address of a ``symbol+0xoffset`` caller."""
        name, _, off = text.partition("+")
        return self.address(name) + int(off, 16)

    def address(self, name: str) -> int:
        ks = self.engine.kallsyms
        if len(ks.names) != self._kallsyms_len:
            self._addr = dict(zip(ks.names, ks.addrs))
            self._kallsyms_len = len(ks.names)
        addr = self._addr.get(name)
        if addr is None:
            ks.extend([(name, 0x100)])
            self._addr = dict(zip(ks.names, ks.addrs))
            self._kallsyms_len = len(ks.names)
            addr = self._addr.get(name, 0)
        return addr


__all__ = ["FunctionCalls", "Tree", "check_nodes", "parse_calltrees", "calltrees_from_graph",
           "graph_entries"]
