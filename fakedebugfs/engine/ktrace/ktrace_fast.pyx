"""ktrace's records in compiled code (beside :mod:`.tracer`).

:func:`records` does for the events of one tracepoint of a batch what
``ring_buffer_probe`` does for one event: the ``u16`` event id followed by
the members of ``DEFINE_KTRACE_STRUCT``, packed, each the low bytes of its
argument (C's assignment to a narrower member), as ``KtraceFormat.pack``
and the Python batch path (``fill_records``) make them.  The rows are
``uint32`` words, zero after the record, as the ring buffer's batch writer
(``split_per_cpu``) takes them.
"""

import sys

from cpython.buffer cimport PyBUF_STRIDED_RO, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from fakedebugfs.engine.core.lazynp import np

if sys.byteorder != "little":  # the members are the low bytes of the host's words
    raise ImportError("ktrace_fast: little-endian hosts only")

DEF MAXF = 64  # members of one event (more: the Python path)

cdef uint64_t MASK64 = 0xFFFFFFFFFFFFFFFF


cdef struct Col:
    # one argument: the value of event j at p + j * stride, or *value* for all
    const char *p
    Py_ssize_t stride
    int64_t value


cdef object as_int64(object col):
    """An integer column as int64 (the same bits for uint64, narrower
    integers widened as C widens them), or None for other columns."""
    kind = col.dtype.kind
    if kind not in "iub" or col.ndim != 1:
        return None
    if col.dtype.itemsize == 8 and kind != "b":
        return col if kind == "i" else col.view(np.int64)
    return col.astype(np.int64)


cdef int scalar(object value, Col *c) except -1:
    """A value shared by every event; 0 when it is not an integer."""
    try:
        v = int(value) & MASK64
    except (TypeError, ValueError, OverflowError):
        return 0
    c.p = NULL
    c.stride = 0
    c.value = <int64_t>(<uint64_t>v)
    return 1


def records(unsigned int event_id, sizes, cols, Py_ssize_t m):
    """*m* records of an event: ``(m, words)`` ``uint32`` rows; *sizes*
    are the members' sizes (1, 2, 4 or 8 bytes), *cols* their columns
    (arrays of at least *m* integers, or integers shared by all).  None
    when a column is not integers (the Python path packs those)."""
    cdef int nf = len(sizes), f, off
    cdef Col col[MAXF]
    cdef int fsize[MAXF]
    cdef Py_buffer views[MAXF]
    cdef int nviews = 0
    cdef Py_ssize_t j
    cdef int64_t v
    cdef uint8_t *row
    cdef uint8_t head[2]
    if nf > MAXF or len(cols) < nf:
        return None
    width = 2
    for f in range(nf):
        fsize[f] = sizes[f]
        if fsize[f] not in (1, 2, 4, 8):
            return None
        width += fsize[f]
    words = (width + 3) >> 2
    out = np.zeros((m, words), np.uint32)
    if m == 0:
        return out
    cdef uint32_t[:, ::1] dst = out
    cdef Py_ssize_t pitch = words * 4
    try:
        for f in range(nf):
            c = cols[f]
            if isinstance(c, np.ndarray) and c.ndim:
                arr = as_int64(c)
                if arr is None or arr.shape[0] < m:
                    return None
                PyObject_GetBuffer(arr, &views[nviews], PyBUF_STRIDED_RO)
                col[f].p = <const char *>views[nviews].buf
                col[f].stride = views[nviews].strides[0]
                col[f].value = (<const int64_t *>col[f].p)[0]  # all of a broadcast column
                nviews += 1
            elif not scalar(c.item() if isinstance(c, np.ndarray) else c, &col[f]):
                return None
        head[0] = event_id & 0xFF
        head[1] = (event_id >> 8) & 0xFF
        row = <uint8_t *>&dst[0, 0]
        with nogil:
            for j in range(m):
                memcpy(row, head, 2)
                off = 2
                for f in range(nf):
                    if col[f].stride:
                        v = (<const int64_t *>(col[f].p + j * col[f].stride))[0]
                    else:
                        v = col[f].value
                    memcpy(row + off, &v, fsize[f])
                    off += fsize[f]
                row += pitch
        return out
    finally:
        for f in range(nviews):
            PyBuffer_Release(&views[f])
