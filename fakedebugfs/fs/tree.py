"""The tree of directories and files a mount serves.

Like debugfs, a file is a name, a mode and its file operations
(``debugfs_create_file(name, mode, parent, data, fops)``); a directory is
``debugfs_create_dir``.  Nodes get inode numbers when they join the tree and
may come and go while mounted (the adapter is told through ``on_remove``).

A directory may be *lazy*, as tracefs' eventfs is (``eventfs_create_dir``,
6.6+): its entries are made the first time anyone looks inside (a
readdir makes them all; a lookup, in stages, only as far as its name), so
a mount with 2,305 event directories is ready without making their 11,500
files, and its ``st_nlink`` may be known before they are.
"""

from __future__ import annotations

import stat
from typing import Callable, Iterator, Optional

from fakedebugfs.fs.fops import FileOperations

ROOT_INODE = 1


class Node:
    # the EntryAttributes the adapter made for this node, and at which of its
    # generations (fs/fastpath.py FastPath.attrs); -1: none
    entry = None
    attrs_generation = -1
    # a directory's mtime and ctime once its entries changed (fs/dircache.py);
    # 0: the mount's
    mtime_ns = 0

    def __init__(self, name: str, mode: int):
        self.name = name
        self.mode = mode
        self.inode = 0
        self.parent: Optional["Dir"] = None
        self.uid: Optional[int] = None  # set by chown; None: the mount's owner
        self.gid: Optional[int] = None

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    def path(self) -> str:
        parts, node = [], self
        while node.parent is not None:
            parts.append(node.name)
            node = node.parent
        return "/" + "/".join(reversed(parts))


class File(Node):
    """``debugfs_create_file``: a regular file with *fops*.

    *static*: the file's text is made from what only the fake changes (an
    event's ``format``, ``available_events``, ``README``): never from the
    buffers, nor from what a traced command did, so an open of it need not
    wait for the process events to be taken in (:mod:`fakedebugfs.fs.operations`)."""

    def __init__(self, name: str, mode: int, fops: FileOperations, static: bool = False):
        super().__init__(name, stat.S_IFREG | (mode & 0o7777))
        self.fops = fops
        self.static = static


