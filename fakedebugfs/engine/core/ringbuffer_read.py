"""The reader side of a per-CPU ring buffer, as kernel/trace/ring_buffer.c's
readers have it: whole pages handed out with the reader page swap
(ring_buffer_read_page, what trace_pipe_raw and ktrace's buffers read),
single events peeked and consumed (trace_pipe, trace), and ktrace's
pinned reader between GET_PRODUCED and PUT_CONSUMED."""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Iterator, Optional

from fakedebugfs.engine.core.layouts import (BUF_PAGE_HDR_SIZE, RB_COMMIT_MASK, RB_EVNT_MIN_SIZE,
    RB_MISSED_EVENTS, RB_MISSED_STORED, RINGBUF_TYPE_PADDING, RINGBUF_TYPE_TIME_EXTEND,
    RINGBUF_TYPE_TIME_STAMP, TS_SHIFT, buffer_data_page_header, packer)


_PAGE_HDR = packer(buffer_data_page_header)
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


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


class RingReader:
    """The reader side of :class:`~fakedebugfs.engine.core.ringbuffer.CpuBuffer`."""

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

    def watermark_hit(self, full: int) -> bool:
        """``rb_watermark_hit``: a waiter asking for *full* percent (a trace
        array's ``buffer_percent``) is ready.  Any data will do for 0;
        otherwise not while the reader is on the writer's page
        (``reader_page == commit_page``), and then when the dirty
        sub-buffers (written and not read: ``ring_buffer_nr_dirty_pages``)
        plus the one being written make *full* percent of ``nr_pages``
        (``full_hit``)."""
        if self.empty():
            return False
        if not full:
            return True
        dirty = (self.produced - self.consumed) // self.page_size
        if not dirty and self.read:  # the reader took part of the writer's page
            return False
        return (dirty + 1) * 100 >= full * self.nr_pages

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
        self.reader_asked += 1
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
        self.reader_asked += 1
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
