"""``fakedebugfs run``: a signal reaches the command once, however it is sent.

``run`` forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to its command.  A
signal sent to run's process group (``kill -INT -PGID``: a CI runner's
group kill, ``timeout``'s) must not reach the command a second time,
forwarded; nor a terminal's Ctrl-C, which the kernel sends to the whole
foreground group.  The command counts what it is delivered
(tests/c/sigint_counter.c), each signal sent once the previous one was
counted (standard signals coalesce while pending).
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess

import pytest

from conftest import FAKEDEBUGFS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="fakedebugfs run needs root")


# how long a second copy of a signal is waited for (none comes: no figure)
SETTLE = 0.1


def _next_line(read, timeout: float = 60) -> str:
    """The next line of the command's output (through *read(timeout)*)."""
    line = read(timeout)
    assert line, "the command's output ended"
    return line


def _count(send, read, pid: int, times: int) -> list[str]:
    """*send(i)* a SIGINT *times* times, each once the previous was counted
    and a second copy of it had a moment to come (else the two would
    coalesce), then SIGTERM to run alone; the command's lines from there."""
    assert _next_line(read) == "ready"
    lines = []
    for i in range(times):
        send(i)
        lines.append(_next_line(read))
        while line := read(SETTLE):
            lines.append(line)
    os.kill(pid, signal.SIGTERM)
    while not lines[-1].startswith("total"):
        lines.append(_next_line(read))
    return lines


def test_sigint_to_the_group_or_to_run_reaches_the_command_once(cc):
    """Without a terminal (CI): SIGINT to run's process group, to run
    alone, to the group four times more: six SIGINTs delivered, not more,
    each from the command's init (its pid 1: forwarded by run), none
    straight from the sender (pid 0: outside the command's namespace).
    (Before the fix a group's SIGINT reached the command straight and
    forwarded, by run and its inits; the copies coalesced now and then.)"""
    counter = cc("sigint_counter.c")
    proc = subprocess.Popen([FAKEDEBUGFS, "run", "--workload", "none", "--", counter],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)

    def read(timeout):
        if not select.select([proc.stdout], [], [], timeout)[0]:
            return ""
        return proc.stdout.readline().strip()

    def send(i):
        if i == 1:
            os.kill(proc.pid, signal.SIGINT)
        else:
            os.killpg(proc.pid, signal.SIGINT)

    try:
        lines = _count(send, read, proc.pid, 6)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert lines == [f"int {i} from 1" for i in range(1, 7)] + ["total 6"]


def test_ctrl_c_in_a_terminal_reaches_the_command_once(cc):
    """In a terminal's foreground: each Ctrl-C (the kernel's SIGINT to the
    whole foreground group, run and the command in it) is one SIGINT
    delivered to the command, the kernel's (pid 0), none forwarded."""
    counter = cc("sigint_counter.c")
    pid, master = pty.fork()
    if pid == 0:
        os.execv(FAKEDEBUGFS, [FAKEDEBUGFS, "run", "--workload", "none", "--", counter])
    buf = b""

    def read(timeout):
        nonlocal buf
        while b"\n" not in buf:
            if not select.select([master], [], [], timeout)[0]:
                return ""
            try:
                data = os.read(master, 4096)
            except OSError:  # (EIO: the terminal's other side closed)
                return ""
            if not data:
                return ""
            buf += data
        line, buf = buf.split(b"\n", 1)
        return line.decode().strip()

    try:
        lines = _count(lambda i: os.write(master, b"\x03"), read, pid, 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(master)
    # (the terminal echoes Ctrl-C as ^C)
    assert [line.replace("^C", "") for line in lines] == \
        ["int 1 from 0", "int 2 from 0", "int 3 from 0", "total 3"]