class Dir(Node):
    """``debugfs_create_dir`` (mode 0755 unless told otherwise).

    *populate*, when given, is called once with the directory, the first
    time its ``children`` are asked for, to add its entries; or a list of
    such stages, made in turn, a lookup (:meth:`get`) making only those up
    to the one that has its name (a system's ``filter`` without its event
    directories).  *subdirs*: how many of its entries are directories
    (eventfs knows a directory's link count before making its entries: a
    READDIRPLUS of ``events/`` gives each system's ``st_nlink`` without
    making its event directories)."""

    def __init__(self, name: str, mode: int = 0o755, populate=None,
                 subdirs: Optional[int] = None):
        super().__init__(name, stat.S_IFDIR | (mode & 0o7777))
        self._children: dict[str, Node] = {}
        if callable(populate):
            populate = [populate]
        # the stages not made yet (None: every entry is made)
        self._populate: Optional[list[Callable[["Dir"], None]]] = list(populate or ()) or None
        self._subdirs = subdirs if self._populate else None
        self._filling = False  # populate() is adding the first entries
        self.table: Optional["InodeTable"] = None
        # inode operations mkdir/rmdir (tracefs' instances/): an object with
        # mkdir(name) -> Dir and rmdir(name), raising OSError to refuse
        self.dir_ops = None

    def subdir_count(self) -> int:
        """How many of its entries are directories (a lazy directory with a
        *subdirs* hint says so without making them)."""
        if self._populate is not None and self._subdirs is not None:
            return self._subdirs
        return sum(1 for child in self.children.values() if isinstance(child, Dir))

    def _fill(self, until: Optional[str] = None) -> None:
        """Make the entries not made yet: every stage, or with *until* the
        stages up to the one that makes that name."""
        while self._populate and (until is None or until not in self._children):
            stage = self._populate.pop(0)
            if not self._populate:
                self._populate = None
            self._filling = True
            try:
                stage(self)
            finally:
                self._filling = False

    @property
    def children(self) -> dict[str, Node]:
        if self._populate is not None:
            self._fill()
        return self._children

    @property
    def made(self) -> bool:
        """Whether every entry is made (a lazy directory not looked into
        yet, or only partly, is not)."""
        return self._populate is None

    def entries(self, make: bool = True) -> dict[str, Node]:
        """Its entries; without *make*, only those made so far."""
        return self.children if make else self._children

    def get(self, name: str) -> Optional[Node]:
        """The entry *name* (None: there is none), a lazy directory's
        stages made only as far as that takes."""
        if self._populate is not None and name not in self._children:
            self._fill(name)
        return self._children.get(name)

    def add(self, node: Node) -> Node:
        if node.name in (self._children if self._filling else self.children):
            raise FileExistsError(f"{self.path()}/{node.name}")
        node.parent = self
        self._children[node.name] = node
        if self.table is not None:
            self.table.attach(node)
            if not self._filling and self.table.on_add is not None:
                self.table.on_add(self, node)
        return node

    def mkdir(self, name: str, mode: int = 0o755, populate=None,
              subdirs: Optional[int] = None) -> "Dir":
        """A directory (*populate*, *subdirs*: as :class:`Dir`'s)."""
        return self.add(Dir(name, mode, populate, subdirs))

    def file(self, name: str, mode: int, fops: FileOperations, static: bool = False) -> File:
        return self.add(File(name, mode, fops, static))

    def remove(self, name: str) -> None:
        node = self.children.pop(name, None)
        if node is not None and self.table is not None:
            self.table.detach(self, node)

    def walk(self, make: bool = True) -> Iterator[Node]:
        """Every node below; lazy directories are made as they are reached,
        or, without *make*, left as they are (only what exists now)."""
        yield self
        for child in list((self.children if make else self._children).values()):
            if isinstance(child, Dir):
                yield from child.walk(make)
            else:
                yield child


class InodeTable:
    """Inode numbers for every node under a root; tells listeners when a
    node joins a directory already listed (``on_add``: not a lazy
    directory's first entries, which nobody can have seen missing) or
    leaves (``on_remove``), so the kernel's caches can be invalidated.

    The table shrinks back when most of its nodes have gone: a dict keeps
    the size it grew to (1,000 instances of 86 nodes: a 2.6 MB table kept
    after their rmdir), so once it holds under a quarter of its most it is
    copied into one of its present size (the kernel's inodes of a removed
    instance are freed at its rmdir, ``evict``)."""

    def __init__(self, root: Dir):
        self.nodes: dict[int, Node] = {}
        self.most = 0  # the most nodes the table held since it was last copied
        self.next_inode = ROOT_INODE
        self.on_remove: Optional[Callable[[Dir, Node], None]] = None
        self.on_add: Optional[Callable[[Dir, Node], None]] = None
        self.attach(root)

    def attach(self, node: Node) -> None:
        """Number *node* and what exists below it (a lazy directory's
        entries are numbered when it makes them: it has the table then)."""
        for sub in (node.walk(make=False) if isinstance(node, Dir) else (node,)):
            sub.inode = self.next_inode
            self.next_inode += 1
            self.nodes[sub.inode] = sub
            if isinstance(sub, Dir):
                sub.table = self
        self.most = max(self.most, len(self.nodes))

    def detach(self, parent: Dir, node: Node) -> None:
        for sub in (node.walk(make=False) if isinstance(node, Dir) else (node,)):
            self.nodes.pop(sub.inode, None)
        if len(self.nodes) * 4 < self.most:
            self.nodes = dict(self.nodes)
            self.most = len(self.nodes)
        if self.on_remove is not None:
            self.on_remove(parent, node)

    def __getitem__(self, inode: int) -> Node:
        return self.nodes[inode]

    def get(self, inode: int) -> Optional[Node]:
        return self.nodes.get(inode)
