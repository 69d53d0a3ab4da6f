# C conversions shared by the engine's compiled batch paths (cimported:
# inline, no module of its own at run time).

from cpython.buffer cimport PyBUF_STRIDED_RO, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy


cdef inline void put32(unsigned char *p, uint32_t v) noexcept nogil:
    """A native 32-bit word at *p* (the pages and records are the host's)."""
    memcpy(p, &v, 4)


cdef inline void put64(unsigned char *p, uint64_t v) noexcept nogil:
    """A native 64-bit word at *p*."""
    memcpy(p, &v, 8)


cdef inline void put_low(void *dst, uint64_t v, int size) noexcept nogil:
    """C assignment of *v* to a member of *size* bytes (1, 2, 4 or 8):
    its low bytes, little-endian as the pages are."""
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
        (<unsigned char *>dst)[0] = <unsigned char>v


cdef inline object as_int64(object col):
    """An integer column (1-D numpy array) whose buffer holds 8-byte
    integers: int64 and uint64 as they are (the same bits), narrower ones
    widened as C widens them; None for other columns."""
    dt = col.dtype
    if dt.kind not in "iub" or col.ndim != 1:
        return None
    if dt.itemsize == 8 and dt.kind != "b" and dt.isnative:
        return col
    return col.astype("=i8")


cdef struct Col:
    # one argument of a batch's events of one kind: the value of the j-th at
    # p + j * stride, or *value* for every one (stride 0, a shared value)
    const char *p
    Py_ssize_t stride
    int64_t value
    Py_ssize_t count  # the column's length (0 for a shared value)


cdef inline uint64_t col_at(const Col *c, Py_ssize_t j) noexcept nogil:
    """The j-th event's value (its bits, as C reads the int64 member)."""
    if c.stride == 0:
        return <uint64_t>c.value
    return <uint64_t>(<const int64_t *>(c.p + j * c.stride))[0]


cdef inline bint cols_cover(const Col *cols, int n, Py_ssize_t events) noexcept nogil:
    """Each of the *n* columns holds a value for each of *events* events
    (a shared value always does): a shorter one is never read past its end."""
    cdef int f
    for f in range(n):
        if cols[f].stride and cols[f].count < events:
            return False
    return True


cdef inline int col_open(object arg, Col *col, Py_buffer *view) except -1:
    """*col* from one argument of a batch: a 1-D integer column (2: *view*
    now holds it, release it with ``PyBuffer_Release``), a value shared by
    every event (1: an integer, its low 64 bits) or 0 when it is not
    integers (the Python path takes those)."""
    if getattr(arg, "ndim", 0) and hasattr(arg, "dtype"):  # a numpy column
        arr = as_int64(arg)
        if arr is None:
            return 0
        PyObject_GetBuffer(arr, view, PyBUF_STRIDED_RO)
        col.p = <const char *>view.buf
        col.stride = view.strides[0]
        col.count = arr.shape[0]
        col.value = (<const int64_t *>col.p)[0] if col.count else 0  # a broadcast column
        return 2
    try:
        v = int(arg) & 0xFFFFFFFFFFFFFFFF
    except (TypeError, ValueError, OverflowError):
        return 0
    col.p = NULL
    col.stride = 0
    col.count = 0
    col.value = <int64_t>(<uint64_t>v)
    return 1
