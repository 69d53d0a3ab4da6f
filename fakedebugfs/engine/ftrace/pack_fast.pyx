"""Compiled payload packer of tracefs events (beside ``events.py``).

:func:`pack` fills ``struct trace_event_raw_<name>`` records for a batch
(what ``EventType.pack_columns`` does with numpy structured arrays): each
integer field gets the low bytes of its value, as C assignment truncates
(and numpy's casts do), then the ``__data_loc`` words and strings.
Anything it does not know (a float column, a big-endian one, an odd field)
makes it answer None and the numpy path packs instead.
"""

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_STRIDES, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from fakedebugfs.engine.core.cconv cimport put_low

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
    if not hasattr(col, "dtype"):  # numpy arrays and scalars only (not bytes, str)
        return 0
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


cdef void fill(char *base, Py_ssize_t m, Py_ssize_t rowb, Py_ssize_t off, int size,
               Col *c) noexcept nogil:
    """One field of every record from its column, a column at a time."""
    cdef Py_ssize_t i
    cdef const char *p = c.data
    cdef char *dst = base + off
    if p == NULL:
        for i in range(m):
            put_low(dst + i * rowb, c.value, size)
    elif c.itemsize == 8 and size == 8:
        for i in range(m):
            memcpy(dst + i * rowb, p + i * c.stride, 8)
    else:
        for i in range(m):
            put_low(dst + i * rowb, get(c, i), size)


cdef enum:
    MAX_FIELDS = 64  # records with more fields are packed by numpy
    MAX_LOCS = 16  # __data_loc fields of one event


cdef class DynTable:
    """The ``__data_loc`` strings of an event for a set of string tables
    (made once per set, ``EventType._fast_dyn``): per combination of the
    tables' entries its string words, its ``len << 16 | offset`` word for
    each field and its payload size in words; the strings start at byte
    *cut* of the record (inside the fixed part's tail padding when
    *cut* < *size*)."""

    cdef Py_ssize_t cut, fsize, nloc
    cdef const uint32_t[:, ::1] words
    cdef const int64_t[::1] nwords
    cdef list locs
    cdef Py_ssize_t loc_off[MAX_LOCS]
    cdef const int64_t *loc_ptr[MAX_LOCS]

    def __init__(self, Py_ssize_t cut, Py_ssize_t size, words, locs, nwords):
        cdef const int64_t[::1] loc
        cdef Py_ssize_t f
        self.cut, self.fsize = cut, size
        self.words = words
        self.nwords = nwords
        if cut < 0 or cut > size or self.nwords.shape[0] != self.words.shape[0] \
                or len(locs) > MAX_LOCS:
            raise ValueError("string tables that do not fit their record")
        self.locs = []
        self.nloc = len(locs)
        for f, (off, arr) in enumerate(locs):
            loc = arr
            if loc.shape[0] != self.words.shape[0] or off < 0:
                raise ValueError("a location table that does not fit")
            self.locs.append(loc)  # kept alive with the pointer
            self.loc_off[f] = off
            self.loc_ptr[f] = &loc[0] if loc.shape[0] else NULL


cdef int fill_dyn(DynTable d, char *base, Py_ssize_t m, Py_ssize_t rowb,
                  const int64_t[::1] which, int64_t[::1] lens) except -1:
    """The location words, the zeroed tail padding and the strings of
    every record, and each payload's length."""
    cdef Py_ssize_t i, f, tw = d.words.shape[1], ncombo = d.words.shape[0]
    cdef int64_t w
    cdef char *row
    if which.shape[0] != m or lens.shape[0] != m or d.cut + tw * 4 > rowb:
        raise ValueError("string tables do not fit the records")
    for f in range(d.nloc):
        if d.loc_off[f] + 4 > rowb:
            raise ValueError("a location word past the record")
    for i in range(m):
        if which[i] < 0 or which[i] >= ncombo:
            raise IndexError("string combination out of its table")
    for i in range(m):
        w = which[i]
        row = base + i * rowb
        for f in range(d.nloc):  # __data_loc: len << 16 | offset
            put_low(row + d.loc_off[f], <uint64_t>d.loc_ptr[f][w], 4)
        if d.cut < d.fsize:
            memset(row + d.cut, 0, d.fsize - d.cut)
        if tw:
            memcpy(row + d.cut, &d.words[w, 0], tw * 4)
        lens[i] = 4 * d.nwords[w]
    return 0


