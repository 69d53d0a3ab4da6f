"""The command's init: a minimal PID 1 inside the seal.

A command of ``fakedebugfs run`` is root, usually, with the capabilities
its tools need (seal.py).  Whatever shares its PID namespace it can
ptrace, read and write through ``/proc/N/mem``, enter through
``/proc/N/root`` and ``/proc/N/fd``, and kill (``kill -9 -1``).  So the
fake's own processes are not there: run's init (the *keeper*: it holds
the namespace where the fake is mounted, and stops the server at the end)
and the FUSE server live in a PID namespace of their own, and the command
in a child of it, whose PID 1 is this init:

* forked by the keeper into a new PID namespace, which the keeper admits
  to the fake's control socket (server/peers.py) before it goes on;
* it takes a mount namespace of its own with the proc of its PID namespace
  (then /proc/kallsyms, and rootless /proc/mounts, bound over it again),
  confines itself as the command is confined (confine.py: /proc/sys and
  /sys read-only, the sysctl copies, other fakes hidden), closes every
  descriptor it inherited but its standard ones and pipes, and seals
  itself (seal.py): its ``/proc/1/root`` is the sealed view, and taking
  it over (ptrace) gives nothing the command has not;
* its mount(2) calls, and the command's, are answered by run's keeper
  (:mod:`fakedebugfs.sandbox.mountview`): a new tracefs mount is another
  view of the fake, any other is refused;
* it opens the command's process events (perf, as the command's pids
  are numbered: sources/procevents.py ``open_watch``) and hands them to
  the server with this namespace's proc, and, for ``--mirror tree`` (run's
  default), opens the mirror's perf events here when the server asks
  (a thread: sources/perfopen.py);
* it runs the command, reaps what is orphaned, forwards the signals run
  forwards, and exits with the command's status.  An init's exit ends
  every process of its namespace: nothing the command started outlives
  it, and ``kill -9 -1`` inside ends the command's tree but never the
  fake, which serves until ``run`` stops it.

The server numbers the command's tasks as its own namespace does; the
pids it shows (a ``trace_marker`` writer's) are the command's own
(fs/pidview.py).
"""

from __future__ import annotations

import logging
import os
import socket
import stat

from fakedebugfs.control import runstate
from fakedebugfs.engine.core.kallsyms import PROC_FILE
from fakedebugfs.native import libc
from fakedebugfs.sandbox import confine, procsys, seal, userns
from fakedebugfs.trees.proc_version import NAME as PROC_VERSION_FILE

log = logging.getLogger(__name__)

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_BIND = 0x1000
PROC = "/proc"
KALLSYMS = "/proc/kallsyms"
PROC_VERSION = "/proc/version"
# the first pid a command gets: five digits, above every task the default
# workload invents (1000-9999: sources/workloads/synthetic.py TASK_PIDS),
# so that no pid in the fake's events is both (ftracetest's event-no-pid.tc
# greps for its own pid); where pid_max allows
FIRST_PID = 10000
NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


class RunError(Exception):
    """Why ``run`` cannot be arranged: one line (and an exit status)."""


