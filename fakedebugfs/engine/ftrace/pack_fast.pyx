"""Compiled payload packer of tracefs events (beside ``events.py``).

:func:`pack` fills ``struct trace_event_raw_<name>`` records for a batch
(what ``EventType.pack_columns`` does with numpy structured arrays): each
integer field gets the low bytes of its value, as C assignment truncates
(and numpy's casts do), then the ``__data_loc`` words and strings.
Anything it does not know (a float column, a big-endian one, an odd field)
makes it answer None and the numpy path packs instead.
"""

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_STRIDES, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

import operator
import sys

if sys.byteorder != "little":  # fields are stored as the host stores integers
    raise ImportError("pack_fast: little-endian hosts only")


cdef struct Col:
    # one column of values: a strided array of integers or one value for all
    const char *data
    Py_ssize_t stride
    int itemsize
    int is_signed
    uint64_t value


cdef int parse_format(const char *fmt, int itemsize, int *is_signed) noexcept:
    """1 when *fmt* (a buffer format) is a native or little-endian integer
    or bool of *itemsize* bytes; sets *is_signed*."""
    cdef char ch
    if fmt == NULL:
        return 0
    while fmt[0] == b'@' or fmt[0] == b'=' or fmt[0] == b'<':
        fmt += 1
    ch = fmt[0]
    if ch == 0 or fmt[1] != 0:
        return 0
    if ch in b"bhilqn":
        is_signed[0] = 1
    elif ch in b"BHILQN?":
        is_signed[0] = 0
    else:
        return 0
    return itemsize in (1, 2, 4, 8)


cdef int open_col(object col, Py_ssize_t m, Col *c, Py_buffer *view) except -1:
    """Fill *c* from *col*: 1 with the buffer held in *view*, 2 for a
    Python integer, 0 when not supported.  An array of *m* values (any
    length when *m* < 0), or of one, or 0-d (a numpy scalar), is broadcast
    as numpy assignment broadcasts it."""
    cdef object v
    c.data = NULL
    c.stride = 0
    c.itemsize = 8
    c.is_signed = 0
    c.value = 0
    if isinstance(col, int):
        v = operator.index(col)
        if v < -(1 << 63) or v >= (1 << 64):
            return 0
        c.value = <uint64_t>(v & 0xFFFFFFFFFFFFFFFF)
        return 2
    try:
        PyObject_GetBuffer(col, view, PyBUF_STRIDES | PyBUF_FORMAT)
    except (TypeError, BufferError, ValueError):
        return 0
    if not parse_format(view.format, <int>view.itemsize, &c.is_signed) or view.ndim > 1 \
            or (view.ndim == 1 and m >= 0 and view.shape[0] != m and view.shape[0] != 1):
        PyBuffer_Release(view)
        return 0
    c.data = <const char *>view.buf
    c.itemsize = <int>view.itemsize
    c.stride = view.strides[0] if view.ndim == 1 and (view.shape[0] == m or m < 0) else 0
    return 1


cdef inline uint64_t get(Col *c, Py_ssize_t i) noexcept nogil:
    """Value *i* of the column, sign-extended to 64 bits."""
    cdef const char *p
    if c.data == NULL:
        return c.value
    p = c.data + i * c.stride
    if c.itemsize == 8:
        return (<const uint64_t *>p)[0]
    if c.itemsize == 4:
        return <uint64_t><int64_t>(<const int32_t *>p)[0] if c.is_signed else (<const uint32_t *>p)[0]
    if c.itemsize == 2:
        return <uint64_t><int64_t>(<const int16_t *>p)[0] if c.is_signed else (<const uint16_t *>p)[0]
    return <uint64_t><int64_t>(<const int8_t *>p)[0] if c.is_signed else (<const uint8_t *>p)[0]


cdef inline void put(char *dst, uint64_t v, int size) noexcept nogil:
    """C assignment to a field of *size* bytes: its low bytes."""
    cdef uint32_t v32
    cdef uint16_t v16
    if size == 8:
        memcpy(dst, &v, 8)
    elif size == 4:
        v32 = <uint32_t>v
        memcpy(dst, &v32, 4)
    elif size == 2:
        v16 = <uint16_t>v
        memcpy(dst, &v16, 2)
    else:
        dst[0] = <char>v


cdef void fill(char *base, Py_ssize_t m, Py_ssize_t rowb, Py_ssize_t off, int size,
               Col *c) noexcept nogil:
    """One field of every record from its column, a column at a time."""
    cdef Py_ssize_t i
    cdef const char *p = c.data
    cdef char *dst = base + off
    if p == NULL:
        for i in range(m):
            put(dst + i * rowb, c.value, size)
    elif c.itemsize == 8 and size == 8:
        for i in range(m):
            memcpy(dst + i * rowb, p + i * c.stride, 8)
    else:
        for i in range(m):
            put(dst + i * rowb, get(c, i), size)


