"""The kmemtrace tracer of 2008 (mm/kmemtrace.c), without its debugfs files.

Probes on the kmem tracepoints turn every allocation and free into one
binary record written to a relay channel (:mod:`.relay`), in one of the two
layouts of ``engine/core/layouts.py``:

``2008-08`` (the August 2008 ABI document and mm/kmemtrace.c, the default)
    event id 0 alloc / 1 free; a 24-byte core (ids, ``u16`` size, ``s32``
    sequence number, call site, pointer); allocations add requested and
    allocated bytes, ``u32`` GFP flags and ``s32`` target CPU (48 bytes).
    The sequence number is one global counter (``atomic_add_return``) taken
    only once relay space is reserved, so the records of all CPUs, merged,
    number 1, 2, 3, ... with no gaps.
``2008-07`` (the July 2008 kmemtrace RFC)
    event id 1 alloc / 2 free; every record is 56 bytes: ids, size, ``s32``
    target CPU, call site, pointer, requested, allocated, ``u64`` GFP flags
    and the ``s64`` timestamp.  NULL pointers are not traced ("Don't trace
    ignored allocations").  Frees carry no target CPU, sizes or flags (the
    kernel left them uninitialised; here they are -1, 0, 0, 0).

Sub-buffers hold ``subbuf_events`` records' worth of bytes: 56 bytes each
for 2008-07 (``KMEMTRACE_SUBBUF_SIZE`` = 8192 * sizeof(struct
kmemtrace_event)), 64 for 2008-08 (its 524288-byte default = 8192 * 64).
0 sub-buffers or events mean the defaults, as ``kmemtrace.subbufs=0`` did.

``total_overruns`` is ``kmemtrace_buf_overruns``: the ``subbuf_start``
callback adds one per refused sub-buffer switch.  A full buffer keeps
refusing, and every record that arrives meanwhile asks again, so each
dropped record counts exactly once: records read + total_overruns = events
traced (the 2008 documents' "number of bytes which were dropped" is not what the
code counts).  A fault (:meth:`Kmemtrace.lose_events`) drops the next records
of a CPU the same way, each counted once in ``total_overruns``.
"""

from __future__ import annotations

import operator
import struct

from fakedebugfs.engine.core.lazynp import np

from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.batch import group_positions
from fakedebugfs.engine.core.ringbuffer_batch import row_view
from fakedebugfs.engine.core.layouts import (PAGE_SIZE, kmemtrace_alloc_v2008_08,
    kmemtrace_event_v2008_07, kmemtrace_event_v2008_08, packer)
from fakedebugfs.engine.kmemtrace.relay import RelayChannel

# the batch path in compiled code (kmemtrace_fast.pyx), None: the Python path
_fast = fast.load("fakedebugfs.engine.kmemtrace.kmemtrace_fast")

KMEMTRACE_ABI_VERSION = 1
DEFAULT_N_SUBBUFS = 20
DEFAULT_SUBBUF_EVENTS = 8192
U32 = 0xFFFFFFFF

# enum kmemtrace_type_id
TYPE_KMALLOC, TYPE_CACHE, TYPE_PAGES = 0, 1, 2

ALLOC_ARGS = ("call_site", "ptr", "bytes_req", "bytes_alloc", "gfp_flags", "node")
PAGE_ALLOC_ARGS = ("call_site", "ptr", "order", "gfp_flags")  # bytes: PAGE_SIZE << order
FREE_ARGS = ("call_site", "ptr")

# (tracepoint, allocation?, type id, the tracepoint arguments the record takes)
PROBES = (
    ("kmem:kmalloc", True, TYPE_KMALLOC, ALLOC_ARGS),
    ("kmem:kmem_cache_alloc", True, TYPE_CACHE, ALLOC_ARGS),
    ("kmem:mm_page_alloc", True, TYPE_PAGES, PAGE_ALLOC_ARGS),
    ("kmem:kfree", False, TYPE_KMALLOC, FREE_ARGS),
    ("kmem:kmem_cache_free", False, TYPE_CACHE, FREE_ARGS),
    ("kmem:mm_page_free", False, TYPE_PAGES, FREE_ARGS),
)


def _u64(v):
    """A column (or a scalar) as ``u64``: C's conversion (negatives wrap)."""
    return v.astype(np.uint64) if isinstance(v, np.ndarray) else np.asarray(v).astype(np.uint64)


