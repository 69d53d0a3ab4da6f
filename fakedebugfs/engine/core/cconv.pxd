# C conversions shared by the engine's compiled batch paths (cimported:
# inline, no module of its own at run time).

from libc.stdint cimport uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy


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
