"""The call trees' batch path: a batch of events (a workload's, the
mirror's) expanded into ``function`` entries at once, the same bytes and
counters as :meth:`~.calltree.FunctionCalls.run` of each event in turn
(tests/test_function_tracer.py compares them).

Taken when every registered ops is a ``function`` tracer that writes each
call as it comes: no ``func_stack_trace``, no ``func-no-repeats``, no
function pid list, and no event recorded by its trace array (whose
entries would interleave with the calls on a CPU).  Otherwise the engine
fires the batch event by event.

Each tree's entries are a template made once per tree and ops state (the
record ips, the parent ips, the start offsets); a batch repeats the
templates for its events with numpy, fills the task and the times, and
hands each CPU's entries, in time order, to its buffer's ``write_batch``.
"""

from __future__ import annotations

from fakedebugfs.engine.core.batch import column_value, payload_group
from fakedebugfs.engine.core.lazynp import np

ENTRY = 24  # struct ftrace_entry: trace_entry, ip, parent_ip


class FunctionBatch:
    """The batch side of one trace array's ``function`` tracer (and, as
    :class:`GraphBatch`, of its ``function_graph`` tracer)."""

    width = ENTRY  # bytes of a template row

    def __init__(self, tracer, tr, ops, user=None):
        self.tracer, self.tr, self.ops, self.user = tracer, tr, ops, user
        self._templates: dict = {}  # id(tree) -> (tree, state, template)

    def ok(self) -> bool:
        tr, flags = self.tr, self.tracer.flags
        return not (flags.get("func_stack_trace") or flags.get("func-no-repeats") or tr.enabled
                    or tr.__dict__.get("ftrace_pids") is not None
                    or tr.__dict__.get("ftrace_no_pids"))

    def state(self):
        ops = self.ops
        return (frozenset(ops.filter), frozenset(ops.notrace), bool(ops.mod_trace))

    def template(self, tree):
        """``(starts, rows, lengths, times)``: each entry's offset from the
        tree's start, its payload (pid 0), its length, and the offsets its
        ``calltime``/``rettime`` get (None: no times), in write order."""
        state = self.state()
        got = self._templates.get(id(tree))
        if got is not None and got[0] is tree and got[1] == state:
            return got[2]
        made = self.make(tree)
        self._templates[id(tree)] = (tree, state, made)
        return made

    def make(self, tree):
        ops = self.ops
        root = tree.tail[0] if tree.tail else 0
        keep = [k for k, i in enumerate(tree.recs) if i is not None and ops.traces(i)]
        rows = np.zeros((len(keep), ENTRY), np.uint8)
        words = rows.view("<u8")
        rows[:, 0:2] = np.frombuffer(int(self.tr.by_id[1].id).to_bytes(2, "little"), np.uint8)
        for j, k in enumerate(keep):
            parent = tree.nodes[k][4]
            words[j, 1] = tree.addrs[k]
            words[j, 2] = tree.rets[parent] if parent >= 0 else root
        starts = np.array([tree.nodes[k][1] for k in keep], np.int64)
        return starts, rows, np.full(len(keep), ENTRY, np.int64), None

    def write(self, trees: list, tree_of, cpu, pid, ts) -> None:
        """The entries of events whose trees are ``trees[tree_of[e]]``, on
        *cpu*, in *pid*, from *ts* (arrays in event order)."""
        tr = self.tr
        if not tr.tracing_on or not len(tree_of):
            return
        parts = []
        for t in np.unique(tree_of).tolist():
            sel = np.flatnonzero(tree_of == t)
            starts, rows, lengths, times = self.template(trees[t])
            m = len(starts)
            if not m:
                continue
            n = len(sel)
            r = np.tile(rows, (n, 1))
            r[:, 4:8] = np.repeat(pid[sel].astype("<i4"), m).view(np.uint8).reshape(-1, 4)
            base = np.repeat(ts[sel], m)
            if times is not None:  # calltime, rettime: the tree's time plus their offsets
                timed = np.tile(times[:, 0] >= 0, n)
                w = r.view("<u8")
                w[timed, 3] = (base + np.tile(times[:, 0], n))[timed]
                w[timed, 4] = (base + np.tile(times[:, 1], n))[timed]
            parts.append((np.repeat(sel, m) * (1 << 20) + np.tile(np.arange(m), n),
                          base + np.tile(starts, n), np.repeat(cpu[sel], m), r,
                          np.tile(lengths, n)))
        if not parts:
            return
        pick = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")
        when = np.concatenate([p[1] for p in parts])[pick]
        where = np.concatenate([p[2] for p in parts])[pick]
        rows = np.concatenate([p[3] for p in parts])[pick]
        lengths = np.concatenate([p[4] for p in parts])[pick]
        mask = np.array([(tr.cpumask >> c) & 1 for c in range(len(tr.buffers))], bool)
        keep = mask[where]
        written = 0
        for c in np.unique(where[keep]).tolist():
            idx = np.flatnonzero(where == c)
            groups = []
            for size in np.unique(lengths[idx]).tolist():
                j = np.flatnonzero(lengths[idx] == size)
                groups.append(payload_group(j, np.ascontiguousarray(rows[idx[j], :size])))
            tr.buffers[c].write_batch(when[idx], groups)
            written += len(idx)
        tr.written += written
        if written and tr.top.options["record-cmd"]:  # tracing_record_cmdline of each entry
            tr.top.cmdlines.record_many(rows[keep][:, 4:8].copy().view("<i4").ravel())


