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

from fakedebugfs.engine.core.batch import EventBatch, as_words, column_value, split_per_cpu
from fakedebugfs.engine.core.lazynp import np

ENTRY = 24  # struct ftrace_entry: trace_entry, ip, parent_ip
# the per-event path writes a tree of this many calls or more at once (its
# template, the compiled ring-buffer writer) rather than call by call
WHOLE_TREE = 48


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
                    or tr.options.get("record-tgid")
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
        starts, rows, lengths, times = self.make(tree)
        made = (starts, as_words(rows), lengths, times)  # rows as uint32 words
        self._templates[id(tree)] = (tree, state, made)
        return made

    def make(self, tree):
        ops = self.ops
        keep = [k for k, i in enumerate(tree.recs) if i is not None and ops.traces(i)]
        rows = np.zeros((len(keep), ENTRY), np.uint8)
        words = rows.view("<u8")
        rows[:, 0:2] = np.frombuffer(int(self.tr.by_id[1].id).to_bytes(2, "little"), np.uint8)
        for j, k in enumerate(keep):
            words[j, 1] = tree.addrs[k]
            words[j, 2] = tree.pips[k]
        starts = np.array([tree.nodes[k][1] for k in keep], np.int64)
        return starts, rows, np.full(len(keep), ENTRY, np.int64), None

    def write(self, trees: list, tree_of, cpu, pid, ts) -> None:
        """The entries of events whose trees are ``trees[tree_of[e]]``, on
        *cpu*, in *pid*, from *ts* (arrays in event order): each event's
        template rows in turn, in one pass (no sort: an event's entries
        follow the previous event's, as one by one), written through
        :func:`~fakedebugfs.engine.core.batch.split_per_cpu` (the compiled
        writer when built) in that order."""
        tr = self.tr
        if not tr.tracing_on or not len(tree_of):
            return
        temps = [self.template(t) for t in trees]
        m = np.array([len(t[0]) for t in temps], np.int64)
        counts = m[tree_of]
        total = int(counts.sum())
        if not total:
            return
        base = np.zeros(len(trees), np.int64)
        np.cumsum(m[:-1], out=base[1:])
        first = np.cumsum(counts) - counts  # each event's first entry
        ev = np.repeat(np.arange(len(tree_of)), counts)  # the event of each entry
        rowidx = np.arange(total) + (base[tree_of] - first)[ev]  # its template row
        starts = np.concatenate([t[0] for t in temps])
        words = np.concatenate([t[1] for t in temps])[rowidx]
        words[:, 1] = pid.astype(np.int32).view(np.uint32)[ev]  # trace_entry.pid
        when = ts[ev] + starts[rowidx]
        if any(t[3] is not None for t in temps):  # calltime, rettime: the tree's time plus theirs
            times = np.concatenate([t[3] if t[3] is not None else np.full((len(t[0]), 2), -1)
                                    for t in temps])[rowidx]
            timed = np.flatnonzero(times[:, 0] >= 0)
            w64 = words.view(np.uint64)
            w64[timed, 3] = ts[ev[timed]] + times[timed, 0]
            w64[timed, 4] = ts[ev[timed]] + times[timed, 1]
        lengths = np.concatenate([t[2] for t in temps])[rowidx]
        length = int(lengths[0]) if (lengths == lengths[0]).all() else lengths
        where = cpu[ev]
        nr = len(tr.buffers)
        mask = np.array([(tr.cpumask >> c) & 1 for c in range(nr)], bool)
        sel = None if mask.all() else np.flatnonzero(mask[where])
        if sel is not None and not len(sel):
            return
        entries = EventBatch((), np.zeros(total, np.int64), where, np.repeat(pid, counts),
                             when, ())
        split_per_cpu(tr.buffers, entries, [(np.arange(total), words, length, None)], sel)
        tr.written += total if sel is None else len(sel)
        if tr.top.options["record-cmd"]:  # tracing_record_cmdline of each entry
            kept = counts > 0 if sel is None else (counts > 0) & mask[cpu]
            tr.top.cmdlines.record_many(pid[kept].astype(np.int32))


    def write_one(self, tree, cpu: int, pid: int, ts: int) -> None:
        """One event's tree (the per-event path, for a big tree): what
        writing its calls one by one writes."""
        one = np.zeros(1, np.int64)
        self.write([tree], one, one + cpu, one + pid, one + ts)


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
            else:
                rows[j, 3] = 1  # common_preempt_count: the entry's callback runs unpreemptible
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
            # t'[j] = max(t[j], t'[j-1] + s[j-1]): less the spans before it,
            # a running maximum
            t_c[0] = max(int(t_c[0]), busy.get(c, 0))
            before = np.zeros(len(on), np.int64)
            np.cumsum(s_c[:-1], out=before[1:])
            ts[on] = np.maximum.accumulate(t_c - before) + before
        busy[c] = int(ts[on[-1]] + s_c[-1])
    clock = calls.engine.clock
    end = max(busy.values())
    if getattr(clock, "deterministic", False) and clock.now() < end:
        clock.advance(end - clock.now())
    for user in tuple(calls.users):
        user.batch.write(trees, tree_of, cpu, pid, ts)


__all__ = ["FunctionBatch", "expand"]
