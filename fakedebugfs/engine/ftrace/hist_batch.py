"""Hist triggers on the engine's batch path: ``event_hist_trigger``
(kernel/trace/trace_events_hist.c, 6.12) of many events of one kind at
once, with the same map, hits, drops and sums as firing them one by one.

A trigger takes the batch path when its plan (:func:`plan_of`, made once
per :class:`~.hist_data.HistData`) can be made: keys that are integer
fields of the record (1, 2, 4 or 8 bytes, signed ones sign-extended to 64
bits as ``hist_field_s*`` reads them), ``common_cpu``, or ``.log2`` /
``.buckets=N`` of those (applied to the key's value, as the kernel's
``hist_field_log2``/``hist_field_bucket`` do); any print-time modifier
(``.hex .sym .sym-offset .execname .syscall``; ``.percent .graph`` of a
value); values that are ``hitcount`` and sums of such fields; no
variables, references, actions, expressions, strings, stack traces,
timestamps, filter or ``name=`` (those fire one by one, as before).

:func:`aggregate` reads each key and value from the records' bytes as the
batch path packed them for the ring buffer (the same bytes the per-event
path hands ``hist_fn_call``) and groups the events by key in the order of
each key's first event, in one compiled pass (``hist_fast.pyx``) or with
numpy (the reference, ``FAKEDEBUGFS_PURE=1``); then, per distinct key, looks the
element up or makes it (``tracing_map_insert``: ``hist_trigger_elt_data_init``
saving the comm of the key's first task), and adds the key's event count
to the map's hits and each value's sum (u64, wrapping).  A key the full
pool has no element for is a drop for each of its events (the per-event
insert walks to a free slot and finds no free element: the walk's result
is known without it).  So a map fed a batch is the map fed its events one
by one: same elements made in the same order (same slots), same counters.
"""

from __future__ import annotations

import logging

from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.lazynp import np
from fakedebugfs.engine.ftrace.hist_fields import (FL_EXPR, FL_STACKTRACE, FL_STRING,
                                                  FL_TIMESTAMP, FL_VAR, FL_VAR_REF)

log = logging.getLogger(__name__)
U64 = (1 << 64) - 1
_READS = {"u8": "<u1", "u16": "<u2", "u32": "<u4", "u64": "<u8",
          "s8": "<i1", "s16": "<i2", "s32": "<i4", "s64": "<i8"}
_REFUSED = FL_VAR | FL_VAR_REF | FL_EXPR | FL_STRING | FL_STACKTRACE | FL_TIMESTAMP
_NONE = object()


class HistPlan:
    """How one trigger's keys and values come out of a batch's records:
    ``keys`` and ``vals`` are column programs (:func:`_program`), ``vals``
    the summed values by their field index (hitcount, index 0, is the
    key's count)."""

    __slots__ = ("keys", "vals", "n_vals", "width", "flat", "uses_cpu")

    def __init__(self, keys: list, vals: list, n_vals: int):
        self.keys, self.vals, self.n_vals = keys, vals, n_vals
        programs = keys + [v for _, v in vals]
        self.width = max([p[0] + p[1] for p in _reads(programs)] or [0])
        flat = [_flat(p) for p in programs]
        self.flat = None if None in flat else flat  # hist_fast's programs
        self.uses_cpu = any(f is not None and f[0] == 1 for f in flat)


def _reads(programs: list):
    for p in programs:
        while p[0] in ("log2", "bucket"):
            p = p[2] if p[0] == "bucket" else p[1]
        if p[0] == "read":
            yield p[1:]


def _flat(p):
    """A column program as ``hist_fast.group`` takes it: ``(src, offset,
    size, signed, op, param)``; None for one it does not (log2 of a bucket)."""
    op, param = 0, 0
    if p[0] == "log2":
        op, p = 1, p[1]
    elif p[0] == "bucket":
        op, param, p = 2, p[1], p[2]
    if p[0] == "read":
        return (0, p[1], p[2], int(p[3][1] == "i"), op, param)
    if p[0] == "cpu":
        return (1, 0, 0, 0, op, param)
    return None


def _fast():
    """The compiled grouping (``hist_fast.pyx``), or None."""
    return fast.load("fakedebugfs.engine.ftrace.hist_fast")


