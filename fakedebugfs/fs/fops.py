"""File operations, as ``struct file_operations`` gives them in the kernel.

A tree file is a name, a mode and one :class:`FileOperations`.  The base
class answers like a debugfs file lacking that operation: ``read`` and
``write`` fail with EINVAL, ``ioctl`` with ENOTTY, ``poll`` reports the
default mask.  The helpers below are the kernel's usual building blocks:
:class:`SeqFile` (``seq_file``: records shown at open), :class:`WriteFile`, :class:`ValueFile`
(``simple_read_from_buffer`` + a parsed write), :func:`strict_strtoul`.
"""

from __future__ import annotations

import contextvars
import errno
import os
import select
from typing import Callable, Optional, Union

from fakedebugfs.engine.core.errors import kernel_error
from fakedebugfs.fs.seq_file import seq_open

# the pid of the task whose write is being handled (the FUSE request's
# header: the writer, which need not be the task that opened the file);
# None when the FUSE binding cannot tell (then OpenFile.pid, the opener's)
WRITER_PID: contextvars.ContextVar = contextvars.ContextVar("writer_pid", default=None)


def writer_pid(f: "OpenFile") -> int:
    """``current->pid`` of a write: the writer's pid, else the opener's."""
    return WRITER_PID.get() or f.pid

DEFAULT_POLLMASK = select.POLLIN | select.POLLOUT | select.POLLRDNORM | select.POLLWRNORM
POLLIN_RDNORM = select.POLLIN | select.POLLRDNORM


fail = kernel_error  # an errno for the caller, as the kernel returns ``-code``


class OpenFile:
    """``struct file``: one open of a tree file."""

    __slots__ = ("node", "flags", "fh", "private", "pid", "uid")

    def __init__(self, node, flags: int, fh: int, pid: int = 0, uid: int = 0):
        self.node = node
        self.flags = flags
        self.fh = fh
        self.private = None  # the file operations' per-open state
        self.pid = pid
        self.uid = uid

    @property
    def nonblock(self) -> bool:
        return bool(self.flags & os.O_NONBLOCK)

    @property
    def readable(self) -> bool:
        return (self.flags & os.O_ACCMODE) in (os.O_RDONLY, os.O_RDWR)

    @property
    def writable(self) -> bool:
        return (self.flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)


class PollTable:
    """``poll_table``: where a poll operation registers its wait queues."""

    def __init__(self, handle, fh: int):
        self.handle = handle
        self.fh = fh

    def wait(self, queue) -> None:
        """``poll_wait``: wake this poller when *queue* is woken."""
        if self.handle is not None:
            queue.add_poller(self.fh, self.handle)


class FileOperations:
    """A file without operations: what debugfs does for a missing one."""

    #: served through the page cache with ``st_size`` = :meth:`size`
    #: (needed for mmap); otherwise ``direct_io`` with ``st_size`` 0.
    mappable = False
    nonseekable = False
    #: every write goes to the async :meth:`write` (a class that defines
    #: ``write`` and not :meth:`write_nowait`: its writes may wait)
    write_waits = False
    #: what the simulated machine did until now is recorded before the file
    #: opens (the adapter's ``on_write`` hook: a paced workload's owed
    #: events, the mirror's backlog), for a file that shows at open what the
    #: tracers made of the events (an event's ``hist``)
    catch_up = False

    def catch_up_now(self, pid: int) -> bool:
        """Whether this open by *pid* of a ``catch_up`` file fires what is
        owed first (a file may answer per open: trees/tracing_hist.py)."""
        return True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "read" in cls.__dict__ and "read_nowait" not in cls.__dict__:
            cls.read_nowait = FileOperations.read_nowait  # its own read answers
        if "write_nowait" in cls.__dict__:
            cls.write_waits = False
        elif "write" in cls.__dict__:
            cls.write_waits = True  # its own write answers, always

    def open(self, f: OpenFile) -> None:
        """Called at open; may raise OSError."""

    def read_nowait(self, f: OpenFile, off: int, size: int):
        """The read's answer when it can be given at once (no waiting, no
        fault to act), as :meth:`read` would give it; None to have
        :meth:`read` answer.  The FUSE adapter asks this first: a read
        answered here skips the event loop's task (the hot path of
        ``trace_pipe_raw`` and of the control files).  A class that
        defines ``read`` and not this gets None."""
        return None

    async def read(self, f: OpenFile, off: int, size: int) -> bytes:
        """:meth:`read_nowait`'s answer; EINVAL without one, as debugfs
        answers for a missing ``.read``."""
        data = self.read_nowait(f, off, size)
        if data is None:
            raise fail(errno.EINVAL)
        return data

    def write_nowait(self, f: OpenFile, off: int, data: bytes) -> int:
        """A write that need not wait, answered at once (the count taken);
        EINVAL without one, as debugfs answers for a missing ``.write``.
        The FUSE adapter calls this in the request's callback.  A class
        whose write may wait defines ``write`` (async) instead (then its
        ``write_waits`` is True and every write goes to its ``write``)."""
        raise fail(errno.EINVAL)

    async def write(self, f: OpenFile, off: int, data: bytes) -> int:
        """:meth:`write_nowait`'s answer."""
        return self.write_nowait(f, off, data)

    def poll(self, f: OpenFile, pt: PollTable) -> int:
        return DEFAULT_POLLMASK

    def ioctl(self, f: OpenFile, cmd: int, in_buf: bytes, out_size: int) -> tuple[int, bytes]:
        raise fail(errno.ENOTTY)

    def truncate(self, f: Optional[OpenFile]) -> None:
        """O_TRUNC at open, or truncate(2): most tracing files ignore it."""

    def release(self, f: OpenFile) -> None:
        """The last close of *f*."""

    def size(self) -> int:
        return 0


