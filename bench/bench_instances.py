"""Instance memory over repeated cycles (issue 35's figure): a fake's
server, ``cycles`` times ``mkdir`` of ``per_cycle`` instances under
``instances/`` then their ``rmdir``; the row is how far the server's
resident memory ends above where it started (before the first cycle),
in MB, once the heap trim after the removals has run (the server trims a
second after instances go: server/server.py ``trim_heap``).  The kernel
frees an instance's ring buffers at its rmdir (``instance_rmdir``), so
the aim is 0; the issue asks for at most 5 MB after 5 cycles of 1,000.

    python -m bench instances                       # the row as a table
    BENCH_INSTANCES=5x1000 python -m bench instances  # cycles x per cycle
    BENCH_INSTANCES_PROFILE=linux-6.18 python -m bench instances  # another profile

The detail lists the RSS after each cycle and the seconds per instance
(``mkdir`` + ``rmdir`` through FUSE).  tests/test_instance_memory.py checks
a smaller case in the suite.
"""

from __future__ import annotations

import os
import time
from typing import Optional

CYCLES, PER_CYCLE = 5, 1000
SIZE_ENV = "BENCH_INSTANCES"  # "CYCLESxPER_CYCLE"
PROFILE_ENV = "BENCH_INSTANCES_PROFILE"  # the fake's profile (unset: the default)
SETTLE_S = 8.0  # the longest wait for the trim after a cycle


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fp:
        for line in fp:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def settled_rss(pid: int, target: int, within: float = SETTLE_S) -> int:
    """The RSS once it is at most *target* KiB, or the lowest seen in *within* s."""
    deadline = time.monotonic() + within
    best = now = rss_kb(pid)
    while now > target and time.monotonic() < deadline:
        time.sleep(0.25)
        now = rss_kb(pid)
        best = min(best, now)
    return best


def cycles_row(cycles: int = CYCLES, per_cycle: int = PER_CYCLE,
               profile: Optional[str] = None) -> dict:
    from fakedebugfs import Fake

    with Fake(cpus=2, **({"profile": profile} if profile else {})) as fk:
        pid = fk.status()["pid"]
        instances = fk.tracing / "instances"
        start = settled_rss(pid, 0, 2.0)  # (after the mount's own trim)
        after, spent = [], 0.0
        for _ in range(cycles):
            t0 = time.monotonic()
            for i in range(per_cycle):
                (instances / f"bench{i}").mkdir()
            for i in range(per_cycle):
                (instances / f"bench{i}").rmdir()
            spent += time.monotonic() - t0
            after.append(settled_rss(pid, start))
    grown = [round((kb - start) / 1024, 1) for kb in after]
    return {"name": f"instance_cycles_rss_growth ({cycles}x{per_cycle}"
                    f"{', ' + profile if profile else ''})",
            "fake": grown[-1], "real": None, "unit": "MB",
            "detail": {"start_mb": round(start / 1024, 1), "growth_after_each_mb": grown,
                       "ms_per_instance": round(spent * 1000 / (cycles * per_cycle), 2)}}


def run() -> list[dict]:
    cycles, per_cycle = CYCLES, PER_CYCLE
    if os.environ.get(SIZE_ENV):
        cycles, per_cycle = (int(n) for n in os.environ[SIZE_ENV].lower().split("x"))
    return [cycles_row(cycles, per_cycle, os.environ.get(PROFILE_ENV) or None)]


if __name__ == "__main__":
    from . import print_rows

    print_rows(run())
