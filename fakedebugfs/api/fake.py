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
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from fakedebugfs.control import runstate
from fakedebugfs.control.client import ControlClient
from fakedebugfs.errors import MountError, ServerGone, WaitTimeout
from fakedebugfs.api.options import MountOptions
from fakedebugfs.server import launcher

STOP_TIMEOUT = launcher.STOP_TIMEOUT
KILL_GRACE = 2.0  # seconds a command's process group gets after SIGTERM, before SIGKILL
READERS_POLL = 0.2  # seconds per wait request while a reader is watched


class ReaderGone(WaitTimeout):
    """:meth:`Fake.wait_readers`: the awaited reader exited before opening the files."""


@dataclass
class Event:
    """One event to inject (the bulk form of :meth:`Fake.emit`)."""

    event: str
    fields: dict = field(default_factory=dict)
    cpu: int = 0
    pid: int = 0
    comm: Optional[str] = None
    ts: Optional[int] = None

    def wire(self) -> dict:
        out = {"event": self.event, "cpu": self.cpu, "pid": self.pid, "fields": self.fields}
        if self.comm is not None:
            out["comm"] = self.comm
        if self.ts is not None:
            out["ts"] = self.ts
        return out


# the mount-time settings of a fresh fake by its options (Fake._settings)
_MOUNTED: dict[tuple, dict] = {}


def _cli() -> list[str]:
    return [sys.executable, "-m", "fakedebugfs"]


