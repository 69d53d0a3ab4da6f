"""``fakedebugfs mount`` and ``umount``: a fake's server started in the
background (forked, in a session of its own) or in front (``--foreground``,
the Python API's child), and stopped.  Errors are :class:`MountError` with
one line saying why; :mod:`fakedebugfs.cli` only parses and reports."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable, Optional

from fakedebugfs.api.options import MountOptions, build_server
from fakedebugfs.control import runstate
from fakedebugfs.errors import MountError
from fakedebugfs.server import launcher


def prepare(opts: MountOptions, mountpoint: str, die_with_parent: bool = False):
    """Check what can be checked before mounting, then build the server."""
    from fakedebugfs.server.server import check_can_mount

    check_can_mount(mountpoint)
    if die_with_parent:
        _die_with_parent()
    if opts.replay:
        check_recording(opts.replay)
    return build_server(opts, mountpoint)


def mount_background(server, opts: MountOptions) -> None:
    """Fork *server* (its own session, stdio on its log); return once it is
    mounted and, with ``--replay``, the recording installed."""
    log_path = str(runstate.paths(server.mountpoint)["log"])
    pid, message = launcher.fork_server(server, log_path, prepare=os.setsid)
    if message != "ok":
        raise MountError(message)
    if opts.replay:
        try:
            start_mount_replay(server.mountpoint, opts.replay)
        except Exception:
            launcher.stop_server(pid)
            launcher.unmount(server.mountpoint)
            raise


def mount_foreground(server, opts: MountOptions,
                     ready: Callable[[str], None]) -> None:
    """Serve *server* here until it is unmounted; ``ready("ok")`` once
    mounted (and the ``--replay`` recording installed), ``ready(why)``
    when it cannot be."""

    def mounted():
        if not opts.replay:
            return ready("ok")

        def replay_then_ready():  # the loop must run to answer the request
            try:
                start_mount_replay(server.mountpoint, opts.replay)
            except Exception as err:  # noqa: BLE001 - reported, then the mount goes
                ready(f"--replay: {err}")
                os.kill(os.getpid(), signal.SIGTERM)
                return
            ready("ok")
        threading.Thread(target=replay_then_ready, daemon=True).start()

    try:
        launcher.serve(server, mounted)
    except MountError as err:
        ready(str(err))
        raise


def remove_mountpoint(mountpoint: str) -> None:
    """``rmdir`` the mount point the Python API made for this server, once
    unmounted.  Only an empty directory goes, and since Linux 3.18 that
    also takes the copies of this (ending) mount that other mount
    namespaces hold, ``fakedebugfs run``'s among them."""
    try:
        os.rmdir(mountpoint)
    except OSError:  # still mounted, not empty, or gone already
        pass


class ReadyReporter:
    """How ``--foreground`` says it is mounted (or why not): a line on
    *ready_fd* (the API's pipe, once), else on stdout/stderr.  After
    ``ok`` the pipe stays open, in this process alone (close-on-exec),
    until :meth:`ended`: its reader then knows that the server has
    unmounted and cleaned up, before its process has finished exiting
    (:func:`fakedebugfs.server.launcher.stop_server`)."""

    def __init__(self, mountpoint: str, ready_fd: Optional[int]):
        self.mountpoint = mountpoint
        self.fd = ready_fd
        self.said = False
        if ready_fd is not None:
            try:
                os.set_inheritable(ready_fd, False)  # fusermount3 and the like: not theirs
            except OSError:  # not an open fd: nothing will be said there either
                pass

    def __call__(self, message: str) -> None:
        if self.said:
            return
        self.said = True
        if self.fd is None:
            if message == "ok":
                print(f"mounted {self.mountpoint}", flush=True)
            else:
                print(f"fakedebugfs mount: {message}", file=sys.stderr, flush=True)
            return
        try:
            os.write(self.fd, f"{message}\n".encode())
        except OSError:
            pass
        if message != "ok":
            self.ended()

    def ended(self) -> None:
        """Done: the pipe's reader gets end of file."""
        self.said = True
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def check_recording(path: str) -> None:
    """``mount --replay``: a broken recording is refused before mounting."""
    from fakedebugfs.sources.replay import ReplayFormatError, open_recording

    try:
        open_recording(path)
    except (ReplayFormatError, OSError) as err:
        raise MountError(f"--replay: {err}") from None


def start_mount_replay(mountpoint: str, path: str) -> None:
    """``mount --replay``: install the recording's events now; replay it once
    a tracer has one of them enabled with tracing on (replay number 1)."""
    from fakedebugfs.api.replay import start
    from fakedebugfs.control.client import ControlClient
    from fakedebugfs.sources.replay.replay import ReplayOptions

    with ControlClient(mountpoint) as client:
        start(client.call, path, ReplayOptions.make(wait_enabled=True))


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: the Python API's server goes when its test goes."""
    from fakedebugfs.native import libc

    libc.set_pdeathsig(signal.SIGTERM)
    if os.getppid() == 1:
        raise MountError("the parent is gone")


def umount(mountpoint: str) -> str:
    """``fakedebugfs umount`` (:func:`fakedebugfs.server.launcher.umount_fake`)."""
    return launcher.umount_fake(mountpoint)
