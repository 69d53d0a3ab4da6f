"""The requests answered without the event loop: lookups, attributes, the
opens, reads, writes and releases of files that need not wait.

Our pyfuse3 (patches/pyfuse3-*-readfast.patch and ``-opfast.patch``)
offers LOOKUP, GETATTR, OPEN, READ, WRITE, RELEASE, OPENDIR, READDIRPLUS
(``-dircache.patch``) and RELEASEDIR first to the ``*_nowait`` method of the same name, inside the request's
callback: no coroutine, no task, no cancel scope.  A method answers (or
raises FUSEError) as the async handler would, or returns None, before it
changed anything, to hand the request to that handler
(:class:`~fakedebugfs.fs.operations.TreeOperations`): while a scripted
fault is active (a stall waits in the event loop), for a read that would
wait (``trace_pipe`` with nothing in it), for a file whose write may wait
(``FileOperations.write_waits``), for a write while ``write_defers()`` (the
mirror's backlog, drained in turns first).  The async handlers call the
same methods, so the two paths give the same answers (docs/fuse.md).
An open or write that removed nodes (``-:NAME`` to ``kprobe_events``) is
done here but answered by the async handler, once the kernel has dropped
its entries of those nodes (:mod:`~fakedebugfs.fs.notify`).

What a tool's control-plane sweep costs is mostly these requests: a
``trace-cmd reset`` makes some 31,000 (docs/cost.md).  Each control request
(a lookup, getattr, open, write, opendir) notes its time in the slicer
(``slicer.last_control``): the workload's turns wait for a sweep's end
(:meth:`~fakedebugfs.fs.slices.Slicer.quiet`).
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
from time import perf_counter

import pyfuse3

from fakedebugfs.fs.dircache import CACHE_LISTINGS, fill
from fakedebugfs.fs.fops import WRITER_PID, OpenFile
from fakedebugfs.fs.slices import slicer
from fakedebugfs.fs.tree import Dir, File

log = logging.getLogger(__name__)

TIMEOUT = 1.0  # lifetime of a mappable file's attributes (its size follows its data), s
STABLE_TIMEOUT = 86400.0  # of entries and other attributes: invalidated when they change
BUFFERS = (bytes, bytearray, memoryview)  # handed to FUSE as they are
_GENERATIONS = itertools.count(1)  # FastPath.attrs_generation: one number, one mount's nodes


def fuse_error(what: str, node, err: BaseException) -> None:
    """Raises the FUSE error an exception of a file operation stands for:
    an OSError's errno, ENOENT for a lookup failure, EIO (logged) for any
    other Exception; a FUSEError or a BaseException that is not an
    Exception (a cancellation) goes on as it is.  The node's path is only
    built for the log message of an unexpected failure."""
    if isinstance(err, pyfuse3.FUSEError) or not isinstance(err, Exception):
        raise err
    if isinstance(err, OSError) and err.errno:
        raise pyfuse3.FUSEError(err.errno) from None
    if isinstance(err, (KeyError, LookupError)):
        raise pyfuse3.FUSEError(errno.ENOENT) from None
    where = f" {node.path()}" if node is not None else ""
    log.exception("%s%s failed", what, where, exc_info=err)
    raise pyfuse3.FUSEError(errno.EIO) from None


class FastPath:
    """The synchronous half of :class:`~fakedebugfs.fs.operations.TreeOperations`
    (which sets ``table``, ``faults``, ``uid``/``gid``, ``mtime_ns``,
    ``open_files``, ``_fh``, the ``on_open``/``on_io``/``on_write`` hooks and
    ``write_defers``)."""

    # bumped by every change a node's attributes may follow (attrs_changed):
    # a node's EntryAttributes made at another generation is made again
    attrs_generation = 0

    # --- attributes -----------------------------------------------------

    def attrs(self, node) -> pyfuse3.EntryAttributes:
        """A node's entry and attributes (``tracefs_getattr``: ``st_size``
        0 but for a mappable file, whose size is its mapping's).  Kept on
        the node until :meth:`attrs_changed` (but a mappable file's, whose
        size follows its data): a ``trace-cmd reset`` asks for some 4,600
        files' and every event directory's (READDIRPLUS), and a directory's
        ``st_nlink`` counts its subdirectories."""
        if node.attrs_generation == self.attrs_generation:
            return node.entry
        entry = self.make_attrs(node)
        if entry.attr_timeout == STABLE_TIMEOUT:
            node.entry, node.attrs_generation = entry, self.attrs_generation
        return entry

    def attrs_changed(self) -> None:
        """What a node's attributes follow changed (its or an anchor's
        owner or mode, a directory joining or leaving one, the mount's
        owner): every kept EntryAttributes is made again when next asked."""
        self.attrs_generation = next(_GENERATIONS)

    def make_attrs(self, node) -> pyfuse3.EntryAttributes:
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = node.inode
        entry.entry_timeout = STABLE_TIMEOUT
        if type(node) is Dir or isinstance(node, Dir):
            entry.attr_timeout = STABLE_TIMEOUT
            entry.st_nlink = 2 + node.subdir_count()
        else:
            fops = node.fops
            if fops.mappable:
                entry.attr_timeout = TIMEOUT
                entry.st_size = fops.size()
            else:
                entry.attr_timeout = STABLE_TIMEOUT
            entry.st_nlink = 1
        entry.st_mode = node.mode
        entry.st_uid, entry.st_gid = self.owner(node)
        entry.st_blksize = 4096
        entry.st_atime_ns = self.mtime_ns
        entry.st_mtime_ns = entry.st_ctime_ns = node.mtime_ns or self.mtime_ns
        return entry

    def owner(self, node) -> tuple[int, int]:
        """``set_tracefs_inode_owner``: a node's uid and gid are its own when
        set (chown, chgrp), else those of its anchor, found as
        ``instance_inode`` finds it: the ``instances`` directory for what is
        under it, the root for the rest; the root's are the mount's
        (``uid=``, ``gid=``) unless set."""
        uid, gid = node.uid, node.gid
        while (uid is None or gid is None) and node.parent is not None:
            node = node.parent
            while node.parent is not None and node.dir_ops is None:
                node = node.parent  # up to instances/ or the root
            if uid is None:
                uid = node.uid
            if gid is None:
                gid = node.gid
        return (self.uid if uid is None else uid), (self.gid if gid is None else gid)

    def _node(self, inode):
        node = self.table.nodes.get(inode)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return node

    def _file(self, fh) -> OpenFile:
        f = self.open_files.get(fh)
        if f is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        return f

    def lookup_nowait(self, parent_inode, name, ctx=None):
        slicer.last_control = perf_counter()
        parent = self._node(parent_inode)
        if not isinstance(parent, Dir):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        name = os.fsdecode(name)
        node = parent.get(name)
        if node is None:
            if name == ".":
                node = parent
            elif name == "..":
                node = parent.parent or parent
            else:
                raise pyfuse3.FUSEError(errno.ENOENT)
        return self.attrs(node)

    def getattr_nowait(self, inode, ctx=None):
        slicer.last_control = perf_counter()
        return self.attrs(self._node(inode))

    # --- directories ----------------------------------------------------

    def opendir_nowait(self, inode, ctx=None):
        """ENOSYS once the kernel may keep listings: it then opens every
        directory without asking, with ``FOPEN_CACHE_DIR`` (fs/dircache.py);
        the opendir itself succeeds."""
        slicer.last_control = perf_counter()
        if not isinstance(self._node(inode), Dir):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        if CACHE_LISTINGS:
            raise pyfuse3.FUSEError(errno.ENOSYS)
        return inode

    def readdir_nowait(self, inode, fh, start_id, token):
        """READDIRPLUS: the directory is the request's *inode* (after
        the ENOSYS of opendir every *fh* is 0)."""
        slicer.last_control = perf_counter()
        node = self._node(inode)
        if not isinstance(node, Dir):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        fill(node, start_id, token, self.attrs)
        return True

    def releasedir_nowait(self, fh):
        return True

    # --- files ----------------------------------------------------------

    def open_nowait(self, inode, flags, ctx):
        """An open, unless a scripted fault may act on it (None)."""
        if self.faults is not None and self.faults.active:
            return None
        queued = self.invalidations.queued
        info = self.open_file(self._node(inode), flags, ctx)
        if self.invalidations.queued != queued:
            return self._defer(("open", inode, flags, ctx.pid), info)
        return info

    def open_file(self, node, flags, ctx) -> pyfuse3.FileInfo:
        """``do_dentry_open``: the file's ``open`` (and ``truncate`` for
        O_TRUNC), after the watched command's process events are in (unless
        the file is static); EISDIR for a directory."""
        if type(node) is not File and not isinstance(node, File):
            raise pyfuse3.FUSEError(errno.EISDIR)
        slicer.last_control = perf_counter()
        if self.on_open is not None and not node.static:
            try:
                self.on_open()
            except Exception:  # never the open's failure
                log.exception("before open %s", node.path())
        fops = node.fops
        if fops.catch_up and self.on_write is not None and flags & os.O_ACCMODE != os.O_WRONLY \
                and fops.catch_up_now(ctx.pid):
            self.before_io(node, self.on_write)
        f = OpenFile(node, flags, next(self._fh), ctx.pid, ctx.uid)
        try:
            fops.open(f)
            if flags & os.O_TRUNC:
                fops.truncate(f)
        except BaseException as err:
            fuse_error("open", node, err)
        self.open_files[f.fh] = f
        # fh, direct_io (but for a mappable file), keep_cache, nonseekable
        return pyfuse3.FileInfo(f.fh, not fops.mappable, True, fops.nonseekable)

    def read_nowait(self, fh, off, size, flags):
        """A read answered at once by the file's ``read_nowait``; None hands
        the read to the async ``read`` (no such open file, scripted faults,
        a file that would wait)."""
        f = self.open_files.get(fh)
        if f is None or (self.faults is not None and self.faults.active):
            return None
        f.flags = (f.flags & ~os.O_NONBLOCK) | (flags & os.O_NONBLOCK)  # fcntl(F_SETFL) too
        if self.on_io is not None and not f.node.static:
            self.before_io(f.node)
        try:
            data = f.node.fops.read_nowait(f, off, size)
        except BaseException as err:
            fuse_error("read", f.node, err)
        if data is None:
            return None
        return data if type(data) in BUFFERS else bytes(data)

    def write_nowait(self, fh, off, buf, pid):
        """A write by the file's ``write_nowait`` (the writer's *pid* is
        ``current``'s); None for a file whose write waits, or while a
        scripted fault is active."""
        slicer.last_control = perf_counter()
        f = self._file(fh)
        fops = f.node.fops
        if fops.write_waits or (self.faults is not None and self.faults.active) or (
                self.write_defers is not None and not f.node.static and self.write_defers()):
            return None
        WRITER_PID.set(pid)
        if (self.on_write or self.on_io) is not None and not f.node.static:
            self.before_io(f.node, self.on_write)
        queued = self.invalidations.queued
        try:
            written = fops.write_nowait(f, off, buf)
        except BaseException as err:
            fuse_error("write", f.node, err)
        if self.invalidations.queued != queued:  # (the key's copy of the data only then)
            return self._defer(("write", fh, off, bytes(buf)), written)
        return written

    def _defer(self, key: tuple, answer) -> None:
        """The request removed nodes (entry invalidations were queued while
        it ran): None, and the async handler gives *answer* (kept under
        *key*) once the kernel dropped its entries, so that a ``test -d``
        after ``echo -:p >> kprobe_events`` finds none."""
        self.settling[key] = answer

    def release_nowait(self, fh):
        f = self.open_files.pop(fh, None)
        if f is not None:
            try:
                f.node.fops.release(f)
            except BaseException as err:
                fuse_error("release", f.node, err)
        return True

    def before_io(self, node, hook=None) -> None:
        """``on_io`` (or *hook*) before a read or write; its failure is
        logged, never the request's."""
        try:
            (hook or self.on_io)()
        except Exception:
            log.exception("before reading or writing %s", node.path())
