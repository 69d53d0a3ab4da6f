"""A ``trace_marker`` entry's ip (issue 32): ``tracing_mark_write``'s own
address, as the profile's ``marker_ip`` records it
(engine/ftrace/marker_ip.py).  The same script, on the fake and on the
kernel of its profile, prints the marker's line with ``raw``,
``sym-offset``, ``sym-addr`` and both: what follows the context is the
same bytes (Debian 6.12 in the oracle guest, this host's 6.18)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

import pytest

from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES
from fakedebugfs.oracle import marker_ip
from support import realtracefs

SCRIPT = ("I=$T/instances/marker_ip_$$; mkdir $I && cd $I && echo hi > trace_marker || exit 1; "
          "for o in raw sym-offset sym-addr; do echo 1 > options/$o; tail -1 trace; "
          "echo 0 > options/$o; done; "
          "echo 1 > options/sym-offset; echo 1 > options/sym-addr; tail -1 trace; "
          "cd /; rmdir $I")


def after_context(out: str) -> list:
    """Each line without its context: ``pid cpu ts`` (raw), the task, CPU,
    flags and time (the others)."""
    lines = out.splitlines()
    assert len(lines) == 4, out
    return [lines[0].split(" ", 3)[3]] + [ln.split(": ", 1)[1] for ln in lines[1:]]


def on_fake(fake, *profile) -> list:
    mnt = fake("--workload", "none", *profile)
    res = subprocess.run(["sh", "-c", SCRIPT], env=dict(os.environ, T=str(mnt / "tracing")),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return after_context(res.stdout)


def test_the_guests_marker_lines(oracle, fake):
    res = oracle.run("T=/sys/kernel/tracing; " + SCRIPT, timeout=300)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    guest = after_context(res.stdout.decode())
    assert guest[0] == "# ffffffff8123600f hi"
    assert on_fake(fake, "--profile", "debian-6.12") == guest


def test_this_hosts_marker_lines(fake):
    if not realtracefs.available():
        pytest.skip("no real tracefs here (root and tracefs needed)")
    if (SHIPPED_PROFILES / "linux-6.18" / "uname").read_text().strip() != os.uname().release:
        pytest.skip("this machine is not the linux-6.18 profile's kernel")
    res = realtracefs.shell(f"T={realtracefs.POINT}; " + SCRIPT, timeout=60)
    assert res.returncode == 0, res.stderr
    assert on_fake(fake, "--profile", "linux-6.18") == after_context(res.stdout)


def test_the_recorder_reads_the_profiles_file_back(oracle):
    """oracle/marker_ip.py, as the oracle's capture runs it in its
    instance, writes the shipped file."""
    script = (f"I=/sys/kernel/tracing/instances/marker_ip_{os.getpid()}; mkdir $I || exit 1; "
              f"{shlex.quote(sys.executable)} -m fakedebugfs.oracle.marker_ip $I -; rc=$?; "
              "rmdir $I; exit $rc")
    res = oracle.run(script, timeout=300)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert res.stdout.decode() == (SHIPPED_PROFILES / "debian-6.12" / "marker_ip").read_text()


def test_without_the_file_the_ip_is_0(fake, tmp_path):
    """A profile that does not record it (``capture-profile`` cannot):
    ip 0, printed as the function's name."""
    prof = tmp_path / "prof"
    shutil.copytree(SHIPPED_PROFILES / "linux-6.18", prof)
    (prof / "marker_ip").unlink()
    assert on_fake(fake, "--profile", str(prof)) == [
        "# 0 hi", "tracing_mark_write: hi", "tracing_mark_write: hi", "tracing_mark_write: hi"]


def test_a_marker_ip_file_that_is_not_one_is_refused():
    with pytest.raises(ValueError):
        marker_ip.from_trace("  sh-1 [000] ..... 1.000000: tracing_mark_write: marker_ip\n")
