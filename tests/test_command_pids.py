"""The pids of a command never look like the default workload's invented
tasks: the workload's take 1000-9999 (sources/workloads/synthetic.py
``TASK_PIDS``), a command's start at 10000 (sandbox/cmdinit.py
``FIRST_PID``), in ``run`` and among a Fake's commands, so no pid of the
fake's events is both, and no workload pid contains a command's
(ftracetest's ``event-no-pid.tc`` greps ``trace`` for its shell's pid)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from fakedebugfs import Fake
from fakedebugfs.sandbox.cmdinit import FIRST_PID
from fakedebugfs.sources.workloads.synthetic import TASK_PIDS

from conftest import FAKEDEBUGFS

PIDS = re.compile(r"^\s*.*?-(\d+)\s+\[\d+\]", re.M)


@pytest.mark.skipif(os.geteuid() != 0, reason="starts runs as root")
def test_run_commands_and_workload_tasks_never_share_digits():
    """The default workload at full pace for a second beside a shell that
    starts processes: every pid in ``trace`` is either the workload's (four
    digits) or one of the command's (five, from 10000), and the shell's
    own pid is in no workload task's."""
    script = r"""
        cd /sys/kernel/tracing
        echo 1 > events/sched/enable; echo 1 > events/syscalls/enable
        for i in 1 2 3 4 5; do /bin/true; done
        echo mark > trace_marker
        sleep 1
        echo 0 > tracing_on
        echo me=$$
        cat trace
    """
    p = subprocess.run([FAKEDEBUGFS, "run", "--", "sh", "-c", script], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    me = int(re.search(r"^me=(\d+)$", p.stdout, re.M)[1])
    assert me >= FIRST_PID
    pids = {int(x) for x in PIDS.findall(p.stdout)}
    workload = {x for x in pids if TASK_PIDS[0] <= x <= TASK_PIDS[1]}
    assert workload, "the workload's tasks should be in trace"
    assert me in pids  # the marker's writer, as it sees itself
    assert all(x == 0 or x in workload or x >= FIRST_PID for x in pids), sorted(pids)
    assert not [x for x in workload if str(me) in str(x)]  # (grep $mypid finds only its own)


def test_fake_commands_start_at_the_first_pid():
    with Fake() as fk:
        out = fk.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout
        assert int(out) >= FIRST_PID
