"""pyfuse3 ``Operations`` serving a :class:`~fakedebugfs.fs.tree.Dir` tree.

A thin adapter in the manner of pyfuse3's ``examples/tmpfs.py``: it maps
FUSE requests to the nodes' file operations and OSErrors to errnos.  A
client's bytes can never stop the server: an unexpected exception in a file
operation is logged and answered with EIO.

Scripted faults (:mod:`fakedebugfs.instrument.faults`) act here, before the
file operation runs: a stall waits (a signal still interrupts a read, and a
stopping server answers EINTR), an errno fault fails the request, a short
read asks the file for fewer bytes (so a consuming file keeps the rest for
the next read), a poll delay holds back the wake-up notification.

What the kernel may keep (docs/cost.md): a name's entry, and every
node's attributes but a mappable file's (whose size follows its data),
are cached for ``STABLE_TIMEOUT``; the server invalidates them itself when
they change: a node that leaves (``invalidate_entry``, which also keeps a
later node of the same name from being mistaken for it), a directory
joining or leaving a listed one (the parent's ``st_nlink``), chown/chgrp of
a directory (the owners its descendants inherit), a remount.  A lookup of
a name that does not exist is never cached (ENOENT, not an entry of inode
0), so a ``define`` or an instance ``mkdir`` is seen at once; a
directory's listing is kept until it changes (fs/dircache.py).  File contents are not kept in
the page cache: tracefs reports ``st_size`` 0, and the kernel reads a
cached file only up to its size.
"""

from __future__ import annotations

import contextvars
import errno
import gc
import itertools
import logging
import os
import time
from typing import Awaitable, Callable, Optional

import pyfuse3
import trio

from fakedebugfs.fs.dircache import fill, listing_changed
from fakedebugfs.fs.fastpath import BUFFERS, FastPath, fuse_error
from fakedebugfs.fs.fops import WRITER_PID, OpenFile, PollTable
from fakedebugfs.fs.notify import EntryInvalidations
from fakedebugfs.fs.ownership import Ownership
from fakedebugfs.fs.tree import Dir, File, InodeTable
from fakedebugfs.fs.waitqueue import WaitQueue

# the writer's pid of a WRITE (patches/pyfuse3-*-ioctl.patch; None unpatched)
_WRITE_PID = getattr(pyfuse3, "write_pid", None)
# the open flags of a READ (the same patch; a stand-in answering None unpatched)
_READ_FLAGS = getattr(pyfuse3, "read_flags", None) or contextvars.ContextVar("read_flags", default=None)

log = logging.getLogger(__name__)


def has_ioctl_support() -> bool:
    """True when the installed pyfuse3 carries our patch (ioctl, interrupted
    reads, the flags of each read)."""
    return "ioctl" in pyfuse3.Operations.__dict__ and hasattr(pyfuse3, "read_flags")


class _Guard:
    """Turns exceptions from file operations into FUSE errors
    (:func:`~fakedebugfs.fs.fastpath.fuse_error`); the hot paths
    (fs/fastpath.py) call that in an ``except`` clause instead (no context
    manager to make and enter)."""

    def __init__(self, what: str, node=None):
        self.what = what
        self.node = node

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if err is not None:
            fuse_error(self.what, self.node, err)
        return False


def _teardown(node: Dir) -> None:
    """A removed directory's nodes let go of their entries and file
    operations: the cycles through them (a file's operations close over
    the tree that holds the file) are broken, so the subtree is freed by
    reference counting at once.  No full collection (which scans every
    object, frozen ones unfrozen: 0.1-0.4 s, more with every instance)
    is needed; what little stays in cycles (the trace array's own, its
    memory released already) stays in the collector's permanent
    generation.  Nothing can reach the nodes any more: they left the
    inode table, and no file under them is open (EBUSY otherwise)."""
    for sub in list(node.walk(make=False)):
        if isinstance(sub, Dir):
            sub._children.clear()
            sub._populate = None
            sub.dir_ops = None
        else:
            sub.fops = None


