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
import struct
from typing import Callable, Optional

from fakedebugfs.engine.core import hugepages
from fakedebugfs.engine.core.layouts import (BUF_PAGE_HDR_SIZE, PAGE_SIZE, RB_MAX_SMALL_DATA,
    RINGBUF_TYPE_PADDING, RINGBUF_TYPE_TIME_EXTEND, TS_MASK, TS_SHIFT)
# the batch path and the reader side, each in a module of its own
from fakedebugfs.engine.core.ringbuffer_batch import BatchWriter
from fakedebugfs.engine.core.ringbuffer_read import _U32, _U64, RingReader

log = logging.getLogger(__name__)
# per CPU: larger sizes answer ENOMEM, as the kernel's ring_buffer_resize
# does when it cannot allocate (the limit named in the error and the
# server's log).  A large buffer costs nothing when made (hugepages.zeroed):
# its pages are had as the writer first reaches them.
MAX_BUFFER_BYTES = 256 << 20
COLLAPSE_MAX = 64 << 20  # larger buffers get huge pages lazily (MADV_COLLAPSE would stall)
_U32x2 = struct.Struct("<II")
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


class CpuBuffer(BatchWriter, RingReader):
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

    def release(self) -> None:
        """The buffer is gone (its instance removed): its memory is given
        back now, whatever still points at this object."""
        self.mem = bytearray()
        self.nr_pages = 0
        self.page_entries, self.page_real_end = [], []

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
        self.reader_asked = 0  # page reads asked of it, taken or not (a reader is there)
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


    # the readers (trace_pipe_raw, trace_pipe, ktrace's reader protocol,
    # docs/ktrace.md#the-buffer-protocol): RingReader, ringbuffer_read.py
