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

``notify_store`` must not run in the task loop that answers requests: it
waits for the page lock, and a page a reader is faulting in (or reading
ahead) stays locked until the loop answers that READ, a deadlock.  So the
stores run in a worker thread (:class:`PagePublisher`), and a page counts as
produced for GET_PRODUCED and poll only once its store is done.  Writing 0
to ``enabled`` returns after the finished tail pages are published.
"""

from __future__ import annotations

import errno
import math

import trio

from ..engine.ktrace import KTRACE_BUF_GET_PRODUCED, U32 as U32_MASK, Ktrace
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
        publisher = self.tree.publisher
        if publisher.has_pages(self.cpu):
            return POLLIN_RDNORM
        pt.wait(self.tree.trace_wait)
        return POLLIN_RDNORM if publisher.has_pages(self.cpu) else 0

    def ioctl(self, f: OpenFile, cmd: int, in_buf: bytes, out_size: int):
        """``trace_data_ioctl``: GET_SIZE/PRODUCED/CONSUMED, PUT_CONSUMED."""
        arg = U32.unpack(in_buf[:4])[0] if len(in_buf) >= 4 else None
        try:
            value = self.tree.ktrace.ioctl(self.cpu, cmd, arg)
        except LookupError:
            raise fail(errno.ENOTTY) from None
        if value is None:
            return 0, b""
        if cmd == KTRACE_BUF_GET_PRODUCED:  # only pages the mapping shows
            value = self.tree.publisher.visible_produced(self.cpu) & U32_MASK
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

    def _entry(self):
        """The event, unless its module went away (the file was removed)."""
        entry = self.tree.ktrace.entries.get(self.name)
        if entry is None or not entry.sites:
            raise fail(errno.ENODEV)
        return entry

    async def read(self, f: OpenFile, off: int, size: int) -> bytes:
        entry = self._entry()
        return f"{int(entry.enabled)}\n".encode()[off:off + size]

    async def write(self, f: OpenFile, off: int, data: bytes) -> int:
        on = kernel_bool_write(data)
        self._entry()
        self.tree.ktrace.set_event_enabled(self.name, on)
        return len(data)


class EnabledFile(ValueFile):
    """``enabled``: a write of 0 returns once the pages it finished are
    published, so a reader can drain everything right after it."""

    def __init__(self, tree: "KtraceTree"):
        kt = tree.ktrace
        super().__init__(lambda: f"{int(kt.enabled)}\n", tree._write_enabled)
        self.tree = tree

    async def write(self, f: OpenFile, off: int, data: bytes) -> int:
        count = await super().write(f, off, data)
        await self.tree.publisher.wait_idle()
        return count


class PagePublisher:
    """Stores finished pages into the page cache from a worker thread, in
    order, and keeps per CPU the ``produced`` position whose pages are all
    stored (``published``)."""

    def __init__(self, tree: "KtraceTree"):
        self.tree = tree
        nr = len(tree.ktrace.buffers)
        self.published = [0] * nr
        self.generation = [0] * nr  # bumped by reset: older batches are stale
        self.pending = 0
        self.idle: trio.Event | None = None
        self._send = None

    # --- what readers see ---------------------------------------------------

    def visible_produced(self, cpu: int) -> int:
        """GET_PRODUCED: published pages, never behind ``consumed`` (an
        overwrite may move ``consumed`` past what was published)."""
        return max(self.published[cpu], self.tree.ktrace.buffers[cpu].consumed)

    def has_pages(self, cpu: int) -> bool:
        return self.visible_produced(cpu) != self.tree.ktrace.buffers[cpu].consumed

    # --- stores ---------------------------------------------------------------

    def reset(self, cpu: int) -> None:
        self.generation[cpu] += 1
        self.published[cpu] = self.tree.ktrace.buffers[cpu].produced

    def submit(self, stores: list, produced: dict[int, tuple[int, int]]) -> None:
        """Store ``[(inode, offset, bytes)]`` in order, then publish
        ``{cpu: (generation, produced)}`` and wake readers."""
        if self._send is None and not self._start():
            for inode, offset, data in stores:  # no task loop (unit use): inline
                store_pages(inode, offset, data)
            self._published(produced)
            return
        self.pending += 1
        self._send.send_nowait((stores, produced))

    def _start(self) -> bool:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            return False
        self._send, receive = trio.open_memory_channel(math.inf)
        self.idle = trio.Event()
        self.idle.set()
        trio.lowlevel.spawn_system_task(self._run, receive, name="ktrace-page-publisher")
        return True

    async def _run(self, receive) -> None:
        async for first in receive:
            batches = [first]
            while True:
                try:
                    batches.append(receive.receive_nowait())
                except trio.WouldBlock:
                    break
            latest: dict = {}  # the last content of each page wins
            for stores, _ in batches:
                for inode, offset, data in stores:
                    latest.pop((inode, offset), None)
                    latest[(inode, offset)] = data
            await trio.to_thread.run_sync(_store_all, latest)
            for _, produced in batches:
                self._published(produced)
            self.pending -= len(batches)
            if not self.pending:
                self.idle.set()

    def _published(self, produced: dict[int, tuple[int, int]]) -> None:
        for cpu, (generation, pos) in produced.items():
            if generation == self.generation[cpu]:
                self.published[cpu] = max(self.published[cpu], pos)
        self.tree.trace_wait.wake()

    async def wait_idle(self) -> None:
        """Return once every submitted store is done."""
        while self.pending:
            if self.idle.is_set():
                self.idle = trio.Event()
            await self.idle.wait()


def _store_all(latest: dict) -> None:
    for (inode, offset), data in latest.items():
        store_pages(inode, offset, data)


class KtraceTree:
    """Builds ``ktrace/`` and keeps it in step with the tracer."""

    def __init__(self, ktrace: Ktrace):
        self.ktrace = ktrace
        self.trace_wait = WaitQueue()
        self.dirty: list[set[int]] = [set() for _ in ktrace.buffers]
        self.publisher = PagePublisher(self)
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
        root.file("enabled", 0o664, EnabledFile(self))
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
                self.publisher.reset(cpu)
                self.dirty[cpu].update(range(self.ktrace.buffers[cpu].nr_pages))
            self.sync()

    # --- keeping mappings and pollers current ----------------------------

    def sync(self) -> None:
        """Push finished pages into the mappings (in the background), then
        publish them and wake readers."""
        stores, produced = [], {}
        for cpu, slots in enumerate(self.dirty):
            if not slots:
                continue
            buf = self.ktrace.buffers[cpu]
            inode = self.cpu_files[cpu].inode
            for slot in sorted(slots):
                stores.append((inode, slot * PAGE_SIZE,
                               bytes(buf.mem[slot * PAGE_SIZE:(slot + 1) * PAGE_SIZE])))
            slots.clear()
            produced[cpu] = (self.publisher.generation[cpu], buf.produced)
        if produced:
            self.publisher.submit(stores, produced)

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
