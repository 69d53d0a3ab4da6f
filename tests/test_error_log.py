"""``error_log`` keeps the kernel's last TRACING_LOG_ERRS_MAX entries: 12
refused filters in a scratch instance leave the last 8, oldest first, on
both profiles, as on this host's 6.18 and in the Debian 6.12 guest (each
run live where it can be)."""

from __future__ import annotations

import subprocess

import pytest

from fakedebugfs import Fake
from support import realtracefs

# 12 refusals (a filter the kernel cannot parse), then the Command lines kept
SCRIPT = r"""
T=$1; d=$T/instances/errlog$$
mkdir $d || exit 3
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
  echo "common_pid == $i &&& x" > $d/events/sched/sched_switch/filter 2>/dev/null
done
grep '^  Command:' $d/error_log
rmdir $d
"""


def commands(out: str) -> list:
    return [line.strip() for line in out.splitlines() if line.strip()]


def fake_commands(profile: str) -> list:
    with Fake(profile=profile, workload="none") as fk:
        p = subprocess.run(["sh", "-c", SCRIPT, "sh", str(fk.tracing)], capture_output=True,
                           text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return commands(p.stdout)


WANT = [f"Command: common_pid == {i} &&& x" for i in range(5, 13)]


@pytest.mark.parametrize("profile", ["linux-6.18", "debian-6.12"])
def test_error_log_keeps_the_last_eight(profile):
    assert fake_commands(profile) == WANT


def test_this_hosts_kernel_keeps_as_many():
    if not realtracefs.available():
        pytest.skip("no real tracefs here (root and tracefs needed)")
    out = realtracefs.shell(SCRIPT.replace("T=$1", f"T={realtracefs.POINT}"), timeout=60)
    assert out.returncode == 0, out.stderr
    assert commands(out.stdout) == fake_commands("linux-6.18")


def test_the_guests_kernel_keeps_as_many(oracle):
    res = oracle.run(SCRIPT.replace("T=$1", "T=/sys/kernel/tracing"), timeout=300)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert commands(res.stdout.decode()) == fake_commands("debian-6.12")
