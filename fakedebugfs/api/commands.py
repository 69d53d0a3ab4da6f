"""Commands run against a fake (the methods of
:class:`~fakedebugfs.api.fake.Fake` of that concern; :class:`Commands` is
one of its bases): each runs in ``fakedebugfs run``'s private mount
namespace, where ``/sys/kernel/tracing`` and ``/sys/kernel/debug`` are the
fake, as a tracefs or debugfs mounted there is the kernel's for every
process of that namespace; each in a session (and process group) of its
own, ended with its group when the fake closes (SIGTERM, then SIGKILL, as
a session's processes get SIGHUP when its leader goes).

The first command of a fake starts the fake's keeper
(:mod:`fakedebugfs.sandbox.keeper`), which makes the namespace as
``fakedebugfs run --attach`` makes it (a new Python, its imports, the
namespaces: 0.1-0.2 s) and holds it; every command, the first included,
is started by the launcher ``fakedebugfs/native/join.c``, which joins the
held namespace (one setns(2), the seal, exec: a few milliseconds; the
first waits for the keeper).  So the commands of one fake share one PID
namespace and its mounts (the sysctl copies too), as processes on one
machine do, and what a command leaves running outside its process group
is ended when the fake closes (or resets).  Where the namespace cannot be
held or joined, commands start as ``run --attach`` (:meth:`command`), and
the reason is logged once (``FAKEDEBUGFS_JOIN=0`` asks for that way).
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from fakedebugfs.native import build as build_native
from fakedebugfs.control import runstate
from fakedebugfs.server.launcher import until_eof, wait_exit

KILL_GRACE = 2.0  # seconds a command's process group gets after SIGTERM, before SIGKILL
JOIN_ENV = "FAKEDEBUGFS_JOIN"  # "0": every command the way of ``run --attach``
KEEPER_MODULE = "fakedebugfs.sandbox.keeper"
KEEPER_TIMEOUT = 30.0  # seconds the keeper may take to hold the namespace
_said: set = set()  # reasons for the slow way already logged (once each)
_KEEPERS = threading.Lock()  # a fake's keeper state, between threads
log = logging.getLogger(__name__)


def _cli() -> list[str]:
    return [sys.executable, "-m", "fakedebugfs"]


class Commands:
    """``command``, ``popen``, ``run`` and ``end_commands``: *argv* in this
    fake's ``run`` namespace; ``self._commands`` holds what still runs."""

    _root: Callable[[], Path]  # Fake._root: the mount point
    _commands: list  # (Popen, has a process group of its own), set by Fake.__init__

    def command(self, argv: Sequence[str]) -> list[str]:
        """The command line that runs *argv* in this fake's ``run`` namespace
        (/sys/kernel/tracing and /sys/kernel/debug are this fake)."""
        return [*_cli(), "run", "--attach", str(self._root()), "--", *map(str, argv)]

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """``subprocess.Popen`` of *argv* in this fake's ``run`` namespace, in
        a session (and process group) of its own: when the fake closes,
        whatever still runs in that group (the command, a recorder's
        children) is ended, SIGTERM then SIGKILL.  Commands after the
        first join the namespace the fake's keeper holds (see the module)."""
        own = kwargs.setdefault("start_new_session", True) or kwargs.get("process_group") == 0
        with _KEEPERS:  # (popen from several threads: one keeper, its fds kept open)
            keeper = getattr(self, "_keeper", None)
            if keeper is None:
                keeper = self._keeper = Keeper(str(self._root()),
                                               getattr(self, "_forkserver", None))
            status, fallback = None, self.command(argv)
            line, fd = keeper.join_line(argv, fallback, kwargs)
            if line is not None:
                status = os.pipe2(os.O_CLOEXEC)
                kwargs["pass_fds"] = (*kwargs.get("pass_fds", ()), fd, status[1])
                line[line.index("{status}")] = str(status[1])
            try:
                proc = subprocess.Popen(line or fallback, **kwargs)
            except BaseException:
                if status is not None:
                    os.close(status[0])
                raise
            finally:
                if status is not None:
                    os.close(status[1])
            if status is not None:
                keeper.statuses.append(status[0])
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
                out, err = _communicate(proc, input, timeout)
            except BaseException:
                _end_group(proc, kwargs["start_new_session"], grace=0)
                raise
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check:
            done.check_returncode()
        return done

    def end_commands(self) -> None:
        """End what :meth:`run`/:meth:`popen` started and still runs, with
        its process group (done by :meth:`close` and :meth:`reset`), and
        what they left running in the keeper's namespace."""
        commands, self._commands = self._commands, []
        for proc, own in commands:
            _end_group(proc, own, KILL_GRACE)
        keeper = getattr(self, "_keeper", None)
        if keeper is not None:
            keeper.sweep()

    def close_keeper(self, wait: bool = True):
        """End the keeper and, with its namespace, every process left in it
        (done by :meth:`close`, after :meth:`end_commands`); not *wait*:
        :meth:`Keeper.close`'s."""
        with _KEEPERS:
            keeper, self._keeper = getattr(self, "_keeper", None), None
        return keeper.close(wait) if keeper is not None else None


