"""How the 6.18 kernel parses writes to tracefs control files
(kernel/trace/trace.c, trace_events.c, lib/bitmap-str.c), as plain
functions over the written bytes.  Each raises OSError with the kernel's
errno; none builds a Python int from an unbounded string.
"""

from __future__ import annotations

import errno
from typing import Optional

from fakedebugfs.engine.ftrace.ctype import SPACES  # lib/ctype's isspace: 0xA0 too
from fakedebugfs.engine.ftrace.kstrto import ULLONG_MAX, kstrtoul_from_user, kstrtoull

BUF_PAGE_SIZE = 4080  # data bytes of a ring-buffer page (PAGE_SIZE - header)
EVENT_BUF_SIZE = 127  # set_event's parser (EVENT_BUF_SIZE + 1 bytes)
PID_BUF_SIZE = 127
PID_MAX_DEFAULT = 0x8000
PID_LIST_MAX = 1 << 30  # pid_split(): pids from here on are refused
MAX_EVENT_SIZE = 4072  # ring_buffer_max_event_size() for 4 KiB sub-buffers
TRACE_MARKER_MAX_SIZE = 4096
PRINT_META = 8 + 8 + 2  # struct print_entry (ent, ip) + '\n' + '\0'
RAW_META = 8 + 4  # struct raw_data_entry (ent, id)
SAVEDCMD_HEADER = 131096  # sizeof(struct saved_cmdlines_buffer), as 6.18 x86_64 rounds
SAVEDCMD_ENTRY = 16 + 4  # TASK_COMM_LEN + the map_cmdline_to_pid slot
PAGE_SIZE = 4096


def _fail(code: int) -> OSError:
    return OSError(code, errno.errorcode[code])


# --- trace_parser ------------------------------------------------------------------

def trace_get_user(data: bytes, size: int) -> tuple[int, Optional[bytes]]:
    """``trace_get_user`` with a fresh parser of *size* bytes: (bytes
    consumed, the token or None when only spaces were written).  A token
    of *size* bytes or more is EINVAL."""
    i, n = 0, len(data)
    while i < n and data[i] in SPACES:
        i += 1
    if i == n or data[i] == 0:
        return min(i + 1, n), None
    start = i
    while i < n and data[i] not in SPACES and data[i] != 0:
        i += 1
    token = data[start:i]
    if len(token) > size - 1:
        raise _fail(errno.EINVAL)
    return min(i + 1, n), token


# --- numbers ---------------------------------------------------------------------------

