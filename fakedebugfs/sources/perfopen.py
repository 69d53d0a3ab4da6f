"""perf_event_open(2) where the command's tasks have the pids it sees.

A perf sample reports its task's pid and tid as the PID namespace of the
process that *opened* the event numbers them (``event->ns``, set from the
opener's ``task_active_pid_ns`` in ``perf_event_alloc``;
``perf_event_pid``/``perf_event_tid`` translate into it).  ``run``'s
command lives in a PID namespace under the server's (the seal:
docs/cli.md#the-seal), so the mirror's events are opened by the
command's init inside it and handed to the server over a socket pair
(SCM_RIGHTS): its samples then carry the pids the command sees, which is
what ``trace-cmd -F`` writes to ``set_event_pid`` and what ``trace`` must
show.

:class:`LocalOpener` opens here (a mount's mirror, ``--mirror`` beside
the command); :class:`RemoteOpener` asks the init, whose thread runs
:func:`serve`.  A request is one datagram (SOCK_SEQPACKET): the
``struct perf_event_attr`` bytes after a small head, with the cgroup's
descriptor attached when the event is opened for a cgroup
(PERF_FLAG_PID_CGROUP: ``pid`` is that descriptor); the reply is the
errno (0) and the new descriptor attached.
"""

from __future__ import annotations

import array
import errno
import logging
import os
import signal
import socket
import struct
from typing import Optional

from fakedebugfs.sources.procevents import perf_event_open

log = logging.getLogger(__name__)

PERF_FLAG_PID_CGROUP = 1 << 2
# request: { i32 pid; i32 cpu; u32 flags; } then the attr; a cgroup fd attached
_REQUEST = struct.Struct("<iiI")
_REPLY = struct.Struct("<i")  # errno, 0: the descriptor is attached
MAX_ATTR = 512
TIMEOUT = 30.0  # s a request may wait for the init (-e syscalls: first users patch text)


class LocalOpener:
    """Opens in this process (its PID namespace numbers the samples)."""

    remote = False

    def open(self, attr: bytes, pid: int, cpu: int, cgroup_fd: Optional[int] = None) -> int:
        if cgroup_fd is not None:
            return perf_event_open(attr, cgroup_fd, cpu, PERF_FLAG_PID_CGROUP)
        return perf_event_open(attr, pid, cpu)

    def close(self) -> None:
        pass


class OpenerGone(OSError):
    """The init that opened for us is gone (the command's namespace ended)."""


class RemoteOpener:
    """Opens through the command's init (:func:`serve` at the other end of
    *sock*): *pid* numbers the command's tasks as the command does."""

    remote = True

    def __init__(self, sock: socket.socket):
        self.sock = sock
        sock.settimeout(TIMEOUT)

    def open(self, attr: bytes, pid: int, cpu: int, cgroup_fd: Optional[int] = None) -> int:
        """The new event's descriptor; :class:`OpenerGone` once the init
        is gone or failed to answer (then for every later request: the
        socket is closed), OSError with the kernel's errno otherwise."""
        if self.sock.fileno() < 0:
            raise OpenerGone(errno.ESRCH, "the command's init is gone")
        try:
            return self._open(attr, pid, cpu, cgroup_fd)
        except OpenerGone:
            self.sock.close()
            raise

    def _open(self, attr: bytes, pid: int, cpu: int, cgroup_fd: Optional[int]) -> int:
        head = _REQUEST.pack(pid, cpu, PERF_FLAG_PID_CGROUP if cgroup_fd is not None else 0)
        anc = [] if cgroup_fd is None else \
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [cgroup_fd]).tobytes())]
        try:
            self.sock.sendmsg([head + attr], anc)
            msg, fds, _, _ = socket.recv_fds(self.sock, _REPLY.size, 1)
        except (BrokenPipeError, ConnectionResetError, socket.timeout) as err:
            raise OpenerGone(errno.ESRCH, f"the command's init does not answer ({err})") \
                from None
        if len(msg) != _REPLY.size:
            for fd in fds:
                os.close(fd)
            raise OpenerGone(errno.ESRCH, "the command's init is gone")
        (code,) = _REPLY.unpack(msg)
        if code:
            for fd in fds:
                os.close(fd)
            raise OSError(code, f"perf_event_open in the command's namespace: "
                                f"{os.strerror(code)}")
        if len(fds) != 1 or not _is_perf_event(fds[0]):
            for fd in fds:
                os.close(fd)
            raise OpenerGone(errno.EPROTO, "the command's init answered no perf event")
        return fds[0]

    def close(self) -> None:
        self.sock.close()


def _is_perf_event(fd: int) -> bool:
    """*fd* is a perf event (the init is the command's, which may be taken
    over: the server uses nothing else it hands over)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[perf_event]"
    except OSError:
        return False


def serve(sock: socket.socket) -> None:
    """As the command's init (a thread of it): open what the server asks
    until it closes its end.  Signals stay with the init's main thread."""
    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))
    with sock:
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(sock, _REQUEST.size + MAX_ATTR, 1)
            except OSError:
                return
            if not msg:
                return
            try:
                code, fd = 0, -1
                if len(msg) <= _REQUEST.size:
                    code = errno.EINVAL
                else:
                    pid, cpu, flags = _REQUEST.unpack_from(msg)
                    if flags & PERF_FLAG_PID_CGROUP:
                        if len(fds) != 1:
                            code = errno.EBADF
                        else:
                            pid = fds[0]
                    if not code:
                        try:
                            fd = perf_event_open(msg[_REQUEST.size:], pid, cpu,
                                                 flags & PERF_FLAG_PID_CGROUP)
                        except OSError as err:
                            code = err.errno or errno.EIO
                try:
                    socket.send_fds(sock, [_REPLY.pack(code)], [fd] if fd >= 0 else [])
                except OSError:
                    return
            finally:
                for f in (*fds, fd):
                    if f >= 0:
                        os.close(f)


__all__ = ["LocalOpener", "OpenerGone", "RemoteOpener", "perf_event_open", "serve"]
