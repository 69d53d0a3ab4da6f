"""The reading side of ``tracing/``: ``trace`` (``tracing_fops``),
``trace_pipe`` (``tracing_pipe_fops``) and ``per_cpu/cpuN/trace_pipe_raw``
(``tracing_buffers_fops``).

* ``trace`` is a seq file made at open: the header and every unread event,
  merged across CPUs by timestamp, nothing consumed.  Opening it for write
  with O_TRUNC clears the buffers (all of them, or its CPU's); writes are
  accepted and ignored (``tracing_write_stub``).
* ``trace_pipe`` consumes events as text lines, whole lines per read; it
  blocks while the buffers are empty (EAGAIN with O_NONBLOCK) and polls
  readable when an event waits.
* ``trace_pipe_raw`` hands out ring-buffer pages (``ring_buffer_read_page``),
  each a sub-buffer (``buffer_subbuf_size_kb``: 4 KiB unless set).
  A blocking read waits for a complete page; with O_NONBLOCK the unread part
  of the page being written is handed out too, and an empty buffer answers
  EAGAIN; ``ioctl(fd, 0)`` wakes a blocked reader, which then returns what
  there is (0 bytes if nothing).  Pages after overruns carry the
  missed-events flags.  Polls readable when a complete page waits.
  A read smaller than a sub-buffer gets a page holding only the events
  that fit in it (``len`` of ``ring_buffer_read_page``), handed out over
  that read and the next ones (the kernel's spare page): a reader of 4 KiB
  gets, from 8 KiB sub-buffers, a 4 KiB page then 4 KiB of zeros; if the
  next event does not fit, the read returns 0.
  Unlike the kernel (one page per read), a read of N sub-buffers gets up to
  N, each as one kernel read would give it; ``--raw-one-page`` mounts
  restore one page per read.

Formatting text is long work: ``trace`` makes its text as it is read (an
iterator per open file, the text kept for seeks back) and ``trace_pipe``
fills a read only for one turn of the server's slicer
(:mod:`fakedebugfs.fs.slices`), so no request waits behind a reader.
"""

from __future__ import annotations

import errno
import heapq
from typing import Iterator

from fakedebugfs.engine.core.layouts import BUF_PAGE_HDR_SIZE, RB_COMMIT_MASK
from fakedebugfs.engine.core.ringbuffer_read import decode_page_events
from fakedebugfs.fs.fops import POLLIN_RDNORM, FileOperations, OpenFile, fail
from fakedebugfs.fs.slices import slicer


# --- trace: text made as it is read ----------------------------------------------------

def unread_until(buf, end: tuple[int, int], cpu: int) -> Iterator[tuple]:
    """``(ts, cpu, payload)`` of the unread events of *buf* (CPU *cpu*'s) up
    to *end* (``(produced, tail)`` when the file was opened), oldest first,
    without consuming.  Pages the writer
    recycles meanwhile are skipped (their events are gone, as a kernel
    iterator overtaken by the writer skips them)."""
    pos, read, read_ts = buf.consumed, buf.read, buf.read_ts
    end_pos, end_tail = end
    while pos <= end_pos:
        if buf.produced < pos:  # the buffer was reset
            return
        if buf.produced - pos >= buf.size:  # overwritten since: jump to the oldest page left
            pos, read, read_ts = buf.consumed, buf.read, buf.read_ts
            if pos > end_pos:
                return
        psize = buf.page_size
        base = buf.slot(pos) * psize
        page = bytes(buf.mem[base:base + psize])  # a copy: the writer may come back
        if pos == end_pos:
            limit = end_tail
        else:
            limit = int.from_bytes(page[8:16], "little") & RB_COMMIT_MASK
        ts0 = read_ts if read else int.from_bytes(page[:8], "little")
        for kind, ts, _, _, payload in decode_page_events(
                page[BUF_PAGE_HDR_SIZE:], limit, ts0, read):  # bytes: payloads sliced once
            if kind == "data":
                yield ts, cpu, payload
        pos += psize
        read = 0


def trace_lines(ft, cpu) -> Iterator[str]:
    """``s_show`` of ``trace``: the header, then every event unread when the
    file was opened, merged across CPUs by timestamp.  The bounds are taken
    now; the text is made as the iterator is advanced."""
    cpus = range(len(ft.buffers)) if cpu is None else [cpu]
    ends = {c: (ft.buffers[c].produced, ft.buffers[c].tail) for c in cpus}

    def lines():
        yield ft.header(cpu)
        # (ts, cpu, payload) tuples: the heap holds one per CPU, so (ts, cpu) orders them
        streams = [unread_until(ft.buffers[c], ends[c], c) for c in cpus]
        yield from ft.text_chunks(heapq.merge(*streams))

    return lines()


