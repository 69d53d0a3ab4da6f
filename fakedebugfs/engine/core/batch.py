"""Many events at once, in columns (the batch path of the engine).

An :class:`EventBatch` holds events in emission order as arrays: which
tracepoint fired (``kind``, an index into ``tps``), CPU, task and
timestamp of each, and per tracepoint one column per argument holding the
values of that tracepoint's events in order.  A column is a numpy array,
a scalar shared by every event, or :class:`Strings` (codes into a table of
strings, for ``const char *`` arguments such as a cache name).

:meth:`Engine.emit_batch <fakedebugfs.engine.core.engine.Engine.emit_batch>`
hands a batch to each tracer at once; a tracer encodes it into its buffers
with the same bytes and counters as firing the events one by one
(:meth:`EventBatch.values` gives one event's argument tuple for that path).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.lazynp import np


@dataclass(frozen=True)
class Strings:
    """A column of strings: ``table[codes[i]]`` is the i-th value."""

    codes: np.ndarray
    table: tuple

    def __getitem__(self, i):
        return self.table[int(self.codes[i])]

    def take(self, idx) -> "Strings":
        return Strings(self.codes[idx], self.table)


def char_array(col, size: int, most: int):
    """A ``char name[size]`` field's column from a tracepoint argument's
    (:class:`Strings`, a shared ``str``/``bytes``, or an ``S``/``V`` array),
    as ``S<size>`` bytes: the first *most* bytes of each value, NUL padded
    (the per-event encoders' bytes: ``strscpy`` keeps ``size - 1``, a
    format's ``memcpy`` all *size*)."""
    def cut(v):
        return (v.encode() if isinstance(v, str) else bytes(v))[:most]
    if isinstance(col, Strings):
        return np.array([cut(v) for v in col.table], f"S{size}")[col.codes]
    if isinstance(col, np.ndarray):
        if col.dtype.kind in "SV":
            return col.view(f"S{col.dtype.itemsize}").astype(f"S{most}").astype(f"S{size}")
        raise TypeError(f"a char[{size}] column of dtype {col.dtype}")
    return np.array(cut(col), f"S{size}")


def run_heads(col: np.ndarray) -> np.ndarray:
    """The first value of each run of equal values of *col*, in order (a
    batch's pids come in runs: cheaper than sorting them all)."""
    if not len(col):
        return col[:0]
    change = np.empty(len(col), bool)
    change[0] = True
    np.not_equal(col[1:], col[:-1], out=change[1:])
    return col[change]


def column_take(col, idx):
    """The values of *col* at positions *idx* (a scalar stays a scalar)."""
    if isinstance(col, Strings):
        return col.take(idx)
    if isinstance(col, np.ndarray):
        return col[idx]
    return col


def column_value(col, i):
    """One value of *col* as the per-event path gets it (a Python object)."""
    if isinstance(col, Strings):
        return col[i]
    if isinstance(col, np.ndarray):
        return col[i] if col.dtype == object else col[i].item()
    return col


def group_positions(key: np.ndarray, groups: int) -> list:
    """For each value ``0 .. groups-1`` of *key*, where it occurs (sorted):
    one stable sort (a radix sort for small keys) instead of a scan per value."""
    small = key.astype(np.int16) if groups < (1 << 15) else key
    order = np.argsort(small, kind="stable")
    bounds = np.searchsorted(small[order], np.arange(groups + 1)).tolist()
    return [order[bounds[g]:bounds[g + 1]] for g in range(groups)]


@dataclass
class EventBatch:
    """Events in emission order; see the module docstring."""

    tps: Sequence  # Tracepoint of each kind
    kind: np.ndarray  # (n,) index into tps
    cpu: np.ndarray  # (n,)
    pid: np.ndarray  # (n,)
    ts: np.ndarray  # (n,) int64, per CPU never going back
    cols: Sequence  # per kind: one column per tracepoint argument
    _where: dict = field(default_factory=dict, repr=False)
    _cache: dict = field(default_factory=dict, repr=False)  # per-CPU splits (split_per_cpu)

    def __len__(self) -> int:
        return len(self.kind)

    def where(self, k: int) -> np.ndarray:
        """Positions (in emission order) of the events of kind *k*."""
        if not self._where:
            self._where.update(enumerate(group_positions(self.kind, len(self.tps))))
        return self._where[k]

    def tasks(self) -> list:
        """The distinct tasks (``pid``) of the batch, in order of first
        appearance."""
        if "tasks" not in self._cache:
            uniq, first = np.unique(run_heads(self.pid), return_index=True)
            self._cache["tasks"] = uniq[np.argsort(first)].tolist()
        return self._cache["tasks"]

    def rank(self) -> np.ndarray:
        """For each event, its index among the events of its kind."""
        out = np.empty(len(self.kind), np.int64)
        for k in range(len(self.tps)):
            pos = self.where(k)
            out[pos] = np.arange(len(pos))
        return out

    def values(self, k: int, j: int) -> tuple:
        """The argument tuple of the *j*-th event of kind *k*."""
        return tuple(column_value(c, j) for c in self.cols[k])

    def events(self):
        """``(tp, cpu, pid, ts, values)`` of every event, in order (the
        per-event path)."""
        rank = self.rank()
        for i, (k, cpu, pid, ts) in enumerate(zip(self.kind.tolist(), self.cpu.tolist(),
                                                  self.pid.tolist(), self.ts.tolist())):
            yield self.tps[k], cpu, pid, ts, self.values(k, int(rank[i]))


_NP = {"B": "u1", "b": "i1", "H": "<u2", "h": "<i2", "I": "<u4", "i": "<i4",
       "Q": "<u8", "q": "<i8"}


def struct_dtype(fmt: str, names=None, align: int = 1) -> np.dtype:
    """The numpy structured dtype of a little-endian ``struct`` format of
    integer codes (``"<HiQ"``): the same bytes, field ``f0`` ... or *names*;
    the item padded with zeros to a multiple of *align* bytes."""
    codes = [c for c in fmt.lstrip("<") if c in _NP]
    if len(codes) != len(fmt.lstrip("<")):
        raise ValueError(f"struct format {fmt!r} has codes other than integers")
    offsets, off = [], 0
    for c in codes:
        offsets.append(off)
        off += np.dtype(_NP[c]).itemsize
    return np.dtype({"names": list(names or (f"f{i}" for i in range(len(codes)))),
                     "formats": [_NP[c] for c in codes], "offsets": offsets,
                     "itemsize": -(-off // align) * align})


def fill_records(dtype: np.dtype, columns, m: int) -> np.ndarray:
    """*m* records of *dtype* filled column by column (scalars broadcast;
    values converted as C assignment converts them: truncated, wrapped)
    as rows of bytes, shape ``(m, itemsize)``."""
    rec = np.zeros(m, dtype)
    for name, col in zip(dtype.names, columns):
        rec[name] = col if isinstance(col, np.ndarray) else np.asarray(col)
    return rec.view(np.uint8).reshape(m, dtype.itemsize)


def as_words(rows: np.ndarray) -> np.ndarray:
    """``uint8`` rows as ``uint32`` words, zero-padded to a multiple of 4."""
    m, width = rows.shape
    if width & 3:
        padded = np.zeros((m, (width + 3) & ~3), np.uint8)
        padded[:, :width] = rows
        rows = padded
    return np.ascontiguousarray(rows).view(np.uint32)


def payload_group(idx, rows, length=None, rowsel=None) -> tuple:
    """A group of payloads for ``CpuBuffer.write_batch``: the event at
    ``idx[j]`` has the first ``length`` bytes of row ``rowsel[j]`` (``j``
    without *rowsel*) of *rows* (``uint8``, or ``uint32`` words with
    *length* given)."""
    if rows.dtype == np.uint8:
        length = rows.shape[1] if length is None else length
        rows = as_words(rows)
    return idx, rows, length, rowsel


def split_per_cpu(buffers, batch: EventBatch, groups, sel=None) -> None:
    """Hand each CPU's events, in order, to its buffer's ``write_batch``.

    *groups* are :func:`payload_group` tuples whose positions are batch
    positions; *sel* the sorted positions of every event to write
    (default: all of *groups*).  Events on CPUs not in *sel* are not
    written.  What is found about the batch's CPUs is kept on it for the
    next tracer.  With the compiled writer (``rb_fast``) the events are
    written in one pass in batch order; the Python path below is the
    reference (the same bytes and counters)."""
    if not groups:
        return
    rb_fast = fast.load("fakedebugfs.engine.core.rb_fast")  # (imports numpy: not at import)
    if rb_fast is not None and rb_fast.write_groups(buffers, batch.ts, batch.cpu, groups, sel):
        return
    split_per_cpu_py(buffers, batch, groups, sel)


def split_per_cpu_py(buffers, batch: EventBatch, groups, sel=None) -> None:
    """:func:`split_per_cpu` in Python: each CPU's events split out with
    numpy and written with ``CpuBuffer.write_batch``."""
    if not groups:
        return
    groups = one_length(groups)
    if sel is None:
        mask = np.zeros(len(batch), bool)
        for group in groups:
            mask[group[0]] = True
        sel = np.flatnonzero(mask)
    nr = len(buffers)
    cache = batch._cache
    lasting = {id(a) for a in batch._where.values()}  # arrays that live as long as the batch
    whole = len(sel) == len(batch)
    split = cache.get("all") if whole else None
    if split is None:
        per = group_positions(batch.cpu[sel], nr)
        local = np.full(len(batch), -1, np.int64)  # index within its CPU's events
        for j in per:
            local[sel[j]] = np.arange(len(j))
        split = ([sel[j] for j in per], local)
        if whole:
            cache["all"] = split
    on_cpu, local = split
    per_cpu = [[] for _ in buffers]
    for idx, words, length, rowsel in groups:
        key = id(idx) if id(idx) in lasting else None
        parts = cache.get(key) if key is not None else None
        if parts is None:
            parts = group_positions(batch.cpu[idx], nr)
            if key is not None:
                cache[key] = parts
        for cpu, j in enumerate(parts):
            if len(j) == len(idx):
                per_cpu[cpu].append((local[idx], words, length, rowsel))
            elif len(j):
                per_cpu[cpu].append((local[idx[j]], words, length,
                                     j if rowsel is None else rowsel[j]))
    for cpu, buf in enumerate(buffers):
        if len(on_cpu[cpu]):
            buf.write_batch(batch.ts[on_cpu[cpu]], per_cpu[cpu])


def one_length(groups) -> list:
    """*groups* with a length per row (the compiled packer's) split into
    groups of one length each (what ``CpuBuffer.write_batch`` takes)."""
    out = []
    for idx, words, length, rowsel in groups:
        if np.ndim(length) == 0:
            out.append((idx, words, length, rowsel))
            continue
        rows = np.arange(len(idx)) if rowsel is None else np.asarray(rowsel)
        per = np.asarray(length)[rows]
        for each in np.unique(per).tolist():
            j = np.flatnonzero(per == each)
            out.append((idx[j], words, each, rows[j]))
    return out


def from_pending(events):
    """A batch of ``Pending`` events (tracepoint, cpu, pid, ts, values), or
    None when some event's values are not one per tracepoint argument."""
    tps, index, rows = [], {}, []
    kind, cpu, pid, ts = [], [], [], []
    for tp, c, p, t, values in events:
        k = index.get(id(tp))
        if k is None:
            k = index[id(tp)] = len(tps)
            tps.append(tp)
            rows.append([])
        kind.append(k)
        cpu.append(c)
        pid.append(p)
        ts.append(t)
        if len(values) != len(tp.args):
            return None
        rows[k].append(values)
    cols = []
    for tp, vals in zip(tps, rows):
        cols.append(tuple(_column([v[a] for v in vals]) for a in range(len(tp.args))))
    return EventBatch(tps, np.array(kind, np.int64), np.array(cpu, np.int64),
                      np.array(pid, np.int64), np.array(ts, np.int64), cols)


def _column(values: list):
    """An array when every value is an integer that fits 64 bits, strings
    as :class:`Strings`, else an object array (per-event path only)."""
    if all(type(v) is int for v in values):
        try:
            return np.array(values, np.int64)
        except OverflowError:
            try:
                return np.array(values, np.uint64)
            except OverflowError:
                pass
    if all(type(v) is str for v in values):
        table = tuple(dict.fromkeys(values))
        code = {s: i for i, s in enumerate(table)}
        return Strings(np.array([code[v] for v in values], np.int64), table)
    out = np.empty(len(values), object)
    for i, v in enumerate(values):  # (tuples stay tuples)
        out[i] = v
    return out


__all__ = ["EventBatch", "Strings", "as_words", "group_positions", "payload_group", "column_take", "column_value", "fill_records", "from_pending",
           "split_per_cpu", "split_per_cpu_py", "struct_dtype"]
