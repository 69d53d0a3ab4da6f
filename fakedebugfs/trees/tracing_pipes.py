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
* ``trace_pipe_raw`` hands out ring-buffer pages (``ring_buffer_read_page``).
  A blocking read waits for a complete page; with O_NONBLOCK the unread part
  of the page being written is handed out too, and an empty buffer answers
  EAGAIN; ``ioctl(fd, 0)`` wakes a blocked reader, which then returns what
  there is (0 bytes if nothing).  Pages after overruns carry the
  missed-events flags.  Polls readable when a complete page waits.
"""

from __future__ import annotations

import errno

from ..fs.fops import POLLIN_RDNORM, FileOperations, OpenFile, fail


class TraceText(FileOperations):
    """``trace`` and ``per_cpu/cpuN/trace``."""

    def __init__(self, tree, cpu):
        self.tree = tree
        self.cpu = cpu

    def open(self, f: OpenFile) -> None:
        f.private = None

    def truncate(self, f) -> None:
        """``tracing_open`` with FMODE_WRITE and O_TRUNC: reset the buffers."""
        self.tree.ft.reset(self.cpu)

    async def read(self, f: OpenFile, off: int, size: int) -> bytes:
        if f.private is None:
            f.private = "".join(self.tree.ft.trace_text(self.cpu)).encode()
        return f.private[off:off + size]

    async def write(self, f: OpenFile, off: int, data: bytes) -> int:
        return len(data)


class TracePipe(FileOperations):
    """``trace_pipe`` and ``per_cpu/cpuN/trace_pipe``: consuming text."""

    nonseekable = True

    def __init__(self, tree, cpu):
        self.tree = tree
        self.cpu = cpu

    def open(self, f: OpenFile) -> None:
        f.private = b""  # a line that did not fit the last read

    def _fill(self, f: OpenFile, size: int) -> bytes:
        ft = self.tree.ft
        out = bytearray(f.private)
        f.private = b""
        while len(out) < size:
            got = ft.consume(self.cpu)
            if got is None:
                break
            line = ft.format_line(*got).encode()
            if out and len(out) + len(line) > size:
                f.private = line
                break
            out += line
        data, rest = bytes(out[:size]), bytes(out[size:])
        f.private = rest + f.private
        return data

    async def read(self, f: OpenFile, off: int, size: int) -> bytes:
        """``tracing_read_pipe``: wait for an event, then whole lines."""
        while True:
            data = self._fill(f, size)
            if data:
                return data
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
    __slots__ = ("page", "woken")

    def __init__(self):
        self.page = b""  # the rest of a page a short read left
        self.woken = False


class TracePipeRaw(FileOperations):
    """``per_cpu/cpuN/trace_pipe_raw``: binary pages."""

    nonseekable = True

    def __init__(self, tree, cpu: int):
        self.tree = tree
        self.cpu = cpu

    def open(self, f: OpenFile) -> None:
        f.private = RawState()

    async def read(self, f: OpenFile, off: int, size: int) -> bytes:
        """``tracing_buffers_read``."""
        st: RawState = f.private
        buf = self.tree.ft.buffers[self.cpu]
        while not st.page:
            partial = f.nonblock or st.woken
            page = buf.read_page(full_only=not partial)
            if page is not None:
                st.page = page
                break
            if f.nonblock:
                raise fail(errno.EAGAIN)
            if st.woken:
                st.woken = False
                return b""
            await self.tree.trace_wait.wait()
        data, st.page = st.page[:size], st.page[size:]
        return data

    def poll(self, f: OpenFile, pt) -> int:
        """``tracing_buffers_poll``: readable with a complete page waiting."""
        buf = self.tree.ft.buffers[self.cpu]
        if f.private.page or buf.has_pages():
            return POLLIN_RDNORM
        pt.wait(self.tree.trace_wait)
        return POLLIN_RDNORM if buf.has_pages() else 0

    def ioctl(self, f: OpenFile, cmd: int, in_buf: bytes, out_size: int):
        """``tracing_buffers_ioctl``: cmd 0 wakes the waiters; others ENOTTY."""
        if cmd != 0:
            raise fail(errno.ENOTTY)
        f.private.woken = True
        self.tree.trace_wait.wake()
        return 0, b""
