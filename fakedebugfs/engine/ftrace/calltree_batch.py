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
    """The batch side of one trace array's ``function`` tracer."""

    def __init__(self, tracer, tr, ops):
        self.tracer, self.tr, self.ops = tracer, tr, ops
        self._templates: dict = {}  # id(tree) -> (tree, state, starts, rows)

    def ok(self) -> bool:
        tr, flags = self.tr, self.tracer.flags
        return not (flags["func_stack_trace"] or flags["func-no-repeats"] or tr.enabled
                    or tr.__dict__.get("ftrace_pids") is not None
                    or tr.__dict__.get("ftrace_no_pids"))

    def _template(self, tree, type_id: int):
        """``(starts, rows)``: the offset and the payload (pid 0) of each
        call of *tree* the ops hooks, in call order."""
        ops = self.ops
        state = (frozenset(ops.filter), frozenset(ops.notrace), bool(ops.mod_trace))
        got = self._templates.get(id(tree))
        if got is not None and got[0] is tree and got[1] == state:
            return got[2], got[3]
        root = tree.tail[0] if tree.tail else 0
        keep = [k for k, i in enumerate(tree.recs) if i is not None and ops.traces(i)]
        rows = np.zeros((len(keep), ENTRY), np.uint8)
        words = rows.view("<u8")
        rows[:, 0:2] = np.frombuffer(int(type_id).to_bytes(2, "little"), np.uint8)
        for j, k in enumerate(keep):
            parent = tree.nodes[k][4]
            words[j, 1] = tree.addrs[k]
            words[j, 2] = tree.rets[parent] if parent >= 0 else root
        starts = np.array([tree.nodes[k][1] for k in keep], np.int64)
        self._templates[id(tree)] = (tree, state, starts, rows)
        return starts, rows

    def write(self, trees: list, tree_of, cpu, pid, ts) -> None:
        """The entries of events whose trees are ``trees[tree_of[e]]``, on
        *cpu*, in *pid*, from *ts* (arrays in event order)."""
        tr = self.tr
        if not tr.tracing_on or not len(tree_of):
            return
        type_id = tr.by_id[1].id
        parts = []
        for t in np.unique(tree_of).tolist():
            sel = np.flatnonzero(tree_of == t)
            starts, rows = self._template(trees[t], type_id)
            m = len(starts)
            if not m:
                continue
            n = len(sel)
            r = np.tile(rows, (n, 1))
            r[:, 4:8] = np.repeat(pid[sel].astype("<i4"), m).view(np.uint8).reshape(-1, 4)
            parts.append((np.repeat(sel, m) * (1 << 20) + np.tile(np.arange(m), n),
                          np.repeat(ts[sel], m) + np.tile(starts, n),
                          np.repeat(cpu[sel], m), r))
        if not parts:
            return
        order = np.concatenate([p[0] for p in parts])
        when = np.concatenate([p[1] for p in parts])
        where = np.concatenate([p[2] for p in parts])
        rows = np.concatenate([p[3] for p in parts])
        pick = np.argsort(order, kind="stable")  # event order, then call order
        when, where, rows = when[pick], where[pick], rows[pick]
        mask = np.array([(tr.cpumask >> c) & 1 for c in range(len(tr.buffers))], bool)
        keep = mask[where]
        written = 0
        for c in np.unique(where[keep]).tolist():
            idx = np.flatnonzero(where == c)
            tr.buffers[c].write_batch(when[idx], [payload_group(np.arange(len(idx)), rows[idx])])
            written += len(idx)
        tr.written += written
        if written and tr.top.options["record-cmd"]:  # tracing_record_cmdline of each entry
            tr.top.cmdlines.record_many(rows[keep][:, 4:8].copy().view("<i4").ravel())


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
