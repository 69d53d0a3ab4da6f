"""A relay channel (kernel/relay.c), as kmemtrace used it in 2008.

A channel has one buffer per CPU; a buffer is ``n_subbufs`` sub-buffers of
``subbuf_size`` bytes.  Writers reserve space in the current sub-buffer of
their CPU (``relay_reserve``/``relay_write``).  A record that does not fit
ends the sub-buffer: the rest of it becomes padding and the writer switches
to the next one (``relay_switch_subbuf``), asking the client's
``subbuf_start`` callback first.  The default callback, and kmemtrace's,
refuses the switch when every sub-buffer is full and unconsumed (no-overwrite
mode): the record is dropped, and the buffer stays "full" (``offset`` is
``subbuf_size + 1``) so that every later record on that CPU retries the
switch, and is dropped, until a reader has consumed a sub-buffer.

Readers use ``read()`` (``relay_file_read``): it never blocks, returns the
bytes written so far, including those of the sub-buffer being filled, skips
padding, and returns 0 when nothing is left.  ``poll()`` says readable only
when at least one *finished* sub-buffer is unconsumed (``relay_buf_empty``),
and readers are woken when a sub-buffer is finished.  The functions below are
transliterations of the kernel's, with the kernel's names in their
docstrings, so their corner cases are the kernel's.
"""

from __future__ import annotations

import mmap
from typing import Callable, Optional

# subbuf_start(buf, subbuf, prev_subbuf, prev_padding) -> accept the switch?
SubbufStart = Callable[["RelayBuffer", int, int, int], bool]


def subbuf_start_default(buf: "RelayBuffer", subbuf: int, prev_subbuf: int,
                         prev_padding: int) -> bool:
    """``subbuf_start_default_callback``: no-overwrite mode."""
    return not buf.full()


