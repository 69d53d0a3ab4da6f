"""``ktrace/``: the debugfs files of the 2009 ktrace RFC (``create_debugfs``).

    ktrace/enabled          0664  global switch, "%u\\n"; strict base-10 writes
    ktrace/info             0444  "version 1.0.0" and one line per event
    ktrace/overflow         0444  events lost to overwrite, "%lu\\n"
    ktrace/reset            0220  a nonzero write empties the buffers
    ktrace/events/<name>    0660  per-event switch, like enabled
    ktrace/buffers/cpuN     0440  poll, mmap of the page array, KTRACE_BUF_* ioctls

The buffer protocol is docs/ktrace.md#the-buffer-protocol.  Pages the writer finishes are
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
import logging
import queue
import threading

import trio

from fakedebugfs.engine.ktrace.tracer import Ktrace
from fakedebugfs.engine.core.layouts import PAGE_SIZE, ktrace_u32, packer
from fakedebugfs.fs.cache import store_pages
from fakedebugfs.fs.fops import (POLLIN_RDNORM, FileOperations, OpenFile, SeqFile, ValueFile,
    WriteFile, fail, kernel_bool_write)
from fakedebugfs.fs.tree import Dir
from fakedebugfs.fs.waitqueue import WaitQueue

U32 = packer(ktrace_u32)
log = logging.getLogger(__name__)


class TraceData(FileOperations):
    """``tracedata_file_operations``: one CPU's buffer."""

    mappable = True

    def __init__(self, tree: "KtraceTree", cpu: int):
        self.tree = tree
        self.cpu = cpu

    def size(self) -> int:
        return self.tree.ktrace.buf_size

    def read_nowait(self, f: OpenFile, off: int, size: int) -> bytes:
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
            value = self.tree.ktrace.ioctl(self.cpu, cmd, arg, reader=f.fh)
        except LookupError:
            raise fail(errno.ENOTTY) from None
        if value is None:
            return 0, b""
        if out_size < 4:
            raise fail(errno.EFAULT)
        return 0, U32.pack(value)

    def release(self, f: OpenFile) -> None:
        self.tree.ktrace.release(self.cpu, reader=f.fh)


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

    def read_nowait(self, f: OpenFile, off: int, size: int) -> bytes:
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
    stored (``published``, updated by the worker under a lock so that
    GET_PRODUCED sees it at once).  The pending count, ``idle`` and the
    wake-up of pollers are the task loop's (``run_sync_soon``)."""

    def __init__(self, tree: "KtraceTree"):
        self.tree = tree
        nr = len(tree.ktrace.buffers)
        self.published = [0] * nr
        self.generation = [0] * nr  # bumped by reset: older batches are stale
        self.pending = 0
        self.idle: trio.Event | None = None
        self._queue: queue.SimpleQueue | None = None
        self._token = None
        self._lock = threading.Lock()  # published/generation: loop and worker

    # --- what readers see ---------------------------------------------------

    def visible_produced(self, cpu: int) -> int:
        """GET_PRODUCED: published pages, never behind ``consumed`` (an
        overwrite may move ``consumed`` past what was published)."""
        return max(self.published[cpu], self.tree.ktrace.buffers[cpu].consumed)

    def has_pages(self, cpu: int) -> bool:
        return self.visible_produced(cpu) != self.tree.ktrace.buffers[cpu].consumed

    # --- stores ---------------------------------------------------------------

    def reset(self, cpu: int) -> None:
        with self._lock:
            self.generation[cpu] += 1
            self.published[cpu] = self.tree.ktrace.buffers[cpu].produced

    def submit(self, stores: list, produced: dict[int, tuple[int, int]]) -> None:
        """Store ``[(inode, offset, bytes)]`` in order, then publish
        ``{cpu: (generation, produced)}`` and wake readers."""
        if self._queue is None and not self._start():
            for inode, offset, data in stores:  # no task loop (unit use): inline
                store_pages(inode, offset, data)
            self._publish([produced])
            self._done(1)
            return
        self.pending += 1
        self._queue.put((stores, produced))

    def _start(self) -> bool:
        try:
            self._token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            return False
        self.idle = trio.Event()
        self._queue = queue.SimpleQueue()
        threading.Thread(target=self._worker, name="ktrace-page-publisher", daemon=True).start()
        return True

    def _worker(self) -> None:
        q = self._queue
        while True:
            batches = [q.get()]
            while not q.empty():
                batches.append(q.get())
            for stores, _ in batches:  # in order: the newest content wins
                for inode, offset, data in stores:
                    try:
                        store_pages(inode, offset, data)
                    except Exception:  # never let the publisher die
                        log.exception("storing %d bytes at %d of inode %d", len(data), offset, inode)
            # published at once (GET_PRODUCED need not wait for the loop's
            # next turn); the count and the wake-up go through the loop
            self._publish([p for _, p in batches])
            try:
                self._token.run_sync_soon(self._done, len(batches))
            except trio.RunFinishedError:
                return

    def _publish(self, batches: list) -> None:
        with self._lock:
            for produced in batches:
                for cpu, (generation, pos) in produced.items():
                    if generation == self.generation[cpu]:
                        self.published[cpu] = max(self.published[cpu], pos)

    def _done(self, count: int) -> None:
        if self._queue is not None:
            self.pending -= count
            if not self.pending:
                self.idle.set()
        self.tree.trace_wait.wake()

    async def wait_idle(self) -> None:
        """Return once every submitted store is done."""
        while self.pending:
            if self.idle.is_set():
                self.idle = trio.Event()
            await self.idle.wait()


class KtraceTree:
    """Builds ``ktrace/`` and keeps it in step with the tracer."""

    def __init__(self, ktrace: Ktrace):
        self.ktrace = ktrace
        self.trace_wait = WaitQueue()
        self.dirty: list[set[int]] = [set() for _ in ktrace.buffers]
        self.publisher = PagePublisher(self)
        ktrace.visible_produced = self.publisher.visible_produced  # GET_PRODUCED
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
        root.file("reset", 0o220, WriteFile(self._write_reset))
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
            # one store per run of adjacent pages: each store takes the GIL
            # back from the task loop, which holds it while the workload runs
            for first, last in _runs(sorted(slots)):
                stores.append((inode, first * PAGE_SIZE,
                               bytes(buf.mem[first * PAGE_SIZE:(last + 1) * PAGE_SIZE])))
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


def _runs(slots: list[int]):
    """``(first, last)`` of each run of consecutive numbers in sorted *slots*."""
    start = prev = None
    for slot in slots:
        if prev is not None and slot == prev + 1:
            prev = slot
            continue
        if start is not None:
            yield start, prev
        start = prev = slot
    if start is not None:
        yield start, prev


def create_tree(kernel) -> Dir:
    """``ktrace/`` for *kernel* (a :class:`fakedebugfs.engine.kernel.Kernel`)."""
    return KtraceTree(kernel.ktrace).root


__all__ = ["KtraceTree", "create_tree"]
