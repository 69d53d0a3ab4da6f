"""Compiled batch writer of the ring buffers (beside ``ringbuffer.py``).

:func:`write_groups` walks a batch's events in emission order and does for
each what :meth:`CpuBuffer.write <.ringbuffer.CpuBuffer.write>` does
(``ring_buffer_write``: ``rb_calculate_event_length``, the time delta or a
``TIME_EXTEND`` before it, ``rb_move_tail`` finishing the tail page with
its padding, ``rb_handle_head_page`` overwriting the oldest page or the
event dropped, the commit), in the CPU's buffer memory, with the payload
words copied from the packed rows of its group.  The same bytes and
counters as the Python paths; buffers with anything odd pending (faults,
a reader pinning the pages for a while: a finite ``pinned_until``) are left
to them (a reader holding them until it puts them back, ktrace's, is not:
an event that finds no free page is lost, as ``_claim_tail`` counts it).
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from fakedebugfs.engine.core.cconv cimport put32, put64

import sys

from . import layouts as _lay

if sys.byteorder != "little":  # the words are stored as the host has them
    raise ImportError("rb_fast: little-endian hosts only")

cdef int64_t HDR = _lay.BUF_PAGE_HDR_SIZE  # struct buffer_data_page: time_stamp, commit
cdef int64_t EVNT_MIN = _lay.RB_EVNT_MIN_SIZE
cdef int64_t MAX_SMALL = _lay.RB_MAX_SMALL_DATA
cdef int64_t TS_SHIFT = _lay.TS_SHIFT
cdef int64_t TS_MASK = _lay.TS_MASK
cdef uint32_t T_PADDING = _lay.RINGBUF_TYPE_PADDING
cdef uint32_t T_EXTEND = _lay.RINGBUF_TYPE_TIME_EXTEND


cdef struct Rb:
    # one struct ring_buffer_per_cpu's writer state (CpuBuffer's attributes)
    unsigned char *mem
    int64_t nr_pages, psize, dsize
    int64_t produced, consumed, tail, tail_entries, last_ts
    int64_t read, read_entries, entries, overrun, dropped, missed
    int overwrite, reader_pages, count_oversized, used
    int pinned  # a ktrace reader holds the pages until it puts them back


cdef inline int64_t event_length(int64_t length) noexcept nogil:
    """rb_calculate_event_length: header word, a length word past
    RB_MAX_SMALL_DATA, 4-byte aligned."""
    if length == 0:
        length = 1
    if length > MAX_SMALL:
        length += 4
    return (length + 4 + 3) & ~3


cdef inline int64_t slot_of(Rb *r, int64_t pos) noexcept nogil:
    return (pos // r.psize) % r.nr_pages


cdef inline int64_t pad(Rb *r, unsigned char *data, int64_t end) noexcept nogil:
    """rb_reset_tail: the padding event after *end*; returns the commit
    (past the padding when there was room for a whole one)."""
    cdef int64_t room = r.dsize - end
    if room >= EVNT_MIN:
        put32(data + end, T_PADDING | (1 << 5))
        put32(data + end + 4, <uint32_t>(room - 4))
        return r.dsize
    if room >= 4:
        put32(data + end, T_PADDING)
    return end


cdef int finish_page(Rb *r, list pages, int c) except -1:
    """rb_move_tail: close the tail page (padding, or with reader pages the
    commit at the data's end as rb_get_reader_page leaves it)."""
    cdef int64_t slot = slot_of(r, r.produced)
    cdef unsigned char *base = r.mem + slot * r.psize
    cdef int64_t commit
    ents, ends, done = pages[c]
    ends[slot] = r.tail if r.tail < r.dsize else 0
    commit = r.tail if r.reader_pages else pad(r, base + HDR, r.tail)
    put64(base + 8, <uint64_t>commit)
    ents[slot] = r.tail_entries
    r.produced += r.psize
    r.tail = 0
    r.tail_entries = 0
    if done is not None:
        done.append(slot)
    return 0


cdef int claim_tail(Rb *r, list pages, int c) except -1:
    """Take the slot at produced: on a full buffer the oldest unread page is
    overwritten (rb_handle_head_page, its unread events overrun) or the
    event dropped.  Returns 0 when the event is lost."""
    cdef int64_t lost
    if r.produced - r.consumed >= r.nr_pages * r.psize:
        if r.pinned and r.overwrite:  # the pages are held: the event is lost (_claim_tail)
            r.overrun += 1
            r.missed += 1
            return 0
        if not r.overwrite:
            r.dropped += 1
            return 0
        lost = <int64_t>pages[c][0][slot_of(r, r.consumed)] - r.read_entries
        r.overrun += lost
        r.missed += lost
        r.consumed += r.psize
        r.read = 0
        r.read_entries = 0
    memset(r.mem + slot_of(r, r.produced) * r.psize, 0, r.psize)
    return 1


cdef int write_one(Rb *r, int64_t ts, const unsigned char *src, int64_t nbytes,
                   int64_t length, list pages, int c) except -1:
    """ring_buffer_write of one event (CpuBuffer.write)."""
    cdef int64_t size = event_length(length)
    cdef int64_t delta = 0
    cdef unsigned char *base
    cdef unsigned char *off
    if size > r.dsize:  # ring_buffer_lock_reserve refuses it
        r.dropped += r.count_oversized
        return 0
    if r.tail:
        delta = ts - r.last_ts
        if delta < 0:
            delta = 0
    if r.tail + size + (8 if delta > TS_MASK else 0) > r.dsize:
        finish_page(r, pages, c)
        delta = 0
    if r.tail == 0 and not claim_tail(r, pages, c):
        return 0
    base = r.mem + slot_of(r, r.produced) * r.psize
    if r.tail == 0:
        put64(base, <uint64_t>ts)
    off = base + HDR + r.tail
    if delta > TS_MASK:  # RINGBUF_TYPE_TIME_EXTEND before the event
        put32(off, T_EXTEND | <uint32_t>((delta & TS_MASK) << 5))
        put32(off + 4, <uint32_t>(delta >> TS_SHIFT))
        off += 8
        r.tail += 8
        delta = 0
    if length > MAX_SMALL:  # type_len 0: the length in the next word
        put32(off, <uint32_t>(delta << 5))
        put32(off + 4, <uint32_t>(size - 4))
        memcpy(off + 8, src, nbytes)
    else:
        put32(off, <uint32_t>(((size - 4) >> 2) | (delta << 5)))
        memcpy(off + 4, src, nbytes)
    r.tail += size
    r.tail_entries += 1
    r.entries += 1
    r.last_ts = ts
    put64(base + 8, <uint64_t>r.tail)
    return 1


cdef double FOREVER = float("inf")  # ktrace's PIN_FOREVER


cdef int plain(buf) except -1:
    """No fault pending and no reader pinning the pages for a while (one
    holding them until it puts them back, ktrace's PIN_FOREVER, holds them
    for the whole batch: claim_tail loses the events as _claim_tail does)."""
    return not (buf.lose_next or buf.drop_pending or
                (buf.pinned_until and buf.pinned_until != FOREVER))


cdef int load(Rb *r, buf) except -1:
    mem = buf.mem
    if type(mem) is not bytearray:
        raise TypeError("ring buffer memory is not a bytearray")
    r.nr_pages = buf.nr_pages
    r.psize = buf.page_size
    r.dsize = buf.data_size
    if PyByteArray_GET_SIZE(mem) != r.nr_pages * r.psize:
        raise ValueError("ring buffer memory of the wrong size")
    r.mem = <unsigned char *>PyByteArray_AS_STRING(mem)
    r.produced = buf.produced
    r.consumed = buf.consumed
    r.tail = buf.tail
    r.tail_entries = buf.tail_entries
    r.last_ts = buf.last_ts
    r.read = buf.read
    r.read_entries = buf.read_entries
    r.entries = buf.entries
    r.overrun = buf.overrun
    r.dropped = buf.dropped
    r.missed = buf.missed
    r.overwrite = bool(buf.overwrite)
    r.pinned = buf.pinned_until != 0.0
    r.reader_pages = bool(buf.reader_pages)
    r.count_oversized = bool(buf.count_oversized)
    r.used = 0
    return 0


cdef int store(Rb *r, buf) except -1:
    buf.produced = r.produced
    buf.consumed = r.consumed
    buf.tail = r.tail
    buf.tail_entries = r.tail_entries
    buf.last_ts = r.last_ts
    buf.read = r.read
    buf.read_entries = r.read_entries
    buf.entries = r.entries
    buf.overrun = r.overrun
    buf.dropped = r.dropped
    buf.missed = r.missed
    return 0


def write_groups(buffers, ts_in, cpu_in, groups, sel=None):
    """Write the events of *groups* (``payload_group`` tuples ``(idx,
    words, length, rowsel)``, positions in the batch; *length* may be an
    array: a length per row of *words*) into ``buffers[cpu]``
    in batch order, each as ``CpuBuffer.write`` would; with *sel* (sorted
    positions) only those.  Returns False, having written nothing, when a
    buffer has a fault pending or a reader pinning it for a while (a finite
    ``pinned_until``), or an array is not of
    the expected type (the Python path then does it all)."""
    cdef Py_ssize_t n, nr = len(buffers), ng = len(groups)
    cdef Py_ssize_t i, j, t, m, rows, g
    cdef int64_t c, k
    cdef const int64_t[:] ts
    cdef const int64_t[:] cpu
    cdef const int64_t[:] idx
    cdef const int64_t[:] rowsel
    cdef const int64_t[:] selv
    cdef const uint32_t[:, ::1] words
    cdef int *gid = NULL
    cdef int64_t *row = NULL
    cdef const unsigned char **src = NULL
    cdef int64_t *width = NULL
    cdef int64_t *glen = NULL
    cdef const int64_t **rowlen = NULL
    cdef const int64_t[::1] lenv
    cdef int64_t *gbytes = NULL
    cdef Rb *rbs = NULL
    cdef Rb *r
    try:
        ts = ts_in
        cpu = cpu_in
        selv = sel if sel is not None else None
    except (ValueError, TypeError):  # other dtypes: the Python path
        return False
    n = ts.shape[0]
    if cpu.shape[0] != n:
        raise ValueError("ts and cpu differ in length")
    for buf in buffers:
        if not plain(buf):
            return False
    keep = []  # the memoryviews whose data the pointers point into
    try:
        gid = <int *>malloc(max(n, 1) * sizeof(int))
        row = <int64_t *>malloc(max(n, 1) * sizeof(int64_t))
        src = <const unsigned char **>malloc(max(ng, 1) * sizeof(void *))
        width = <int64_t *>malloc(max(ng, 1) * sizeof(int64_t))
        glen = <int64_t *>malloc(max(ng, 1) * sizeof(int64_t))
        gbytes = <int64_t *>malloc(max(ng, 1) * sizeof(int64_t))
        rowlen = <const int64_t **>malloc(max(ng, 1) * sizeof(void *))
        rbs = <Rb *>malloc(max(nr, 1) * sizeof(Rb))
        if not (gid and row and src and width and glen and gbytes and rowlen and rbs):
            raise MemoryError()
        for i in range(n):
            gid[i] = -1
        for g in range(ng):
            group = groups[g]
            try:
                idx = group[0]
                words = group[1]
                rowsel = group[3] if group[3] is not None else None
            except (ValueError, TypeError):  # other dtypes or layouts: the Python path
                return False
            keep.append(words)
            rows = words.shape[0]
            m = idx.shape[0]
            if rowsel is not None and rowsel.shape[0] != m:
                raise ValueError("rowsel and idx differ in length")
            width[g] = words.shape[1]
            rowlen[g] = NULL
            if getattr(group[2], "ndim", 0) == 0:  # one length for the group
                glen[g] = int(group[2])
                # the payload words up to the 4-byte end (the rows' zeros there)
                gbytes[g] = min((glen[g] + 3) >> 2, width[g]) * 4
            else:  # a length per row
                try:
                    lenv = group[2]
                except (ValueError, TypeError):
                    return False
                if lenv.shape[0] != rows:
                    raise ValueError("a length per row: lengths and rows differ")
                keep.append(lenv)
                rowlen[g] = &lenv[0] if rows else NULL
            src[g] = <const unsigned char *>&words[0, 0] if rows else NULL
            for j in range(m):
                k = idx[j]
                if k < 0 or k >= n:
                    raise IndexError("event position out of the batch")
                t = j if rowsel is None else rowsel[j]
                if t < 0 or t >= rows:
                    raise IndexError("payload row out of its group")
                if cpu[k] < 0 or cpu[k] >= nr:
                    raise IndexError("event on a CPU without a buffer")
                gid[k] = <int>g
                row[k] = t
        pages = []
        for c in range(nr):
            buf = buffers[c]
            try:
                load(&rbs[c], buf)
            except (TypeError, ValueError, OverflowError):  # not a state it knows: Python
                return False
            cb = buf.on_page_done
            pages.append((buf.page_entries, buf.page_real_end, None if cb is None else []))
        m = n if sel is None else selv.shape[0]
        for t in range(m):  # checked before anything is written
            if sel is not None and (selv[t] < 0 or selv[t] >= n):
                raise IndexError("selected position out of the batch")
        for t in range(m):
            i = t if sel is None else selv[t]
            g = gid[i]
            if g < 0:
                continue
            c = cpu[i]
            r = &rbs[c]
            r.used = 1
            if rowlen[g] == NULL:
                write_one(r, ts[i], src[g] + row[i] * width[g] * 4, gbytes[g], glen[g], pages,
                          <int>c)
            else:
                k = rowlen[g][row[i]]
                write_one(r, ts[i], src[g] + row[i] * width[g] * 4,
                          min((k + 3) >> 2, width[g]) * 4, k, pages, <int>c)
        for c in range(nr):
            if rbs[c].used:
                store(&rbs[c], buffers[c])
        for c in range(nr):  # the callbacks once the buffers are consistent
            done = pages[c][2]
            if done:
                cb = buffers[c].on_page_done
                for slot in done:
                    cb(slot)
        return True
    finally:
        free(gid)
        free(row)
        free(src)
        free(width)
        free(glen)
        free(gbytes)
        free(rowlen)
        free(rbs)
