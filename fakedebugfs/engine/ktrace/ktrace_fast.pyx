"""ktrace's records in compiled code (beside :mod:`.tracer`).

:func:`pack_batch` does for every event of a batch that ktrace records
what ``ring_buffer_probe`` does for one: the ``u16`` event id followed by
the members of ``DEFINE_KTRACE_STRUCT``, packed, each the low bytes of its
argument (C's assignment to a narrower member), as ``KtraceFormat.pack``
and the Python batch path (``fill_records``) make them.  The records come
out in emission order as one group of ``uint32`` rows, zero after each
record, with a length per row, as the ring buffer's batch writer
(``split_per_cpu``) takes them: one pass over the batch, one group.
"""

import sys

from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Malloc
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.string cimport memset

from fakedebugfs.engine.core.cconv cimport Col, col_at, col_open, cols_cover, put_low
from fakedebugfs.engine.core.lazynp import np

if sys.byteorder != "little":  # the members are the low bytes of the host's words
    raise ImportError("ktrace_fast: little-endian hosts only")

cdef enum:
    MAXF = 64  # members of one event (more: the Python path)

cdef struct Kind:
    # a tracepoint of the batch that ktrace records (DEFINE_KTRACE_STRUCT)
    int nf  # members; -1: not recorded by ktrace
    int length  # the record's bytes: u16 id + the members
    unsigned int event_id
    int fsize[MAXF]
    Col col[MAXF]


cdef int set_kind(Kind *kd, spec, Py_buffer *views, int *nviews) except -1:
    """*kd* from ``(event_id, sizes, columns)``: 0 when a size is not 1, 2,
    4 or 8 bytes or a column is not integers."""
    event_id, sizes, cols = spec
    cdef int f, got, nf = len(sizes)
    if nf > MAXF or len(cols) < nf:
        return 0
    kd.nf = nf
    kd.event_id = event_id & 0xFFFF
    kd.length = 2
    for f in range(nf):
        kd.fsize[f] = sizes[f]
        if kd.fsize[f] not in (1, 2, 4, 8):
            return 0
        kd.length += kd.fsize[f]
        got = col_open(cols[f], &kd.col[f], &views[nviews[0]])
        if not got:
            return 0
        nviews[0] += got == 2
    return 1


cdef void pack_row(uint8_t *row, Kind *kd, Py_ssize_t j) noexcept nogil:
    """``ring_buffer_probe``'s record of the *j*-th event of a kind: the
    u16 id, then each member the low bytes of its argument."""
    cdef int f, off = 2
    row[0] = kd.event_id & 0xFF
    row[1] = (kd.event_id >> 8) & 0xFF
    for f in range(kd.nf):
        put_low(row + off, col_at(&kd.col[f], j), kd.fsize[f])
        off += kd.fsize[f]


cdef object grown(list scratch, int at, Py_ssize_t need, dtype):
    """``scratch[at]``, a 1-D array of at least *need* items (reused)."""
    buf = scratch[at]
    if buf is None or buf.shape[0] < need:
        buf = scratch[at] = np.empty(max(need, 2 * (0 if buf is None else buf.shape[0]), 64),
                                     dtype)
    return buf


def pack_batch(kind_in, specs, list scratch):
    """The records ktrace writes for a batch, in emission order, as one
    ``payload_group`` with a length per row: ``(positions, words,
    lengths)``.  *kind_in*: the batch's int64 kinds; *specs*: for each kind
    None or ``(event_id, member sizes, columns)`` (sizes 1, 2, 4 or 8
    bytes; columns arrays of integers, one per event of the kind, or
    integers shared by all).  None when a column is not integers (the
    Python path packs those).  The arrays are views of *scratch* (three
    arrays kept by the caller and reused): they hold until the next call."""
    cdef const int64_t[::1] kd
    try:
        kd = kind_in
    except (ValueError, TypeError):
        return None
    cdef Py_ssize_t n = kd.shape[0], i, r = 0, pitch
    cdef int nk = len(specs), k, f, nviews = 0, maxlen = 2
    cdef int64_t kk
    cdef Kind *kinds = <Kind *>PyMem_Malloc(max(nk, 1) * sizeof(Kind))
    cdef Py_ssize_t *rank = <Py_ssize_t *>PyMem_Calloc(max(nk, 1), sizeof(Py_ssize_t))
    cdef Py_buffer *views = <Py_buffer *>PyMem_Malloc(max(nk * MAXF, 1) * sizeof(Py_buffer))
    cdef Py_buffer out[3]
    cdef int nout = 0
    cdef int64_t *pos
    cdef int64_t *lengths
    cdef uint8_t *rows
    try:
        if not (kinds and rank and views):
            raise MemoryError()
        for k in range(nk):
            kinds[k].nf = -1
            if specs[k] is not None:
                if not set_kind(&kinds[k], specs[k], views, &nviews):
                    return None
                maxlen = max(maxlen, kinds[k].length)
        for i in range(n):  # how many events, and each column long enough
            kk = kd[i]
            if 0 <= kk < nk and kinds[kk].nf >= 0:
                rank[kk] += 1
                r += 1
        for k in range(nk):
            if not cols_cover(kinds[k].col, max(kinds[k].nf, 0), rank[k]):
                return None
            rank[k] = 0
        words = (maxlen + 3) >> 2
        pitch = words * 4
        idx = grown(scratch, 0, r, np.int64)[:r]
        lens = grown(scratch, 1, r, np.int64)[:r]
        rows_arr = grown(scratch, 2, r * words, np.uint32)[:r * words].reshape(r, words)
        for a in (idx, lens, rows_arr):
            PyObject_GetBuffer(a, &out[nout], PyBUF_WRITABLE)
            nout += 1
        pos, lengths, rows = <int64_t *>out[0].buf, <int64_t *>out[1].buf, <uint8_t *>out[2].buf
        with nogil:
            memset(rows, 0, r * pitch)
            r = 0
            for i in range(n):
                kk = kd[i]
                if kk < 0 or kk >= nk or kinds[kk].nf < 0:
                    continue
                pack_row(rows + r * pitch, &kinds[kk], rank[kk])
                rank[kk] += 1
                pos[r] = i
                lengths[r] = kinds[kk].length
                r += 1
        return idx, rows_arr, lens
    finally:
        for k in range(nout):
            PyBuffer_Release(&out[k])
        for k in range(nviews):
            PyBuffer_Release(&views[k])
        PyMem_Free(kinds)
        PyMem_Free(rank)
        PyMem_Free(views)
