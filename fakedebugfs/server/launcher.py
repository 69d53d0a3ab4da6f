"""A mount's server from start to end, the one way for the CLI, the Python
API and ``fakedebugfs run``.

Start: in this process (:func:`serve`, ``mount --foreground``), forked
(:func:`fork_server`: ``fakedebugfs mount``, ``fakedebugfs run``) or as a
child process that dies with its parent (:func:`spawn_server`: the Python
API).  End: :func:`stop_server` (SIGTERM, then SIGKILL), :func:`unmount`
(what a server that died left mounted: ``fusermount3 -u -z``, or a lazy
umount2 as root) and :func:`umount_fake`, both for ``fakedebugfs umount``.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from typing import Callable, Optional, Sequence

from fakedebugfs.control import runstate
from fakedebugfs.server import allocator
from fakedebugfs.errors import MountError

STOP_TIMEOUT = 10.0  # seconds a server gets to unmount after SIGTERM


def serve(server, ready: Optional[Callable[[], None]] = None) -> None:
    """Run *server* until it is unmounted; *ready* is called once mounted.
    Raises MountError when it cannot mount."""
    import trio

    trio.run(server.run, ready)


def fork_server(server, log_path: str,
                prepare: Optional[Callable[[], None]] = None) -> tuple[int, str]:
    """Fork; the child runs *prepare* then *server* with stdio on *log_path*.

    Returns ``(pid, message)``: *message* is ``"ok"`` once the file system is
    mounted, otherwise why the server could not mount (it has exited)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            if prepare is not None:
                prepare()
            _redirect_stdio(log_path)
            serve(server, ready=lambda: os.write(w, b"ok\n"))
            code = 0
        except MountError as err:
            os.write(w, f"{err}\n".encode())
        except BaseException as err:  # report anything to the waiting parent
            os.write(w, f"server failed: {err!r} (see {log_path})\n".encode())
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fp:
        message = fp.readline().decode().strip()
    return pid, message or f"server exited before mounting (see {log_path})"


def _redirect_stdio(log_path: str) -> None:
    fd = runstate.open_private(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # no symlink
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)


