"""kmemtrace's batch path in compiled code (beside :mod:`.tracer`).

:func:`write_batch` does for every event of a batch, in emission order,
what ``Kmemtrace._log`` does for one (``kmemtrace_probe_alloc`` /
``kmemtrace_probe_free`` of mm/kmemtrace.c): the 2008-07 layout skips NULL
pointers, a fault's pending loss drops the record (counted in
``total_overruns``), ``relay_reserve`` takes room in the CPU's current
sub-buffer, the 2008-08 layout numbers the record (``atomic_add_return``
once the room is had) and the record is stored there.  A record that does
not fit switches sub-buffers with the relay's own ``switch_subbuf`` (its
padding, ``subbuf_start`` and wake-up, in Python: once a sub-buffer); while
a full buffer refuses the switch every later record of that CPU is refused
and counted the same way, without asking again (nothing frees a
sub-buffer during a batch).  The same bytes and counters as the Python
paths.
"""

import sys

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport int64_t, uint8_t, uint64_t

from fakedebugfs.engine.core.layouts import PAGE_SIZE as _PAGE_SIZE
from fakedebugfs.engine.core.cconv cimport Col, col_at, col_open, cols_cover, put64

if sys.byteorder != "little":  # the records are stored as the host stores words
    raise ImportError("kmemtrace_fast: little-endian hosts only")

cdef enum:
    NCOLS = 6  # call_site, ptr, bytes_req, bytes_alloc, gfp_flags, node

cdef uint64_t U32 = 0xFFFFFFFF
cdef uint64_t PAGE_SIZE = _PAGE_SIZE

# what a kind's columns are (Kmemtrace._make_probe)
cdef enum:
    FREE = 0  # call_site, ptr
    ALLOC = 1  # call_site, ptr, bytes_req, bytes_alloc, gfp_flags, node
    PAGES = 2  # call_site, ptr, order, gfp_flags: PAGE_SIZE << order bytes, node -1


cdef struct Kind:
    # one tracepoint of the batch that kmemtrace records
    int used, mode
    uint64_t head  # event_id | type_id << 8 | event_size << 16
    int64_t size  # the record's bytes
    Col col[NCOLS]


cdef struct Buf:
    # one CPU's struct rchan_buf as the writer sees it
    uint8_t *start
    int64_t data, offset
    int64_t lose  # a fault's records still to drop
    int refused  # a full buffer refused the switch: so it stays this batch


cdef void record(uint8_t *p, Kind *kd, int64_t j, uint64_t seq, int64_t ts, bint v07) noexcept nogil:
    """The record of the *j*-th event of a kind at *p*: ``struct
    kmemtrace_event`` (+ ``kmemtrace_alloc_event`` in 2008-08), the words
    of ``Kmemtrace._words``."""
    cdef uint64_t req = 0, given = 0, gfp = 0, node = 0xFFFFFFFFFFFFFFFF, order
    if kd.mode == ALLOC:
        req, given, gfp, node = col_at(&kd.col[2], j), col_at(&kd.col[3], j), col_at(&kd.col[4], j), col_at(&kd.col[5], j)
    elif kd.mode == PAGES:
        order = col_at(&kd.col[2], j)
        req = PAGE_SIZE << order if order < 64 else 0  # numpy's int64 shift
        given = req
        gfp = col_at(&kd.col[3], j)
    if v07:
        put64(p, kd.head | ((node & U32) << 32))
    else:
        put64(p, kd.head | ((seq & U32) << 32))
    put64(p + 8, col_at(&kd.col[0], j))
    put64(p + 16, col_at(&kd.col[1], j))
    if v07:
        put64(p + 24, req)
        put64(p + 32, given)
        put64(p + 40, gfp)
        put64(p + 48, <uint64_t>ts)
    elif kd.mode != FREE:
        put64(p + 24, req)
        put64(p + 32, given)
        put64(p + 40, (gfp & U32) | ((node & U32) << 32))


