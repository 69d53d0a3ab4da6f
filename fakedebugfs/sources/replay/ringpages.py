"""Walk ring-buffer data pages as the kernel wrote them (kernel/trace/ring_buffer.c)
and libtraceevent's kbuffer reads them, with the recording's own
``header_page`` (commit word of 4 or 8 bytes) and ``header_event``.

A page is ``struct buffer_data_page``: the page's time, the commit word (low
27 bits: bytes of event data; ``RB_MISSED_EVENTS`` / ``RB_MISSED_STORED``
set on pages handed to readers after a loss, the lost count stored as a
``long`` right after the data when ``RB_MISSED_STORED`` is set), then
events.  Each event starts with a ``u32`` of ``type_len:5, time_delta:27``:

* type_len 1..28: a payload of ``type_len * 4`` bytes follows;
* 0: ``array[0]`` holds the payload length + 4, the payload follows it;
* padding (29): ``time_delta == 0`` ends the page's data, otherwise
  ``array[0]`` more bytes are skipped (a discarded event) and the delta
  still counts, as kbuffer adds it;
* time extend (30): ``array[0] << 27`` is added to the delta;
* time stamp (31): an absolute time, ``array[0] << 27 | time_delta``, the
  page time's top 5 bits kept (kbuffer's ``TS_MSB``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fakedebugfs.engine.ftrace.formatfile import EventHeader, PageHeader
from fakedebugfs.sources.replay.tracedat_layouts import (RB_COMMIT_MASK, RB_MISSED_EVENTS,
    RB_MISSED_STORED, TS_MSB, TS_SHIFT, page_layouts)


class PageError(Exception):
    """A page breaks at byte *pos* of the per-CPU data (the reader names the file)."""

    def __init__(self, pos: int, message: str, truncated: bool = False):
        super().__init__(message)
        self.pos = pos
        self.message = message
        self.truncated = truncated


@dataclass(frozen=True, slots=True)
class PageInfo:
    """One page's header: its time, data size and the missed-events flags."""

    pos: int  # of the page in the per-CPU data
    time_stamp: int
    size: int
    missed: bool  # RB_MISSED_EVENTS
    lost: int | None  # the stored count (RB_MISSED_STORED), None if not stored


class PageDecoder:
    """Pages of one recording: endianness, header_page and header_event."""

    def __init__(self, endian: str, page: PageHeader, event: EventHeader, page_size: int):
        self.endian = endian
        self.page = page
        self.event = event
        self.page_size = page_size
        self.capacity = page_size - page.data_offset
        self.layouts = page_layouts(endian, page.commit_size)
        big = endian == "big"
        self._type = (lambda w: w >> 27) if big else (lambda w: w & 31)
        self._delta = (lambda w: w & ((1 << 27) - 1)) if big else (lambda w: w >> 5)

    def header(self, data, pos: int) -> PageInfo:
        """The header of the page at *pos* of *data* (checked against the page size)."""
        lay = self.layouts
        ts = lay.u64.unpack_from(data, pos + self.page.timestamp_offset)[0]
        commit = lay.long.unpack_from(data, pos + self.page.commit_offset)[0]
        size = commit & RB_COMMIT_MASK
        missed = bool(commit & RB_MISSED_EVENTS)
        lost = None
        if size > self.capacity:
            raise PageError(pos + self.page.commit_offset,
                            f"page commit says {size} bytes of events, a page holds "
                            f"{self.capacity}")
        if missed and commit & RB_MISSED_STORED:
            end = pos + self.page.data_offset + size
            if size + lay.long.size > self.capacity:
                raise PageError(end, "lost-events count stored past the page end")
            lost = lay.long.unpack_from(data, end)[0]
        return PageInfo(pos, ts, size, missed, lost)

    def records(self, data, info: PageInfo) -> list[tuple[int, int, int]]:
        """``(ts, payload start, payload end)`` of every event of the page."""
        u32 = self.layouts.u32.unpack_from
        ev = self.event
        start = info.pos + self.page.data_offset
        end = start + info.size
        ts = info.time_stamp
        pos = start
        out = []
        type_of, delta_of = self._type, self._delta
        while pos < end:
            if pos + 4 > end:
                raise PageError(pos, f"event header runs past the page's data ({end - pos} "
                                "bytes left)")
            word = u32(data, pos)[0]
            type_len, delta = type_of(word), delta_of(word)
            if 0 < type_len <= ev.data_max_type_len:
                nxt = pos + 4 + type_len * 4
                ts += delta
                if nxt > end:
                    raise PageError(pos, f"event of {type_len * 4} bytes runs past the "
                                    "page's data")
                out.append((ts, pos + 4, nxt))
                pos = nxt
                continue
            if pos + 8 > end and not (type_len == ev.padding and delta == 0):
                raise PageError(pos, f"event of type {type_len} runs past the page's data")
            if type_len == 0:
                length = u32(data, pos + 4)[0]
                if length < 4:
                    raise PageError(pos + 4, f"event length {length} is below 4")
                payload = length - 4
                nxt = pos + 8 + ((payload + 3) & ~3)
                if nxt > end:
                    raise PageError(pos, f"event of {payload} bytes runs past the page's data")
                ts += delta
                out.append((ts, pos + 8, pos + 8 + payload))
                pos = nxt
            elif type_len == ev.padding:
                if delta == 0:  # rb_null_event: the rest of the page is padding
                    break
                ts += delta
                skip = u32(data, pos + 4)[0]
                if skip < 4:
                    raise PageError(pos + 4, f"padding of {skip} bytes is below 4")
                pos += 4 + skip  # past the data: the tail of a full page
            elif type_len == ev.time_extend:
                ts += (u32(data, pos + 4)[0] << TS_SHIFT) + delta
                pos += 8
            elif type_len == ev.time_stamp:
                ts = ((u32(data, pos + 4)[0] << TS_SHIFT) + delta) | (ts & TS_MSB)
                pos += 8
            else:
                raise PageError(pos, f"unknown event type_len {type_len}")
        return out