class Abi:
    """One record layout: event ids, sizes, struct packers, sub-buffer slot."""

    def __init__(self, name: str):
        self.name = name
        if name == "2008-08":
            self.alloc_id, self.free_id = 0, 1
            self.alloc = struct.Struct("<" + packer(kmemtrace_event_v2008_08).format[1:]
                                       + packer(kmemtrace_alloc_v2008_08).format[1:])
            self.free = packer(kmemtrace_event_v2008_08)
            self.slot = 64
        elif name == "2008-07":
            self.alloc_id, self.free_id = 1, 2
            self.alloc = self.free = packer(kmemtrace_event_v2008_07)
            self.slot = self.alloc.size
        else:
            raise ValueError(f"unknown kmemtrace ABI {name!r} (2008-08, 2008-07)")


class Kmemtrace:
    """``kmemtrace_chan`` with its probes, sequence counter and overruns."""

    def __init__(self, engine, abi: str = "2008-08", n_subbufs: int = DEFAULT_N_SUBBUFS,
                 subbuf_events: int = DEFAULT_SUBBUF_EVENTS, enabled: bool = False):
        self.engine = engine
        self.abi = Abi(abi)
        self.abi_version = KMEMTRACE_ABI_VERSION
        self.n_subbufs = n_subbufs or DEFAULT_N_SUBBUFS
        self.subbuf_size = (subbuf_events or DEFAULT_SUBBUF_EVENTS) * self.abi.slot
        self.chan = RelayChannel(self.subbuf_size, self.n_subbufs, engine.nr_cpus,
                                 self._subbuf_start)
        self.buf_overruns = 0  # u32, debugfs_create_u32("total_overruns")
        self.seq_num = 0  # atomic_t kmemtrace_seq_num
        self.records = 0  # records written (not an ABI value: for status)
        self.lose_next = [0] * engine.nr_cpus  # faults: records to drop per CPU
        self.enabled = False
        self._probes = []
        for key, alloc, type_id, args in PROBES:
            tp = engine.tracepoint(key)
            ix = tuple(tp.index(a) for a in args)
            self._probes.append((tp, self._make_probe(alloc, type_id, ix)))
        if enabled:
            self.set_enabled(True)

    def _subbuf_start(self, buf, subbuf, prev_subbuf, prev_padding) -> bool:
        """``kmemtrace_subbuf_start``: count an overrun when the buffer is full."""
        if buf.full():
            self._overrun()
            return False
        return True

    def _overrun(self) -> None:
        self.buf_overruns = (self.buf_overruns + 1) & U32

    def lose_events(self, cpu: int, count: int) -> None:
        """Drop the next *count* records of *cpu* as a full channel drops
        them: no sequence number used, each counted in ``total_overruns``."""
        if count < 0:
            raise ValueError("count must be >= 0")
        self.lose_next[cpu] += count

    def set_enabled(self, on: bool) -> None:
        """``kmemtrace_enabled_set``: start or stop the probes."""
        on = bool(on)
        if on == self.enabled:
            return
        self.enabled = on
        for tp, probe in self._probes:
            (tp.register if on else tp.unregister)(probe)

    def _make_probe(self, alloc: bool, type_id: int, ix: tuple):
        """The probe of one tracepoint; *ix* locates the values it needs."""
        if alloc and type_id == TYPE_PAGES:
            site, ptr, order, gfp = ix

            def probe(cpu, pid, ts, values):
                size = PAGE_SIZE << values[order]
                self.log_alloc(cpu, ts, type_id, values[site], values[ptr], size, size,
                               values[gfp], -1)
        elif alloc:
            def probe(cpu, pid, ts, values):
                self.log_alloc(cpu, ts, type_id, *[values[i] for i in ix])
        else:
            site, ptr = ix

            def probe(cpu, pid, ts, values):
                self.log_free(cpu, ts, type_id, values[site], values[ptr])
        probe.batch_owner = self  # the batch path (write_batch)
        probe.spec = (alloc, type_id, ix)
        layout = self.abi.alloc if alloc else self.abi.free
        mode = 2 if alloc and type_id == TYPE_PAGES else int(alloc)  # FREE, ALLOC, PAGES
        probe.fast_spec = (self._head(alloc, type_id), layout.size, mode,
                           operator.itemgetter(*ix))
        return probe

    # --- the batch path (engine.core.batch) -----------------------------------

    def batch_ok(self, batch, kinds) -> bool:
        """Every argument the records take is a column of numbers."""
        for k, probe in kinds:
            for i in probe.spec[2]:
                c = batch.cols[k][i]
                if not isinstance(c, (int, np.ndarray)) or \
                        (isinstance(c, np.ndarray) and c.dtype == object):
                    return False
        return True

    def write_batch(self, batch, kinds) -> None:
        """:meth:`_log` of every event of *kinds*, in emission order: per
        CPU the records the relay takes (after a fault's losses, until a
        refused sub-buffer switch) are found first, then the 2008-08
        sequence numbers are given in emission order across CPUs, and the
        records are packed column-wise into the sub-buffers (the Python
        path; ``kmemtrace_fast`` does it event by event in compiled code)."""
        if _fast is not None and self._write_batch_fast(batch, kinds):
            return
        abi = self.abi
        parts = []  # (positions, alloc?, columns of the record after the header)
        for k, probe in kinds:
            alloc, type_id, ix = probe.spec
            pos = batch.where(k)
            cols = batch.cols[k]
            m = len(pos)
            if alloc and type_id == TYPE_PAGES:
                site, ptr, order, gfp = (cols[i] for i in ix)
                size = PAGE_SIZE << np.asarray(order, np.int64)
                vals = (site, ptr, size, size, gfp, -1)
            elif alloc:
                vals = tuple(cols[i] for i in ix)
            else:
                vals = (cols[ix[0]], cols[ix[1]])
            if abi.name == "2008-07":
                keep = np.broadcast_to(np.asarray(vals[1]) != 0, (m,))
                if not keep.all():  # "Don't trace ignored allocations."
                    pos = pos[keep]
                    vals = tuple(v[keep] if isinstance(v, np.ndarray) else v for v in vals)
                    m = len(pos)
            parts.append((pos, alloc, type_id, vals))
        if not parts:
            return
        n = len(batch)
        size_of = np.zeros(len(batch.tps), np.int64)  # record size of each kind
        for k, probe in kinds:
            size_of[k] = (abi.alloc if probe.spec[0] else abi.free).size
        if abi.name == "2008-07":  # NULL pointers filtered: only the events kept
            mask = np.zeros(n, bool)
            for pos, _, _, _ in parts:
                mask[pos] = True
            sel = np.flatnonzero(mask)
        else:
            sel = np.flatnonzero(size_of[batch.kind] > 0)
        where = np.full(n, -1, np.int64)  # byte position in its CPU's buffer
        for cpu, j in enumerate(group_positions(batch.cpu[sel], len(self.chan.bufs))):
            if len(j):
                on = sel[j]
                where[on] = self._reserve_many(cpu, self.chan.bufs[cpu], size_of[batch.kind[on]])
        accepted = where >= 0
        seq = np.cumsum(accepted) + self.seq_num  # atomic_add_return, in emission order
        if abi.name == "2008-08":
            self.seq_num = int(seq[-1]) & U32
        self.records += int(accepted.sum())
        for pos, alloc, type_id, vals in parts:
            ok = accepted[pos]
            cpu_of = np.where(ok, batch.cpu[pos], len(self.chan.bufs))  # refused: no CPU
            for cpu, sel in enumerate(group_positions(cpu_of, len(self.chan.bufs))):
                if not len(sel):
                    continue
                buf = self.chan.bufs[cpu]
                at = pos[sel]
                words = self._words(batch, at, alloc, type_id,
                                    [v[sel] if isinstance(v, np.ndarray) else v for v in vals], seq)
                # records are 8-byte multiples at 8-byte offsets
                mem = np.frombuffer(buf.start, np.uint64)
                row_view(mem, words.shape[1])[where[at] >> 3] = words
                del mem

    def _write_batch_fast(self, batch, kinds) -> bool:
        """:meth:`write_batch` by ``kmemtrace_fast``: each kind's record
        header and the tracepoint columns it takes; False when it leaves
        the batch to the Python path."""
        specs = []
        for k, probe in kinds:
            head, size, mode, pick = probe.fast_spec
            specs.append((k, head, size, mode, pick(batch.cols[k])))
        return _fast.write_batch(self, batch.kind, batch.cpu, batch.ts, len(batch.tps), specs,
                                 self.abi.name == "2008-07")

    def _head(self, alloc: bool, type_id: int) -> int:
        """The low half of a record's first word: ``event_id``, ``type_id``
        and ``event_size`` of ``struct kmemtrace_event`` (the high half is
        the 2008-08 sequence number or the 2008-07 node)."""
        abi = self.abi
        layout = abi.alloc if alloc else abi.free
        return (abi.alloc_id if alloc else abi.free_id) | (type_id << 8) | (layout.size << 16)

    def _words(self, batch, at, alloc, type_id, vals, seq) -> np.ndarray:
        """The records of the events at *at* as rows of ``u64`` words (the
        layouts of :class:`Abi`, little endian: ids, size and the ``s32``
        in the first word)."""
        abi = self.abi
        layout = abi.alloc if alloc else abi.free
        out = np.zeros((len(at), layout.size // 8), np.uint64)
        head = self._head(alloc, type_id)
        if abi.name == "2008-08":
            out[:, 0] = head | ((_u64(seq[at]) & U32) << np.uint64(32))
            out[:, 1], out[:, 2] = _u64(vals[0]), _u64(vals[1])
            if alloc:
                site, ptr, req, given, gfp, node = vals
                out[:, 3], out[:, 4] = _u64(req), _u64(given)
                out[:, 5] = (_u64(gfp) & U32) | ((_u64(node) & U32) << np.uint64(32))
        else:
            node = vals[5] if alloc else -1
            out[:, 0] = head | ((_u64(node) & U32) << np.uint64(32))
            out[:, 1], out[:, 2] = _u64(vals[0]), _u64(vals[1])
            if alloc:
                out[:, 3], out[:, 4], out[:, 5] = _u64(vals[2]), _u64(vals[3]), _u64(vals[4])
            out[:, 6] = _u64(batch.ts[at])
        return out

    def _reserve_many(self, cpu: int, buf, length) -> np.ndarray:
        """``relay_reserve`` for each record of *length* (bytes, in order)
        on *cpu*: its position in the buffer, or -1 when dropped (a fault's
        loss or a refused switch, each counted in ``total_overruns``)."""
        m = len(length)
        out = np.full(m, -1, np.int64)
        lost = min(self.lose_next[cpu], m)
        if lost:
            self.lose_next[cpu] -= lost
            self.buf_overruns = (self.buf_overruns + lost) & U32
        size = buf.chan.subbuf_size
        cum = np.zeros(m + 1, np.int64)
        np.cumsum(length, out=cum[1:])
        i = lost
        while i < m:
            room = size - buf.offset  # negative while a switch is refused
            j = int(np.searchsorted(cum, cum[i] + room, "right")) - 1
            if j > i:
                out[i:j] = buf.data + buf.offset + cum[i:j] - cum[i]
                buf.offset += int(cum[j] - cum[i])
                i = j
                continue
            if not buf.switch_subbuf(int(length[i])):  # refused: counted once per record
                if buf.full():
                    self.buf_overruns = (self.buf_overruns + m - i - 1) & U32
                    break
                i += 1
        return out

    # --- kmemtrace_probe_alloc / kmemtrace_probe_free -------------------------

    def _next_seq(self) -> int:
        """``atomic_add_return(1, &kmemtrace_seq_num)`` as an ``s32``."""
        self.seq_num = (self.seq_num + 1) & U32
        return self.seq_num - (1 << 32) if self.seq_num & 0x80000000 else self.seq_num

    def log_alloc(self, cpu, ts, type_id, call_site, ptr, req, alloc, gfp, node) -> None:
        if self.abi.name == "2008-08":
            rest = (call_site, ptr, req, alloc, gfp & U32, node)
        else:
            rest = (node, call_site, ptr, req, alloc, gfp, ts)
        self._log(cpu, self.abi.alloc, self.abi.alloc_id, type_id, ptr, rest)

    def log_free(self, cpu, ts, type_id, call_site, ptr) -> None:
        if self.abi.name == "2008-08":
            rest = (call_site, ptr)
        else:  # the 2008-07 probe leaves node, sizes and flags unset
            rest = (-1, call_site, ptr, 0, 0, 0, ts)
        self._log(cpu, self.abi.free, self.abi.free_id, type_id, ptr, rest)

    def _log(self, cpu, layout, event_id, type_id, ptr, rest) -> None:
        """``relay_write`` one record: reserve its room on *cpu*'s buffer
        (or drop it, counted) and pack it there.  In 2008-08 the sequence
        number comes after the reservation, so dropped events use none."""
        if self.abi.name == "2008-07" and not ptr:
            return  # "Don't trace ignored allocations."
        if self.lose_next[cpu]:
            self.lose_next[cpu] -= 1
            self._overrun()
            return
        buf = self.chan.bufs[cpu]
        pos = buf.reserve(layout.size)
        if pos is None:
            return
        if self.abi.name == "2008-08":
            rest = (self._next_seq(),) + rest
        layout.pack_into(buf.start, pos, event_id, type_id, layout.size, *rest)
        self.records += 1

    def unread(self, whole_subbufs: bool = False) -> list[int]:
        """Bytes not yet read on each CPU (with *whole_subbufs*: only those in
        finished sub-buffers, which a relay reader polls for)."""
        out = []
        size = self.chan.subbuf_size
        for buf in self.chan.bufs:
            done = (buf.subbufs_produced - buf.subbufs_consumed) * size
            current = min(buf.offset, size)  # the sub-buffer being written
            if done:
                out.append(done - buf.bytes_consumed + (0 if whole_subbufs else current))
            else:
                out.append(0 if whole_subbufs else max(0, current - buf.bytes_consumed))
        return out

    def status(self) -> dict:
        return {"enabled": self.enabled, "abi": self.abi.name, "records": self.records,
                "total_overruns": self.buf_overruns}