class Fake:
    """A mounted fake: paths, injection, faults, waits, and commands run
    against it.  Use as a context manager (or call :meth:`start` and
    :meth:`close`)."""

    def __init__(self, mountpoint: Union[str, os.PathLike, None] = None, *,
                 ready_timeout: float = 30.0, **options: Any):
        options.setdefault("workload", "none")
        self.options = MountOptions.make(**options)
        self._own_dir = mountpoint is None
        self._given = None if mountpoint is None else Path(mountpoint)
        self.ready_timeout = ready_timeout
        self.root: Optional[Path] = None
        self._proc: Optional[subprocess.Popen] = None
        self._client: Optional[ControlClient] = None
        self._log_text = ""
        # run/popen's commands (and whether each has a process group of its
        # own), ended by close()
        self._commands: list[tuple[subprocess.Popen, bool]] = []
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
        self._proc = launcher.spawn_server(str(self.root), self.options.argv(),
                                           self.ready_timeout)

    def close(self) -> None:
        """End every command started with :meth:`run`/:meth:`popen` (and its
        process group), stop the server and make sure nothing stays
        mounted; idempotent."""
        self.end_commands()
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.root is not None:
            self._log_text = self.log() or self._log_text
        proc, self._proc = self._proc, None
        if proc is not None:
            launcher.stop_server(proc.pid)
            proc.poll()
        if self.root is not None:
            launcher.unmount(str(self.root))
            runstate.clear_state(str(self.root), drop_log=True)
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
        emptied.  Done through the files, as ``trace-cmd reset`` does;
        event filters and triggers a test set are not undone."""
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

    def emit(self, event: str, *, cpu: int = 0, pid: int = 0, comm: Optional[str] = None,
             ts: Optional[int] = None, fields: Optional[dict] = None, strict: bool = False,
             **more_fields: Any) -> int:
        """Inject one event (``system:name``); fields as keyword arguments (or
        in *fields*, for names that clash with the keywords)."""
        ev = Event(event, {**(fields or {}), **more_fields}, cpu, pid, comm, ts)
        return self.call("emit", events=[ev.wire()], strict=strict)["emitted"]

    def emit_many(self, events: Iterable[Union[Event, dict]], strict: bool = False) -> int:
        """Inject many events at once: all are checked before any is fired."""
        wire = [ev.wire() if isinstance(ev, Event) else dict(ev) for ev in events]
        return self.call("emit", events=wire, strict=strict)["emitted"]

    def define(self, system: str, name: str, fields: Sequence[str],
               print_fmt: Optional[str] = None) -> str:
        """A new tracefs event ``events/<system>/<name>/``; *fields* are C
        declarations (``"unsigned long addr"``, ``"char comm[16]"``,
        ``"__data_loc char[] msg"``).  Returns ``system:name``."""
        args = {"system": system, "name": name, "fields": list(fields)}
        if print_fmt is not None:
            args["print_fmt"] = print_fmt
        return self.call("define", **args)["event"]

    def fault(self, kind: str, **spec: Any) -> dict:
        """Script a fault (``overrun``, ``errno``, ``stall``, ``short_read``,
        ``poll_delay``); returns it with its ``id``."""
        return self.call("fault", spec={"kind": kind, **spec})["fault"]

    def faults(self) -> list:
        return self.call("faults")["faults"]

    def clear_faults(self, id: Optional[int] = None) -> None:
        self.call("clear_faults", **({} if id is None else {"id": id}))

    def scenario(self, source: Union[str, os.PathLike]) -> int:
        """Apply a scenario file (or its text): checked whole first, then run
        in order; returns the number of steps (ScenarioError names the line)."""
        from fakedebugfs.api.scenario import apply_scenario

        return apply_scenario(self.call, source)

    def replay(self, path: Union[str, os.PathLike], *, wait: bool = True,
               timeout: Optional[float] = None, **options: Any) -> dict:
        """Replay a trace.dat (v6/v7) or a raw capture directory into this fake
        (:mod:`fakedebugfs.sources.replay`): the recording is checked whole first
        (ReplayError with its one-line error: nothing replayed), its events
        defined, then replayed.  *options*: ``speed`` (None: as fast as
        possible), ``realtime``, ``loop``, ``events`` ("kmem,sched:sched_switch"),
        ``cpu_map`` ({0: 1} or "0:1"), ``keep_timestamps``, ``buffer`` (the
        recording's), ``into`` (the fake's instance, default the top level),
        ``wait_enabled`` (start once tracing is on with one of its events
        enabled).  With *wait*, returns the finished replay's status
        (``done``, ``committed``, ``lost_marks``, ``notes``...); otherwise its
        status at the start (``replay``: its number for ``replay_status``)."""
        from fakedebugfs.api.replay import follow, start
        from fakedebugfs.sources.replay.replay import ReplayOptions

        st = start(self.call, path, ReplayOptions.make(**options))
        return follow(self.call, st["replay"], timeout=timeout) if wait else st

    def wait_idle(self, timeout: float = 30.0) -> float:
        """Wait until the workload is done, no scenario runs and every event
        is visible to readers; WaitTimeout otherwise.  Returns seconds waited."""
        return self._wait("idle", timeout)

    def wait_done(self, timeout: float = 300.0) -> float:
        """Wait until the workload reached its ``count`` and, for a fake
        mounted with ``replay=`` (the marker's too), until that replay has
        ended (it starts once a tracer enables one of its events; ReplayError
        if it failed).  Returns seconds waited; WaitTimeout otherwise."""
        start = time.monotonic()
        self._wait("done", timeout)
        if self.options.replay:
            from fakedebugfs.api.replay import follow

            left = max(0.0, timeout - (time.monotonic() - start))
            try:
                follow(self.call, 1, timeout=left)  # the mount's replay is the first
            except TimeoutError as err:
                raise WaitTimeout(f"not done after {timeout:g} s: {err}") from None
        return round(time.monotonic() - start, 6)

    def wait_consumed(self, timeout: float = 30.0, tracers: Optional[Sequence[str]] = None,
                      complete_pages: bool = True) -> float:
        """Wait until readers have taken the events in the buffers (of
        *tracers*).  By default (*complete_pages*), every whole page that
        ``trace-cmd record`` (or any poller of ``trace_pipe_raw``) takes while
        it runs: the kernel wakes it only once a CPU's buffer is
        ``buffer_percent`` full (50 by default), so fewer events than that
        stay buffered, as does the page being written, until the recorder
        stops and takes them.  ``complete_pages=False`` waits for every event, as
        a reader of ``trace_pipe`` or ``ktrace-read`` takes them."""
        args = {"complete_pages": complete_pages}
        if tracers is not None:
            args["tracers"] = list(tracers)
        return self._wait("consumed", timeout, **args)

    def wait_readers(self, path: str = "tracing/per_cpu/cpu*/trace_pipe_raw",
                     timeout: float = 30.0,
                     proc: Optional[subprocess.Popen] = None) -> float:
        """Wait until every file matching the glob *path* (relative to the
        mount) is held open by some reader: by default, until a recorder
        such as ``trace-cmd record`` reads every CPU's ``trace_pipe_raw``.
        The reader is *proc*, else the commands of :meth:`popen` still
        running: once none runs, :class:`ReaderGone` (a WaitTimeout) is
        raised at once with its exit status, not after *timeout*."""
        watched = [proc] if proc is not None else \
            [p for p, _ in self._commands if p.poll() is None]
        if not watched:
            return self._wait("readers", timeout, path=path)
        start = time.monotonic()
        while True:
            left = timeout - (time.monotonic() - start)
            try:
                self._wait("readers", max(0.0, min(left, READERS_POLL)), path=path)
                return round(time.monotonic() - start, 6)
            except WaitTimeout as err:
                if all(p.poll() is not None for p in watched):
                    codes = ", ".join(f"{_name(p)} exited with status {p.returncode}"
                                      for p in watched)
                    raise ReaderGone(f"the reader is gone ({codes}): {err}") from None
                if left <= READERS_POLL:
                    raise

    def _wait(self, until: str, timeout: float, **args) -> float:
        """The server waits (polling its state); the socket waits a little longer."""
        return self.call("wait", io_timeout=timeout + 10, until=until, timeout=timeout,
                         **args)["waited"]

    # --- commands against this fake ---------------------------------------------------

    def command(self, argv: Sequence[str]) -> list[str]:
        """The command line that runs *argv* in this fake's ``run`` namespace
        (/sys/kernel/tracing and /sys/kernel/debug are this fake)."""
        return [*_cli(), "run", "--attach", str(self._root()), "--", *map(str, argv)]

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """``subprocess.Popen`` of *argv* in this fake's ``run`` namespace, in
        a session (and process group) of its own: when the fake closes,
        whatever still runs in that group (the command, a recorder's
        children) is ended, SIGTERM then SIGKILL."""
        own = kwargs.setdefault("start_new_session", True) or kwargs.get("process_group") == 0
        proc = subprocess.Popen(self.command(argv), **kwargs)
        self._commands.append((proc, bool(own)))
        return proc

    def run(self, argv: Sequence[str], *, input: Any = None, capture_output: bool = False,
            timeout: Optional[float] = None, check: bool = False,
            **kwargs: Any) -> subprocess.CompletedProcess:
        """``subprocess.run`` of *argv* in this fake's ``run`` namespace (a
        process group of its own, as :meth:`popen`; on a timeout or an
        interrupt the whole group is killed)."""
        if capture_output:
            kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
        if input is not None:
            kwargs["stdin"] = subprocess.PIPE
        kwargs.setdefault("start_new_session", True)
        with self.popen(argv, **kwargs) as proc:
            try:
                out, err = proc.communicate(input, timeout=timeout)
            except BaseException:
                _end_group(proc, kwargs["start_new_session"], grace=0)
                raise
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check:
            done.check_returncode()
        return done

    def end_commands(self) -> None:
        """End what :meth:`run`/:meth:`popen` started and still runs, with
        its process group (done by :meth:`close`)."""
        commands, self._commands = self._commands, []
        for proc, own in commands:
            _end_group(proc, own, KILL_GRACE)


def _name(proc: subprocess.Popen) -> str:
    argv = proc.args if isinstance(proc.args, (list, tuple)) else [proc.args]
    tail = list(argv)
    if "--" in tail:
        tail = tail[tail.index("--") + 1:]
    return os.path.basename(str(tail[0])) if tail else str(proc.pid)


def _end_group(proc: subprocess.Popen, own: bool, grace: float) -> None:
    """SIGTERM *proc*'s process group (*own*: it has one, see Fake.popen), then
    SIGKILL after *grace* seconds; without a group of its own, only *proc*."""
    if not own:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        return

    def signal_group(sig) -> bool:  # a session leader's pid is its group's id
        try:
            os.killpg(proc.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if not signal_group(sig):
            break
        deadline = time.monotonic() + wait
        while True:
            proc.poll()  # reaps the leader (a zombie still counts in the group)
            if not signal_group(0):
                proc.poll()
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
    proc.poll()