class RelayBuffer:
    """``struct rchan_buf``: one CPU's sub-buffers and the positions in them.

    ``data`` is the byte offset of the current sub-buffer in ``start``;
    ``offset`` the write position in it (``subbuf_size + 1`` while a switch
    was refused).  ``subbufs_produced``/``subbufs_consumed`` count finished
    and read sub-buffers; ``bytes_consumed`` is the read position in the
    oldest unconsumed one; ``padding[i]`` the unused tail of sub-buffer i.
    """

    def __init__(self, chan: "RelayChannel", cpu: int):
        self.chan = chan
        self.cpu = cpu
        # anonymous memory: pages are committed only once written, as vmalloc'd
        # relay buffers are, so many CPUs with large channels cost little
        self.start = mmap.mmap(-1, chan.subbuf_size * chan.n_subbufs)
        self.data = 0
        self.offset = 0
        self.subbufs_produced = 0
        self.subbufs_consumed = 0
        self.bytes_consumed = 0
        self.padding = [0] * chan.n_subbufs
        self.prev_padding = 0
        self.wakeup_pending = False  # a sub-buffer finished since readers were woken

    # --- state --------------------------------------------------------------

    def full(self) -> bool:
        """``relay_buf_full``: every sub-buffer is finished and unconsumed."""
        return self.subbufs_produced - self.subbufs_consumed >= self.chan.n_subbufs

    def empty(self) -> bool:
        """``relay_buf_empty``: no finished sub-buffer waits to be read."""
        return self.subbufs_produced == self.subbufs_consumed

    # --- writing --------------------------------------------------------------

    def reserve(self, length: int) -> Optional[int]:
        """``relay_reserve``: the position of *length* bytes in ``start``,
        or None when the record is dropped."""
        if self.offset + length > self.chan.subbuf_size:
            length = self.switch_subbuf(length)
            if not length:
                return None
        pos = self.data + self.offset
        self.offset += length
        return pos

    def switch_subbuf(self, length: int) -> int:
        """``relay_switch_subbuf``: finish the current sub-buffer (its tail is
        padding) and start the next if ``subbuf_start`` allows; returns
        *length*, or 0 when the record cannot be written."""
        chan = self.chan
        if length > chan.subbuf_size:
            chan.last_toobig = length
            return 0
        if self.offset != chan.subbuf_size + 1:
            self.prev_padding = chan.subbuf_size - self.offset
            old_subbuf = self.subbufs_produced % chan.n_subbufs
            self.padding[old_subbuf] = self.prev_padding
            self.subbufs_produced += 1
            self.wakeup_pending = True  # irq_work_queue(&buf->wakeup_work)
        old = self.data
        new_subbuf = self.subbufs_produced % chan.n_subbufs
        new = new_subbuf * chan.subbuf_size
        self.offset = 0
        if not chan.subbuf_start(self, new, old, self.prev_padding):
            self.offset = chan.subbuf_size + 1
            return 0
        self.data = new
        self.padding[new_subbuf] = 0
        return length

    # --- reading (relay_file_operations) --------------------------------------

    def subbufs_consumed_add(self, count: int) -> None:
        """``relay_subbufs_consumed``."""
        if count > self.chan.n_subbufs:
            return
        if self.subbufs_consumed + count > self.subbufs_produced:
            self.subbufs_consumed = self.subbufs_produced
        else:
            self.subbufs_consumed += count

    def read_consume(self, read_pos: int, bytes_consumed: int) -> None:
        """``relay_file_read_consume``: advance the reader past what it took
        and past a sub-buffer once all its data is read."""
        size, n = self.chan.subbuf_size, self.chan.n_subbufs
        if self.subbufs_produced == self.subbufs_consumed and self.offset == self.bytes_consumed:
            return
        if self.bytes_consumed + bytes_consumed > size:
            self.subbufs_consumed_add(1)
            self.bytes_consumed = 0
        self.bytes_consumed += bytes_consumed
        read_subbuf = self.subbufs_consumed % n if not read_pos else read_pos // size
        if self.bytes_consumed + self.padding[read_subbuf] == size:
            if read_subbuf == self.subbufs_produced % n and self.offset == size:
                return
            self.subbufs_consumed_add(1)
            self.bytes_consumed = 0

    def read_avail(self) -> bool:
        """``relay_file_read_avail``: is there anything to read?"""
        size, n = self.chan.subbuf_size, self.chan.n_subbufs
        self.read_consume(0, 0)
        produced, consumed = self.subbufs_produced, self.subbufs_consumed
        if self.offset > size:
            return produced != consumed
        if produced - consumed >= n:  # overwrite mode only
            consumed = produced - n + 1
            self.subbufs_consumed = consumed
            self.bytes_consumed = 0
        produced_pos = (produced % n) * size + self.offset
        consumed_pos = (consumed % n) * size + self.bytes_consumed
        if consumed_pos > produced_pos:
            produced_pos += n * size
        if consumed_pos == produced_pos:
            return self.offset == size and self.subbufs_produced > self.subbufs_consumed
        return True

    def read_start_pos(self) -> int:
        """``relay_file_read_start_pos``: the read position, past padding."""
        size, n = self.chan.subbuf_size, self.chan.n_subbufs
        consumed = self.subbufs_consumed % n
        read_pos = (consumed * size + self.bytes_consumed) % (n * size)
        read_subbuf = read_pos // size
        padding_start = (read_subbuf + 1) * size - self.padding[read_subbuf]
        if padding_start <= read_pos < (read_subbuf + 1) * size:
            read_pos = ((read_subbuf + 1) % n) * size
        return read_pos

    def read_subbuf_avail(self, read_pos: int) -> int:
        """``relay_file_read_subbuf_avail``: bytes readable from *read_pos*
        to the end of the data in its sub-buffer."""
        size = self.chan.subbuf_size
        write_subbuf = self.data // size
        write_offset = min(self.offset, size)
        read_subbuf, read_offset = divmod(read_pos, size)
        padding = self.padding[read_subbuf]
        if read_subbuf == write_subbuf:
            if read_offset + padding < write_offset:
                return write_offset - (read_offset + padding)
            return 0
        return size - padding - read_offset

    def read(self, count: int) -> bytes:
        """``relay_file_read``: up to *count* bytes; never blocks; b"" when empty."""
        chunks = []
        while count:
            if not self.read_avail():
                break
            read_start = self.read_start_pos()
            avail = min(count, self.read_subbuf_avail(read_start))
            if not avail:
                break
            chunks.append(bytes(self.start[read_start:read_start + avail]))
            count -= avail
            self.read_consume(read_start, avail)
        return b"".join(chunks)


class RelayChannel:
    """``struct rchan`` (``relay_open``): per-CPU buffers and the callbacks."""

    def __init__(self, subbuf_size: int, n_subbufs: int, nr_cpus: int,
                 subbuf_start: SubbufStart = subbuf_start_default):
        if subbuf_size <= 0 or n_subbufs <= 0:
            raise ValueError("relay_open: sub-buffer size and count must be positive")
        self.subbuf_size = subbuf_size
        self.n_subbufs = n_subbufs
        self.subbuf_start = subbuf_start
        self.last_toobig = 0
        self.bufs = [RelayBuffer(self, cpu) for cpu in range(nr_cpus)]

    def reserve(self, cpu: int, length: int) -> Optional[int]:
        """``relay_reserve`` on *cpu*'s buffer."""
        return self.bufs[cpu].reserve(length)

    def write(self, cpu: int, data: bytes) -> bool:
        """``relay_write``: copy *data* in, or drop it; True when written."""
        buf = self.bufs[cpu]
        pos = buf.reserve(len(data))
        if pos is None:
            return False
        buf.start[pos:pos + len(data)] = data
        return True
