"""The Python API: a fake kernel tracing interface for one test.

::

    from fakedebugfs import Fake

    with Fake(cpus=2, clock="virtual") as fk:
        fk.emit("kmem:kmalloc", cpu=1, pid=42, comm="app", call_site=0x10, ptr=0x20,
                bytes_req=8, bytes_alloc=8, gfp_flags=0xCC0, node=-1)
        out = fk.run(["trace-cmd", "show"], capture_output=True, text=True)

:class:`Fake` starts a server in a child process that dies with this one,
waits until the mount is ready, and always stops and unmounts on exit, when
the body raised or was interrupted too.  It talks to its server over the
control socket (:mod:`fakedebugfs.control.protocol`); every refusal raises a
typed :class:`~fakedebugfs.errors.FakeError` with the server's
message.  Unlike the CLI, the API starts with the ``none`` workload: a test
sees exactly the events it injects.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional, Union

from fakedebugfs.api.commands import KILL_GRACE, Commands
from fakedebugfs.api.inject import Event, Injection
from fakedebugfs.api.options import MountOptions
from fakedebugfs.api.waits import READERS_POLL, ReaderGone, Waits
from fakedebugfs.control import runstate
from fakedebugfs.control.client import ControlClient
from fakedebugfs.errors import MountError, ServerGone
from fakedebugfs.server import launcher

STOP_TIMEOUT = launcher.STOP_TIMEOUT

# the mount-time settings of a fresh fake by its options (Fake._settings)
_MOUNTED: dict[tuple, dict] = {}
# servers that have unmounted and cleaned up but were not waited for
# (``close(wait=False)``): :func:`wait_ended` waits for them
_ENDING: list = []


class Fake(Injection, Waits, Commands):
    """A mounted fake: paths, injection, faults, waits, and commands run
    against it.  Use as a context manager (or call :meth:`start` and
    :meth:`close`).  Its life, paths, log and control socket are here;
    injection (:class:`~fakedebugfs.api.inject.Injection`), waits
    (:class:`~fakedebugfs.api.waits.Waits`) and commands
    (:class:`~fakedebugfs.api.commands.Commands`) come from its bases."""

    def __init__(self, mountpoint: Union[str, os.PathLike, None] = None, *,
                 ready_timeout: float = 30.0, **options: Any):
        options.setdefault("workload", "none")
        self.options = MountOptions.make(**options)
        self._own_dir = mountpoint is None
        self._given = None if mountpoint is None else Path(mountpoint)
        self.ready_timeout = ready_timeout
        self.root: Optional[Path] = None
        self._proc: Optional[subprocess.Popen] = None
        self._ended: Optional[int] = None  # end of file once the server is done (spawn_server)
        self._client: Optional[ControlClient] = None
        self._log_text = ""
        # run/popen's commands (and whether each has a process group of its
        # own), ended by close()
        self._commands: list[tuple[subprocess.Popen, bool]] = []
        self._keeper = None  # the namespace later commands join (api.commands.Keeper)
        self._forkserver: Optional[str] = None  # the fork server that started it (if any)
        self._mounted_state: Optional[dict] = None  # reset()'s, read at start

    # --- life -------------------------------------------------------------------

    def __enter__(self) -> "Fake":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "Fake":
        """Mount and wait until the server answers (MountError otherwise)."""
        if self._proc is not None:
            raise MountError("this fake is already started")
        from fakedebugfs.server.fusecheck import mount_problem

        problem = mount_problem()  # what the system forbids, with the fix
        if problem:
            raise MountError(problem)
        if self._own_dir:
            self.root = Path(tempfile.mkdtemp(prefix="fakedebugfs-"))
            self.root.chmod(0o755)
        else:
            self.root = Path(runstate.canonical(os.fspath(self._given)))
        try:
            self._spawn()
            self._client = ControlClient(str(self.root))
            self._client.call("hello")
            self._mounted_state = self._settings()
        except BaseException:
            self.close()
            raise
        return self

    def _spawn(self) -> None:
        self._forkserver = launcher.forkserver_path()  # (its keeper is forked there too)
        _reap_ended()
        self._proc, self._ended = launcher.spawn_server(
            str(self.root), self.options.argv(), self.ready_timeout, rmdir=self._own_dir)

    def close(self, wait: bool = True) -> None:
        """End every command started with :meth:`run`/:meth:`popen` (and its
        process group), end the keeper of their namespace, stop the
        server and make sure nothing stays mounted; idempotent.  With
        *wait* False it returns once the server has unmounted and removed
        its state and mount point, not waiting the few ms its process
        takes to finish exiting (:func:`wait_ended` waits for them; the
        pytest plugin's fixture closes so, and waits at the session's end)."""
        self.end_commands()
        keeper = self.close_keeper(wait)
        if keeper is not None:  # done, still exiting (not *wait*)
            _ENDING.append(keeper)
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.root is not None:
            self._log_text = self.log() or self._log_text
        proc, self._proc = self._proc, None
        ended, self._ended = self._ended, None
        if proc is not None:
            launcher.stop_server(proc.pid, ended=None if wait else ended)
            if proc.poll() is None:  # done, still exiting (not *wait*)
                _ENDING.append(proc)
        if ended is not None:
            os.close(ended)
        if self.root is not None:
            launcher.unmount(str(self.root))
            self._log_text = self.log() or self._log_text  # the server's last words too
            runstate.clear_state(str(self.root))
            # (:meth:`log` and a failed test's report keep its text; a log
            # left in the run directory would be no one's to remove)
            runstate.paths(str(self.root))["log"].unlink(missing_ok=True)
            if self._own_dir:
                shutil.rmtree(self.root, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def reset(self) -> None:
        """Back to the state of the mount, for the next test of a shared
        (session) fake: commands of :meth:`popen` ended, faults cleared,
        instances removed, the tracer, ``trace_options``, ``trace_clock``,
        buffer sizes, enabled events (and event pids), ``tracing_on``,
        ktrace's and kmemtrace's enables as they were, every buffer
        emptied, and where the profile has function tracing its filters,
        pid lists, graph settings and function commands cleared.  Done
        through the files, as ``trace-cmd reset`` does; event filters and
        triggers a test set are not undone."""
        from fakedebugfs.api.reset import apply

        if self._mounted_state is None:
            raise ServerGone("this fake is not started")
        self.end_commands()
        self.clear_faults()
        apply(self._root(), self._mounted_state)

    def _settings(self) -> dict:
        """The mount-time settings :meth:`reset` goes back to.  Read from the
        files (some 20 reads, a third of a warm start) for the first fake of
        these options in this process; the next one's are the same, made
        from the same options by the same code: kept (not when the mount's
        state comes from outside the options: a recording, an events file,
        a profile directory, a mirror, a workload)."""
        from fakedebugfs.api.reset import settings

        o = self.options
        key = None if (o.replay or o.events or o.profile is not None or o.mirror
                       or o.workload != "none") else tuple(o.argv())
        if key is not None and key in _MOUNTED:
            return copy.deepcopy(_MOUNTED[key])
        state = settings(self._root())
        if key is not None:
            _MOUNTED[key] = copy.deepcopy(state)
        return state

    # --- where things are ------------------------------------------------------------

    @property
    def tracing(self) -> Path:
        return self._root() / "tracing"

    @property
    def ktrace(self) -> Path:
        return self._root() / "ktrace"

    @property
    def kmemtrace(self) -> Path:
        return self._root() / "kmemtrace"

    def _root(self) -> Path:
        if self.root is None:
            raise ServerGone("this fake is not started")
        return self.root

    def log(self) -> str:
        """The server's log so far (warnings, errors; requests with verbose=True)."""
        if self.root is None:
            return self._log_text
        try:
            return runstate.paths(str(self.root))["log"].read_text(errors="replace")
        except OSError:
            return self._log_text

    def _tail_of_log(self) -> str:
        lines = [line for line in self.log().strip().splitlines() if line.strip()]
        return lines[-1] if lines else ""

    # --- the control socket ----------------------------------------------------------

    def call(self, cmd: str, io_timeout: Optional[float] = None, **args) -> dict:
        """One control request (:mod:`fakedebugfs.control.protocol`)."""
        if self._client is None:
            raise ServerGone("this fake is not started")
        return self._client.call(cmd, io_timeout=io_timeout, **args)

    def status(self) -> dict:
        """The server's counters: emitted, injected, per-tracer state."""
        return self.call("status")


def wait_ended(timeout: float = STOP_TIMEOUT) -> None:
    """Wait until the servers of fakes closed with ``close(wait=False)``
    have finished exiting (each is done already: unmounted, its state
    removed); a child of this process is reaped."""
    while _ENDING:
        proc = _ENDING.pop()
        try:
            launcher.wait_exit(proc, timeout)  # (not Popen's wait: its sleeps of up to 50 ms)
        except subprocess.TimeoutExpired:
            launcher.stop_server(proc.pid, timeout=0)


def _reap_ended() -> None:
    """Reap what :func:`wait_ended` would wait for and has ended already."""
    _ENDING[:] = [proc for proc in _ENDING if proc.poll() is None]


__all__ = ["Fake", "wait_ended", "Event", "ReaderGone", "STOP_TIMEOUT", "KILL_GRACE", "READERS_POLL"]
