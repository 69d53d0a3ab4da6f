"""The batch path of a per-CPU ring buffer: a whole batch of events laid out
and written page by page in one pass (compiled in rb_fast.pyx when built),
each event exactly as ``CpuBuffer.write`` writes it one at a time."""

from __future__ import annotations

import math

from fakedebugfs.engine.core.lazynp import np
from fakedebugfs.engine.core.batch import payload_group
from fakedebugfs.engine.core.layouts import (BUF_PAGE_HDR_SIZE, RB_EVNT_MIN_SIZE,
    RB_MAX_SMALL_DATA, RINGBUF_TYPE_PADDING, RINGBUF_TYPE_TIME_EXTEND, TS_MASK, TS_SHIFT)


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


class BatchWriter:
    """The batch path of :class:`~fakedebugfs.engine.core.ringbuffer.CpuBuffer`."""

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