def pack(uint32_t[:, ::1] out, int type_id, int flags, int preempt, pid, pos, fields, dyn=None,
         int64_t[::1] lens=None):
    """Fill the zeroed records *out* (one row of words per event): the
    ``struct trace_entry`` (type, flags, preempt count, ``pid[pos[i]]``
    or ``pid[i]``), then each ``(offset, size, column)`` of *fields*
    (integers, truncated to *size* bytes), then with *dyn* ``(cut, size,
    table, which, locs, nwords)`` the ``__data_loc`` strings: for event i
    combination ``which[i]``, its location words ``locs`` ``(offset,
    per-combination words)``, bytes ``cut .. size`` zeroed, the string
    words ``table[which[i]]`` from ``cut`` on, its payload length
    ``4 * nwords[which[i]]`` in *lens*.  Returns True, or False (nothing
    meaningful written) when a column is of a kind it does not pack."""
    cdef Py_ssize_t m = out.shape[0], rowb = out.shape[1] * 4, i, f, nf = len(fields)
    cdef Py_ssize_t cut, fsize, tw, ncombo, nd
    cdef char *base = <char *>&out[0, 0] if m else NULL
    cdef char *row
    cdef const int64_t[:] posv
    cdef Col pidc
    cdef Py_buffer pidview
    cdef Col *cols = NULL
    cdef Py_buffer *views = NULL
    cdef int *sizes = NULL
    cdef Py_ssize_t *offs = NULL
    cdef int *held = NULL
    cdef int got, pid_held = 0
    cdef const uint32_t[:, ::1] table
    cdef const int64_t[::1] which
    cdef const int64_t[::1] nwords
    cdef const int64_t[::1] loc
    if pos is not None:
        try:
            posv = pos
        except (ValueError, TypeError):  # not int64 positions
            return False
        if posv.shape[0] != m:
            raise ValueError("pos and out differ in length")
    cols = <Col *>PyMem_Calloc(max(nf, 1), sizeof(Col))
    views = <Py_buffer *>PyMem_Calloc(max(nf, 1), sizeof(Py_buffer))
    sizes = <int *>PyMem_Calloc(max(nf, 1), sizeof(int))
    offs = <Py_ssize_t *>PyMem_Calloc(max(nf, 1), sizeof(Py_ssize_t))
    held = <int *>PyMem_Calloc(max(nf, 1), sizeof(int))
    try:
        if not (cols and views and sizes and offs and held):
            raise MemoryError()
        got = open_col(pid, m if pos is None else -1, &pidc, &pidview)
        pid_held = got == 1
        if got == 0:
            return False
        if pos is not None and pidc.data != NULL and pidview.ndim == 1:
            for i in range(m):
                if posv[i] < 0 or posv[i] >= pidview.shape[0]:
                    raise IndexError("event position out of the batch")
        for f in range(nf):
            off, size, col = fields[f]
            offs[f] = off
            sizes[f] = size
            if sizes[f] not in (1, 2, 4, 8) or offs[f] < 0 or offs[f] + sizes[f] > rowb:
                return False
            got = open_col(col, m, &cols[f], &views[f])
            held[f] = got == 1
            if got == 0:
                return False
        for i in range(m):  # struct trace_entry, then the fields in order
            row = base + i * rowb
            put(row, <uint64_t>type_id, 2)
            put(row + 2, <uint64_t>flags, 1)
            put(row + 3, <uint64_t>preempt, 1)
        if pos is None:
            fill(base, m, rowb, 4, 4, &pidc)
        else:
            for i in range(m):
                put(base + i * rowb + 4, get(&pidc, posv[i]), 4)
        for f in range(nf):
            fill(base, m, rowb, offs[f], sizes[f], &cols[f])
        if dyn is not None:
            cut, fsize, table, which, locs, nwords = dyn
            tw = table.shape[1]
            ncombo = table.shape[0]
            if which.shape[0] != m or nwords.shape[0] != ncombo or lens is None \
                    or lens.shape[0] != m or cut < 0 or cut > fsize or cut + tw * 4 > rowb:
                raise ValueError("dyn tables do not fit the records")
            for i in range(m):
                if which[i] < 0 or which[i] >= ncombo:
                    raise IndexError("string combination out of its table")
            for off, loc in locs:  # __data_loc: len << 16 | offset
                if loc.shape[0] != ncombo or off < 0 or off + 4 > rowb:
                    raise ValueError("dyn location table does not fit")
                for i in range(m):
                    put(base + i * rowb + <Py_ssize_t>off, <uint64_t>loc[which[i]], 4)
            for i in range(m):
                row = base + i * rowb
                if cut < fsize:  # the strings start in the fixed part's tail padding
                    memset(row + cut, 0, fsize - cut)
                if tw:
                    memcpy(row + cut, &table[which[i], 0], tw * 4)
                lens[i] = 4 * nwords[which[i]]
        return True
    finally:
        if pid_held:
            PyBuffer_Release(&pidview)
        if held:
            for f in range(nf):
                if held[f]:
                    PyBuffer_Release(&views[f])
        PyMem_Free(cols)
        PyMem_Free(views)
        PyMem_Free(sizes)
        PyMem_Free(offs)
        PyMem_Free(held)
