"""The oracle's cost: what the Debian 6.12 guest adds to a test session.

Rows (the "real" column: the guest is the real kernel; the fake has no
figure of its own here):

* boot to first answer: QEMU started (TCG, one thread) until the agent ran
  its first command, a fresh guest each trial (``Guest.start``);
* a command's round trip: ``true`` run through the agent in a booted guest
  (the request file taken within 0.1 s, bash started in the chroot);
* the fake's answer beside it: ``true`` under ``fakedebugfs run``, for the
  same question asked of the fake.

``python -m bench oracle``; BOOTS and TRIPS trials, their spread printed.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from . import FAKEDEBUGFS, ROOT, spread

BOOTS = 3
TRIPS = 10


def run() -> list[dict]:
    from fakedebugfs.oracle import Guest, why_not

    cause = why_not()
    if cause:
        raise RuntimeError(f"the oracle cannot run here: {cause}")
    guest = Guest(ROOT / "fakedebugfs" / "profiles" / "debian-6.12", name="bench")
    boots, trips, fake = [], [], []
    try:
        for _ in range(BOOTS):
            guest.stop()
            began = time.monotonic()
            guest.start()
            guest.run("true", check=True)
            boots.append(time.monotonic() - began)
        for _ in range(TRIPS):
            began = time.monotonic()
            guest.run("true", check=True)
            trips.append(time.monotonic() - began)
    finally:
        guest.stop()
    for _ in range(TRIPS):
        began = time.monotonic()
        subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", "--", "true"], check=True,
                       capture_output=True, timeout=120)
        fake.append(time.monotonic() - began)
    load = list(os.getloadavg())
    med = lambda v: spread(v)[1]  # noqa: E731
    return [
        {"name": "oracle: boot to first answer (TCG, 4 vCPUs)", "fake": None, "real": med(boots),
         "unit": "s", "spread": {"real": spread(boots)},
         "detail": {"trials": BOOTS, "load": load, "kernel": os.uname().release}},
        {"name": "oracle: a command's round trip / fakedebugfs run -- true", "fake": med(fake),
         "real": med(trips), "unit": "s", "spread": {"fake": spread(fake), "real": spread(trips)},
         "detail": {"trials": TRIPS, "load": load}},
    ]
