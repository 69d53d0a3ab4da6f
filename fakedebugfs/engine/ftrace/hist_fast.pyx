"""Compiled grouping of a batch's events by hist key (beside
``hist_batch.py``): one pass over the records instead of a dozen numpy
calls, for the small batches the server fires between FUSE requests.

:func:`group` reads each event's key and values from its record's bytes
(``hist_batch``'s column programs: a field of 1, 2, 4 or 8 bytes, signed
ones sign-extended to 64 bits, or the event's CPU; then ``.log2`` or
``.buckets=N``), groups the events by key in a hash table of its own (not
the kernel's: only the order of first appearance matters, which the
caller keeps), and returns, per distinct key in the order of its first
event, the key's bytes (its u64 words little-endian: the map's key), that
first event's position, the key's event count and each value's u64 sum
(wrapping, as ``hist_trigger_elt_update`` adds).
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset

cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil

cdef enum:
    MAX_COLS = 6  # 3 keys + 3 values (TRACING_MAP_KEYS_MAX, TRACING_MAP_VALS_MAX)

# a column program, as hist_batch makes it: src (0: read the record, 1: the CPU),
# offset, size, signed, op (0: none, 1: log2, 2: bucket), bucket size
cdef struct Col:
    int src
    Py_ssize_t off
    int size
    int is_signed
    int op
    uint64_t param


cdef inline uint64_t _read(const uint8_t *p, int size, int is_signed) nogil:
    cdef uint8_t u8
    cdef uint16_t u16
    cdef uint32_t u32
    cdef uint64_t u64
    if size == 8:
        memcpy(&u64, p, 8)
        return u64
    if size == 4:
        memcpy(&u32, p, 4)
        return <uint64_t><int64_t>(<int32_t>u32) if is_signed else u32
    if size == 2:
        memcpy(&u16, p, 2)
        return <uint64_t><int64_t>(<int16_t>u16) if is_signed else u16
    u8 = p[0]
    return <uint64_t><int64_t>(<int8_t>u8) if is_signed else u8


cdef inline uint64_t _value(Col *c, const uint8_t *rec, int64_t cpu) nogil:
    cdef uint64_t v = <uint64_t>cpu if c.src == 1 else _read(rec + c.off, c.size, c.is_signed)
    if c.op == 1:  # order_base_2
        return 0 if v <= 1 else <uint64_t>(64 - __builtin_clzll(v - 1))
    if c.op == 2:
        return v // c.param * c.param
    return v


cdef inline uint64_t _mix(const uint64_t *k, int n) nogil:
    cdef uint64_t h = 0x9E3779B97F4A7C15ULL
    cdef int i
    for i in range(n):
        h ^= k[i]
        h *= 0xFF51AFD7ED558CCDULL
        h ^= h >> 33
    return h


def group(const uint8_t[:, ::1] rows, const int64_t[:] cpu, list programs, int nkeys):
    """``[(key bytes, first position, count, [sums]), ...]`` of the events
    of *rows* (their records, in order), by key, in first-seen order;
    *programs*: ``(src, offset, size, signed, op, param)`` of each key,
    then of each summed value."""
    cdef Py_ssize_t m = rows.shape[0], width = rows.shape[1], i, slot, u, nu = 0
    cdef int ncols = len(programs), nvals = ncols - nkeys, j
    cdef Col cols[MAX_COLS]
    cdef uint64_t key[3]
    cdef uint64_t h, mask
    cdef int64_t c = 0
    cdef bint need_cpu = False
    if nkeys < 1 or nkeys > 3 or nvals < 0 or ncols > MAX_COLS:
        raise ValueError("1 to 3 keys, at most 3 values")
    for j in range(ncols):
        p = programs[j]
        cols[j].src, cols[j].off, cols[j].size = p[0], p[1], p[2]
        cols[j].is_signed, cols[j].op, cols[j].param = p[3], p[4], p[5]
        if cols[j].src == 0 and (cols[j].off < 0 or cols[j].off + cols[j].size > width or not (
                cols[j].size == 1 or cols[j].size == 2 or cols[j].size == 4 or cols[j].size == 8)):
            raise ValueError("a field outside the records")
        if cols[j].src == 1:
            if cpu.shape[0] != m:
                raise ValueError("a CPU column of another length")
            need_cpu = True
        if cols[j].op == 2 and cols[j].param == 0:
            raise ValueError("buckets of 0")
    if m == 0:
        return []
    cdef Py_ssize_t cap = 16
    while cap < 2 * m:
        cap <<= 1
    mask = cap - 1
    cdef Py_ssize_t *table = <Py_ssize_t *>malloc(cap * sizeof(Py_ssize_t))
    cdef uint64_t *keys = <uint64_t *>malloc(m * nkeys * sizeof(uint64_t))
    cdef uint64_t *sums = <uint64_t *>malloc((m * nvals + 1) * sizeof(uint64_t))
    cdef Py_ssize_t *first = <Py_ssize_t *>malloc(m * sizeof(Py_ssize_t))
    cdef Py_ssize_t *count = <Py_ssize_t *>malloc(m * sizeof(Py_ssize_t))
    if not table or not keys or not sums or not first or not count:
        free(table); free(keys); free(sums); free(first); free(count)
        raise MemoryError()
    try:
        memset(table, 0xFF, cap * sizeof(Py_ssize_t))  # -1: empty
        with nogil:
            for i in range(m):
                if need_cpu:
                    c = cpu[i]
                for j in range(nkeys):
                    key[j] = _value(&cols[j], &rows[i, 0], c)
                slot = <Py_ssize_t>(_mix(key, nkeys) & mask)
                while True:
                    u = table[slot]
                    if u < 0:
                        u = nu
                        nu += 1
                        table[slot] = u
                        memcpy(&keys[u * nkeys], key, nkeys * sizeof(uint64_t))
                        first[u] = i
                        count[u] = 0
                        for j in range(nvals):
                            sums[u * nvals + j] = 0
                        break
                    if memcmp(&keys[u * nkeys], key, nkeys * sizeof(uint64_t)) == 0:
                        break
                    slot = (slot + 1) & mask
                count[u] += 1
                for j in range(nvals):
                    sums[u * nvals + j] += _value(&cols[nkeys + j], &rows[i, 0], c)
        out = []
        for u in range(nu):
            out.append((PyBytes_FromStringAndSize(<char *>&keys[u * nkeys], 8 * nkeys),
                        first[u], count[u], [sums[u * nvals + j] for j in range(nvals)]))
        return out
    finally:
        free(table); free(keys); free(sums); free(first); free(count)