def mount_proc() -> None:
    """As an init: a mount namespace of its own (a child of its parent's)
    and, over /proc, the proc of this PID namespace: its processes see
    their own namespace's only, and a server reads them by the pids it
    sees."""
    libc.unshare(CLONE_NEWNS, "unshare(CLONE_NEWNS)")
    try:
        libc.mount("proc", PROC, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError as err:
        raise RunError(f"cannot mount the command's /proc ({err.strerror}): this system "
                       f"hides parts of /proc (a container's masked paths?)") from None


def bind_kallsyms(mnt: str, work: str) -> None:
    """The fake's live symbol table (:mod:`fakedebugfs.trees.kallsyms`)
    over /proc/kallsyms; a fake without it gets a copy of its symbols now."""
    source = os.path.join(mnt, PROC_FILE)
    if not os.path.exists(source):
        source = os.path.join(work, "kallsyms")
        if not os.path.exists(source):
            from fakedebugfs.control.client import ControlClient
            from fakedebugfs.errors import FakeError

            try:
                with ControlClient(mnt) as client:
                    text = client.call("kallsyms")["text"]
            except FakeError as err:
                raise RunError(f"{mnt}: {err}") from None
            with open(source, "w") as fp:
                fp.write(text)
    if os.path.exists(KALLSYMS):
        libc.mount(source, KALLSYMS, None, MS_BIND)


def bind_proc_version(mnt: str) -> None:
    """The profile's ``/proc/version`` (:mod:`fakedebugfs.trees.proc_version`)
    over the command's, where the fake has one."""
    source = os.path.join(mnt, PROC_VERSION_FILE)
    if os.path.exists(source) and os.path.exists(PROC_VERSION):
        try:
            libc.mount(source, PROC_VERSION, None, MS_BIND)
        except OSError as err:  # (a container's masked /proc): the host's stays
            log.debug("/proc/version not bound: %s", err)


def reserve_pids() -> None:
    """As a PID namespace's init, before its first other process: the
    namespace's next pids start at :data:`FIRST_PID` (``ns_last_pid``)."""
    try:
        with open("/proc/sys/kernel/pid_max") as fp:
            if int(fp.read()) <= 2 * FIRST_PID:
                return
        with open(NS_LAST_PID, "w") as fp:
            fp.write(str(FIRST_PID - 1))
    except (OSError, ValueError) as err:  # (an old kernel, a container without the right)
        log.debug("pids of the command's namespace not moved: %s", err)


def enter(mnt: str, work: str, rootless: bool, sealed: bool, supervisor=None) -> None:
    """As the command's init: its mount namespace, confined; its
    descriptors; its seal (see the module).  *supervisor*: a socket to
    send the seal's listener to (mount(2) calls answered outside:
    :mod:`fakedebugfs.sandbox.mountview`)."""
    mount_proc()
    reserve_pids()
    bind_kallsyms(mnt, work)
    bind_proc_version(mnt)
    procsys.bind_stack_tracer(mnt)
    if rootless:
        try:
            userns.publish_mounts(work)
        except OSError as err:
            raise RunError(f"cannot mount a mount table over /proc/mounts "
                           f"({err.strerror}): trace-cmd would not find the fake") from None
    seal_in(mnt, work, sealed, supervisor)


def seal_in(mnt: str, work: str, sealed: bool, supervisor=None) -> None:
    """As an init whose namespace is arranged: confine this process as its
    command will be (it inherits all of it), keep no descriptor of the
    keeper's namespace, and seal it (the listener of its mount(2) calls
    sent to *supervisor*)."""
    paths = runstate.paths(mnt)
    confine.confine(work, mnt, [str(paths["state"]), str(paths["sock"])], sealed)
    if sealed:
        listener = seal.install_filter(listener=supervisor is not None)
        if listener is not None:
            socket.send_fds(supervisor, [b"L"], [listener])
            os.close(listener)
    close_inherited()  # (the supervisor's socket too)


def close_inherited() -> None:
    """Close every descriptor but 0-2 and pipes (the keeper's: its error
    report and its lifeline): no directory, file or socket of the
    keeper's namespace stays reachable through ``/proc/1/fd``."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2:
            continue
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            os.close(fd)
        except OSError:  # (the listing's own descriptor, closed meanwhile)
            pass


def watch_command(pid: int, mnt: str) -> None:
    """Open the process events of command *pid* (forked, not yet exec'd)
    here, where they number tasks as the command does, and hand them to the
    server with this namespace's proc, and a socket to a thread of this
    init that opens the mirror's perf events here for the server
    (:mod:`fakedebugfs.sources.perfopen`; it ends when the server closes
    its end, or with this init).  Where the kernel refuses
    (perf_event_paranoid 3), the run goes on unwatched."""
    import threading

    from fakedebugfs.control.client import ControlClient
    from fakedebugfs.errors import FakeError
    from fakedebugfs.sources import perfopen, procevents

    try:
        opened = procevents.open_watch(pid)
    except OSError as err:
        log.debug("the command's process events are not watched: %s", err)
        return
    fds = [os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]
    fds += [fd for _, ring, switch in opened for fd in (ring, switch)]
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fds.append(theirs.detach())
    opener = threading.Thread(target=perfopen.serve, args=(ours,), daemon=True,
                              name="perf opener")
    opener.start()
    try:
        with ControlClient(mnt) as client:
            client.call("watch", pid=pid, parent=os.getpid(),
                        parent_comm=procevents.comm_of(os.getpid()),
                        fds=[cpu for cpu, _, _ in opened], opener=True, pass_fds=fds)
    except (FakeError, OSError) as err:
        log.debug("the command's process events are not watched: %s", err)
    finally:
        for fd in fds:
            os.close(fd)


__all__ = ["RunError", "bind_kallsyms", "bind_proc_version", "close_inherited", "enter",
           "mount_proc", "reserve_pids", "seal_in", "watch_command"]
