"""A fake with more CPUs than this machine is, to the command ``run``
starts, a kernel with more possible CPUs than online ones
(sandbox/hotplug.py ``show_possible``): ``sysconf(_SC_NPROCESSORS_CONF)``
counts the fake's ``per_cpu`` CPUs, as libtracefs' utest expects when it
compares ``tracing_cpumask`` with it ("instance reset"), and what is online
stays this machine's."""

from __future__ import annotations

import os
import subprocess

import pytest

from fakedebugfs.sandbox.hotplug import cpulist

from conftest import FAKEDEBUGFS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="starts runs as root")

SCRIPT = r"""
echo conf=$(getconf _NPROCESSORS_CONF) onln=$(getconf _NPROCESSORS_ONLN)
echo possible=$(cat /sys/devices/system/cpu/possible)
echo offline=$(cat /sys/devices/system/cpu/offline)
echo per_cpu=$(ls /sys/kernel/tracing/per_cpu | wc -l)
echo cpumask=$(cat /sys/kernel/tracing/tracing_cpumask)
"""


def _host(name: str) -> set[int]:
    with open(f"/sys/devices/system/cpu/{name}") as fp:
        return cpulist(fp.read())


def _run(cpus: int) -> dict:
    p = subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", "--cpus", str(cpus), "--",
                        "sh", "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return dict(word.split("=", 1) for word in p.stdout.split())


def test_more_cpus_than_the_machine_are_possible_not_online():
    """--cpus two more than this machine's possible CPUs: sysconf counts
    the fake's CPUs, the same as its per_cpu directories and the bits of
    tracing_cpumask; online CPUs are this machine's, and the others are
    listed offline."""
    possible, online = _host("possible"), _host("online")
    n = max(possible) + 3
    got = _run(n)
    assert int(got["conf"]) == n == int(got["per_cpu"])
    assert int(got["cpumask"], 16) == (1 << n) - 1
    assert int(got["onln"]) == len(online)
    assert cpulist(got["possible"]) == set(range(n))
    assert cpulist(got["offline"]) == set(range(n)) - online


def test_fewer_cpus_leave_the_machine_as_it_is():
    """--cpus 1: the machine's possible CPUs are shown unchanged."""
    got = _run(1)
    assert cpulist(got["possible"]) == _host("possible")
    assert int(got["conf"]) == len(_host("possible"))