def read_from_buffer(text, off: int, size: int) -> bytes:
    """``simple_read_from_buffer``: the slice of *text* at *off*."""
    data = text.encode(errors="surrogateescape") if isinstance(text, str) else text
    return data[off:off + size]


class SeqFile(FileOperations):
    """``seq_file``: the records are shown at open and read as
    ``seq_read_iter`` reads them (:mod:`fakedebugfs.fs.seq_file`: a large
    read stops at a record boundary, the buffer grows for a large record).
    *show* returns a list of records (str or bytes each), or one text cut
    into records by *records* (default: after each ``\\n``, one line per
    record); a file the kernel reads with ``simple_read_from_buffer``
    returns its text as a list of one record."""

    def __init__(self, show: Callable[[], Union[str, bytes, list]],
                 records: Optional[Callable[[str], list]] = None):
        self.show = show
        self.records = records

    def open(self, f: OpenFile) -> None:
        f.private = seq_open(self.show() if f.readable else b"", self.records)

    def read_nowait(self, f: OpenFile, off: int, size: int) -> bytes:
        return f.private.read(off, size)


class WriteFile(FileOperations):
    """A file with a write operation only: a write goes to *store* (raising
    OSError to refuse) and is accepted whole; a read fails with EINVAL, as
    debugfs answers for a missing ``.read``."""

    def __init__(self, store: Optional[Callable[[bytes], None]] = None):
        self.store = store

    def write_nowait(self, f: OpenFile, off: int, data: bytes) -> int:
        if self.store is None:
            raise fail(errno.EINVAL)
        self.store(data)
        return len(data)


class ValueFile(WriteFile):
    """A text value made on every read, and written like a :class:`WriteFile`
    (EINVAL without *store*)."""

    def __init__(self, show: Callable[[], str], store: Optional[Callable[[bytes], None]] = None):
        super().__init__(store)
        self.show = show

    def read_nowait(self, f: OpenFile, off: int, size: int) -> bytes:
        return read_from_buffer(self.show(), off, size)


def strict_strtoul(data: bytes, base: int = 10) -> int:
    """The kernel's ``strict_strtoul`` (lib/vsprintf.c, 2.6.29) on a write
    buffer: digits, optionally one trailing newline; the string ends at the
    first NUL; the value wraps at 64 bits.  Raises EINVAL otherwise."""
    text = data.split(b"\0", 1)[0]
    if not text:
        raise fail(errno.EINVAL)
    value, i = 0, 0
    while i < len(text):
        ch = text[i:i + 1]
        if not ch.isdigit() and not (base == 16 and ch.lower() in b"abcdef"):
            break
        digit = int(ch, 16)
        if digit >= base:
            break
        value = (value * base + digit) & 0xFFFFFFFFFFFFFFFF
        i += 1
    if i == len(text) or (i == len(text) - 1 and text[i:] == b"\n"):
        return value
    raise fail(errno.EINVAL)


def kernel_bool_write(data: bytes, limit: int = 64) -> bool:
    """``trace_debugfs_write`` of the 2009 ktrace RFC: at most ``limit - 1`` bytes,
    ``strict_strtoul`` base 10, any nonzero value means 1."""
    if len(data) >= limit:
        raise fail(errno.EINVAL)
    return strict_strtoul(data, 10) != 0
