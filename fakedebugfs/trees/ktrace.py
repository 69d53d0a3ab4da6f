"""``ktrace/``: the debugfs files of the ktrace RFC (seed 001, ``create_debugfs``).

    ktrace/enabled          0664  global switch, "%u\\n"; strict base-10 writes
    ktrace/info             0444  "version 1.0.0" and one line per event
    ktrace/overflow         0444  events lost to overwrite, "%lu\\n"
    ktrace/reset            0220  a nonzero write empties the buffers
    ktrace/events/<name>    0660  per-event switch, like enabled
    ktrace/buffers/cpuN     0440  poll, mmap of the page array, KTRACE_BUF_* ioctls

The buffer protocol is DESIGN section 2.  Pages the writer finishes are
pushed into the page cache of ``buffers/cpuN`` (``notify_store``) so a
reader's mapping sees them at once; readers are woken when pages complete
and when tracing is disabled.
"""

from __future__ import annotations

import errno

from ..engine.ktrace import Ktrace
from ..engine.layouts import PAGE_SIZE, ktrace_u32, packer
from ..fs.cache import store_pages
from ..fs.fops import (
    POLLIN_RDNORM,
    FileOperations,
    OpenFile,
    SeqFile,
    ValueFile,
    fail,
    kernel_bool_write,
)
from ..fs.tree import Dir
from ..fs.waitqueue import WaitQueue

U32 = packer(ktrace_u32)


class TraceData(FileOperations):
    """``tracedata_file_operations``: one CPU's buffer."""

    mappable = True

    def __init__(self, tree: "KtraceTree", cpu: int):
        self.tree = tree
        self.cpu = cpu

    def size(self) -> int:
        return self.tree.ktrace.buf_size

    async def read(self, f: OpenFile, off: int, size: int) -> bytes:
        # Page-cache fills for the mapping arrive here; FUSE cannot tell them
        # from read(2), so read(2) sees the page array too (README: differences).
        mem = self.tree.ktrace.buffers[self.cpu].mem
        return bytes(mem[off:off + size])

    def poll(self, f: OpenFile, pt) -> int:
        """``trace_data_poll``: readable when a complete page is waiting."""
        if not f.readable:
            return 0
        buf = self.tree.ktrace.buffers[self.cpu]
        if buf.has_pages():
            return POLLIN_RDNORM
        pt.wait(self.tree.trace_wait)
        return POLLIN_RDNORM if buf.has_pages() else 0

    def ioctl(self, f: OpenFile, cmd: int, in_buf: bytes, out_size: int):
        """``trace_data_ioctl``: GET_SIZE/PRODUCED/CONSUMED, PUT_CONSUMED."""
        arg = U32.unpack(in_buf[:4])[0] if len(in_buf) >= 4 else None
        try:
            value = self.tree.ktrace.ioctl(self.cpu, cmd, arg)
        except LookupError:
            raise fail(errno.ENOTTY) from None
        if value is None:
            return 0, b""
        if out_size < 4:
            raise fail(errno.EFAULT)
        return 0, U32.pack(value)

    def release(self, f: OpenFile) -> None:
        self.tree.ktrace.release(self.cpu)


class EventControl(FileOperations):
    """``ktracecontrol_file_operations``: ``events/<name>``."""

    def __init__(self, tree: "KtraceTree", name: str):
        self.tree = tree
        self.name = name

    async def read(self, f: OpenFile, off: int, size: int) -> bytes:
        entry = self.tree.ktrace.entries.get(self.name)
        if entry is None:
            raise fail(errno.ENODEV)
        return f"{int(entry.enabled)}\n".encode()[off:off + size]

    async def write(self, f: OpenFile, off: int, data: bytes) -> int:
        on = kernel_bool_write(data)
        if self.name not in self.tree.ktrace.entries:
            raise fail(errno.ENODEV)
        self.tree.ktrace.set_event_enabled(self.name, on)
        return len(data)


class KtraceTree:
    """Builds ``ktrace/`` and keeps it in step with the tracer."""

    def __init__(self, ktrace: Ktrace):
        self.ktrace = ktrace
        self.trace_wait = WaitQueue()
        self.dirty: list[set[int]] = [set() for _ in ktrace.buffers]
        self.root = self.create_debugfs()
        for cpu, buf in enumerate(ktrace.buffers):
            buf.on_page_done = self.dirty[cpu].add
        ktrace.on_change.append(self._registry_changed)
        ktrace.engine.listeners.append(self.sync)

    def create_debugfs(self) -> Dir:
        """The directory table of the RFC's ``create_debugfs``."""
        kt = self.ktrace
        root = Dir("ktrace")
        buffers = root.mkdir("buffers")
        self.cpu_files = [
            buffers.file(f"cpu{cpu}", 0o440, TraceData(self, cpu))
            for cpu in range(len(kt.buffers))
        ]
        root.file("enabled", 0o664, ValueFile(lambda: f"{int(kt.enabled)}\n", self._write_enabled))
        root.file("info", 0o444, SeqFile(kt.info))
        root.file("overflow", 0o444, ValueFile(lambda: f"{kt.overflow()}\n"))
        root.file("reset", 0o220, ValueFile(_no_read, self._write_reset))
        self.events = root.mkdir("events")
        for entry in kt.order:
            self.events.file(entry.name, 0o660, EventControl(self, entry.name))
        return root

    # --- writes -------------------------------------------------------------

    def _write_enabled(self, data: bytes) -> None:
        self.ktrace.set_enabled(kernel_bool_write(data))
        self.sync()

    def _write_reset(self, data: bytes) -> None:
        if kernel_bool_write(data):
            self.ktrace.reset()
            for cpu in range(len(self.ktrace.buffers)):
                self.dirty[cpu].update(range(self.ktrace.buffers[cpu].nr_pages))
            self.sync()

    # --- keeping mappings and pollers current ----------------------------

    def sync(self) -> None:
        """Push finished pages into the mappings, then wake readers."""
        woke = False
        for cpu, slots in enumerate(self.dirty):
            if not slots:
                continue
            mem = self.ktrace.buffers[cpu].mem
            inode = self.cpu_files[cpu].inode
            for slot in sorted(slots):
                store_pages(inode, slot * PAGE_SIZE, mem[slot * PAGE_SIZE:(slot + 1) * PAGE_SIZE])
            slots.clear()
            woke = True
        if woke:
            self.trace_wait.wake()

    def _registry_changed(self, what: str, name: str) -> None:
        """The module notifier: an event file appears or goes."""
        if what == "add":
            self.events.file(name, 0o660, EventControl(self, name))
        else:
            self.events.remove(name)


def _no_read() -> str:
    raise fail(errno.EINVAL)


def create_tree(kernel) -> Dir:
    """``ktrace/`` for *kernel* (a :class:`fakedebugfs.kernel.Kernel`)."""
    return KtraceTree(kernel.ktrace).root


__all__ = ["KtraceTree", "create_tree"]
