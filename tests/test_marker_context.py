"""The context of a ``trace_marker`` / ``trace_marker_raw`` entry: 6.18
takes it with preemption disabled (``common_preempt_count`` 1, ``...1.`` in
``trace``), 6.12 preemptible (0, ``.....``); a hist keyed on it sees the
same.  Each profile against its kernel, live where it can run (this host's
6.18, the Debian 6.12 guest), and the profiles against each other."""

from __future__ import annotations

import re
import subprocess

import pytest

from fakedebugfs import Fake
from support import realtracefs

# the latency flags of a marker's entry and of a raw marker's, in a scratch
# instance (the hist needs a kernel with hist triggers: printed when it has one)
SCRIPT = r"""
T=$1; d=$T/instances/marker$$
mkdir $d || exit 3
if [ -e $d/events/ftrace/print/hist ]; then
  echo 'hist:keys=common_preempt_count' > $d/events/ftrace/print/trigger
fi
echo hello > $d/trace_marker
printf '\001\000\000\000abcd' > $d/trace_marker_raw
grep -o '\] [.a-zA-Z0-9]\{5\} ' $d/trace
[ -e $d/events/ftrace/print/hist ] && grep '^{' $d/events/ftrace/print/hist
echo > $d/events/ftrace/print/trigger 2>/dev/null
rmdir $d
"""


def answers(out: str) -> list:
    return [re.sub(r"\s+", " ", line.strip()) for line in out.splitlines() if line.strip()]


def fake_answers(profile: str) -> list:
    with Fake(profile=profile, workload="none") as fk:
        p = subprocess.run(["sh", "-c", SCRIPT, "sh", str(fk.tracing)], capture_output=True,
                           text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return answers(p.stdout)


def test_the_profiles_differ_as_their_kernels():
    assert fake_answers("linux-6.18") == ["] ...1.", "] ...1."]
    assert fake_answers("debian-6.12") == ["] .....", "] .....",
                                           "{ common_preempt_count: 0 } hitcount: 1"]


def test_as_this_hosts_kernel():
    if not realtracefs.available():
        pytest.skip("no real tracefs here (root and tracefs needed)")
    out = realtracefs.shell(SCRIPT.replace("T=$1", f"T={realtracefs.POINT}"), timeout=60)
    assert out.returncode == 0, out.stderr
    release = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout
    if not release.startswith("6.18."):
        pytest.skip(f"this host runs {release.strip()}, not the profile's 6.18")
    assert answers(out.stdout) == fake_answers("linux-6.18")


def test_as_the_guests_kernel(oracle):
    res = oracle.run(SCRIPT.replace("T=$1", "T=/sys/kernel/tracing"), timeout=300)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert answers(res.stdout.decode()) == fake_answers("debian-6.12")