cdef class Plan:
    """How an event's records are packed (``EventType._plan``, made once):
    its type id, record size and integer fields ``(name, offset, size)``;
    :meth:`pack` makes the records of a batch's events of the event."""

    cdef int type_id
    cdef Py_ssize_t size, nf
    cdef tuple names
    cdef Py_ssize_t offs[MAX_FIELDS]
    cdef int sizes[MAX_FIELDS]
    cdef object zeros, empty, u32, i64, arange

    def __init__(self, int type_id, Py_ssize_t size, fields, np, arange):
        cdef Py_ssize_t f
        if len(fields) > MAX_FIELDS:
            raise ValueError("too many fields")
        self.type_id, self.size, self.nf = type_id, size, len(fields)
        self.names = tuple(name for name, _, _ in fields)
        for f, (_, off, fsize) in enumerate(fields):
            self.offs[f] = off
            self.sizes[f] = fsize
        self.zeros, self.empty, self.u32, self.i64 = np.zeros, np.empty, np.uint32, np.int64
        self.arange = arange

    def pack(self, dict vals, pid, pos, Py_ssize_t m, int flags=0, int preempt=0,
             DynTable dyn=None, which=None, Py_ssize_t width=0):
        """The payload groups of ``EventType.pack_columns`` (one, a length
        per row with *dyn*: records *width* bytes wide), from the field
        values *vals*; None when a column is not one it packs."""
        cdef Py_ssize_t f
        columns = [vals[self.names[f]] for f in range(self.nf)]
        words = self.zeros((m, (width or self.size) >> 2), self.u32)
        lens = None if dyn is None else self.empty(m, self.i64)
        if not pack_records(words, self.type_id, flags, preempt, pid, pos, self.nf, self.offs,
                            self.sizes, columns, dyn, which, lens):
            return None
        return [(self.arange(m), words, self.size if lens is None else lens, None)]


cdef object pack_records(uint32_t[:, ::1] out, int type_id, int flags, int preempt, pid, pos,
                         Py_ssize_t nf, Py_ssize_t *offs, int *sizes, list columns,
                         DynTable dyn, which, lens):
    """Fill the zeroed records *out* (one row of words per event): the
    ``struct trace_entry`` (type, flags, preempt count, ``pid[pos[i]]``
    or ``pid[i]``), then each field at ``offs[f]`` of ``sizes[f]`` bytes
    from ``columns[f]`` (integers, truncated to the size), then with *dyn*
    the ``__data_loc`` strings of combination ``which[i]`` for event i, its
    payload length in ``lens[i]``.  True, or False (nothing meaningful
    written) when a column is of a kind it does not pack; *nf* is at most
    MAX_FIELDS (``Plan`` refuses more)."""
    cdef Py_ssize_t m = out.shape[0], rowb = out.shape[1] * 4, i, f
    cdef char *base = <char *>&out[0, 0] if m else NULL
    cdef char *row
    cdef const int64_t[:] posv
    cdef Col pidc
    cdef Py_buffer pidview
    cdef Col cols[MAX_FIELDS]
    cdef Py_buffer views[MAX_FIELDS]
    cdef int held[MAX_FIELDS]
    cdef int got, pid_held = 0, nheld = 0
    if pos is not None:
        try:
            posv = pos
        except (ValueError, TypeError):  # not int64 positions
            return False
        if posv.shape[0] != m:
            raise ValueError("pos and out differ in length")
    try:
        got = open_col(pid, m if pos is None else -1, &pidc, &pidview)
        pid_held = got == 1
        if got == 0:
            return False
        if pos is not None and pidc.data != NULL and pidview.ndim == 1:
            for i in range(m):
                if posv[i] < 0 or posv[i] >= pidview.shape[0]:
                    raise IndexError("event position out of the batch")
        for f in range(nf):
            if sizes[f] not in (1, 2, 4, 8) or offs[f] < 0 or offs[f] + sizes[f] > rowb:
                return False
            got = open_col(columns[f], m, &cols[f], &views[f])
            held[f] = got == 1
            nheld = f + 1
            if got == 0:
                return False
        for i in range(m):  # struct trace_entry, then the fields in order
            row = base + i * rowb
            put_low(row, <uint64_t>type_id, 2)
            put_low(row + 2, <uint64_t>flags, 1)
            put_low(row + 3, <uint64_t>preempt, 1)
        if pos is None:
            fill(base, m, rowb, 4, 4, &pidc)
        else:
            for i in range(m):
                put_low(base + i * rowb + 4, get(&pidc, posv[i]), 4)
        for f in range(nf):
            fill(base, m, rowb, offs[f], sizes[f], &cols[f])
        if dyn is not None:
            fill_dyn(dyn, base, m, rowb, which, lens)
        return True
    finally:
        if pid_held:
            PyBuffer_Release(&pidview)
        for f in range(nheld):
            if held[f]:
                PyBuffer_Release(&views[f])