def buffer_pages(kb_value: int, data_size: int = BUF_PAGE_SIZE) -> int:
    """``tracing_entries_write`` + ``ring_buffer_resize``: the value in KiB
    shifted by 10 (wrapping at 64 bits as the kernel's ``val <<= 10``), in
    sub-buffers of *data_size* data bytes (4080 for 4 KiB ones), at least
    two."""
    size = (kb_value << 10) & ULLONG_MAX
    return max(2, -(-size // data_size))


def buffer_kb_shown(pages: int, data_size: int = BUF_PAGE_SIZE) -> int:
    """``buffer_size_kb`` of a buffer of *pages* sub-buffers of *data_size*
    data bytes (``ring_buffer_size >> 10``)."""
    return pages * data_size >> 10


def subbuf_pages(pages: int, old_data: int, new_data: int) -> int:
    """``ring_buffer_subbuf_order_set``: the sub-buffers of a new size that
    hold what *pages* of the old size held, at least two."""
    return max(2, -(-(old_data * pages) // new_data))


def subbuf_order(data: bytes) -> int:
    """``buffer_subbuf_size_write``: KiB (times 1024, wrapping) in system
    pages rounded up to a power of two; orders 0 to 7 (sub-buffers of 4 to
    512 KiB), EINVAL past."""
    val = (kstrtoul_from_user(data) * 1024) & ULLONG_MAX
    pages = -(-val // PAGE_SIZE)
    order = (pages - 1).bit_length() if pages else 32  # fls(pages - 1), int
    if order > 7:
        raise _fail(errno.EINVAL)
    return order


def nsecs_write(data: bytes) -> int:
    """``tracing_nsecs_write``: microseconds stored as nanoseconds
    (``val * 1000`` wrapping); shown divided back (``tracing_nsecs_read``)."""
    return (kstrtoul_from_user(data) * 1000) & ULLONG_MAX


def saved_cmdlines_size(data: bytes) -> int:
    """``tracing_saved_cmdlines_size_write``: 1 to PID_MAX_DEFAULT, then
    rounded up to what the pages allocated for the buffer hold
    (``allocate_cmdlines_buffer``)."""
    val = kstrtoul_from_user(data)
    if not val or val > PID_MAX_DEFAULT:
        raise _fail(errno.EINVAL)
    size = SAVEDCMD_HEADER + val * SAVEDCMD_ENTRY
    alloc = PAGE_SIZE
    while alloc < size:
        alloc <<= 1
    return (alloc - SAVEDCMD_HEADER) // SAVEDCMD_ENTRY


DEFAULT_SAVED_CMDLINES = (1 << 18) - SAVEDCMD_HEADER  # 128 rounded: 6552
DEFAULT_SAVED_CMDLINES //= SAVEDCMD_ENTRY


def percent(data: bytes) -> int:
    """``buffer_percent_write``: 0 to 100."""
    val = kstrtoul_from_user(data)
    if val > 100:
        raise _fail(errno.EINVAL)
    return val


def bool_write(data: bytes) -> bool:
    """``event_enable_write``/``trace_options_write``: 0 or 1, else EINVAL."""
    val = kstrtoul_from_user(data)
    if val > 1:
        raise _fail(errno.EINVAL)
    return bool(val)


# --- pid lists -------------------------------------------------------------------------

def pid_write(data: bytes, current: set) -> tuple[int, set]:
    """``trace_pid_write``: every token of the write (``kstrtoul`` base 0,
    cast to ``pid_t``) added to a copy of *current*, all or nothing;
    EPERM (-1) for a pid the list cannot hold; a write with no pid clears
    the list.  Returns (bytes consumed, the new list)."""
    new, read, nr = set(current), 0, 0
    while read < len(data):
        used, token = trace_get_user(data[read:], PID_BUF_SIZE + 1)
        read += used
        if token is None:
            break
        try:
            val = kstrtoull(token, 0)
        except OSError:
            raise _fail(errno.EINVAL) from None
        pid = val & 0xFFFFFFFF
        if pid >= PID_LIST_MAX:
            raise _fail(errno.EPERM)
        new.add(pid)
        nr += 1
    return read, (new if nr else set())


# --- cpumask ---------------------------------------------------------------------------

def _hex(c: int) -> int:
    if 0x30 <= c <= 0x39:
        return c - 0x30
    if 0x61 <= (c | 0x20) <= 0x66:
        return (c | 0x20) - 0x61 + 10
    return -1


def bitmap_parse(data: bytes, nbits: int) -> int:
    """``bitmap_parse_user``: hex in 32-bit chunks separated by commas or
    spaces, read from the right, up to the first newline or NUL; EINVAL
    for a non-hex digit, EOVERFLOW for a chunk of more than 8 digits, more
    chunks than the mask has or bits past *nbits*."""
    end = len(data)
    for stop in (b"\n", b"\0"):
        at = data.find(stop)
        if at != -1:
            end = min(end, at)
    text = data[:end]
    chunks = (nbits + 31) // 32
    mask, chunk, pos = 0, 0, len(text) - 1
    while True:
        while pos >= 0 and (text[pos] in SPACES or text[pos] == 0x2C):
            pos -= 1
        if pos < 0:
            break
        if chunk >= chunks:
            raise _fail(errno.EOVERFLOW)
        value, shift = 0, 0
        while True:
            digit = _hex(text[pos])
            if digit < 0:
                raise _fail(errno.EINVAL)
            value |= digit << shift
            pos -= 1
            shift += 4
            if pos < 0 or text[pos] in SPACES or text[pos] == 0x2C:
                break
            if shift == 32:  # a ninth digit overflows; anything else is skipped
                if _hex(text[pos]) >= 0:
                    raise _fail(errno.EOVERFLOW)
                pos -= 1
                break
        mask |= value << (32 * chunk)
        chunk += 1
    if chunk * 32 >= nbits and mask >> nbits:
        raise _fail(errno.EOVERFLOW)
    return mask & ((1 << nbits) - 1)


# --- trace_marker ------------------------------------------------------------------------

def marker_count(n: int) -> int:
    """``tracing_mark_write``: at most TRACE_MARKER_MAX_SIZE bytes, then cut
    to what one event can hold (the count written is returned)."""
    cnt = min(n, TRACE_MARKER_MAX_SIZE)
    if cnt + PRINT_META > MAX_EVENT_SIZE:
        cnt = MAX_EVENT_SIZE - PRINT_META
    return cnt


def raw_marker_ok(n: int, id_counted_once: bool = True) -> bool:
    """``tracing_mark_raw_write``: an id, and all of it in one event.
    *id_counted_once*: False where the kernel sizes the event as
    ``sizeof(struct raw_data_entry) + cnt``, the id counted twice (6.12:
    4,060 bytes at most with 4 KiB sub-buffers, against 4,064; kversion.py)."""
    return 4 <= n and RAW_META + n - (4 if id_counted_once else 0) <= MAX_EVENT_SIZE


__all__ = [n for n in dir() if not n.startswith("_")]