def _program(hf, depth: int = 0):
    """A field's value as a column program: ``("read", offset, size,
    dtype)``, ``("cpu",)``, ``("log2", op)``, ``("bucket", n, op)``; None
    where the batch path does not compute it."""
    if hf is None or depth > 2 or hf.flags & _REFUSED:
        return None
    fn = hf.fn
    if fn in _READS:
        f = hf.field
        if f is None or f.size not in (1, 2, 4, 8) or f.size != int(_READS[fn][2]):
            return None
        return ("read", f.offset, f.size, _READS[fn])
    if fn == "cpu":
        return ("cpu",)
    if fn == "log2":
        op = _program(hf.operands[0], depth + 1)
        return None if op is None else ("log2", op)
    if fn == "bucket":
        op = _program(hf.operands[0], depth + 1)
        return None if op is None or not hf.buckets else ("bucket", hf.buckets, op)
    return None


def plan_of(hd):
    """The trigger's :class:`HistPlan`, made once (None: one by one)."""
    plan = hd.__dict__.get("_batch_plan", _NONE)
    if plan is _NONE:
        plan = hd.__dict__["_batch_plan"] = _make_plan(hd)
    return plan


def _make_plan(hd):
    if hd.var_refs or hd.actions or hd.field_vars or hd.n_vars or hd.enable_timestamps:
        return None
    fields = hd.fields
    if not fields or fields[0].fn != "counter":
        return None
    vals = []
    for i in range(1, hd.n_vals):
        p = _program(fields[i])
        if p is None:
            return None
        vals.append((i, p))
    keys = []
    for hf in fields[hd.n_vals:]:
        p = _program(hf)
        if p is None or hf.size != 8:
            return None
        keys.append(p)
    if not keys or hd.key_size != 8 * len(keys):
        return None
    return HistPlan(keys, vals, hd.n_vals)


def batchable(trig) -> bool:
    """Can the batch path run every trigger of this event's list?"""
    for t in trig.list:
        hd = getattr(t, "hist_data", None)
        if hd is None or t.pred is not None or t.name is not None or plan_of(hd) is None:
            return False
    return True


# --- running a plan over a batch ---------------------------------------------------------

_POW2 = None


def _log2(v):
    """``order_base_2`` of each u64: ``bit_length(v - 1)`` for v > 1, else 0."""
    global _POW2
    if _POW2 is None:
        _POW2 = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))
    out = np.searchsorted(_POW2, v - np.uint64(1), side="right").astype(np.uint64)
    out[v <= 1] = 0
    return out


def _column(p, rows, cpu):
    kind = p[0]
    if kind == "read":
        _, off, size, dtype = p
        col = np.ascontiguousarray(rows[:, off:off + size]).view(dtype).ravel()
        return col.astype(np.int64).view(np.uint64) if dtype[1] == "i" else col.astype(np.uint64)
    if kind == "cpu":
        return cpu.astype(np.uint64)
    if kind == "log2":
        return _log2(_column(p[1], rows, cpu))
    n = np.uint64(p[1])
    return _column(p[2], rows, cpu) // n * n


def record_rows(groups, m: int, width: int):
    """The records of the *m* events that ``EventType.pack_columns``
    packed into *groups*, in the kind's order, as C-contiguous ``uint8``
    rows (at least *width* bytes of each)."""
    if len(groups) == 1:
        idx, words, _, rowsel = groups[0]
        rows = words.view(np.uint8)
        if rowsel is not None:
            rows = rows[rowsel]
        if len(idx) == m and (m == 0 or (idx[0] == 0 and idx[-1] == m - 1)):
            return np.ascontiguousarray(rows)
    out = np.zeros((m, width), np.uint8)
    for idx, words, _, rowsel in groups:
        rows = words.view(np.uint8)[:, :width]
        out[idx] = rows if rowsel is None else rows[rowsel]
    return out


