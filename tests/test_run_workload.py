"""The workload's driving inside ``fakedebugfs run`` (server/workload.py):
what a short ``tracing_on`` window records, as ftracetest's
``filter/event-filter-function.tc`` opens one (``echo 1 > tracing_on;
ls; echo 0 > tracing_on``) and needs the simulated machine's events in it.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap

import pytest

from conftest import FAKEDEBUGFS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the runs start as root")

WINDOWS = textwrap.dedent(r"""
    cd /sys/kernel/tracing
    echo 0 > tracing_on
    echo 1 > events/enable
    # other readers keep the FUSE queue busy, as on a loaded machine: the
    # workload's turns wait for it to empty (up to 20 ms)
    for r in 1 2 3; do (while :; do cat tracing_on; done > /dev/null) & pids="$pids $!"; done
    for i in $(seq 10); do
        echo > trace
        echo 1 > tracing_on
        sleep 0.01
        echo 0 > tracing_on
        echo "window $i: $(grep -vc '^#' trace)"
    done
    kill $pids
""")


RATE = 30000  # run's default


def test_a_short_tracing_on_window_records_the_workload():
    """Each of 10 windows of at least 10 ms between ``tracing_on`` 1 and 0
    holds the paced workload's events of that time (RATE a second) while
    other readers keep the server busy: the write of 0 first fires what the
    workload owes until then (its turns, which wait for the FUSE queue to
    empty, recorded a fifth to a half of them)."""
    # (--mirror none: the synthetic workload's windows alone; mirrored, the
    # three cat loops' real events of every tracepoint (events/enable) are
    # fired beside it, thousands a window, and the drains share its CPU)
    p = subprocess.run([FAKEDEBUGFS, "run", "--mirror", "none", "--rate", str(RATE), "--",
                        "sh", "-c", WINDOWS], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    counts = [int(n) for n in re.findall(r"^window \d+: (\d+)$", p.stdout, re.M)]
    assert len(counts) == 10, p.stdout
    # (a trace line for most of the workload's events: half of what 10 ms owes)
    assert min(counts) >= 0.5 * RATE * 0.01, counts
