"""Commands run against a fake (the methods of
:class:`~fakedebugfs.api.fake.Fake` of that concern; :class:`Commands` is
one of its bases): each runs in ``fakedebugfs run``'s private mount
namespace, where ``/sys/kernel/tracing`` and ``/sys/kernel/debug`` are the
fake, as a tracefs or debugfs mounted there is the kernel's for every
process of that namespace; each in a session (and process group) of its
own, ended with its group when the fake closes (SIGTERM, then SIGKILL, as
a session's processes get SIGHUP when its leader goes).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

KILL_GRACE = 2.0  # seconds a command's process group gets after SIGTERM, before SIGKILL


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


def command_name(proc: subprocess.Popen) -> str:
    """The program a command of :meth:`Commands.command` runs (after ``--``)."""
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
