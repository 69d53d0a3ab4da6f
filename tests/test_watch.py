"""``fakedebugfs run``'s watch of its command (server/watch.py,
sources/procevents.py): what it costs while nothing listens to the
side-band tracepoints, and what it keeps for when something does.

While no tracer listens to ``sched_switch`` or ``sched_process_*``, the
server is not woken for the watch (it waits on the perf rings, which wake
it when half full) and the command's context switches are not recorded;
an enable drains what happened before it (not shown) and turns the
switches on for every task already watched.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
import time

import pytest

from conftest import FAKEDEBUGFS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the runs start as root")


def run(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([FAKEDEBUGFS, "run", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as fp:
                kids = [int(x) for x in fp.read().split()]
        except OSError:
            continue
        out += kids
        todo += kids
    return out


def server_of(run_pid: int) -> int:
    """The run's server: the process under it holding /dev/fuse."""
    for pid in descendants(run_pid):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/fuse":
                    return pid
            except OSError:
                pass
    raise AssertionError("no server under the run")


def wakeups(pid: int) -> int:
    """Voluntary context switches of all the process's threads so far."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as fp:
                total += int(re.search(r"^voluntary_ctxt_switches:\s*(\d+)", fp.read(),
                                       re.M).group(1))
        except (OSError, AttributeError):
            pass
    return total


def test_an_idle_watch_does_not_wake_the_server():
    """A watched command with nothing listening to its process events
    costs the server no periodic wake-ups (a drain every 5 ms was 200 a
    second): it sleeps on the perf rings, looking every 0.1 s for a probe
    that came without an enable."""
    p = subprocess.Popen([FAKEDEBUGFS, "run", "--workload", "none", "--", "sh", "-c",
                          "echo ready; sleep 4"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        server = server_of(p.pid)
        time.sleep(0.5)  # the mount's start settled
        before, t0 = wakeups(server), time.monotonic()
        time.sleep(2.0)
        woken, seconds = wakeups(server) - before, time.monotonic() - t0
    finally:
        p.kill()
        p.wait()
    assert woken / seconds < 40, f"{woken} wake-ups in {seconds:.2f} s"


BEFORE_THE_ENABLE = textwrap.dedent(r"""
    cd /sys/kernel/tracing
    sleep 0.5 & child=$!
    echo 1 > events/sched/sched_process_fork/enable
    echo 1 > events/sched/sched_process_exit/enable
    echo 1 > events/sched/sched_switch/enable
    wait $child
    echo 0 > events/sched/sched_switch/enable
    echo "me=$$ child=$child"
    grep -v '^#' trace
""")


def test_an_enable_shows_what_follows_it_only():
    """The fork of a task made just before the enables is not in the
    trace (the kernel recorded nothing before them: an enable drains
    what the rings hold first), its exit is, with the name its exec gave
    it (learned while nothing listened); and its context switches after
    ``sched_switch`` is enabled are there though it was forked while the
    switches were not recorded (the enable reaches the inherited copies)."""
    p = run("--workload", "none", "--", "sh", "-c", BEFORE_THE_ENABLE)
    assert p.returncode == 0, p.stderr
    me, child = re.search(r"^me=(\d+) child=(\d+)$", p.stdout, re.M).groups()
    lines = p.stdout
    assert not re.search(rf"sched_process_fork: .* child_pid={child}$", lines, re.M), lines
    assert re.search(rf"^\s*sleep-{child}\s+\[\d+\].*sched_process_exit: comm=sleep "
                     rf"pid={child} prio=120", lines, re.M), lines
    into = re.search(rf"sched_switch: prev_comm=swapper/\d+ prev_pid=0 prev_prio=120 "
                     rf"prev_state=R ==> next_comm=sleep next_pid={child} ", lines)
    assert into, lines
