"""A paced workload held up catches up, and counts what it could not
generate (server/workload.py): the workload's turns wait for control
requests (fs/slices.py ``Slicer.quiet``), so it may fall behind; what it
owes beyond a second is skipped, and the status says how many
(``workload_skipped``), so no event goes missing unsaid.
"""

from __future__ import annotations

import os
import signal
import time

from fakedebugfs import Fake

RATE = 20000  # events/s
STOP = 2.5  # seconds the server is stopped: more than the second it may owe


def test_a_stopped_workload_counts_what_it_skipped():
    """The server stopped (SIGSTOP) for longer than a second: once it runs
    again the status counts skipped events, and the events fired plus those
    skipped are the rate times the time since the workload started, less at
    most the second it may still owe, and never more."""
    t_before = time.monotonic()  # the workload starts after this
    with Fake(workload="default", rate=RATE) as fk:
        # warmed up: its first events built their formats and (a distro
        # profile) loaded the kernel's symbol table for their call sites,
        # a second or more on a busy machine, which a workload then owes
        warm = time.monotonic() + 60
        while fk.status()["emitted"] < RATE // 10 and time.monotonic() < warm:
            time.sleep(0.05)
        t_ready = time.monotonic()  # the workload started before this
        pid = fk.status()["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(STOP)
        finally:
            os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + 60
        while True:
            t_sent = time.monotonic()
            st = fk.status()
            t_back = time.monotonic()
            if st["workload_skipped"] or t_back > deadline:
                break
            time.sleep(0.05)
    accounted = st["emitted"] + st["workload_skipped"]
    assert st["workload_skipped"] > 0, st
    # never more than the pace allows since the mount began ...
    assert accounted <= RATE * (t_back - t_before), (accounted, st)
    # ... and at most a second's worth (plus one batch) short of it
    assert accounted >= RATE * (t_sent - t_ready) - RATE - 1, (accounted, st)
