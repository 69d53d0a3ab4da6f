"""Per-CPU ring buffers in the kernel's page format (kernel/trace/ring_buffer.c).

A :class:`CpuBuffer` is one ``struct ring_buffer_per_cpu``: a circular array
of data pages (``struct buffer_data_page``, the kernel's *sub-buffers*)
holding events encoded exactly as the kernel encodes them (``struct
ring_buffer_event``), so the bytes can be served as they are through
``trace_pipe_raw`` or an mmap.  A page is ``page_size`` bytes: 4096 by
default, ``PAGE_SIZE << order`` after ``buffer_subbuf_size_kb`` set the
order (``ring_buffer_subbuf_order_set``), with ``data_size`` bytes of events
(``buffer->subbuf_size``: the page less its 16-byte header).

Positions are byte offsets in the stream of pages, always multiples of the
page size:
``produced`` counts pages the writer has finished, ``consumed`` pages the
reader has taken.  Pages in ``[consumed, produced)`` are complete; the writer
fills the *tail page* at ``produced``.  A reader may also take events one by
one (``trace_pipe``) or take the unfinished part of the tail page
(``trace_pipe_raw`` at the end of a recording); ``read`` is its offset in the
page at ``consumed``.

Overwrite mode (``RB_FL_OVERWRITE``) drops the oldest page when the writer
needs it and counts its unread events as *overrun*; otherwise new events are
dropped and counted as *dropped*.  Every written event ends up read, still
in the buffer, overrun or dropped: nothing disappears uncounted, except an
event too big for a sub-buffer in a buffer made with ``count_oversized``
False (tracefs: ``ring_buffer_lock_reserve`` refuses it and counts nothing).

:meth:`CpuBuffer.write_batch` writes many events at once (the engine's batch
path): the same pages, time deltas and counters as :meth:`CpuBuffer.write`
of each in turn, laid out with numpy.  When the compiled writer is built
(``rb_fast.pyx``), :func:`~.batch.split_per_cpu` writes a batch through it
instead: one pass in batch order doing :meth:`CpuBuffer.write` of each
event in C on these same attributes and memory; ``write_batch`` stays the
Python path (and the reference the tests compare it with).

Faults (``fakedebugfs.instrument.faults``) lose events on purpose, counted
as the kernel counts an overwrite: :meth:`CpuBuffer.lose_events` makes the
next N events overrun (the tail page is finished first, so the gap falls
between two pages and the page after it carries the missed count), and
:meth:`CpuBuffer.drop_pages` drops the oldest unread pages at once.
"""

from __future__ import annotations

import errno
import logging
import math
import struct
import time

from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from fakedebugfs.engine.core.lazynp import np

from fakedebugfs.engine.core import hugepages
from fakedebugfs.engine.core.batch import payload_group
from fakedebugfs.engine.core.layouts import (BUF_PAGE_HDR_SIZE, PAGE_SIZE, RB_COMMIT_MASK,
    RB_EVNT_MIN_SIZE, RB_MAX_SMALL_DATA, RB_MISSED_EVENTS, RB_MISSED_STORED, RINGBUF_TYPE_PADDING,
    RINGBUF_TYPE_TIME_EXTEND, RINGBUF_TYPE_TIME_STAMP, TS_MASK, TS_SHIFT, buffer_data_page_header,
    packer)

log = logging.getLogger(__name__)
_PAGE_HDR = packer(buffer_data_page_header)
# per CPU: larger sizes answer ENOMEM, as the kernel's ring_buffer_resize
# does when it cannot allocate (the limit named in the error and the
# server's log).  A large buffer costs nothing when made (hugepages.zeroed):
# its pages are had as the writer first reaches them.
MAX_BUFFER_BYTES = 256 << 20
COLLAPSE_MAX = 64 << 20  # larger buffers get huge pages lazily (MADV_COLLAPSE would stall)
_U32 = struct.Struct("<I")
_U32x2 = struct.Struct("<II")
_U64 = struct.Struct("<Q")
MAX_SUBBUF_ORDER = 7  # buffer_subbuf_size_write: 1 to 128 system pages


def too_large(size: int, why: str = "") -> OSError:
    """ENOMEM for a buffer of *size* bytes per CPU, the limit named (and logged)."""
    text = (f"ring buffer of {size} bytes per CPU refused: "
            + (why or f"over the fake's limit of {MAX_BUFFER_BYTES} bytes per CPU"))
    log.warning("%s", text)
    return OSError(errno.ENOMEM, text)


def event_length(payload_len: int) -> int:
    """Bytes an event with *payload_len* bytes of data takes in a page
    (``rb_calculate_event_length``)."""
    length = payload_len or 1
    if length > RB_MAX_SMALL_DATA:
        length += 4
    return (length + 4 + 3) & ~3


