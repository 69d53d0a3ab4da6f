"""Who owns the tree's nodes, as tracefs keeps it: the mount's ``uid=`` and
``gid=`` for every node (a remount sets them again, forgetting chown and
chgrp), and a chown, chgrp or chmod of one node staying on that node
(``tracefs_setattr``).  A mixin of
:class:`~fakedebugfs.fs.operations.TreeOperations` (which sets ``uid``,
``gid`` and ``table``); the kernel's cached attributes of the nodes a
change reaches are dropped here."""

from __future__ import annotations

import errno
import logging
import stat
from typing import Optional

import pyfuse3

from fakedebugfs.fs.tree import Dir

log = logging.getLogger(__name__)


class Ownership:
    """The owners and modes of the nodes of a mounted tree."""

    def remount(self, uid: Optional[int] = None, gid: Optional[int] = None) -> int:
        """``tracefs_apply_options`` on remount: a new ``uid=``/``gid=``
        becomes every node's again, forgetting what chown/chgrp set (the
        ``TRACEFS_*_PERM_SET`` flags cleared); the kernel's cached attributes
        are dropped.  Returns how many nodes were reset."""
        if uid is not None:
            self.uid = uid
        if gid is not None:
            self.gid = gid
        self.attrs_changed()
        nodes = list(self.table.nodes.values())
        for node in nodes:
            if uid is not None:
                node.uid = None
            if gid is not None:
                node.gid = None
            try:
                pyfuse3.invalidate_inode(node.inode, attr_only=True)
            except OSError:  # not in the kernel's cache
                pass
        return len(nodes)

    def _chown_chmod(self, node, attr, fields, ctx) -> None:
        """``tracefs_setattr``/``simple_setattr``: chown, chgrp and chmod of
        any file or directory stay on that node alone (a directory's new
        group is not its children's, as eventfs keeps it).  Root may do all;
        the owner may chmod and chgrp (default_permissions has the kernel
        check the rest); others get EPERM."""
        owner = self.owner(node)[0]
        if ctx.uid != 0 and (fields.update_uid or ctx.uid != owner):
            raise pyfuse3.FUSEError(errno.EPERM)
        if fields.update_uid:
            node.uid = attr.st_uid
        if fields.update_gid:
            node.gid = attr.st_gid
        if isinstance(node, Dir) and (fields.update_uid or fields.update_gid):
            self._owners_changed(node)
        if fields.update_mode:
            node.mode = stat.S_IFMT(node.mode) | (attr.st_mode & 0o7777)

    def _owners_changed(self, top: Dir) -> None:
        """*top*'s new owner is that of every node below it that has none of
        its own (:meth:`owner`): their cached attributes go (the reply to
        the chown itself refreshes *top*'s)."""
        for node in top.walk(make=False):
            if node is not top and (node.uid is None or node.gid is None):
                invalidate_attrs(node)


def invalidate_attrs(node) -> None:
    """Drop the kernel's cached attributes of *node* (none cached, or not
    mounted yet: nothing to do)."""
    try:
        pyfuse3.invalidate_inode(node.inode, attr_only=True)
    except Exception as err:
        log.debug("invalidate attributes of %s: %s", node.name, err)


__all__ = ["Ownership", "invalidate_attrs"]