def settle_heap(collect: bool = False) -> None:
    """Move every live object to the collector's permanent generation
    (``gc.freeze``), after a full collection if *collect*.  The trees,
    the engine and the event catalogue are some 100,000 objects that
    live as long as the mount; a full collection scanning them takes
    40-70 ms, which a FUSE request waiting behind it would see as a stall.
    Frozen, they are never scanned; what is made later still is."""
    if collect:
        gc.unfreeze()
        gc.collect()
    gc.freeze()


class TreeOperations(Ownership, FastPath, pyfuse3.Operations):
    """Serves a tree whose files carry kernel-style file operations: the
    requests that need not wait are answered by :class:`FastPath`'s
    ``*_nowait`` methods, the rest here (scripted faults, waiting reads
    and writes, directory changes)."""

    supports_dot_lookup = False
    enable_writeback_cache = False

    def __init__(self, root: Dir, uid: int = 0, gid: int = 0, faults=None):
        super().__init__()
        self.faults = faults  # a FaultTable, or None
        self._stall_wait = WaitQueue() if faults is not None else None
        self.table = InodeTable(root)
        self.table.on_remove = self._removed
        self.table.on_add = self._added
        self.invalidations = EntryInvalidations()  # the server closes it before pyfuse3.close
        self.uid, self.gid = uid, gid
        self.mtime_ns = time.time_ns()
        self.attrs_changed()  # a generation of its own: no node's kept attributes are ours yet
        self.open_files: dict[int, OpenFile] = {}
        self._fh = itertools.count(1)
        # answers the fast path made that removed nodes: the async handler
        # gives them once the kernel has dropped its entries of those nodes
        self.settling: dict[tuple, object] = {}
        # called before every open: what happened before a reader opens a
        # file is in it (the server's watch of `run`'s command, server/watch.py)
        self.on_open: Optional[Callable[[], None]] = None
        # before every read, write and poll of a file that is not static (--mirror:
        # the kernel's events so far drained into the buffers first)
        self.on_io: Optional[Callable[[], None]] = None
        # before a write, when set, instead of on_io (--mirror: every event
        # before a write to a control file is in, however many are waiting;
        # a paced workload's events owed until then)
        self.on_write: Optional[Callable[[], None]] = None
        # a write first awaits drain_before_write while write_defers() says so
        # (--mirror: a backlog drained in slicer turns, other requests answered
        # meanwhile), then runs on_write
        self.write_defers: Optional[Callable[[], bool]] = None
        self.drain_before_write: Optional[Callable[[], Awaitable[None]]] = None

    # --- attributes (FastPath.attrs) -------------------------------------

    async def lookup(self, parent_inode, name, ctx=None):
        return self.lookup_nowait(parent_inode, name, ctx)

    async def getattr(self, inode, ctx=None):
        return self.getattr_nowait(inode, ctx)

    async def setattr(self, inode, attr, fields, fh, ctx):
        node = self._node(inode)
        if fields.update_uid or fields.update_gid or fields.update_mode:
            self._chown_chmod(node, attr, fields, ctx)
            self.attrs_changed()  # the node's, and its descendants' owners
        if fields.update_size and isinstance(node, File):
            with _Guard("truncate"):
                node.fops.truncate(self.open_files.get(fh))
            await self.invalidations.settled(self.invalidations.queued)
        return self.attrs(node)

    async def statfs(self, ctx):
        data = pyfuse3.StatvfsData()
        data.f_bsize = data.f_frsize = 4096
        data.f_namemax = 255
        return data

    # --- directories ----------------------------------------------------

    async def opendir(self, inode, ctx):
        return self.opendir_nowait(inode, ctx)

    async def readdir(self, fh, start_id, token):
        # (readdir_nowait answers all with our pyfuse3; fh: opendir's inode)
        fill(self._node(fh), start_id, token, self.attrs)

    async def releasedir(self, fh):
        pass

    # --- directory changes (tracefs: only instances/ has mkdir/rmdir) ---------

    def _dir_ops(self, parent_inode):
        parent = self._node(parent_inode)
        if not isinstance(parent, Dir):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return parent, parent.dir_ops

    async def mkdir(self, parent_inode, name, mode, ctx):
        """``tracefs_create_instance_dir``'s mkdir; EPERM elsewhere (no
        ``i_op->mkdir``), EEXIST for a taken name."""
        parent, ops = self._dir_ops(parent_inode)
        name = os.fsdecode(name)
        if name in parent.children:
            raise pyfuse3.FUSEError(errno.EEXIST)
        if ops is None:
            raise pyfuse3.FUSEError(errno.EPERM)
        collecting = gc.isenabled()
        gc.disable()  # a tracefs instance is ~14,000 new nodes: no collections meanwhile
        WRITER_PID.set(getattr(ctx, "pid", None))  # current: the kernel's calls in mkdir are its
        try:
            with _Guard(f"mkdir {name}"):
                node = ops.mkdir(name)
                parent.add(node)
        finally:
            if collecting:
                gc.enable()
        settle_heap()  # the new instance lives until rmdir: out of the collector's scans
        return self.attrs(node)

    async def rmdir(self, parent_inode, name, ctx):
        """``instance_rmdir``: ENOENT for no such directory, EBUSY while a
        file under it is open (the trace array's ``ref``), EPERM elsewhere."""
        parent, ops = self._dir_ops(parent_inode)
        node = parent.children.get(os.fsdecode(name))
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        if ops is None or not isinstance(node, Dir):
            raise pyfuse3.FUSEError(errno.ENOTDIR if ops is not None else errno.EPERM)
        if any(_under(f.node, node) for f in self.open_files.values()):
            raise pyfuse3.FUSEError(errno.EBUSY)
        with _Guard(f"rmdir {node.name}"):
            ops.rmdir(node.name)
            parent.remove(node.name)
        _teardown(node)


    async def create(self, parent_inode, name, mode, flags, ctx):
        raise pyfuse3.FUSEError(errno.EACCES)  # no i_op->create: may_o_create

    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        # what mknod(2) answers on 6.18's tracefs and debugfs (checked)
        raise pyfuse3.FUSEError(errno.EACCES)

    async def unlink(self, parent_inode, name, ctx):
        raise pyfuse3.FUSEError(errno.EPERM)

    async def symlink(self, parent_inode, name, target, ctx):
        raise pyfuse3.FUSEError(errno.EPERM)

    async def link(self, inode, new_parent_inode, new_name, ctx):
        raise pyfuse3.FUSEError(errno.EPERM)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        raise pyfuse3.FUSEError(errno.EPERM)

    # --- files ----------------------------------------------------------

    async def open(self, inode, flags, ctx):
        node = self._node(inode)
        if isinstance(node, Dir):
            raise pyfuse3.FUSEError(errno.EISDIR)
        info = self.settling.pop(("open", inode, flags, ctx.pid), None)
        if info is None:
            if self.faults is not None and self.faults.active:
                await self._inject(node, "open")
            info = self.open_file(node, flags, ctx)
        # O_TRUNC of dynamic_events: the probes' directories are gone
        await self.invalidations.settled(self.invalidations.queued)
        return info

    async def read(self, fh, off, size):
        f = self.open_files.get(fh)
        if f is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        flags = _READ_FLAGS.get()  # f_flags now: fcntl(F_SETFL) included
        if flags is not None:
            f.flags = (f.flags & ~os.O_NONBLOCK) | (flags & os.O_NONBLOCK)
        if self.faults is not None and self.faults.active:
            size = await self._inject(f.node, "read", size)
        if self.on_io is not None and not f.node.static:
            self.before_io(f.node)
        try:
            data = await f.node.fops.read(f, off, size)
        except BaseException as err:
            fuse_error("read", f.node, err)
        return data if type(data) in BUFFERS else bytes(data)

    async def write(self, fh, off, buf):
        f = self._file(fh)
        data = bytes(buf)
        written = self.settling.pop(("write", fh, off, data), None)  # done by write_nowait
        if written is None:
            WRITER_PID.set(_WRITE_PID.get() if _WRITE_PID is not None else None)
            if self.faults is not None and self.faults.active:
                await self._inject(f.node, "write")
            if self.drain_before_write is not None and not f.node.static:
                await self.drain_before_write()
            if (self.on_write or self.on_io) is not None and not f.node.static:
                self.before_io(f.node, self.on_write)
            with _Guard("write", f.node):
                written = await f.node.fops.write(f, off, data)
        await self.invalidations.settled(self.invalidations.queued)  # "-:NAME": its directory
        return written

    async def flush(self, fh):
        raise pyfuse3.FUSEError(errno.ENOSYS)  # no round trip on every close

    async def release(self, fh):
        self.release_nowait(fh)

    async def poll(self, inode, fh, poll_handle, ctx):
        f = self._file(fh)
        if self.faults is not None and self.faults.active:
            await self._inject(f.node, "poll")
            delay = self.faults.peek(_rel(f.node), "poll", "poll_delay")
            if delay is not None and poll_handle is not None:
                poll_handle = _DelayedNotify(poll_handle, self.faults, _rel(f.node))
        if self.on_io is not None and not f.node.static:
            self.before_io(f.node)
        with _Guard("poll", f.node):
            return f.node.fops.poll(f, PollTable(poll_handle, fh))

    async def ioctl(self, inode, fh, cmd, arg, in_buf, out_size, flags, ctx):
        f = self._file(fh)
        if self.faults is not None and self.faults.active:
            await self._inject(f.node, "ioctl")
        with _Guard("ioctl", f.node):
            result, out = f.node.fops.ioctl(f, cmd, in_buf, out_size)
            return result, out[:out_size]

    # --- scripted faults ----------------------------------------------------

    async def _inject(self, node, op: str, size: int = 0) -> int:
        """The faults scripted for *op* on *node*: a stall, then an errno;
        for a read, returns the size to ask the file for (short reads; not
        for page-cache fills of mappable files, which must be whole)."""
        path = _rel(node)
        stall = self.faults.take(path, op, "stall")
        if stall is not None:
            try:
                with trio.move_on_after(stall.ms / 1000):
                    await self._stall_wait.wait()  # only a server shutdown wakes it
            except OSError as err:
                raise pyfuse3.FUSEError(err.errno) from None
        fault = self.faults.take(path, op, "errno")
        if fault is not None:
            raise pyfuse3.FUSEError(fault.errno)
        if op == "read" and not node.fops.mappable:
            fault = self.faults.take(path, op, "short_read")
            if fault is not None:
                size = min(size, fault.bytes)
        return size

    # --- tree changes while mounted ---------------------------------------

    def _removed(self, parent: Dir, node) -> None:
        """A node left the tree: drop the kernel's cached dentry, and the
        parent's listing and attributes (a directory's leaving changes its
        ``st_nlink``)."""
        listing_changed(parent)
        self.invalidations.put(parent.inode, node.name.encode(), node.inode)
        if isinstance(node, Dir):
            self.attrs_changed()

    def _added(self, parent: Dir, node) -> None:
        """A node joined a directory while mounted (a ``define``'s event
        directory, a tracer's option file): its name needs nothing (no
        lookup that missed it was cached); the parent's listing and
        attributes go (a directory changes its ``st_nlink``)."""
        listing_changed(parent)
        if isinstance(node, Dir):
            self.attrs_changed()


def _under(node, top) -> bool:
    while node is not None:
        if node is top:
            return True
        node = node.parent
    return False


def _rel(node) -> str:
    """A node's path as faults match it: relative to the mount root."""
    return node.path().lstrip("/")


class _DelayedNotify:
    """A poll handle whose wake-ups a ``poll_delay`` fault holds back: each
    :meth:`notify` uses one count of the fault and reaches the kernel
    ``ms`` later (at once when no count is left)."""

    __slots__ = ("handle", "faults", "path")

    def __init__(self, handle, faults, path: str):
        self.handle, self.faults, self.path = handle, faults, path

    def notify(self) -> None:
        fault = self.faults.take(self.path, "poll", "poll_delay")
        if fault is None:
            self.handle.notify()
            return
        try:
            trio.lowlevel.spawn_system_task(self._later, fault.ms / 1000)
        except RuntimeError:  # no trio loop (unit use): deliver now
            self.handle.notify()

    async def _later(self, seconds: float) -> None:
        await trio.sleep(seconds)
        try:
            self.handle.notify()
        except Exception as err:  # the poller went away; a system task must not raise
            log.debug("delayed poll notify failed: %s", err)