def _payloads(n: int, groups, upto: int) -> list:
    """The payload bytes of events ``0 .. upto-1`` of a batch (per-event path)."""
    out = [b""] * n
    for idx, words, length, rowsel in groups:
        for j in np.flatnonzero(idx < upto).tolist():
            r = j if rowsel is None else int(rowsel[j])
            out[int(idx[j])] = words[r].tobytes()[:length]
    return out


def row_view(mem, width: int) -> np.ndarray:
    """*mem* (1-D) seen as rows of *width* items starting at every item:
    ``row_view(mem, w)[i]`` is ``mem[i:i + w]``, so one fancy assignment
    copies whole records to any positions (they must not overlap)."""
    return np.ndarray((len(mem) - width + 1, width), mem.dtype, buffer=mem,
                      strides=(mem.itemsize, mem.itemsize))


def _scatter(mem32, data, keep, groups) -> None:
    """Copy each kept event's payload words to word *data* of the buffer."""
    every = keep.all()
    for idx, words, length, rowsel in groups:
        kept = None if every else keep[idx]
        if kept is not None and not kept.all():
            if not kept.any():
                continue
            j = np.flatnonzero(kept)
            idx, rowsel = idx[j], j if rowsel is None else rowsel[j]
        nw = (length + 3) >> 2
        src = words if rowsel is None else words[rowsel]
        row_view(mem32, nw)[data[idx]] = src if src.shape[1] == nw else src[:, :nw]


def _after(group, start: int) -> tuple:
    """*group* without its events before *start*, renumbered from there."""
    idx, words, length, rowsel = group
    j = np.flatnonzero(idx >= start)
    return idx[j] - start, words, length, j if rowsel is None else rowsel[j]


@dataclass(frozen=True)
class Event:
    """One decoded data event: its absolute timestamp and payload bytes."""

    ts: int
    payload: bytes


def decode_page_events(data, commit: int, ts: int, start: int = 0) -> Iterator[tuple]:
    """Yield ``(kind, ts, offset, next_offset, payload)`` for the events in
    ``data[start:commit]``, *ts* being the timestamp before the first one.

    *kind* is ``"data"``, ``"pad"`` or ``"time"`` (extend / absolute stamp).
    This is the decoder libtraceevent applies to ``header_event``.
    """
    off = start
    while off + 4 <= commit:
        word = _U32.unpack_from(data, off)[0]
        type_len = word & 0x1F
        delta = word >> 5
        if type_len == RINGBUF_TYPE_PADDING:
            if delta == 0:  # padding up to the end of the page
                return
            nxt = off + 4 + _U32.unpack_from(data, off + 4)[0]
            yield "pad", ts, off, nxt, b""
        elif type_len == RINGBUF_TYPE_TIME_EXTEND:
            ts += (_U32.unpack_from(data, off + 4)[0] << TS_SHIFT) + delta
            nxt = off + 8
            yield "time", ts, off, nxt, b""
        elif type_len == RINGBUF_TYPE_TIME_STAMP:
            ts = (_U32.unpack_from(data, off + 4)[0] << TS_SHIFT) + delta
            nxt = off + 8
            yield "time", ts, off, nxt, b""
        elif type_len == 0:
            length = _U32.unpack_from(data, off + 4)[0] - 4
            ts += delta
            nxt = off + 8 + ((length + 3) & ~3)
            yield "data", ts, off, nxt, bytes(data[off + 8:off + 8 + length])
        else:
            ts += delta
            nxt = off + 4 + type_len * 4
            yield "data", ts, off, nxt, bytes(data[off + 4:nxt])
        off = nxt


