"""The read side of the kernel's ``seq_file`` (fs/seq_file.c), over a list
of records already shown.

A ``seq_file`` read does not slice a text by offset: ``seq_read_iter``
fills a buffer of ``m->size`` bytes (``PAGE_SIZE`` at first, doubled while a
single record does not fit, and kept doubled for the rest of the open file)
with whole records, stops adding records once the buffer holds at least what
the caller asked for or when the next record would overflow it, copies at
most the count asked for and keeps the rest (``m->from``/``m->count``) for
the next read, which flushes that leftover first and then fills a new buffer
the same way.  So a large read ends at a record boundary short of the page
(``available_events``: ~4,070 bytes per read), and a record larger than the
page comes alone in a later read.  A read at an offset other than the read
position re-walks the records from the first (``traverse``).

Pure Python, no I/O: :class:`SeqFileState` is ``struct seq_file``'s
``index``, ``size``, ``from``/``count`` (the leftover) and ``read_pos``.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional, Union

PAGE_SIZE = 4096


def split_records(text: Union[str, bytes]) -> list[bytes]:
    """The records of a seq file that prints one line per record (the most
    of tracefs': ``available_events``, ``printk_formats``, ...): *text* cut
    after each ``\\n`` (a last line without one is a record too)."""
    data = text.encode(errors="surrogateescape") if isinstance(text, str) else text
    parts = data.split(b"\n")
    out = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _fits(records: list) -> bool:
    total = 0
    for rec in records:
        total += len(rec)
        if total >= PAGE_SIZE:
            return False
    return True


def seq_open(shown, records: Optional[Callable] = None) -> "SeqFileState":
    """The state of one open of a seq file whose *show* returned *shown*: a
    list of records (str or bytes each), or a text cut into records by
    *records* (default :func:`split_records`, one line each) only when it
    is too long for one page (shorter, it is read as a slice, the same)."""
    if isinstance(shown, (str, bytes)):
        data = shown.encode(errors="surrogateescape") if isinstance(shown, str) else shown
        if len(data) < PAGE_SIZE:
            return SeqFileState((data,))
        if records is None:  # one line a record: read from the text as it is
            return SeqLinesState(data)
        shown = records(shown)
    return SeqFileState(r.encode(errors="surrogateescape") if isinstance(r, str) else r
                        for r in shown)


class SeqFileState:
    """``struct seq_file`` of one open file, over *records* (each the bytes
    one ``->show`` puts in the buffer; an empty one is skipped, as
    ``seq_read_iter`` skips an empty record).  A record fits the buffer
    when it leaves a byte free: ``seq_printf``/``seq_write`` overflow at
    ``m->count + len >= m->size``."""

    __slots__ = ("records", "flat", "index", "size", "buf", "from_", "count", "read_pos")

    def __init__(self, records: Iterable[bytes]):
        self.records = list(records)
        # records that all fit one page-sized buffer are read as a slice of
        # their text: every read returns what was asked, up to EOF
        self.flat = b"".join(self.records) if _fits(self.records) else None
        self.index = 0        # m->index: the next record to show
        self.size = PAGE_SIZE  # m->size
        self.buf = b""        # m->buf[0:m->from + m->count]
        self.from_ = 0        # m->from
        self.count = 0        # m->count: bytes shown and not yet copied
        self.read_pos = 0     # m->read_pos

    def _show(self, index: int):
        """``m->op->start``/``next`` then ``show``: the record at *index*,
        None past the last."""
        return self.records[index] if index < len(self.records) else None

    def traverse(self, offset: int) -> None:
        """``traverse``: walk the records from the first up to *offset*,
        leaving the rest of the record it falls in as the leftover
        (growing the buffer for a record larger than it)."""
        self.index = 0
        self.count = self.from_ = 0
        self.buf = b""
        if not offset:
            return
        pos = 0
        while True:
            rec = self._show(self.index)
            if rec is None:
                return
            while len(rec) >= self.size:  # Eoverflow: -EAGAIN, retried bigger
                self.size <<= 1
            self.index += 1
            if pos + len(rec) > offset:
                self.buf = rec
                self.from_ = offset - pos
                self.count = len(rec) - self.from_
                return
            pos += len(rec)
            if pos == offset:
                return

    def read(self, pos: int, want: int) -> bytes:
        """``seq_read_iter``: the bytes a read of *want* at *pos* returns."""
        if self.flat is not None:
            return self.flat[pos:pos + want]
        if want <= 0:
            return b""
        if pos == 0:
            self.index = 0
            self.count = 0
        if pos != self.read_pos:  # don't assume ki_pos is where we left it
            self.traverse(pos)
            self.read_pos = pos
        out = b""
        if self.count:  # something left in the buffer: copy it out first
            n = min(self.count, want)
            out = self.buf[self.from_:self.from_ + n]
            self.count -= n
            self.from_ += n
            if self.count:
                self.read_pos += n
                return out
        out += self._fill(want - len(out))
        self.read_pos += len(out)
        return out

    def _fill(self, want: int) -> bytes:
        """The buffer filled from ``m->index`` with whole records, its first
        *want* bytes copied and the rest kept."""
        self.from_ = 0
        while True:  # get a non-empty record in the buffer
            rec = self._show(self.index)
            if rec is None:  # EOF
                self.count = 0
                return b""
            if not rec:
                self.index += 1
                continue
            if len(rec) < self.size:
                break
            self.size <<= 1  # need a bigger buffer
        parts, count = [rec], len(rec)
        while True:  # Fill: more records while they are wanted and fit
            self.index += 1
            rec = self._show(self.index)
            if rec is None or count >= want:
                break
            if count + len(rec) >= self.size:
                break
            parts.append(rec)
            count += len(rec)
        self.buf = b"".join(parts)
        n = min(count, want)
        self.count = count - n
        self.from_ = n
        return self.buf[:n]


class SeqLinesState(SeqFileState):
    """:class:`SeqFileState` of a text whose records are its lines (what
    :func:`split_records` cuts), read from the text itself: a record is
    found when a read reaches it (``bytes.find``/``rfind`` of the line
    ends), so an open makes no list of records.  ``/proc/kallsyms`` is
    7 MB in ~200,000 lines: cutting it at each open took 60-70 ms of the
    server's loop, and each 4 KB read walked ~100 records in Python
    (25 us); ``available_filter_functions`` the same at a tenth.  The
    bytes a read returns are :class:`SeqFileState`'s over the same
    records (tests/test_seq_file.py compares the two): ``index`` is the
    offset of the next record to show."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data
        self.records = None
        self.flat = None  # (never: a text shorter than a page is read as a slice)
        self.index = 0
        self.size = PAGE_SIZE
        self.buf = b""
        self.from_ = 0
        self.count = 0
        self.read_pos = 0

    def _line_end(self, start: int) -> int:
        """The end of the record (line) that begins at *start*."""
        end = self.data.find(b"\n", start)
        return len(self.data) if end < 0 else end + 1

    def traverse(self, offset: int) -> None:
        data = self.data
        self.index = 0
        self.count = self.from_ = 0
        self.buf = b""
        if not offset:
            return
        # every record up to the one *offset* falls in is walked, the
        # buffer growing for each that does not fit it
        start = data.rfind(b"\n", 0, offset) + 1 if offset < len(data) else len(data)
        end = self._line_end(start) if start < len(data) else start
        lines = data[:end].split(b"\n")  # (the last: a record without its \n, or empty)
        longest = max(max(map(len, lines[:-1]), default=-1) + 1, len(lines[-1]))
        while longest >= self.size:
            self.size <<= 1
        if offset >= len(data) or start == offset:
            self.index = min(offset, len(data))
            return
        self.index = end
        self.buf = data[start:end]
        self.from_ = offset - start
        self.count = end - offset

    def _fill(self, want: int) -> bytes:
        data, start = self.data, self.index
        self.from_ = 0
        if start >= len(data):  # EOF
            self.count = 0
            return b""
        end = self._line_end(start)
        while end - start >= self.size:  # need a bigger buffer
            self.size <<= 1
        if end - start < want:
            # more records while they are wanted (each starts before
            # *want* bytes are in) and fit (the buffer keeps a byte free)
            room = start + self.size - 1
            last = len(data) if len(data) <= room else data.rfind(b"\n", start, room) + 1
            wanted = self._line_end(start + want - 1) if start + want - 1 < len(data) else len(data)
            end = max(end, min(last, wanted))
        self.index = end
        count = end - start
        self.buf = data[start:end]
        n = min(count, want)
        self.count = count - n
        self.from_ = n
        return self.buf[:n]
