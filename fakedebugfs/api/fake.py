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
from fakedebugfs.errors import MountError, ServerGone
from fakedebugfs.api.options import MountOptions

STOP_TIMEOUT = 10.0  # seconds a server gets to unmount after SIGTERM


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
        if self._own_dir:
            self.root = Path(tempfile.mkdtemp(prefix="fakedebugfs-"))
            self.root.chmod(0o755)
        else:
            self.root = Path(runstate.canonical(os.fspath(self._given)))
        try:
            self._spawn()
            self._client = ControlClient(str(self.root))
            self._client.call("hello")
        except BaseException:
            self.close()
            raise
        return self

    def _spawn(self) -> None:
        r, w = os.pipe()
        argv = [*_cli(), "mount", str(self.root), "--foreground", "--ready-fd", str(w),
                "--die-with-parent", *self.options.argv()]
        log = open(runstate.paths(str(self.root))["log"], "wb")
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, pass_fds=(w,),
                                          start_new_session=True)
        finally:
            os.close(w)
            log.close()
        with os.fdopen(r, "rb") as fp:
            message = _read_line(fp, self.ready_timeout).decode(errors="replace").strip()
        if message != "ok":
            code = self._proc.poll()
            detail = message or self._tail_of_log() or f"server exited with status {code}"
            raise MountError(f"{self.root}: {detail}")

    def close(self) -> None:
        """Stop the server and make sure nothing stays mounted; idempotent."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.root is not None:
            self._log_text = self.log() or self._log_text
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop(proc)
        if self.root is not None:
            _unmount(str(self.root))
            runstate.clear_state(str(self.root), drop_log=True)
            if self._own_dir:
                shutil.rmtree(self.root, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

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
        """Wait until the workload reached its ``count``."""
        return self._wait("done", timeout)

    def wait_consumed(self, timeout: float = 30.0, tracers: Optional[Sequence[str]] = None,
                      complete_pages: bool = False) -> float:
        """Wait until readers have taken every event in the buffers (of
        *tracers*; with *complete_pages*, every whole page: what trace-cmd
        takes before it is stopped)."""
        args = {"complete_pages": complete_pages}
        if tracers is not None:
            args["tracers"] = list(tracers)
        return self._wait("consumed", timeout, **args)

    def wait_readers(self, path: str = "tracing/per_cpu/cpu*/trace_pipe_raw",
                     timeout: float = 30.0) -> float:
        """Wait until every file matching the glob *path* (relative to the
        mount) is held open by some reader: by default, until a recorder
        such as ``trace-cmd record`` reads every CPU's ``trace_pipe_raw``."""
        return self._wait("readers", timeout, path=path)

    def _wait(self, until: str, timeout: float, **args) -> float:
        """The server waits (polling its state); the socket waits a little longer."""
        return self.call("wait", io_timeout=timeout + 10, until=until, timeout=timeout,
                         **args)["waited"]

    # --- commands against this fake ---------------------------------------------------

    def command(self, argv: Sequence[str]) -> list[str]:
        """The command line that runs *argv* in this fake's ``run`` namespace
        (/sys/kernel/tracing and /sys/kernel/debug are this fake)."""
        return [*_cli(), "run", "--attach", str(self._root()), "--", *map(str, argv)]

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """``subprocess.run`` of *argv* in this fake's ``run`` namespace."""
        return subprocess.run(self.command(argv), **kwargs)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """``subprocess.Popen`` of *argv* in this fake's ``run`` namespace."""
        return subprocess.Popen(self.command(argv), **kwargs)


def _read_line(fp, timeout: float) -> bytes:
    """The first line of *fp* within *timeout* seconds (b"" at EOF or timeout)."""
    import select

    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fp], [], [], left)[0]:
            return b""
        chunk = os.read(fp.fileno(), 256)
        if not chunk:
            break
        data += chunk
    return data


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _unmount(mnt: str) -> None:
    """A server that died leaves a dead mount: take it away."""
    if not runstate.is_mounted(mnt):
        return
    for cmd in (["fusermount3", "-u", "-z", mnt], ["umount", "-l", mnt]):
        if subprocess.run(cmd, capture_output=True).returncode == 0:
            return
