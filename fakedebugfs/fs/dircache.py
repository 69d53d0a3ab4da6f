"""Directory listings the kernel keeps, dropped whenever the fake changes one.

A listing of a tracing tree changes only when the fake changes it: an
instance ``mkdir``/``rmdir``, a dynamic event defined or removed, a module
loaded or unloaded, a tracer's option files, a ``define``.  So the kernel
may keep it, as it keeps names and attributes (docs/cost.md):

* OPENDIR is answered ENOSYS (pyfuse3's dircache.patch).  FUSE then sends
  no more OPENDIR or RELEASEDIR on the mount (``fc->no_opendir``) and
  opens every directory with ``FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR``
  (``fuse_file_open``): the first listing of a directory fills its cache
  with the READDIRPLUS replies, later ones read that cache without a
  request (``fuse_readdir_cached``).  A ``perf list`` or a walk of
  ``events/`` costs no round trip per directory once it is cached.  The
  first opendir itself succeeds for the client (ENOSYS there means "no
  opendir needed", not a failure).
* Every change of a directory's entries (``InodeTable.on_add`` /
  ``on_remove``: the tree's one way to change them once mounted) goes
  through :func:`listing_changed`: the directory's cached listing and
  attributes are dropped (``notify_inval_inode`` of the directory, which
  removes the pages the listing is kept in) before the request or control
  call that made the change is answered.  The invalidation is sent from
  the loop itself: unlike ``notify_inval_entry`` it takes no directory
  lock, only the locks of the cache's pages, which a client holds only
  while it copies entries from them, never while it waits for this
  server.
* A listing in flight when the change is made (its READDIRPLUS answered,
  not yet copied into the cache by the client's thread) would be cached
  after the invalidation.  The directory's mtime moves at each change,
  as tracefs' own ``simple_rmdir``/``simple_unlink`` move the parent's
  when an instance or a dynamic event goes: the kernel compares a cached
  listing's mtime with the directory's when a listing starts
  (``fuse_readdir_cached``, after a GETATTR: the invalidation dropped the
  attributes), so such a listing is thrown away at its first use.

What a tool sees is unchanged: the same names, the same attributes
(``st_size`` 0, the modes; a directory's mtime, which on tracefs moves
with removals and with eventfs' inodes being made again, is the time of
its last change).
"""

from __future__ import annotations

import logging
import os
import time

import pyfuse3

log = logging.getLogger(__name__)

# pyfuse3 with dircache.patch (readdir_nowait, FileInfo.cache_readdir):
# the kernel may keep listings (without it every listing is asked for);
# FAKEDEBUGFS_NO_DIRCACHE=1 in the server's environment asks for every
# listing as before (bench/bench_floor.py's walk row measures both)
CACHE_LISTINGS = hasattr(pyfuse3.FileInfo(), "cache_readdir") and \
    not os.environ.get("FAKEDEBUGFS_NO_DIRCACHE")


def listing_changed(node) -> None:
    """*node* (a directory) gained or lost an entry: its mtime and ctime
    move (strictly: two changes in one clock tick differ), its attributes
    are made again when next asked, and the kernel's cached listing and
    attributes of it are dropped (none cached, or not mounted yet:
    nothing to do)."""
    node.mtime_ns = max(time.time_ns(), node.mtime_ns + 1)
    node.attrs_generation = -1
    try:
        pyfuse3.invalidate_inode(node.inode)
    except Exception as err:  # ENOENT: the kernel has no inode for it
        log.debug("invalidate listing of %s: %s", node.name, err)


def fill(node, start_id: int, token, attrs) -> None:
    """READDIRPLUS of *node* from entry *start_id*: as many entries as
    the reply holds (``dcache_readdir``'s order, the order they were
    made; an entry's next id is its index + 1), each with its
    attributes (*attrs*), hidden ones (found by lookup only) left out."""
    children = node.children
    if start_id >= len(children):
        return
    for i, child in enumerate(list(children.values())[start_id:], start_id):
        if getattr(child, "hidden", False):
            continue
        if not pyfuse3.readdir_reply(token, child.name.encode(), attrs(child), i + 1):
            return
