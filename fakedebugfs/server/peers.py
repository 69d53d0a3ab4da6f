"""Who may talk to a fake's control socket (and to the fork server's).

The socket is a file of the fake's owner (0600, in a 0700 state
directory), but that stops no process running as root, and a command of
``fakedebugfs run`` usually does: it can read every bound socket's path in
``/proc/net/unix`` and connect to one left in sight (a
``FAKEDEBUGFS_RUNDIR`` of its own, a fork server's folder in /tmp), and a
path socket is reached across network namespaces.  So each connection's
peer is checked (SO_PEERCRED, as the kernel fills it at connect):

* its uid is the server's, or root;
* its PID namespace is the server's own (the owner, outside any ``run``),
  or one the owner *admitted* from there: the namespace of a ``run``'s
  command (its init), of ``run --attach``'s, of a fake's keeper;
* a peer whose pid the server cannot see (pid 0: a process of another
  run's namespace, beside the server's rather than under it) is refused.

A sealed command cannot make a namespace (seal.py), so it is always
where it was admitted or nowhere the server knows.  Only a peer of the
server's own namespace may admit one (:meth:`Peers.admit`).
"""

from __future__ import annotations

import os
import socket
import struct

# struct ucred { pid_t pid; uid_t uid; gid_t gid; }  (include/linux/socket.h)
UCRED = struct.Struct("iII")


def peer_of(sock) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process that connected *sock*, as this
    process's namespaces number them (pid 0: not visible from here)."""
    return UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED.size))


def pidns_of(pid) -> tuple[int, int] | None:
    """The PID namespace of *pid* (``"self"`` too), as ``(st_dev, st_ino)``
    of its ``/proc/PID/ns/pid``; None when it cannot be read (gone)."""
    try:
        st = os.stat(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Peers:
    """The check of one server's (or fork server's) connections."""

    def __init__(self):
        self.uid = os.geteuid()
        self.own = pidns_of("self")
        self.admitted: set[tuple[int, int]] = set()

    def refusal(self, sock) -> tuple[str | None, bool]:
        """``(why, own)``: why the peer of *sock* is refused (None: it is
        not), and whether it is of the server's own PID namespace."""
        if self.own is None:  # no /proc of our own to tell by: as before the check
            return None, True
        pid, uid, _gid = peer_of(sock)
        if uid not in (self.uid, 0):
            return f"uid {uid} is not the fake's owner", False
        if pid == 0:
            return "this fake is not reachable from another run's namespace", False
        ns = pidns_of(pid)
        if ns == self.own:
            return None, True
        if ns is not None and ns in self.admitted:
            return None, False
        return "this fake is not reachable from inside another run", False

    def admit(self, pid: int) -> None:
        """Let the processes of *pid*'s PID namespace in (``run``'s command
        namespace, a keeper's); OSError if *pid* is gone."""
        ns = pidns_of(pid)
        if ns is None:
            raise ProcessLookupError(f"no process {pid}")
        if ns != self.own:
            self.admitted.add(ns)


__all__ = ["Peers", "peer_of", "pidns_of"]