class TextState:
    """An open ``trace``: the line iterator and the text made so far (kept,
    so a seek back reads the same text, as ``seq_file`` does)."""

    __slots__ = ("lines", "text", "done")

    def __init__(self, lines: Iterator[str]):
        self.lines = lines
        self.text = bytearray()
        self.done = False

    def fill(self, want: int, turn) -> None:
        """Make text until *want* bytes exist, the end, or the *turn* is over."""
        text, lines = self.text, self.lines
        while len(text) < want:
            try:
                text += next(lines).encode(errors="surrogateescape")
            except StopIteration:
                self.done = True
                return
            if turn.over():
                return


class TraceText(FileOperations):
    """``trace`` and ``per_cpu/cpuN/trace``.  Opened for reading, it shows
    every event recorded until the open (``tracing_open`` iterates the
    buffers as they are): what the simulated machine and a mirrored
    command did until then is fired first, all of it (``catch_up``; the
    50 ms an open otherwise drains left a loaded machine's ``cat trace``
    after a command with 19 of its 5,000 lines)."""

    catch_up = True

    def __init__(self, tree, cpu):
        self.tree = tree
        self.cpu = cpu

    def open(self, f: OpenFile) -> None:
        f.private = TextState(trace_lines(self.tree.ft, self.cpu)) if f.readable else None

    def truncate(self, f) -> None:
        """``tracing_open`` with FMODE_WRITE and O_TRUNC: reset the buffers."""
        self.tree.ft.reset(self.cpu)

    async def read(self, f: OpenFile, off: int, size: int) -> bytes:
        """``seq_read``: text is made in slicer turns until the read is
        filled or the text ends (other requests are answered between the
        turns; a read that came back after each turn made ``cat`` ask
        seven times as often)."""
        st: TextState = f.private
        if st is None:
            raise fail(errno.EBADF)
        while not st.done and len(st.text) < off + size:
            async with slicer.turn() as turn:
                st.fill(off + size, turn)
        return bytes(st.text[off:off + size])

    async def write(self, f: OpenFile, off: int, data: bytes) -> int:
        return len(data)


class TracePipe(FileOperations):
    """``trace_pipe`` and ``per_cpu/cpuN/trace_pipe``: consuming text."""

    nonseekable = True

    def __init__(self, tree, cpu):
        self.tree = tree
        self.cpu = cpu

    def open(self, f: OpenFile) -> None:
        # a line that did not fit the last read; first, what the tracer
        # hands out at open (its pipe_open: mmiotrace's version and devices)
        self.tree.ft.pipe_idx = 0  # iter->idx of a new pipe iterator (verbose latency lines)
        lead = getattr(self.tree.ft.tracer, "pipe_open", None)
        f.private = lead(self.tree.ft) if lead is not None else b""

    def _fill(self, f: OpenFile, size: int, turn) -> bytes:
        """Whole lines up to *size* bytes, or what was made in the *turn*."""
        ft = self.tree.ft
        out = bytearray(f.private)
        f.private = b""
        while len(out) < size:
            got = ft.consume(self.cpu)
            if got is None:
                break
            line = ft.format_line(*got).encode(errors="surrogateescape")
            if out and len(out) + len(line) > size:
                f.private = line
                break
            out += line
            if turn.over():
                break
        data, rest = bytes(out[:size]), bytes(out[size:])
        f.private = rest + f.private
        return data

    async def read(self, f: OpenFile, off: int, size: int) -> bytes:
        """``tracing_read_pipe``: wait for an event, then whole lines, as many
        as the read asks for or one slicer turn makes; a tracer's own
        ``read`` first (mmiotrace's note of lost events)."""
        ft = self.tree.ft
        note = getattr(ft.tracer, "pipe_note", None)
        if note is not None:
            text = note(ft)
            if text:
                return text
        while True:
            if f.private or not ft.empty(self.cpu):
                async with slicer.turn() as turn:
                    data = self._fill(f, size, turn)
                if data:
                    return data
                continue
            if f.nonblock:
                raise fail(errno.EAGAIN)
            await self.tree.trace_wait.wait()

    def poll(self, f: OpenFile, pt) -> int:
        """``tracing_poll_pipe``."""
        if f.private or not self.tree.ft.empty(self.cpu):
            return POLLIN_RDNORM
        pt.wait(self.tree.trace_wait)
        return 0 if self.tree.ft.empty(self.cpu) else POLLIN_RDNORM


class RawState:
    __slots__ = ("page", "size", "woken")

    def __init__(self):
        self.page = b""  # the rest of a page a short read left (the spare page)
        self.size = 0  # the sub-buffer size of that page
        self.woken = False


