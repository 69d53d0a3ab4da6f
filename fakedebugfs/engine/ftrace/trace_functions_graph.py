"""The ``function_graph`` tracer (kernel/trace/trace_functions_graph.c,
fgraph.c, 6.12): its entries and its text.

Recording (``trace_graph_entry``/``trace_graph_return``): a call the trace
array's ops hooks is *accepted* unless its task is filtered out
(``ftrace_trace_task``), it is outside every ``set_graph_function``
function while that list has some, or it is as deep as
``max_graph_depth``; an accepted call writes a ``funcgraph_entry`` when
it starts and a ``funcgraph_exit`` (with ``calltime``/``rettime``) when it
returns, and counts one level of depth for the calls it makes.  A
``set_graph_notrace`` function is accepted but hides itself and all it
calls.

Text (``print_graph_function_flags``): an entry followed on its CPU by
its own return is a leaf (``func();`` with its duration), otherwise
``func() {`` and a ``}`` at the return; the columns (``funcgraph-cpu``,
``-proc``, ``-abstime``, ``-duration``, ``-overhead``, ``-tail``,
``-overrun``) as the tracer flags say; a change of task on a CPU prints
the ``------`` banner; other entries print as ``/* ... */`` comments.
"""

from __future__ import annotations

import struct
from itertools import islice
from typing import Iterator

from fakedebugfs.engine.ftrace.output import lat_flags
from fakedebugfs.engine.ftrace.output_formats import latency_header
from fakedebugfs.engine.ftrace.calltree_batch import WHOLE_TREE

TRACE_GRAPH_RET, TRACE_GRAPH_ENT, TRACE_FN, TRACE_STACK = 10, 11, 1, 4
TRACE_GRAPH_INDENT = 2
TRACE_GRAPH_PROCINFO_LENGTH = 14
# the tracer flags (trace_opts, in order) and which are set at boot
GRAPH_FLAGS = (("funcgraph-overrun", False), ("funcgraph-cpu", True),
               ("funcgraph-overhead", True), ("funcgraph-proc", False),
               ("funcgraph-duration", True), ("funcgraph-abstime", False),
               ("funcgraph-irqs", True), ("funcgraph-tail", False),
               ("funcgraph-retval", False), ("funcgraph-retval-hex", False),
               ("sleep-time", True), ("graph-time", True))
MARKS = ((1000000000, "$"), (100000000, "@"), (10000000, "*"), (1000000, "#"),
         (100000, "!"), (10000, "+"))
_ENT = struct.Struct("<HBBiQi")
_RET = struct.Struct("<HBBiQiIQQ")
LOOKAHEAD = 4096  # events searched for a leaf's return


def trace_find_mark(d: int) -> str:
    for val, sym in MARKS:
        if d > val:
            return sym
    return " "


def graph_duration(d: int) -> str:
    """``trace_print_graph_duration``: microseconds, up to 7 digits with the
    nanoseconds after a dot, `` us `` and spaces to 8 columns."""
    usecs, nsecs = divmod(d, 1000)
    text = str(usecs)
    n = len(text)
    if n < 7:
        frac = f"{nsecs:03d}"[:min(5, 8 - n) - 1]
        text += "." + frac
        n += len(frac) + 1
    return text + " us " + " " * max(0, 8 - n)