def spawn_server(mountpoint: str, argv: Sequence[str], ready_timeout: float = 30.0,
                 python: Optional[str] = None, rmdir: bool = False):
    """``fakedebugfs mount MOUNTPOINT --foreground`` with mount options
    *argv*, as a child in a session of its own that dies with this process
    (PR_SET_PDEATHSIG); returns ``(process, ended)`` once it is mounted:
    *ended* is the ready pipe's read end, at end of file once the server
    has unmounted and cleaned up (:func:`stop_server`; the caller closes
    it).  MountError with the server's reason otherwise (the child is then
    stopped).  With *rmdir* the server removes MOUNTPOINT when it ends
    (``--rmdir``)."""
    if rmdir:
        argv = ["--rmdir", *argv]
    r, w = os.pipe()
    cmd = [python or sys.executable, "-m", "fakedebugfs", "mount", mountpoint, "--foreground",
           "--ready-fd", str(w), "--die-with-parent", *argv]
    log_path = runstate.paths(mountpoint)["log"]
    log = os.fdopen(runstate.open_private(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb")
    try:
        proc = _forked(mountpoint, argv, log, w) if python is None else None
        if proc is None:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, pass_fds=(w,),
                                    start_new_session=True, env=allocator.server_env())
    finally:
        os.close(w)
        log.close()
    message = read_line(r, ready_timeout).decode(errors="replace").strip()
    if message != "ok":
        os.close(r)
        code = proc.poll()
        stop_server(proc.pid)
        proc.poll()
        detail = message or _last_line(log_path) or (
            f"server exited with status {code}" if code is not None
            else f"not mounted after {ready_timeout:g} s")
        raise MountError(f"{mountpoint}: {detail}")
    return proc, r


def _forked(mountpoint: str, argv: Sequence[str], log, ready: int):
    """The same server forked by the fork server named in
    ``FAKEDEBUGFS_FORKSERVER`` (:mod:`fakedebugfs.server.forkserver`: its
    imports done once), or None where there is none to ask."""
    path = forkserver_path()
    if path is None:
        return None
    from fakedebugfs.server import forkserver

    try:
        return forkserver.spawn(path, ["mount", mountpoint, "--foreground", "--ready-fd",
                                       "{ready}", *argv], log.fileno(), ready)
    except OSError:  # gone, or it refused (another user, another environment)
        return None


def forkserver_path() -> Optional[str]:
    """The socket of the fork server ``FAKEDEBUGFS_FORKSERVER`` names, or None."""
    path = os.environ.get("FAKEDEBUGFS_FORKSERVER", "")
    if path.strip().lower() in ("", "0", "no", "false", "off"):  # off: the plugin's too
        return None
    return path


def read_line(fd: int, timeout: float) -> bytes:
    """The first line of pipe *fd* within *timeout* seconds (b"" at EOF or
    timeout)."""
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        chunk = _read_by(fd, deadline)
        if chunk is None:
            return b""
        if not chunk:
            break
        data += chunk
    return data


def _last_line(path) -> str:
    try:
        with open(path, errors="replace") as fp:
            lines = [line.strip() for line in fp if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def stop_server(pid: int, timeout: float = STOP_TIMEOUT, ended: Optional[int] = None) -> bool:
    """SIGTERM server *pid* (it unmounts on the way out), SIGKILL after
    *timeout* seconds; True once it is gone.  A child of ours is reaped.
    With *ended* (:func:`spawn_server`'s): True as soon as that pipe says
    the server is done (unmounted, its state removed), without waiting for
    its process to finish exiting (a few ms more: the kernel tearing down
    its memory)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        _reap(pid)
        return True
    if ended is not None:
        if until_eof(ended, timeout):
            return True
        timeout = 0  # it had its time: SIGKILL now
    if wait_gone(pid, timeout):
        return True
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return wait_gone(pid, 5.0)


def until_eof(fd: int, timeout: float) -> bool:
    """True once pipe *fd* reads end of file (within *timeout* s)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            chunk = _read_by(fd, deadline)
        except OSError:
            return False
        if chunk is None:
            return False
        if not chunk:
            return True


def _read_by(fd: int, deadline: float) -> Optional[bytes]:
    """What pipe *fd* gives before *deadline* (``time.monotonic``): some
    bytes, b"" at end of file, None once the deadline has passed."""
    left = deadline - time.monotonic()
    if left <= 0 or not select.select([fd], [], [], left)[0]:
        return None
    return os.read(fd, 256)


def _reap(pid: int) -> bool:
    """Reap child *pid* if it has ended; True when it is gone (or not ours)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (or reaped already)
        return not runstate.alive(pid)
    return bool(done)


def _pidfd_wait(pid: int, timeout: float) -> Optional[bool]:
    """Wait up to *timeout* s on process *pid*'s pidfd: True once it has
    ended, False if not by then, None when it has no pidfd (reaped
    already, or no pidfd_open here)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None
    try:
        return bool(select.select([pidfd], [], [], timeout)[0])
    finally:
        os.close(pidfd)


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to *timeout* s for process *pid* to end (reaped if it is a
    child of ours); True once it is gone."""
    deadline = time.monotonic() + timeout
    _pidfd_wait(pid, timeout)  # woken when it exits, not at the next 10 ms poll
    while not _reap(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def wait_exit(proc: subprocess.Popen, timeout: float) -> int:
    """``proc.wait(timeout)`` that returns as the process ends: Popen's wait
    with a time limit sleeps in steps that double up to 50 ms (CPython's
    loop on POSIX), so it saw a command end up to 50 ms late.  A pidfd is
    waited on instead, then the status taken; TimeoutExpired if it still
    runs after *timeout* s."""
    ended = _pidfd_wait(proc.pid, timeout)
    if ended is None:  # reaped already (or no pidfd_open)
        return proc.wait(timeout)
    if not ended:
        raise subprocess.TimeoutExpired(proc.args, timeout)
    return proc.wait()


def unmount(mnt: str) -> bool:
    """Take away what a server left mounted at *mnt* (a server that died
    leaves a mount whose every access fails with ENOTCONN); True when
    nothing is mounted there any more."""
    if not runstate.is_mounted(mnt):
        return True
    if os.geteuid() == 0:
        from fakedebugfs.native import libc

        try:
            libc.umount2(mnt, 2 | 8)  # MNT_DETACH | UMOUNT_NOFOLLOW
        except OSError:
            pass
    if runstate.is_mounted(mnt):
        from fakedebugfs.server.fusecheck import fusermount

        cmd = fusermount()
        if cmd is not None:
            subprocess.run([cmd, "-u", "-z", mnt], capture_output=True)
    return not runstate.is_mounted(mnt)


def umount_fake(mountpoint: str) -> str:
    """``fakedebugfs umount``: stop the server of the fake at *mountpoint*
    (resolved as umount(8) resolves it: symlinks followed) and make sure
    the mount is gone, also when its server died.  MountError when nothing
    of ours is mounted there, or something else is.  Returns the mount point."""
    mnt = os.path.realpath(mountpoint)  # a dead mount's lstat fails: realpath keeps it
    fstype = runstate.mounted_fstype(mnt)
    if fstype is None and not os.path.lexists(mountpoint):  # (a dead mount: ENOTCONN)
        raise MountError(f"{mountpoint}: no such file or directory")
    if fstype is not None and fstype != runstate.FSTYPE:
        raise MountError(f"{mountpoint}: not a fakedebugfs mount (it is {fstype}); "
                         "use umount(8)")
    state = runstate.read_state(mnt)
    pid = state.get("pid") if state else None
    if fstype is None and not (pid and runstate.alive(pid)):
        runstate.clear_state(mnt, drop_log=True)
        raise MountError(f"{mountpoint}: not mounted")
    if pid and runstate.alive(pid):
        stop_server(pid)
    gone = unmount(mnt)
    runstate.clear_state(mnt, drop_log=True)
    if not gone:
        raise MountError(f"{mountpoint}: still mounted")
    return mnt