class TracePipeRaw(FileOperations):
    """``per_cpu/cpuN/trace_pipe_raw``: binary pages."""

    nonseekable = True

    def __init__(self, tree, cpu: int):
        self.tree = tree
        self.cpu = cpu
        self._one_page_opt = None  # --raw-one-page, looked up at the first read

    def open(self, f: OpenFile) -> None:
        f.private = RawState()

    def _one_page(self) -> bool:
        """``--raw-one-page`` (a mount option: the kernel's options are set
        when it is made)."""
        if self._one_page_opt is None:
            self._one_page_opt = self.tree.kernel.config.raw_one_page
        return self._one_page_opt

    async def read(self, f: OpenFile, off: int, size: int) -> bytes:
        """``tracing_buffers_read``, in bulk: as many whole sub-buffers as
        *size* holds (one for a read of one, as the kernel; up to 16 for
        a read of 16), each what one kernel read would hand out.  A read
        smaller than a sub-buffer gets a page of the events that fit in it
        (``ring_buffer_read_page`` with ``len`` *size*): its start, the next
        reads the rest (a spare page of another size than the sub-buffers'
        now is dropped, as the kernel frees it); 0 bytes when the next
        event does not fit.  ``--raw-one-page`` gives the kernel's one page
        per read."""
        st: RawState = f.private
        buf = self.tree.ft.buffers[self.cpu]
        psize = buf.page_size
        if st.page and st.size != psize:
            st.page = b""
        got = self.read_nowait(f, off, size)
        if got is not None:
            return got
        limit = size if size < psize else None
        while not st.page:
            # the kernel's read takes what there is (ring_buffer_read_page,
            # full 0); a blocking one here waits for a whole page, as splice
            # (emulated with read) does, until the buffer_percent mark
            partial = f.nonblock or st.woken or buf.watermark_hit(self.tree.ft.buffer_percent)
            page = buf.read_page(full_only=not partial, limit=limit)
            if page is not None:
                st.page, st.size = page, psize
                break
            if limit is not None and (buf.has_pages() or (partial and buf.read < buf.tail)):
                return b""  # the next event does not fit in the read
            if f.nonblock:
                raise fail(errno.EAGAIN)
            if st.woken:
                st.woken = False
                return b""
            await self.tree.trace_wait.wait()
            buf = self.tree.ft.buffers[self.cpu]
            psize = buf.page_size
            limit = size if size < psize else None
        if len(st.page) < psize or size < 2 * psize or self._one_page():
            data, st.page = st.page[:size], st.page[size:]
            return data
        pages, st.page = [st.page], b""
        return self._more(f, buf, pages, size // psize - 1)

    def read_nowait(self, f: OpenFile, off: int, size: int):
        """The common bulk read, answered at once: whole sub-buffers as they
        are (a view of the ring buffer), as many as *size* holds, when no
        spare page is left and at least one complete page waits; None
        otherwise (:meth:`read` answers, waiting if it must)."""
        buf = self.tree.ft.buffers[self.cpu]
        psize = buf.page_size
        if f.private.page or size < 2 * psize or self._one_page():
            return None
        want = size // psize
        got = buf.read_pages(want)
        if not got:
            return None
        left = want - len(got) // psize
        return got if not left else self._more(f, buf, [got], left)

    @staticmethod
    def _more(f: OpenFile, buf, pages: list, left: int):
        """*pages* and up to *left* more whole pages, as one buffer."""
        partial = f.nonblock or f.private.woken
        psize = buf.page_size
        while left > 0:
            got = buf.read_pages(left) or buf.read_page(full_only=not partial)
            if got is None:
                break
            pages.append(got)
            left -= len(got) // psize
        return pages[0] if len(pages) == 1 else b"".join(pages)

    def poll(self, f: OpenFile, pt) -> int:
        """``tracing_buffers_poll`` (``trace_poll``): always readable with
        the ``block`` option, else once the buffer is ``buffer_percent``
        full (``ring_buffer_poll_wait``, :meth:`watermark_hit`; 0: any
        data); the rest of a page a short read left is readable too."""
        ft = self.tree.ft
        if f.private.page or ft.poll_ready(self.cpu):
            return POLLIN_RDNORM
        pt.wait(self.tree.trace_wait)
        return POLLIN_RDNORM if ft.poll_ready(self.cpu) else 0

    def ioctl(self, f: OpenFile, cmd: int, in_buf: bytes, out_size: int):
        """``tracing_buffers_ioctl``: cmd 0 wakes the waiters; others ENOTTY."""
        if cmd != 0:
            raise fail(errno.ENOTTY)
        f.private.woken = True
        self.tree.trace_wait.wake()
        return 0, b""