class GraphTracer:
    """``graph_trace``: allowed in instances; its flags those of the
    profile's ``options/`` (a kernel without ``CONFIG_FUNCTION_GRAPH_RETVAL``
    has no ``funcgraph-retval``), shared by every trace array as the
    kernel's ``tracer_flags`` are."""

    name = "function_graph"

    def __init__(self, fn):
        self.fn = fn
        flags = fn.__dict__.get("graph_flags")
        if flags is None:  # tracer_flags: one for every trace array
            have = fn.top.profile.modes() if fn.top.profile is not None else {}
            flags = fn.graph_flags = {n: on for n, on in GRAPH_FLAGS
                                      if f"options/{n}" in have or not have}
        self.flags = flags
        self._user = None
        self.pipe_state = None

    def set_flag(self, name: str, on: bool) -> None:
        self.flags[name] = on

    def init(self, tr) -> None:
        """``graph_trace_init``: buffers reset (``tracer_init``), the graph
        ops registered."""
        tr.reset()
        ops = self.fn.ops(tr)
        from fakedebugfs.engine.ftrace.calltree_batch import GraphBatch

        self._user = self._make_user(tr, ops)
        self._user.batch = GraphBatch(self, tr, ops, self._user)
        self.fn.register(ops, self._user, "ftrace_graph_func")
        self.fn.follow_fork()
        self.pipe_state = None

    def reset(self, tr) -> None:
        if self._user is not None:
            self.fn.unregister(self._user)
            self._user = None

    # --- recording ----------------------------------------------------------------------

    def _make_user(self, tr, ops):
        fn = self.fn
        gops = fn.graph_ops
        ent_id = tr.by_id[TRACE_GRAPH_ENT].id if TRACE_GRAPH_ENT in tr.by_id else TRACE_GRAPH_ENT
        ret_id = tr.by_id[TRACE_GRAPH_RET].id if TRACE_GRAPH_RET in tr.by_id else TRACE_GRAPH_RET
        ent, ret = _ENT.pack, _RET.pack

        def user(tree, cpu, pid, ts):
            if not fn.trace_task(tr, pid):
                return
            if len(tree.nodes) >= WHOLE_TREE and not tr.options.get("record-tgid"):
                user.batch.write_one(tree, cpu, pid, ts)  # the same bytes, at once
                return
            addrs = tree.addrs
            for off, is_exit, k, depth, call, end in graph_plan(tree, ops, gops,
                                                                fn.max_graph_depth):
                if is_exit:
                    tr.commit(cpu, ts + off, ret(ret_id, 0, 0, pid, addrs[k], depth, 0,
                                                 ts + call, ts + end))
                else:
                    # the entry's preempt count is one deeper: the callback runs
                    # with preemption off (the guest's entries "...1.", returns "....")
                    tr.commit(cpu, ts + off, ent(ent_id, 0, 1, pid, addrs[k], depth))

        def plan(tree):
            return graph_plan(tree, ops, gops, fn.max_graph_depth), (ent_id, ret_id)
        user.graph_plan = plan
        return user

    # --- text ---------------------------------------------------------------------------

    def print_header(self, tr) -> str:
        """``print_graph_headers_flags``."""
        if not tr.options.get("context-info", True):
            return ""
        f = self.flags
        lat = tr.options.get("latency-format")
        if lat and tr.empty():  # print nothing if the buffers are empty
            return ""
        one, two = "#", "#"
        head = latency_header(tr, self.name) + _lat_header(f) if lat else ""
        if f.get("funcgraph-abstime"):
            one += "     TIME       "
            two += "      |         "
        if f.get("funcgraph-cpu"):
            one += " CPU"
            two += " |  "
        if f.get("funcgraph-proc"):
            one += "  TASK/PID       "
            two += "   |    |        "
        if lat:
            one += "||||   "
            two += "||||   "
        if f.get("funcgraph-duration"):
            one += "  DURATION   "
            two += "   |   |      "
        return (head + one + "               FUNCTION CALLS\n"
                + two + "               |   |   |   |\n")

    def print_line(self, tr, etype, rec):
        return None

    def text_chunks(self, tr, events, lines: int) -> Iterator[str]:
        """The text of ``trace``: *lines* events a step."""
        state = GraphText(tr, self)
        window = _Window(iter(events))
        while True:
            chunk = []
            for _ in range(lines):
                item = window.next()
                if item is None:
                    break
                chunk.append(state.line(item, window))
            if not chunk:
                return
            yield "".join(chunk)

    def format_event(self, tr, cpu: int, ev) -> str:
        """A ``trace_pipe`` line: the next entry of the CPU peeked (a leaf's
        return consumed with it, as ``get_return_for_leaf``)."""
        if self.pipe_state is None or self.pipe_state.tr is not tr:
            self.pipe_state = GraphText(tr, self)
        return self.pipe_state.line((ev.ts, cpu, ev.payload), _PipePeek(tr, cpu))


def _lat_header(flags: dict) -> str:
    """``print_lat_header``: the flag columns' legend, indented past the
    columns before them."""
    size = 16 * bool(flags.get("funcgraph-abstime")) + 4 * bool(flags.get("funcgraph-cpu")) \
        + 17 * bool(flags.get("funcgraph-proc"))
    pad = " " * size
    return (f"#{pad}  _-----=> irqs-off        \n"
            f"#{pad} / _----=> need-resched    \n"
            f"#{pad}| / _---=> hardirq/softirq \n"
            f"#{pad}|| / _--=> preempt-depth   \n"
            f"#{pad}||| /                      \n")


