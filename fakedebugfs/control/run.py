"""The control socket's requests of ``fakedebugfs run``: ``admit`` (the
command's PID namespace may use the socket) and ``watch`` (the command's
fork, exec, exit and context switches become the ``sched_process_*`` and
``sched_switch`` events a kernel would record of it:
:mod:`fakedebugfs.server.watch`).  Both are asked from the server's own
PID namespace only (:data:`PEER_OWN`, set by the server per connection).
"""

from __future__ import annotations

import contextvars
import os

from fakedebugfs.control.protocol import Refused

# whether the connection being answered is from the server's own PID
# namespace (its owner outside any run: fakedebugfs/server/peers.py)
PEER_OWN: contextvars.ContextVar = contextvars.ContextVar("peer_own", default=True)


class RunRequests:
    """``admit`` and ``watch`` (a part of
    :class:`~fakedebugfs.control.service.ControlService`, which holds
    ``server`` and the connection's SCM_RIGHTS ``fds``)."""

    def admit(self, req) -> dict:
        """Let the processes of *pid*'s PID namespace use this socket (a
        ``run``'s command, a keeper's): asked only from the server's own
        namespace (:mod:`fakedebugfs.server.peers`)."""
        pid = req["pid"]
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise Refused("request", f"pid must be a process id > 0, got {pid!r}")
        if not PEER_OWN.get():
            raise Refused("request", "admit is asked from outside any run")
        try:
            self.server.peers.admit(pid)
        except OSError as err:
            raise Refused("request", f"cannot admit pid {pid}: {err}") from None
        return {"pid": pid}

    def watch(self, req) -> dict:
        """``run``: watch command *pid* (forked by *parent*, not yet exec'd)
        and inject its fork/exec/exit and context switches
        (:mod:`fakedebugfs.server.watch`)."""
        pid, parent = req["pid"], req["parent"]
        for name, value in (("pid", pid), ("parent", parent)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise Refused("request", f"{name} must be a process id > 0, got {value!r}")
        if req.get("fds") is not None:
            return self._watch_opened(req, pid, parent)
        if pid == os.getpid():  # pid 0 or -1 would be this server, or every task
            raise Refused("request", "the server does not watch itself")
        if not PEER_OWN.get():  # (a pid of this server's namespace)
            raise Refused("request", "watch is asked from outside any run")
        try:
            self.server.watch(pid, parent, str(req.get("parent_comm", "")))
        except OSError as err:
            raise Refused("watch", f"cannot watch pid {pid}: {err.strerror or err}") from None
        return {"pid": pid}

    def _watch_opened(self, req, pid: int, parent: int) -> dict:
        """``watch`` with the perf events opened by ``run``'s command init in
        the command's PID namespace (*fds*: their CPUs), sent with the proc
        of that namespace: pids are the command's, and nothing is opened
        here on a pid of another namespace.  With *opener*, the last
        descriptor is a socket to that init, which opens the mirror's
        perf events there (:mod:`fakedebugfs.sources.perfopen`)."""
        cpus = req["fds"]
        if not isinstance(cpus, list) or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpus):
            raise Refused("request", "fds must be a list of CPU numbers")
        want = 1 + 2 * len(cpus) + bool(req.get("opener"))
        if len(self.fds) < want:
            raise Refused("request", f"fds: {want} file descriptors expected "
                                     f"(the proc, then each CPU's ring and switches, then "
                                     f"the opener's socket if 'opener')")
        taken = [self.fds.pop(0) for _ in range(want)]
        proc_fd, rest = taken[0], taken[1:1 + 2 * len(cpus)]
        opened = [(cpu, rest[2 * i], rest[2 * i + 1]) for i, cpu in enumerate(cpus)]
        opener = taken[-1] if req.get("opener") else None
        try:
            self.server.watch(pid, parent, str(req.get("parent_comm", "")), opened,
                              f"/proc/self/fd/{proc_fd}", opener)
        except (OSError, ValueError) as err:  # (the perf events were closed by then)
            os.close(proc_fd)
            raise Refused("watch", f"cannot watch pid {pid}: {err}") from None
        return {"pid": pid}