class GraphBatch(FunctionBatch):
    """``function_graph``'s: each tree's :func:`~.trace_functions_graph.graph_plan`
    as a template (``funcgraph_entry`` 20 bytes, ``funcgraph_exit`` 40 with
    its times)."""

    width = 40

    def state(self):
        fn = self.tracer.fn
        g = fn.graph_ops
        return super().state() + (frozenset(g.filter), frozenset(g.notrace), fn.max_graph_depth)

    def make(self, tree):
        plan, (ent_id, ret_id) = self.user.graph_plan(tree)
        rows = np.zeros((len(plan), 40), np.uint8)
        words = rows.view("<u8")
        dwords = rows.view("<i4")
        starts = np.empty(len(plan), np.int64)
        lengths = np.empty(len(plan), np.int64)
        times = np.full((len(plan), 2), -1, np.int64)
        for j, (off, is_exit, k, depth, call, end) in enumerate(plan):
            rows[j, 0:2] = np.frombuffer(int(ret_id if is_exit else ent_id).to_bytes(2, "little"),
                                         np.uint8)
            words[j, 1] = tree.addrs[k]
            dwords[j, 4] = depth
            starts[j] = off
            lengths[j] = 40 if is_exit else 20
            if is_exit:
                times[j] = (call, end)
        return starts, rows, lengths, times


def expand(calls, batch, kinds) -> None:
    """:meth:`FunctionCalls.write_batch`: the trees of the batch's events
    (each the first whose selector fits), one CPU's trees one after the
    other (``busy``), then each ``function`` user's entries."""
    trees, index = [], {}
    got_pos, got_tree = [], []
    for k, probe in kinds:
        pos = batch.where(k)
        cols = batch.cols[k]
        chosen = np.full(len(pos), -1, np.int64)
        for t, (pairs, tree) in enumerate(probe.sels):
            mask = chosen < 0
            for ai, v in pairs:
                col = cols[ai]
                if isinstance(col, np.ndarray) and col.dtype.kind in "iu":
                    mask &= col == v
                else:
                    mask &= np.array([column_value(col, j) == v for j in range(len(pos))], bool)
            if not mask.any():
                continue
            if tree.recs is None:
                calls.resolve(tree)
            g = index.get(id(tree))
            if g is None:
                g = index[id(tree)] = len(trees)
                trees.append(tree)
            chosen[mask] = g
        hit = np.flatnonzero(chosen >= 0)
        got_pos.append(pos[hit])
        got_tree.append(chosen[hit])
    if not trees:
        return
    pos = np.concatenate(got_pos)
    order = np.argsort(pos, kind="stable")
    pos = pos[order]
    tree_of = np.concatenate(got_tree)[order]
    cpu = batch.cpu[pos].astype(np.int64)
    pid = batch.pid[pos].astype(np.int64)
    ts = batch.ts[pos].astype(np.int64)
    span = np.array([t.span for t in trees], np.int64)[tree_of]
    busy = calls.busy
    for c in np.unique(cpu).tolist():
        on = np.flatnonzero(cpu == c)
        t_c, s_c = ts[on], span[on]
        before = np.concatenate(([busy.get(c, 0)], (t_c + s_c)[:-1]))
        if (t_c < before).any():  # trees overlap: one after the other, in turn
            last = busy.get(c, 0)
            for j in range(len(on)):
                t_c[j] = max(int(t_c[j]), last)
                last = int(t_c[j] + s_c[j])
            ts[on] = t_c
        busy[c] = int(ts[on[-1]] + s_c[-1])
    clock = calls.engine.clock
    end = max(busy.values())
    if getattr(clock, "deterministic", False) and clock.now() < end:
        clock.advance(end - clock.now())
    for user in tuple(calls.users):
        user.batch.write(trees, tree_of, cpu, pid, ts)


__all__ = ["FunctionBatch", "expand"]