class CpuBuffer:
    """One CPU's ring buffer (``struct ring_buffer_per_cpu``)."""

    def __init__(self, cpu: int, size: int, overwrite: bool = True,
                 page_size: int = PAGE_SIZE, count_oversized: bool = True,
                 reader_pages: bool = False):
        self.cpu = cpu
        self.count_oversized = count_oversized  # an event too big counts as dropped
        # a finished page is left as a reader gets it (commit = real_end,
        # zeros after; no padding event), so bulk reads copy it as it is
        self.reader_pages = reader_pages
        self.page_size = page_size  # set for real by resize()
        self.overwrite = overwrite
        # called with the slot index of each page the writer finishes
        self.on_page_done: Optional[Callable[[int], None]] = None
        # faults: pending losses outlive a reset (they are not content)
        self.lose_next = 0  # the next events to lose as overrun
        self.drop_pending = 0  # pages to drop once no reader pins them
        self.resize(size, page_size)

    # --- geometry ---------------------------------------------------------

    def resize(self, size: int, page_size: Optional[int] = None) -> None:
        """Reallocate for *size* bytes (at least two pages) and reset; with
        *page_size*, in pages of that size (a power of two from 4096 to
        ``4096 << MAX_SUBBUF_ORDER``: ``rb_allocate_cpu_buffer`` after a
        new sub-buffer order).

        Raises ENOMEM past ``MAX_BUFFER_BYTES`` or when the memory cannot be
        had, leaving the buffer as it was."""
        page_size = self.page_size if page_size is None else page_size
        if page_size & (page_size - 1) or not PAGE_SIZE <= page_size <= PAGE_SIZE << MAX_SUBBUF_ORDER:
            raise ValueError(f"page size {page_size}: a power of two, 4 KiB to 512 KiB")
        nr_pages = max(2, size // page_size)
        if nr_pages * page_size > MAX_BUFFER_BYTES:
            raise too_large(nr_pages * page_size)
        try:
            mem = hugepages.zeroed(nr_pages * page_size)
        except MemoryError:
            raise too_large(nr_pages * page_size, "the memory cannot be had") from None
        hugepages.advise(mem, collapse=len(mem) <= COLLAPSE_MAX)  # bulk reads walk fewer pages
        self.nr_pages, self.mem = nr_pages, mem
        self.page_size = page_size
        self.data_size = page_size - BUF_PAGE_HDR_SIZE  # buffer->subbuf_size
        self._zeros = memoryview(bytes(self.data_size))
        self.reset(zero=False)  # a new bytearray is zeros already

    @property
    def size(self) -> int:
        return self.nr_pages * self.page_size

    def slot(self, pos: int) -> int:
        """The page slot holding stream position *pos*."""
        return (pos // self.page_size) % self.nr_pages

    def reset(self, zero: bool = True) -> None:
        """``ring_buffer_reset_cpu``: drop all content and counters."""
        if zero:  # in place, its whole pages given back (hugepages.clear)
            hugepages.clear(self.mem)
        self.page_entries = [0] * self.nr_pages
        self.page_real_end = [0] * self.nr_pages  # data end before the padding (0: full)
        self.produced = 0
        self.consumed = 0
        self.tail = 0
        self.tail_entries = 0
        self.last_ts = 0
        self.read = 0
        self.read_entries = 0
        self.read_ts = 0
        self.entries = 0  # events written since reset
        self.overrun = 0  # events lost to overwrite (or to a pinned reader)
        self.dropped = 0  # events refused: buffer full without overwrite, or too big
        self.consumed_events = 0  # events taken by readers
        self.missed = 0  # lost since a reader last took a page
        self.gaps: list[list[int]] = []  # [pos, lost]: lost before the page at pos
        self.unstored: set[int] = set()  # gaps whose count is not stored (lose_now(None))
        self.missed_unstored = False  # the next reader page has the flag, not the count
        self.pinned_until = 0.0  # a ktrace reader is copying [consumed, produced)

    # --- writer -----------------------------------------------------------

    def write(self, ts: int, payload: bytes) -> bool:
        """Reserve and commit one event (``ring_buffer_write``).

        Returns False when the event was lost (and counted)."""
        if self.lose_next or self.drop_pending:
            if self._fault_loses():
                return False
        length = len(payload)
        size = event_length(length)
        dsize = self.data_size
        if size > dsize:
            self.dropped += self.count_oversized
            return False
        delta = ts - self.last_ts if self.tail else 0
        if delta < 0:
            delta = 0
        need = size + (8 if delta > TS_MASK else 0)
        if self.tail + need > dsize:
            self._finish_page()
            delta = 0
        if self.tail == 0 and not self._claim_tail():
            return False
        psize = self.page_size
        base = (self.produced // psize) % self.nr_pages * psize
        mem = self.mem
        if self.tail == 0:
            _U64.pack_into(mem, base, ts)
        off = base + BUF_PAGE_HDR_SIZE + self.tail
        if delta > TS_MASK:
            _U32x2.pack_into(mem, off, RINGBUF_TYPE_TIME_EXTEND | ((delta & TS_MASK) << 5),
                             delta >> TS_SHIFT)
            off += 8
            self.tail += 8
            delta = 0
        if length > RB_MAX_SMALL_DATA:
            _U32x2.pack_into(mem, off, delta << 5, size - 4)
            mem[off + 8:off + 8 + length] = payload
        else:
            _U32.pack_into(mem, off, ((size - 4) >> 2) | (delta << 5))
            mem[off + 4:off + 4 + length] = payload
        self.tail += size
        self.tail_entries += 1
        self.entries += 1
        self.last_ts = ts
        _U64.pack_into(mem, base + 8, self.tail)
        return True

    def write_batch(self, ts, groups) -> None:
        """Write many events at once, byte for byte and counter for counter
        what :meth:`write` of each in turn would do.

        *ts* (n,) are the timestamps in write order; *groups* is a list of
        :func:`~.batch.payload_group` tuples ``(idx, words, length,
        rowsel)`` (or ``(idx, rows)`` with ``uint8`` rows): the event at
        position ``idx[j]`` has the first ``length`` bytes of row
        ``rowsel[j]`` (or ``j``).  Only the length rounded up to 4 bytes
        matters (``rb_calculate_event_length``): the bytes after a payload
        up to its 4-byte end are zeros in a page either way.
        Pending faults, a reader pinning the pages for a while (a finite
        ``pinned_until``) and payloads too big for a page are done event by
        event; the rest is laid out in pages (time deltas,
        ``TIME_EXTEND``, page finishing and overwrite) with numpy."""
        n = len(ts)
        if not n:
            return
        ts = np.asarray(ts, np.int64)
        groups = [g if len(g) == 4 else payload_group(*g) for g in groups]
        length = np.empty(n, np.int64)
        for idx, _, glen, rowsel in groups:
            length[idx] = glen
        size = np.maximum(length, 1)
        size = (size + np.where(size > RB_MAX_SMALL_DATA, 4, 0) + 4 + 3) & ~3
        if (self.pinned_until and self.pinned_until != math.inf) or (size > self.data_size).any():
            start = n  # a reader holds the pages for a while / some are too big: one by one
        elif self.lose_next or self.drop_pending:
            start = min(n, max(self.lose_next, 1))  # the losses, then the fast path
        else:
            start = 0
        if start:
            payloads = _payloads(n, groups, start)
            for i in range(start):
                self.write(int(ts[i]), payloads[i])
            if start < n and (self.lose_next or self.drop_pending):
                payloads = _payloads(n, groups, n)
                for i in range(start, n):
                    self.write(int(ts[i]), payloads[i])
                return
            if start == n:
                return
            groups = [_after(g, start) for g in groups]
            ts, length, size = ts[start:], length[start:], size[start:]
        self._write_laid_out(ts, length, size, groups)

    def _write_laid_out(self, ts, length, size, groups) -> None:
        """The vectorised part of :meth:`write_batch` (no fault pending, no
        pinned reader): the events are laid out in pages as :meth:`write`
        lays them out one by one, then the pages' bookkeeping (finished
        pages, overwrite of the oldest, counters) and bytes are done at once."""
        n = len(ts)
        prev = np.empty(n, np.int64)
        prev[0] = self.last_ts
        prev[1:] = ts[:-1]
        delta = np.maximum(ts - prev, 0)
        ext = delta > TS_MASK
        starts, cont = self._segments(size, ext)
        nseg = len(starts)
        seg_start = np.array(starts, np.int64)
        seg_len = np.diff(np.append(seg_start, n))
        seg = np.repeat(np.arange(nseg), seg_len)
        first = np.zeros(n, bool)
        first[seg_start[cont:]] = True
        has_ext = ext & ~first
        hdr_delta = np.where(first | has_ext, 0, delta)
        w = size + (has_ext << 3)
        excl = np.zeros(n + 1, np.int64)
        np.cumsum(w, out=excl[1:])
        fill0 = np.zeros(nseg, np.int64)
        if cont:
            fill0[0] = self.tail
        off = excl[:n] - excl[seg_start][seg] + fill0[seg]  # offset in the page's data
        seg_end = excl[seg_start + seg_len] - excl[seg_start] + fill0  # data end of each page
        seg_entries = seg_len.copy()
        if cont:
            seg_entries[0] += self.tail_entries
        # claims: the page of segment k is claimed at produced + k pages
        nr, p0, c0, psize = self.nr_pages, self.produced, self.consumed, self.page_size
        k_full = max(cont, -(-(c0 + nr * psize - p0) // psize))  # first claim on a full buffer
        overwrite = self.overwrite and not self.pinned()  # a reader pinning pages stops it
        if not overwrite and k_full < nseg:  # that claim fails: the rest is lost
            cut, written, finished = int(seg_start[k_full]), k_full, k_full
            if self.overwrite:  # pinned: lost as overrun (_claim_tail)
                self.overrun += n - cut
                self.missed += n - cut
            else:
                self.dropped += n - cut
        else:
            cut, written, finished = n, nseg, nseg - 1
        drops = max(0, nseg - k_full) if overwrite else 0
        if drops:  # rb_handle_head_page: the oldest pages are overwritten
            q = (c0 - p0) // psize + np.arange(drops)  # in pages from produced
            old = np.array([self.page_entries[self.slot(c0 + i * psize)] for i in
                            range(min(drops, max(0, (p0 - c0) // psize)))], np.int64)
            lost = int(old.sum()) + int(seg_entries[q[q >= 0]].sum()) - self.read_entries
            self.overrun += lost
            self.missed += lost
            self.consumed += drops * psize
            self.read = 0
            self.read_entries = 0
        first_slot = p0 // psize
        dsize = self.data_size
        for k in range(max(0, finished - nr), finished):
            slot = (first_slot + k) % nr
            end = int(seg_end[k])
            self.page_real_end[slot] = end if end < dsize else 0
            self.page_entries[slot] = int(seg_entries[k])
        self.produced = p0 + finished * psize
        if self.on_page_done is not None:
            for k in range(finished):
                self.on_page_done((first_slot + k) % nr)
        if finished == written:  # the claim that failed left no tail page
            self.tail = self.tail_entries = 0
        else:
            self.tail = int(seg_end[-1])
            self.tail_entries = int(seg_entries[-1])
        if cut:
            self.entries += cut
            self.last_ts = int(ts[cut - 1])
        self._write_pages(ts, length, size, groups, seg, seg_start, seg_end, cont, written,
                          finished, off, has_ext, hdr_delta, delta, cut)

    def _segments(self, size, ext) -> tuple[list, int]:
        """Where each page starts (event indices), as :meth:`write` fills
        pages; *cont* is 1 when the first segment continues the tail page.
        For every event the start of the page after a page it would begin
        is found at once; the pages are then that chain from the first."""
        n = len(size)
        cum = np.zeros(n + 1, np.int64)
        np.cumsum(size + (ext << 3), out=cum[1:])
        dsize = self.data_size
        nxt = np.searchsorted(cum, dsize - size + cum[1:], "right") - 1
        starts, i, cont = [], 0, 0
        if self.tail:
            starts.append(0)
            cont = 1
            i = int(np.searchsorted(cum, dsize - self.tail, "right")) - 1
        while i < n:  # a new page: its first event has no time extend
            starts.append(i)
            i = int(nxt[i])
        return starts, cont

    def _write_pages(self, ts, length, size, groups, seg, seg_start, seg_end, cont, written,
                     finished, off, has_ext, hdr_delta, delta, cut) -> None:
        """The bytes of the pages still in the buffer after a batch (the
        last ``nr_pages`` written; earlier ones had their slots reused)."""
        nr, psize, dsize = self.nr_pages, self.page_size, self.data_size
        lo = max(0, written - nr)
        if lo >= written:
            return
        mem32 = np.frombuffer(self.mem, np.uint32)
        mem64 = np.frombuffer(self.mem, np.uint64)
        pages = np.arange(lo, written)
        slots = ((self.produced - finished * psize) // psize + pages) % nr
        new = pages >= cont
        pages32 = mem32.reshape(nr, psize // 4)
        pages32[slots[new]] = 0  # rb_reset_tail / a claimed page starts empty
        mem64[slots[new] * (psize // 8)] = ts[seg_start[pages[new]]]
        end = seg_end[pages]
        done = pages < finished
        room = dsize - end
        if self.reader_pages:  # as _pad_tail: no padding, the commit at the end
            mem64[slots * (psize // 8) + 1] = end
            pad = np.zeros_like(done)
        else:
            mem64[slots * (psize // 8) + 1] = np.where(done & (room >= RB_EVNT_MIN_SIZE), dsize, end)
            pad = done & (room >= 4)
        word = (slots * psize + BUF_PAGE_HDR_SIZE + end) >> 2
        big = pad & (room >= RB_EVNT_MIN_SIZE)
        mem32[word[pad & ~big]] = RINGBUF_TYPE_PADDING
        mem32[word[big]] = RINGBUF_TYPE_PADDING | (1 << 5)
        mem32[word[big] + 1] = room[big] - 4
        # the events
        keep = seg >= lo
        if cut < len(seg):
            keep &= np.arange(len(seg)) < cut
        if not keep.any():
            return
        slot_of = np.zeros(written, np.int64)
        slot_of[lo:] = slots
        at = slot_of[np.minimum(seg, written - 1)] * psize + BUF_PAGE_HDR_SIZE + off
        e = keep & has_ext
        if e.any():
            wd = at[e] >> 2
            d = delta[e]
            mem32[wd] = RINGBUF_TYPE_TIME_EXTEND | ((d & TS_MASK) << 5)
            mem32[wd + 1] = d >> TS_SHIFT
        hdr = at + (has_ext << 3)
        bigdata = length > RB_MAX_SMALL_DATA
        wd = hdr >> 2
        sel = keep & ~bigdata
        mem32[wd[sel]] = (((size - 4) >> 2) | (hdr_delta << 5))[sel]
        if bigdata.any():
            sel = keep & bigdata
            mem32[wd[sel]] = hdr_delta[sel] << 5
            mem32[wd[sel] + 1] = size[sel] - 4
        _scatter(mem32, (hdr + np.where(bigdata, 8, 4)) >> 2, keep, groups)

    # --- faults: events lost on purpose, counted as overrun ------------------

    def lose_events(self, count: int) -> None:
        """Lose the next *count* events this buffer would record, as if they
        had been written and overwritten: ``entries`` and ``overrun`` both
        grow, so the unread count (``stats`` entries) does not change."""
        if count < 0:
            raise ValueError("count must be >= 0")
        self.lose_next += count

    def _fault_loses(self) -> bool:
        """Apply pending faults before a write; True when this event is lost."""
        if self.drop_pending and not self.pinned():
            self._drop_pages_now(self.drop_pending)
            self.drop_pending = 0
        if not self.lose_next:
            return False
        if self.tail:  # the gap starts on a fresh page (``rb_move_tail``)
            self._finish_page()
        self.lose_next -= 1
        self.entries += 1
        self.overrun += 1
        if self.gaps and self.gaps[-1][0] == self.produced:
            self.gaps[-1][1] += 1
        else:
            self.gaps.append([self.produced, 1])
        return True

    def lose_now(self, count: Optional[int]) -> None:
        """Events lost right here (a replayed recording's ``RB_MISSED_EVENTS``
        mark): the tail page is finished and the page after the gap carries
        *count* (``RB_MISSED_STORED``), or only the flag when *count* is None,
        as a kernel page with no room left for the count."""
        self.flush()
        lost = count or 0
        self.entries += lost
        self.overrun += lost
        if self.gaps and self.gaps[-1][0] == self.produced:
            self.gaps[-1][1] += lost
        else:
            self.gaps.append([self.produced, lost])
        if count is None:
            self.unstored.add(self.produced)

    def drop_pages(self, count: int) -> int:
        """Drop the *count* oldest unread complete pages now, their unread
        events counted as overrun, as the writer's overwrite does
        (``rb_handle_head_page``).  While a ktrace reader pins the pages the
        drop waits for the pin to end.  Returns the events lost now."""
        if count < 0:
            raise ValueError("count must be >= 0")
        if self.pinned():
            self.drop_pending += count
            return 0
        return self._drop_pages_now(count)

    def _drop_pages_now(self, count: int) -> int:
        before = self.overrun
        for _ in range(min(count, (self.produced - self.consumed) // self.page_size)):
            self._drop_oldest()
        return self.overrun - before

    def _settle_gaps(self) -> None:
        """Losses before the page at ``consumed`` become the reader's missed
        count (``cpu_buffer->lost_events`` at the reader-page swap)."""
        while self.gaps and self.gaps[0][0] <= self.consumed:
            pos, lost = self.gaps.pop(0)
            self.missed += lost
            if self.unstored and pos in self.unstored:
                self.unstored.discard(pos)
                self.missed_unstored = True

    def _finish_page(self) -> None:
        """Close the tail page: pad it and make it readable (``rb_move_tail``);
        where its data ends is kept (``real_end``, ``rb_reset_tail``)."""
        done = self.slot(self.produced)
        self.page_real_end[done] = self.tail if self.tail < self.data_size else 0
        self._pad_tail()
        self.page_entries[done] = self.tail_entries
        self.produced += self.page_size
        self.tail = 0
        self.tail_entries = 0
        if self.on_page_done is not None:
            self.on_page_done(done)

    def _claim_tail(self) -> bool:
        """Take the slot at ``produced`` for writing, dropping the oldest
        unread page if it is there (overwrite mode) or refusing the event."""
        psize = self.page_size
        if self.produced - self.consumed >= self.nr_pages * psize:
            if self.overwrite and not self.pinned():
                self._drop_oldest()
            else:
                if self.overwrite:
                    self.overrun += 1
                    self.missed += 1
                else:
                    self.dropped += 1
                return False
        base = self.slot(self.produced) * psize
        self.mem[base:base + psize] = bytes(psize)
        return True

    def _pad_tail(self) -> None:
        """Fill the unused end of the tail page (``rb_reset_tail``); with
        ``reader_pages``, leave it zero and the commit at the data's end,
        as ``rb_get_reader_page`` makes it (``commit = real_end``) and
        ``ring_buffer_read_page`` hands it out (zeroed past the commit)."""
        base = self.slot(self.produced) * self.page_size
        commit = self.tail if self.reader_pages else self._pad(self.mem, base, self.tail)
        _U64.pack_into(self.mem, base + 8, commit)

    def _pad(self, mem, base: int, end: int) -> int:
        """Write the padding event after *end* into the page at *base* of
        *mem* (``rb_reset_tail``); returns the page's commit."""
        commit = self._kernel_commit(end)
        off = base + BUF_PAGE_HDR_SIZE + end
        if commit != end:
            _U32x2.pack_into(mem, off, RINGBUF_TYPE_PADDING | (1 << 5), self.data_size - end - 4)
        elif self.data_size - end >= 4:
            _U32.pack_into(mem, off, RINGBUF_TYPE_PADDING)
        return commit

    def _drop_oldest(self) -> None:
        """Overwrite mode: the oldest unread page is lost to the writer."""
        lost = self.page_entries[self.slot(self.consumed)] - self.read_entries
        self.overrun += lost
        self.missed += lost
        self.consumed += self.page_size
        self.read = 0
        self.read_entries = 0

    def pin(self, seconds: float) -> None:
        """Keep the complete pages from being recycled for *seconds*
        (a reader is copying them); new events are lost meanwhile."""
        self.pinned_until = time.monotonic() + seconds

    def unpin(self) -> None:
        self.pinned_until = 0.0
        if self.drop_pending:
            self._drop_pages_now(self.drop_pending)
            self.drop_pending = 0

    def pinned(self) -> bool:
        return self.pinned_until != 0.0 and time.monotonic() < self.pinned_until

    def flush(self) -> None:
        """Finish a non-empty tail page so readers can take it."""
        if self.tail:
            self._finish_page()

    # --- state for readers -------------------------------------------------

    def page_view(self, pos: int) -> tuple[int, int]:
        """``(time_stamp, commit)`` of the page at stream position *pos*."""
        return _PAGE_HDR.unpack_from(self.mem, self.slot(pos) * self.page_size)

    def empty(self) -> bool:
        """No unread event anywhere, tail page included
        (``ring_buffer_per_cpu_empty``)."""
        return self.consumed == self.produced and self.read >= self.tail

    def has_pages(self) -> bool:
        """A complete page is waiting (``produced != consumed``)."""
        return self.produced != self.consumed

    # --- page reader (trace_pipe_raw, ktrace) -------------------------------

    def read_page(self, full_only: bool = False, limit: Optional[int] = None) -> Optional[bytes]:
        """Take the next page for a reader (``ring_buffer_read_page`` with
        ``len`` *limit*, None: a whole page).

        An unread complete page is handed over whole when *limit* holds it
        (the kernel swaps it out); it ends at its ``real_end`` (its padding
        is not handed over), which leaves room for a missed-events count.
        Otherwise the events from the read position are copied, whole ones
        (a time extend with its event) while they fit in *limit* less the
        page header, up to the page's commit (its end padding included) or,
        unless *full_only*, the unread part of the tail page.  The commit
        word carries ``RB_MISSED_EVENTS`` (and the count,
        ``RB_MISSED_STORED``) when events were lost since the previous page.
        Returns a page of ``page_size`` bytes, or None when there is nothing
        to take or the next event does not fit in *limit*."""
        if self.gaps:
            self._settle_gaps()
        psize = self.page_size
        room = None if limit is None else limit - BUF_PAGE_HDR_SIZE
        if room is not None and room <= 0:
            return None
        if self.consumed != self.produced:
            slot = self.slot(self.consumed)
            ts, commit = self.page_view(self.consumed)
            end = commit = commit & RB_COMMIT_MASK
            if self.reader_pages:  # the kernel's page ends past its padding
                commit = self._kernel_commit(end)
            if not self.read and (room is None or room >= commit):  # the page swapped out
                start = slot * psize + BUF_PAGE_HDR_SIZE
                data = self.mem[start:start + (self.page_real_end[slot] or commit)]
                taken = self.page_entries[slot]
                self._advance_page()
                self.consumed_events += taken
                return self._reader_page(ts, bytes(data))
            mem, base = self.mem, slot * psize
            if self.reader_pages:  # copied from the page as the kernel's writer left it
                mem, base = mem[base:base + psize], 0
                self._pad(mem, 0, end)
            return self._copy_events(base, commit, room, True, mem)
        if self.read < self.tail and not full_only:
            return self._copy_events(self.slot(self.produced) * psize, self.tail, room, False)
        return None

    def _kernel_commit(self, end: int) -> int:
        """The commit of a finished page in the kernel's buffer: past its
        padding event when there was room for one (``rb_reset_tail``)."""
        return self.data_size if self.data_size - end >= RB_EVNT_MIN_SIZE else end

    def _copy_events(self, base: int, commit: int, room: Optional[int],
                     complete: bool, mem=None) -> Optional[bytes]:
        """``ring_buffer_read_page``'s copy: the events of the page at *base*
        (of *mem*, default the buffer) from ``read`` up to *commit* that fit
        in *room* bytes (all of them when None), consumed; None when the
        first does not fit."""
        mem = self.mem if mem is None else mem
        ts0 = self.read_ts if self.read else _U64.unpack_from(mem, base)[0]
        start = end = self.read
        ts, taken = ts0, 0
        if room is None or room >= commit - start:
            end = commit
            if complete:
                taken = self.page_entries[self.slot(self.consumed)] - self.read_entries
            else:
                taken, ts = self.tail_entries - self.read_entries, self.last_ts
        else:
            view = memoryview(mem)[base + BUF_PAGE_HDR_SIZE:base + self.page_size]
            for kind, t, _, nxt, _ in decode_page_events(view, commit, ts0, start):
                if nxt - start > room:
                    break
                if kind == "time":  # a time extend goes with the event after it
                    continue
                end, ts = nxt, t
                taken += kind == "data"
            if end == start:
                return None
        data = bytes(mem[base + BUF_PAGE_HDR_SIZE + start:base + BUF_PAGE_HDR_SIZE + end])
        self.consumed_events += taken
        if complete and end >= commit:
            self._advance_page()
        else:
            self.read, self.read_ts = end, ts
            self.read_entries += taken
        return self._reader_page(ts0, data)

    def read_pages(self, max_pages: int):
        """Up to *max_pages* complete pages at once, each byte for byte what
        :meth:`read_page` would hand out, copied in one go (bulk
        ``trace_pipe_raw`` reads); with ``reader_pages`` a view of the
        buffer itself, valid until the writer comes back to those pages
        (the FUSE reply is made before anything else runs).  Stops before a page that must report
        missed events and at a partly read page (b"" there: the caller takes
        that page with :meth:`read_page`)."""
        if self.gaps:
            self._settle_gaps()
        if self.read or self.missed or self.missed_unstored:
            return b""
        psize = self.page_size
        first = self.slot(self.consumed)
        n = min(max_pages, (self.produced - self.consumed) // psize, self.nr_pages - first)
        if self.gaps:
            n = min(n, (self.gaps[0][0] - self.consumed) // psize)
        if n <= 0:
            return b""
        self.consumed_events += sum(self.page_entries[first:first + n])
        self.consumed += n * psize
        if self.reader_pages:  # the pages are as a reader gets them already: no copy
            return memoryview(self.mem)[first * psize:(first + n) * psize]
        out = self.mem[first * psize:(first + n) * psize]  # a copy (bytearray)
        view, real_end = memoryview(out), self.page_real_end
        dsize, zeros = self.data_size, self._zeros
        for k in range(n):
            end = real_end[first + k]
            if end:  # the padding is not handed over (as read_page)
                base = k * psize
                _U64.pack_into(out, base + 8, end)
                view[base + BUF_PAGE_HDR_SIZE + end:base + psize] = zeros[:dsize - end]
        return out

    def _reader_page(self, ts: int, data: bytes) -> bytes:
        commit = len(data)
        flags = 0
        if self.missed or self.missed_unstored:
            if self.data_size - commit >= 8 and not self.missed_unstored:
                data += _U64.pack(self.missed)
                flags |= RB_MISSED_STORED
            flags |= RB_MISSED_EVENTS
            self.missed = 0
            self.missed_unstored = False
        page = _PAGE_HDR.pack(ts, commit | flags) + data
        return page + bytes(self.page_size - len(page))

    # --- event reader (trace_pipe) ----------------------------------------

    def _cursor(self) -> tuple[int, int, bool]:
        """``(page base, data limit, complete)`` of the page being read."""
        if self.consumed != self.produced:
            commit = self.page_view(self.consumed)[1] & RB_COMMIT_MASK
            return self.slot(self.consumed) * self.page_size, commit, True
        return self.slot(self.produced) * self.page_size, self.tail, False

    def peek(self) -> Optional[Event]:
        """The next unread event without consuming it (``ring_buffer_peek``)."""
        return self._next(consume=False)

    def consume(self) -> Optional[Event]:
        """Take the next unread event (``ring_buffer_consume``)."""
        return self._next(consume=True)

    def _next(self, consume: bool) -> Optional[Event]:
        while True:
            base, limit, complete = self._cursor()
            if self.read >= limit:
                if not complete:
                    return None
                self._advance_page()
                continue
            ts0 = self.read_ts if self.read else _U64.unpack_from(self.mem, base)[0]
            data = memoryview(self.mem)[base + BUF_PAGE_HDR_SIZE:base + self.page_size]
            for kind, ts, _, nxt, payload in decode_page_events(data, limit, ts0, self.read):
                if kind != "data":  # skipping padding/time stamps changes nothing
                    self.read, self.read_ts = nxt, ts
                    continue
                if consume:
                    self.read, self.read_ts = nxt, ts
                    self.read_entries += 1
                    self.consumed_events += 1
                return Event(ts, payload)
            if not complete:
                return None
            self._advance_page()

    def _advance_page(self) -> None:
        self.consumed += self.page_size
        self.read = 0
        self.read_entries = 0

    def iter_unread(self) -> Iterator[Event]:
        """Every unread event, oldest first, without consuming (``trace``)."""
        pos, read, read_ts = self.consumed, self.read, self.read_ts
        psize = self.page_size
        while True:
            last = pos == self.produced
            base = self.slot(pos) * psize
            limit = self.tail if last else self.page_view(pos)[1] & RB_COMMIT_MASK
            ts0 = read_ts if read else _U64.unpack_from(self.mem, base)[0]
            data = self.mem[base + BUF_PAGE_HDR_SIZE:base + psize]
            for kind, ts, _, _, payload in decode_page_events(data, limit, ts0, read):
                if kind == "data":
                    yield Event(ts, payload)
            if last:
                return
            pos += psize
            read = 0

    # --- ktrace reader protocol (docs/ktrace.md#the-buffer-protocol) ---------

    def advance_reader(self, nbytes: int) -> None:
        """``ring_buffer_advance_reader``: the reader is done with *nbytes* of
        pages; never past ``produced``."""
        pages = min(nbytes // self.page_size, (self.produced - self.consumed) // self.page_size)
        for _ in range(max(0, pages)):
            self.consumed_events += self.page_entries[self.slot(self.consumed)] - self.read_entries
            self._advance_page()
        self._settle_gaps()
        self.missed = 0
        self.missed_unstored = False