def write_batch(km, kind_in, cpu_in, ts_in, int nkinds, specs, bint v07) -> bool:
    """Record the events of *specs* (``(k, head, size, mode, columns)`` of
    each tracepoint index *k* < *nkinds* kmemtrace records) of a batch
    whose int64 columns are *kind_in*, *cpu_in*, *ts_in*, into *km*'s relay
    channel.  False, with nothing written, when the Python path must do it
    (a column that is not integers, a record larger than a sub-buffer, an
    event on a CPU without a buffer)."""
    cdef const int64_t[::1] kd
    cdef const int64_t[::1] cp
    cdef const int64_t[::1] tsv
    try:
        kd, cp, tsv = kind_in, cpu_in, ts_in
    except (ValueError, TypeError):
        return False
    cdef Py_ssize_t n = kd.shape[0], i
    cdef int nr = len(km.chan.bufs), nspecs = len(specs), f, got, c
    cdef int64_t k, j, length, pos
    cdef int64_t subbuf_size = km.chan.subbuf_size
    cdef uint64_t seq = km.seq_num, over = 0, accepted = 0
    cdef Kind *kinds = <Kind *>PyMem_Calloc(max(nkinds, 1), sizeof(Kind))
    cdef int64_t *rank = <int64_t *>PyMem_Calloc(max(nkinds, 1), sizeof(int64_t))
    cdef Buf *bufs = <Buf *>PyMem_Calloc(max(nr, 1), sizeof(Buf))
    cdef Py_buffer *views = <Py_buffer *>PyMem_Calloc(max(nspecs * NCOLS + nr, 1), sizeof(Py_buffer))
    cdef int nviews = 0
    cdef Kind *kp
    cdef Buf *b
    try:
        if not (kinds and rank and bufs and views):
            raise MemoryError()
        if cp.shape[0] != n or tsv.shape[0] != n:
            return False
        for k_, head, size, mode, cols in specs:
            if not 0 <= k_ < nkinds or size > subbuf_size or len(cols) > NCOLS:
                return False
            kp = &kinds[<int>k_]
            kp.used, kp.mode, kp.head, kp.size = 1, mode, head, size
            for f in range(len(cols)):
                got = col_open(cols[f], &kp.col[f], &views[nviews])
                if not got:
                    return False
                nviews += got == 2
        for i in range(n):  # every event recorded is on a CPU with a buffer
            k = kd[i]
            if 0 <= k < nkinds and kinds[k].used:
                if not 0 <= cp[i] < nr:
                    return False
                rank[k] += 1
        for k in range(nkinds):  # and each of its kind's columns as long as its events
            if not cols_cover(kinds[k].col, NCOLS, rank[k]):
                return False
            rank[k] = 0
        bufs_py = km.chan.bufs
        lose_next = km.lose_next
        for c in range(nr):
            buf = bufs_py[c]
            PyObject_GetBuffer(buf.start, &views[nviews], PyBUF_WRITABLE)
            bufs[c].start = <uint8_t *>views[nviews].buf
            nviews += 1
            bufs[c].data, bufs[c].offset, bufs[c].lose = buf.data, buf.offset, lose_next[c]
        for i in range(n):
            k = kd[i]
            if k < 0 or k >= nkinds or not kinds[k].used:
                continue
            kp = &kinds[k]
            j = rank[k]
            rank[k] += 1
            if v07 and col_at(&kp.col[1], j) == 0:
                continue  # "Don't trace ignored allocations."
            c = <int>cp[i]
            b = &bufs[c]
            if b.lose:  # a fault: dropped as a full channel drops it
                b.lose -= 1
                over += 1
                continue
            length = kp.size
            if b.offset + length > subbuf_size:  # relay_reserve: switch sub-buffers
                if b.refused:
                    over += 1  # kmemtrace_subbuf_start refuses again
                    continue
                buf = bufs_py[c]
                km.buf_overruns = (km.buf_overruns + over) & U32
                over = 0
                buf.offset = b.offset
                got = buf.switch_subbuf(length)  # a refusal counted in buf_overruns
                b.data, b.offset = buf.data, buf.offset
                if not got:
                    b.refused = b.offset == subbuf_size + 1
                    continue
            pos = b.data + b.offset
            b.offset += length
            if not v07:
                seq = (seq + 1) & U32
            record(b.start + pos, kp, j, seq, tsv[i], v07)
            accepted += 1
        for c in range(nr):
            buf = bufs_py[c]
            buf.offset = bufs[c].offset
            lose_next[c] = bufs[c].lose
        km.buf_overruns = (km.buf_overruns + over) & U32
        if not v07:
            km.seq_num = seq
        km.records += accepted
        return True
    finally:
        for f in range(nviews):
            PyBuffer_Release(&views[f])
        PyMem_Free(kinds)
        PyMem_Free(rank)
        PyMem_Free(bufs)
        PyMem_Free(views)