def graph_plan(tree, ops, gops, max_depth: int) -> list:
    """What ``trace_graph_entry``/``trace_graph_return`` write for *tree*:
    ``(offset, exit?, node, depth, call offset, return offset)`` in write
    order.  A call is accepted when the ops hooks it, a graph function is
    on the stack (or there is none) and it is not as deep as
    *max_depth*; only accepted calls count as depth; a notrace graph
    function hides itself and its calls."""
    graph, notrace = gops.filter, gops.notrace
    recs, nodes = tree.recs, tree.nodes
    out: list = []
    pending: list = []  # (node end index, depth, in graph function, exit)
    depth = 0
    in_graph = False
    n = len(nodes)
    ends = _subtree_ends(tree)
    gone = tree.never_returns()  # (an exiting task's: entries only)
    k = 0
    while k < n:
        while pending and pending[-1][0] <= k:
            _, depth, in_graph, exit_ = pending.pop()
            if exit_[2] not in gone:
                out.append(exit_)
        node = nodes[k]
        i = recs[k]
        if i is None or not ops.traces(i):
            k += 1
            continue
        if i in notrace:  # accepted, hides itself and its calls
            k = ends[k]
            continue
        if not ((in_graph or not graph or i in graph) and not (max_depth and depth >= max_depth)):
            k += 1
            continue
        at, end = node[1], node[1] + node[2]
        out.append((at, False, k, depth, at, end))
        pending.append((ends[k], depth, in_graph, (end, True, k, depth, at, end)))
        depth += 1
        in_graph = True
        k += 1
    while pending:
        exit_ = pending.pop()[3]
        if exit_[2] not in gone:
            out.append(exit_)
    return out


def _event_text(tr, payload) -> str:
    """What an entry prints after its context (``event->funcs->trace``)."""
    etype, label, show, arg, _ = tr._kind(int.from_bytes(payload[:2], "little"), None)
    if etype is None:
        return ""
    return label + show(etype.decode(payload), arg)


def _subtree_ends(tree) -> list:
    """For each node, the index after its last descendant."""
    ends = tree._ends
    if ends is None:
        nodes = tree.nodes
        ends = [len(nodes)] * len(nodes)
        stack: list = []
        for k, node in enumerate(nodes):
            while stack and nodes[stack[-1]][0] >= node[0]:
                ends[stack.pop()] = k
            stack.append(k)
        tree._ends = ends
    return ends


class _Window:
    """The merged events of ``trace`` with a look-ahead: a leaf's return
    (the next event of the entry's CPU) is taken out of the stream."""

    def __init__(self, it):
        self.it = it
        self.buf: list = []

    def next(self):
        if self.buf:
            return self.buf.pop(0)
        return next(self.it, None)

    def take_next_of(self, cpu: int):
        """The next event of *cpu*, removed if it is returned."""
        for j, item in enumerate(self.buf):
            if item[1] == cpu:
                return j, item
        for item in islice(self.it, LOOKAHEAD):
            self.buf.append(item)
            if item[1] == cpu:
                return len(self.buf) - 1, item
        return None, None

    def drop(self, j: int) -> None:
        del self.buf[j]


class _PipePeek:
    """The same for ``trace_pipe``: the CPU's buffer peeked and consumed."""

    def __init__(self, tr, cpu):
        self.tr, self.cpu = tr, cpu

    def take_next_of(self, cpu: int):
        ev = self.tr.buffers[cpu].peek()
        return (0, (ev.ts, cpu, ev.payload)) if ev is not None else (None, None)

    def drop(self, j: int) -> None:
        self.tr.buffers[self.cpu].consume()


