"""The ``blk`` and ``mmiotrace`` tracers (engine/ftrace/trace_blk.py,
trace_mmiotrace.py; docs/profiles.md#the-blk-and-mmiotrace-tracers), the
same shell session run in the fake and in the profile's kernel, live:
the Debian 6.12 guest of the oracle for ``debian-6.12`` (both tracers),
this host's 6.18 for ``linux-6.18`` (``blk``; it has no ``mmiotrace``).

What is compared, byte for byte: the errno of selecting them at the top
level and in an instance, an instance's tracers and options, ``trace``'s
header under each (``blk_classic``'s columns, ``mmiotrace``'s one CPU),
``blk_classic`` turning ``context-info`` off and on whichever tracer is
current, ``trace_options`` accepting blk's flags only while it is
current, and what ``trace_pipe`` hands out under ``mmiotrace`` with no
MMIO activity: its version, the machine's PCI devices, a marker as a
``MARK`` line (its time left out), and the reset that ``tracing_on`` and
leaving the tracer make.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import FAKEDEBUGFS
from support import realtracefs

# w FILE VALUE: the write, and the error bash reports (nothing when it succeeds);
# available_tracers is read less the fake's own kmemtrace (docs/kmemtrace.md)
PRELUDE = r"""
cd /sys/kernel/tracing || exit 1
w() { out=$( { echo "$2" > "$1"; } 2>&1 ); echo "$1 <- $2: ${out##*: }"; }
trap 'echo 0 > options/blk_classic; echo nop > current_tracer' EXIT
"""
BLK = r"""
mkdir instances/bm
grep -cw -e blk -e mmiotrace instances/bm/available_tracers
w instances/bm/current_tracer blk
w instances/bm/current_tracer mmiotrace
ls instances/bm/options | grep -c blk
rmdir instances/bm
w current_tracer blk
cat current_tracer
head -2 trace
grep blk trace_options
w options/blk_classic 1
grep context-info trace_options
head -4 trace
w options/blk_classic 0
grep context-info trace_options
w trace_options noblk_cgroup
w current_tracer nop
w options/blk_classic 1
grep context-info trace_options
cat options/blk_classic
w options/blk_classic 0
grep context-info trace_options
w trace_options blk_classic
"""
MMIO = r"""
sed 's/^kmemtrace //' available_tracers
w current_tracer mmiotrace
cat current_tracer
cat trace
echo hello > trace_marker
dd if=trace_pipe iflag=nonblock bs=65536 status=none 2>/dev/null | sed -E 's/^MARK [0-9]+\.[0-9]{6} /MARK <time> /'
echo again > trace_marker
sed -n 3p trace
w tracing_on 0
w tracing_on 1
sed -n 3p trace
echo once more > trace_marker
w current_tracer nop
sed -n 3p trace
"""


def fake_session(profile: str, script: str) -> str:
    res = subprocess.run([FAKEDEBUGFS, "run", "--profile", profile, "--cpus", "4",
                          "--workload", "none", "--", "bash", "-c", PRELUDE + script],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_debian_6_12_as_the_guest(oracle):
    """Both tracers, as the guest's kernel serves them."""
    res = oracle.run(PRELUDE + BLK + MMIO, timeout=600)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    guest = res.text
    assert "VERSION 20070824\nPCIDEV " in guest and "#P:1\n" in guest  # the session ran through
    assert fake_session("debian-6.12", BLK + MMIO) == guest


def test_linux_6_18_as_this_host():
    """``blk`` as this host's 6.18 serves it (the top level, under the lock)."""
    if not realtracefs.available():
        pytest.skip("no real tracefs here (root and tracefs needed)")
    if not os.uname().release.startswith("6.18."):
        pytest.skip(f"this host runs {os.uname().release}, not the profile's 6.18")
    res = realtracefs.run(["bash", "-c", PRELUDE + BLK], lock=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "current_tracer <- blk: \nblk\n" in res.stdout
    assert fake_session("linux-6.18", BLK) == res.stdout


def test_mmiotrace_is_the_profiles_only():
    """A kernel without it (this host's 6.18): EINVAL, as there."""
    out = fake_session("linux-6.18", "w current_tracer mmiotrace\ncat available_tracers\n")
    assert out == "current_tracer <- mmiotrace: Invalid argument\nblk nop\n"