class Keeper:
    """A fake's keeper (:mod:`fakedebugfs.sandbox.keeper`), seen from the
    fake: started with the first command, and the command lines that
    join the namespace it holds (the launcher ``fakedebugfs/native/join.c``:
    with the holder's pidfd once the keeper said where it is, else waiting
    for the keeper to say it); ``None`` (the ``run --attach`` way) when it
    cannot be used, with the reason logged once."""

    def __init__(self, mnt: str, forkserver: Optional[str] = None):
        self.mnt = mnt
        self.forkserver = forkserver  # a fork server's socket: the keeper is forked there
        self.proc: Optional[subprocess.Popen] = None
        self.info: Optional[dict] = None  # the keeper's report
        self.pidfd: Optional[int] = None  # the holder's
        self.tell: Optional[int] = None  # what launchers wait on while the keeper starts
        self.launcher: Optional[str] = None
        self.off: Optional[str] = None  # why commands go the slow way
        self.statuses: list[int] = []  # read ends of the launchers' --status pipes
        self.work: Optional[str] = None  # the keeper's work folder
        self.started = 0.0

    def start(self) -> None:
        """Start the keeper (once), not waiting for it."""
        if self.proc is not None or self.off is not None:
            return
        if os.environ.get(JOIN_ENV) == "0":
            self.off = f"{JOIN_ENV}=0"
            return
        if not hasattr(os, "pidfd_open"):
            self.disable("this Python has no os.pidfd_open")
            return
        try:
            self.launcher = str(build_native("join"))
        except Exception as err:  # gcc missing or failing
            self.disable(f"cannot build the join launcher ({err}); run `make install`")
            return
        tell_r, tell_w = os.pipe2(os.O_CLOEXEC)
        try:
            self.work = tempfile.mkdtemp(prefix="keep-", dir=runstate.rundir())
            self.proc = self._forked(tell_w) or subprocess.Popen(
                [sys.executable, "-m", KEEPER_MODULE, self.mnt, self.work, str(tell_w)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                start_new_session=True, pass_fds=(tell_w,))
        except OSError as err:
            os.close(tell_r)
            self.disable(f"cannot start the keeper: {err}")
            return
        finally:
            os.close(tell_w)
        self.tell = tell_r
        self.started = time.monotonic()

    def _forked(self, tell: int):
        """The keeper forked by the fork server that started the fake (its
        imports done: a few ms instead of a Python's start), with pipes as
        its stdin and stdout, as ``Popen`` gives; None where there is none
        or it refuses (then it is started as a command)."""
        if not self.forkserver:
            return None
        from fakedebugfs.server import forkserver

        stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
        stdout_r, stdout_w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = forkserver.spawn_module(self.forkserver, KEEPER_MODULE,
                                          [self.mnt, self.work, "{fd2}"],
                                          [stdin_r, stdout_w, tell])
        except OSError:
            for fd in (stdin_r, stdin_w, stdout_r, stdout_w):
                os.close(fd)
            return None
        os.close(stdin_r)
        os.close(stdout_w)
        proc = forkserver.Forked(pid, None)
        proc.stdin, proc.stdout = os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb")
        return proc

    def disable(self, why: str) -> None:
        """Commands go the ``run --attach`` way from now on; *why* logged once."""
        self.off = why
        if why not in _said:
            _said.add(why)
            log.warning("commands start the slow way (fakedebugfs run --attach): %s", why)
        self.close()

    def ready(self) -> bool:
        """Whether the namespace is held (the keeper said so); a keeper
        not there after KEEPER_TIMEOUT s is given up."""
        self._check_statuses()
        if self.off is not None or self.proc is None:
            return False
        if self.pidfd is not None:
            if self.proc.poll() is None:
                return True
            self.disable(f"the keeper ended (status {self.proc.returncode})")
            return False
        if not select.select([self.proc.stdout.fileno()], [], [], 0)[0]:
            if time.monotonic() - self.started > KEEPER_TIMEOUT:
                self.disable(f"the keeper did not hold the namespace in {KEEPER_TIMEOUT:g} s")
            return False
        try:
            info = json.loads(self.proc.stdout.readline() or b"{}")
        except ValueError:
            info = {}
        if "holder" not in info:
            self.disable(info.get("error") or "the keeper ended without holding the namespace")
            return False
        try:
            self.pidfd = os.pidfd_open(int(info["holder"]))
        except OSError as err:
            self.disable(f"pidfd_open of the holder: {err.strerror}")
            return False
        if self.proc.poll() is not None:  # the pid could be another's by now
            self.disable("the keeper ended")
            return False
        self.info = info
        if self.tell is not None:
            os.close(self.tell)
            self.tell = None
        return True

    def join_line(self, argv: Sequence[str], fallback: list[str],
                  kwargs: dict) -> tuple[Optional[list[str]], Optional[int]]:
        """The launcher's command line for *argv* (``{status}`` standing for
        its status fd) and the fd to pass it, or ``(None, None)``: the
        caller runs *fallback*.  Starts the keeper if need be."""
        if kwargs.get("close_fds") is False or kwargs.get("shell") or kwargs.get("executable"):
            return None, None  # (what the launcher's pass_fds or argv would change)
        self.start()
        info = os.path.join(self.work or "", runstate.JOIN_INFO)
        tail = ["--info", info, "--status", "{status}",
                "--fallback", *fallback, "--end-fallback", "--", *map(str, argv)]
        if self.ready():
            return [self.launcher, "--pidfd", str(self.pidfd), *tail], self.pidfd
        if self.off is None and self.tell is not None:
            return [self.launcher, "--wait-fd", str(self.tell), *tail], self.tell
        return None, None

    def _check_statuses(self) -> None:
        """A launcher that could not join says why on its status pipe."""
        for fd in list(self.statuses):
            if not select.select([fd], [], [], 0)[0]:
                continue
            why = os.read(fd, 4096).decode(errors="replace")
            os.close(fd)
            self.statuses.remove(fd)
            if why and self.off is None:
                self.disable(why)

    def sweep(self) -> None:
        """SIGKILL every process of the held PID namespace but the holder,
        its init (what commands left running outside their groups)."""
        if self.pidfd is None or self.info is None:
            return
        holder = int(self.info["holder"])
        try:
            ns = os.readlink(f"/proc/{holder}/ns/pid")
        except OSError:
            return
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == holder:
                continue
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == ns:
                    os.kill(int(name), signal.SIGKILL)
            except OSError:
                continue

    def close(self, wait: bool = True):
        """End the keeper (stdin closed: it kills its namespace's init, and
        with it every process there; still starting: killed, with its init);
        idempotent.  Not *wait*: returns once the keeper says it is done
        (its stdout at end of file: the namespace and its work folder
        gone), with its process if that is still exiting (else None)."""
        ending = None
        self._check_statuses()
        for fd in self.statuses:
            os.close(fd)
        self.statuses = []
        for name in ("pidfd", "tell"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)
        proc, self.proc = self.proc, None
        held, self.info = self.info is not None, None
        if proc is not None:
            if held:  # it ends its namespace and removes its work folder
                try:
                    proc.stdin.close()
                except OSError:
                    pass
                if not wait and until_eof(proc.stdout.fileno(), 5.0):
                    ending = proc if proc.poll() is None else None
                else:
                    try:
                        wait_exit(proc, 5.0)
                    except subprocess.TimeoutExpired:
                        held = False
            if not held:  # still starting (or stuck): its init dies with it
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None
        return ending


def command_name(proc: subprocess.Popen) -> str:
    """The program a command of :meth:`Commands.command` runs (after ``--``)."""
    argv = proc.args if isinstance(proc.args, (list, tuple)) else [proc.args]
    tail = list(argv)
    if "--" in tail:
        tail = tail[tail.index("--") + 1:]
    return os.path.basename(str(tail[0])) if tail else str(proc.pid)


def _communicate(proc: subprocess.Popen, input: Any, timeout: Optional[float]) -> tuple:
    """``proc.communicate(input, timeout)``, but a command with no pipe and
    a time limit is waited for with :func:`wait_exit`, so :meth:`Commands.run`
    returns as it ends (Popen's own wait polls, in steps up to 50 ms: a 20
    ms ``run(..., timeout=30)`` took 31.5 ms, a 65 ms one 113.5).  With
    pipes, their end of file is what ends the wait, and the command is
    seen gone within a millisecond or two after it."""
    if timeout is None or proc.stdin or proc.stdout or proc.stderr:
        return proc.communicate(input, timeout=timeout)
    wait_exit(proc, timeout)
    return None, None


def _end_group(proc: subprocess.Popen, own: bool, grace: float) -> None:
    """SIGTERM *proc*'s process group (*own*: it has one, see Fake.popen), then
    SIGKILL after *grace* seconds; without a group of its own, only *proc*.
    The group's leader is waited for on its pidfd; what of the group
    outlives it is looked for every 20 ms."""
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
        try:  # the leader's end seen at once (its pidfd), then the rest of the group
            wait_exit(proc, wait)
        except subprocess.TimeoutExpired:
            pass
        while True:
            proc.poll()  # reaps the leader (a zombie still counts in the group)
            if not signal_group(0):
                proc.poll()
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
    proc.poll()
