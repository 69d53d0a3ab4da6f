"""ktrace's records in compiled code (beside :mod:`.tracer`).

:func:`pack` does for the events of each tracepoint of a batch what
``ring_buffer_probe`` does for one event: the ``u16`` event id followed by
the members of ``DEFINE_KTRACE_STRUCT``, packed, each the low bytes of its
argument (C's assignment to a narrower member), as ``KtraceFormat.pack``
and the Python batch path (``fill_records``) make them.  The rows are
``uint32`` words, zero after the record, as the ring buffer's batch writer
(``split_per_cpu``) takes them.
"""

import sys

from cpython.buffer cimport PyBUF_STRIDED_RO, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from fakedebugfs.engine.core.lazynp import np

if sys.byteorder != "little":  # the members are the low bytes of the host's words
    raise ImportError("ktrace_fast: little-endian hosts only")

cdef enum:
    MAXF = 64  # members of one event (more: the Python path)

cdef uint64_t MASK64 = 0xFFFFFFFFFFFFFFFF


cdef struct Col:
    # one argument: the value of event j at p + j * stride, or *value* for all
    const char *p
    Py_ssize_t stride
    int64_t value


cdef object I8 = None  # numpy's int64 and uint64, once numpy is in (lazynp:
cdef object U8 = None  # importing this module must not import it)


cdef object as_int64(object col):
    """An integer column whose buffer holds 8-byte integers (int64 and
    uint64 as they are: the same bits), narrower integers widened as C
    widens them; None for other columns."""
    global I8, U8
    if I8 is None:
        I8, U8 = np.dtype(np.int64), np.dtype(np.uint64)
    dt = col.dtype
    if dt is I8 or dt is U8:
        return col
    if dt.kind not in "iub" or col.ndim != 1:
        return None
    if dt.itemsize == 8 and dt.kind != "b" and dt.isnative:
        return col
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


cdef void fill(uint8_t *out, Py_ssize_t pitch, Py_ssize_t m, Col *c, int nbytes) noexcept nogil:
    """One member of *m* records: the low *nbytes* of each value."""
    cdef Py_ssize_t j
    cdef int64_t v = c.value
    cdef uint32_t v4
    cdef uint16_t v2
    for j in range(m):
        if c.stride:
            v = (<const int64_t *>(c.p + j * c.stride))[0]
        if nbytes == 8:
            memcpy(out, &v, 8)
        elif nbytes == 4:
            v4 = <uint32_t>v
            memcpy(out, &v4, 4)
        elif nbytes == 2:
            v2 = <uint16_t>v
            memcpy(out, &v2, 2)
        else:
            out[0] = <uint8_t>v
        out += pitch


cdef int pack_kind(uint8_t *rows, Py_ssize_t pitch, Py_ssize_t m, unsigned int event_id,
                   sizes, cols) except -1:
    """*m* records of one event into *rows* (zeroed, *pitch* bytes apart):
    the u16 event id, then each member the low bytes of its argument.
    0 when a column is not integers (nothing written)."""
    cdef int nf = len(sizes), f, off
    cdef Col col[MAXF]
    cdef int fsize[MAXF]
    cdef Py_buffer views[MAXF]
    cdef int nviews = 0
    cdef Col head
    if nf > MAXF or len(cols) < nf:
        return 0
    for f in range(nf):
        fsize[f] = sizes[f]
    try:
        for f in range(nf):
            c = cols[f]
            if isinstance(c, np.ndarray) and c.ndim:
                arr = as_int64(c)
                if arr is None or arr.shape[0] < m:
                    return 0
                PyObject_GetBuffer(arr, &views[nviews], PyBUF_STRIDED_RO)
                nviews += 1
                col[f].p = <const char *>views[nviews - 1].buf
                col[f].stride = views[nviews - 1].strides[0]
                col[f].value = (<const int64_t *>col[f].p)[0] if m else 0  # a broadcast column
            elif not scalar(c.item() if isinstance(c, np.ndarray) else c, &col[f]):
                return 0
        head.stride = 0
        head.value = event_id & 0xFFFF
        with nogil:
            memset(rows, 0, m * pitch)
            fill(rows, pitch, m, &head, 2)  # the u16 event id
            off = 2
            for f in range(nf):
                fill(rows + off, pitch, m, &col[f], fsize[f])
                off += fsize[f]
        return 1
    finally:
        for f in range(nviews):
            PyBuffer_Release(&views[f])


def pack(specs, scratch):
    """The records of each event of a batch: for each ``(event_id, sizes,
    columns, m)`` of *specs* (sizes: the members' sizes, 1, 2, 4 or 8
    bytes; columns: arrays of at least *m* integers, or integers shared by
    all) ``(m, words)`` ``uint32`` rows, or None when a column is not
    integers (the Python path packs those).  The rows are views of
    ``scratch[0]``, an array kept by the caller and reused (grown when
    needed): they hold until the next call."""
    cdef Py_ssize_t total = 0, at = 0, m, need
    cdef Py_buffer view
    layout = []
    for event_id, sizes, cols, m in specs:
        width = 2
        for size in sizes:
            if size not in (1, 2, 4, 8):
                width = -1
                break
            width += size
        words = (width + 3) >> 2 if width > 0 else 0
        layout.append(words)
        total += m * words
    buf = scratch[0]
    if buf is None or buf.shape[0] < total:
        buf = scratch[0] = np.empty(max(total, 2 * (0 if buf is None else buf.shape[0])), np.uint32)
    out = []
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        for (event_id, sizes, cols, m), words in zip(specs, layout):
            need = m * words
            if not words or not pack_kind(<uint8_t *>view.buf + at * 4, words * 4, m, event_id,
                                          sizes, cols):
                out.append(None)
                continue
            out.append(buf[at:at + need].reshape(m, words))
            at += need
        return out
    finally:
        PyBuffer_Release(&view)