def _grouped(plan: HistPlan, rows, cpu) -> list:
    """``[(key bytes, first position, count, [sums]), ...]`` per distinct
    key in the order of its first event: compiled (``hist_fast.group``)
    or with numpy (the reference)."""
    fast = _fast()
    if fast is not None and plan.flat is not None:
        cpus = np.asarray(cpu, np.int64) if plan.uses_cpu else np.empty(0, np.int64)
        return fast.group(rows, cpus, plan.flat, len(plan.keys))
    keys = [_column(p, rows, cpu) for p in plan.keys]
    if len(keys) == 1:
        uniq, first, inv, counts = np.unique(keys[0], return_index=True, return_inverse=True,
                                             return_counts=True)
        as_bytes = [int(u).to_bytes(8, "little") for u in uniq.tolist()]
    else:
        packed = np.ascontiguousarray(np.stack(keys, axis=1)).view(
            np.dtype((np.void, 8 * len(keys)))).ravel()
        uniq, first, inv, counts = np.unique(packed, return_index=True, return_inverse=True,
                                             return_counts=True)
        as_bytes = [bytes(u) for u in uniq]
    inv = inv.ravel()
    sums = []
    for _, p in plan.vals:
        s = np.zeros(len(uniq), np.uint64)
        np.add.at(s, inv, _column(p, rows, cpu))
        sums.append(s.tolist())
    counts, firsts = counts.tolist(), first.tolist()
    return [(as_bytes[j], firsts[j], counts[j], [col[j] for col in sums])
            for j in np.argsort(first, kind="stable").tolist()]


def aggregate(hd, plan: HistPlan, rows, cpu, pid, comms: dict) -> None:
    """The events of *rows* (their records' bytes, in emission order),
    their CPUs and tasks, into *hd*'s map (see the module docstring)."""
    if not len(rows):
        return
    tmap = hd.map
    index = tmap.index
    idx = [i for i, _ in plan.vals]
    for key, first, n, sums in _grouped(plan, rows, cpu):
        elt = index.get(key)
        if elt is None:
            if tmap.next_elt >= tmap.max_elts:  # no free element: each event a drop
                tmap.drops += n
                continue
            task = int(pid[first])
            hd._current_pid, hd._current_comm = task, comms.get(task, "")
            elt = tmap.insert(key)  # one hit
            tmap.hits += n - 1
        else:
            tmap.hits += n
        s = elt.sums
        s[0] = (s[0] + n) & U64
        for i, v in zip(idx, sums):
            s[i] = (s[i] + v) & U64


def hit_one(hd, plan: HistPlan, payload: bytes, cpu: int, pid: int, comm) -> None:
    """One event through a trigger with a plan (the per-event path's
    ``event_hist_trigger`` for the common cases): its key's bytes and
    values read from *payload* by the plan, the element found or made
    (*comm*: the task's, for ``.execname``; None to look it up), the
    sums added; no context or key pieces made on the way."""
    vals = [_one(p, payload, cpu) for p in plan.keys]
    key = b"".join(v.to_bytes(8, "little") for v in vals) if len(vals) > 1 \
        else vals[0].to_bytes(8, "little")
    tmap = hd.map
    elt = tmap.index.get(key)
    if elt is None:
        if tmap.next_elt >= tmap.max_elts:
            tmap.drops += 1
            return
        hd._current_pid, hd._current_comm = pid, comm
        elt = tmap.insert(key)
    else:
        tmap.hits += 1
    s = elt.sums
    s[0] = (s[0] + 1) & U64
    for i, p in plan.vals:
        s[i] = (s[i] + _one(p, payload, cpu)) & U64


def _one(p, payload: bytes, cpu: int) -> int:
    """A column program of one record (:func:`_column` of one row)."""
    kind = p[0]
    if kind == "read":
        _, off, size, dtype = p
        return int.from_bytes(payload[off:off + size], "little", signed=dtype[1] == "i") & U64
    if kind == "cpu":
        return cpu & U64
    if kind == "log2":
        v = _one(p[1], payload, cpu)
        return (v - 1).bit_length() if v > 1 else 0
    v = _one(p[2], payload, cpu)
    return v // p[1] * p[1]


def run_triggers(tr, ev, trig, groups, m: int, cpu, pid) -> None:
    """Every hist trigger of *trig* (all :func:`batchable`) over the *m*
    events of one kind: *groups* their packed records, *cpu* and *pid*
    (m,) their CPUs and tasks."""
    comms = tr.engine.comms
    rows = None
    for t in list(trig.list):
        if t.paused:
            continue
        hd = t.hist_data
        plan = plan_of(hd)
        try:
            if rows is None:
                rows = record_rows(groups, m, max(plan.width, ev.size))
            aggregate(hd, plan, rows, cpu, pid, comms)
        except (ArithmeticError, LookupError, TypeError, ValueError) as err:
            # as one by one (HistTrigger.fire): what cannot be aggregated is
            # counted dropped, never the server's end
            hd.map.drops += m
            log.debug("hist trigger on %s, a batch of %d: %r", ev.key, m, err)


__all__ = ["HistPlan", "aggregate", "batchable", "hit_one", "plan_of", "record_rows",
           "run_triggers"]