class GraphText:
    """``struct fgraph_data`` of one reader: per CPU the last task, the
    depth and the functions entered."""

    def __init__(self, tr, tracer: GraphTracer):
        self.tr = tr
        self.tracer = tracer
        n = len(tr.buffers)
        self.last_pid = [-1] * n
        self.depth = [0] * n
        self.enter: list = [dict() for _ in range(n)]
        self.cpu_width = len(str(n - 1))

    def line(self, item, window) -> str:
        ts, cpu, payload = item[0], item[1], item[2]  # (latency-format adds the next's time)
        ident = int.from_bytes(payload[:2], "little")
        f = self.tracer.flags
        if ident == TRACE_GRAPH_ENT:
            _, _, _, pid, func, depth = _ENT.unpack_from(payload.ljust(_ENT.size, b"\0"))
            s = self._prologue(ts, cpu, pid, payload)
            j, nxt = window.take_next_of(cpu)
            if nxt is not None and int.from_bytes(nxt[2][:2], "little") == TRACE_GRAPH_RET:
                r = _RET.unpack_from(nxt[2])
                if r[3] == pid and r[4] == func:
                    window.drop(j)
                    self.depth[cpu] = depth - 1
                    self.enter[cpu].pop(depth, None)
                    return (s + self._duration(r[8] - r[7]) + " " * depth * TRACE_GRAPH_INDENT
                            + f"{self.tr.out.sym(func)}();\n")
            self.depth[cpu] = depth
            self.enter[cpu][depth] = func
            return (s + self._fill("              |  ") + " " * depth * TRACE_GRAPH_INDENT
                    + f"{self.tr.out.sym(func)}() {{\n")
        if ident == TRACE_GRAPH_RET:
            _, _, _, pid, func, depth, overrun, call, ret = _RET.unpack_from(payload)
            self.depth[cpu] = depth - 1
            match = self.enter[cpu].pop(depth, None) == func
            s = self._prologue(ts, cpu, pid, payload) + self._duration(ret - call) \
                + " " * depth * TRACE_GRAPH_INDENT
            if match and not f.get("funcgraph-tail"):
                s += "}\n"
            else:
                s += f"}} /* {self.tr.out.sym(func)} */\n"
            if f.get("funcgraph-overrun"):
                s += f" (Overruns: {overrun})\n"
            return s
        if ident in (TRACE_FN, TRACE_STACK):  # printed as trace.c prints them
            return self.tr.format_lines(((ts, cpu, payload),))
        return self._comment(ts, cpu, payload)

    def _comment(self, ts, cpu, payload) -> str:
        """``print_graph_comment``: another entry as ``/* ... */``."""
        pid = int.from_bytes(payload[4:8], "little", signed=True)
        s = self._prologue(ts, cpu, pid, payload) + self._fill("              |  ")
        depth = self.depth[cpu]
        if depth > 0:
            s += " " * (depth + 1) * TRACE_GRAPH_INDENT
        text = _event_text(self.tr, payload).rstrip("\n")
        return s + "/* " + text + " */\n"

    def _fill(self, text: str) -> str:
        if not self.tracer.flags.get("funcgraph-duration") \
                or not self.tr.options.get("context-info", True):
            return ""
        return text

    def _duration(self, d: int) -> str:
        """``print_graph_duration``."""
        if not self.tracer.flags.get("funcgraph-duration") \
                or not self.tr.options.get("context-info", True):
            return ""
        mark = trace_find_mark(d) if self.tracer.flags.get("funcgraph-overhead") else " "
        return f"{mark} {graph_duration(d)}|  "

    def _proc(self, pid: int) -> str:
        """``print_graph_proc``: ``comm-pid`` centred in 14 columns."""
        comm = self.tr.top.cmdlines.get(pid)[:7] if pid else "<idle>"
        text = f"{comm}-{pid}"
        spaces = max(0, TRACE_GRAPH_PROCINFO_LENGTH - len(text))
        return " " * (spaces // 2) + text + " " * (spaces - spaces // 2)

    def _prologue(self, ts: int, cpu: int, pid: int, payload) -> str:
        """``print_graph_prologue``: the task-change banner, then the
        columns."""
        f = self.tracer.flags
        s = ""
        prev = self.last_pid[cpu]
        if prev != pid:
            self.last_pid[cpu] = pid
            if prev != -1:
                s += (" ------------------------------------------\n"
                      + f" {cpu:{self.cpu_width}d}) " + self._proc(prev) + " => "
                      + self._proc(pid) + "\n ------------------------------------------\n\n")
        if not self.tr.options.get("context-info", True):
            return s
        if f.get("funcgraph-abstime"):  # print_graph_abs_time: truncated, not rounded
            s += f"{ts // 1000000000:5d}.{ts % 1000000000 // 1000:06d} |  "
        if f.get("funcgraph-cpu"):
            s += f" {cpu:{self.cpu_width}d}) "
        if f.get("funcgraph-proc"):
            s += self._proc(pid) + " | "
        if self.tr.options.get("latency-format"):  # print_graph_lat_fmt
            s += " " + lat_flags(payload[2], payload[3]) + " | "
        return s


__all__ = ["GraphTracer", "GraphText", "graph_duration", "graph_plan", "trace_find_mark"]
