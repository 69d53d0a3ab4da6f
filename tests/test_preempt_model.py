"""A profile's ``preempt_model`` (issue 32) is read off the kernel's own
latency header by the oracle's capture (oracle/preempt_model.py, run in a
new instance), so a re-capture keeps it: in the Debian 6.12 guest it reads
the shipped debian-6.12 file, on this host's 6.18 the linux-6.18 one, and
on the fake what the fake's header prints from the profile."""

from __future__ import annotations

import os
import shlex
import sys

import pytest

from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES
from fakedebugfs.oracle import preempt_model
from support import realtracefs

SCRIPT = ("I={tracing}/instances/preempt_model_{pid}; mkdir $I || exit 1; "
          "{python} -m fakedebugfs.oracle.preempt_model $I -; rc=$?; rmdir $I; exit $rc")


def shipped(name: str) -> str:
    return (SHIPPED_PROFILES / name / "preempt_model").read_text()


def script(tracing: str) -> str:
    return SCRIPT.format(tracing=tracing, pid=os.getpid(), python=shlex.quote(sys.executable))


def test_the_guests_model_is_the_shipped_profiles(oracle):
    res = oracle.run(script("/sys/kernel/tracing"), timeout=300)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert res.stdout.decode() == shipped("debian-6.12") == "desktop\n"


def test_this_hosts_model_is_the_linux_6_18_profiles():
    if not realtracefs.available():
        pytest.skip("no real tracefs here (root and tracefs needed)")
    if (SHIPPED_PROFILES / "linux-6.18" / "uname").read_text().strip() != os.uname().release:
        pytest.skip("this machine is not the linux-6.18 profile's kernel")
    res = realtracefs.shell(script(realtracefs.POINT), timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout == shipped("linux-6.18")


@pytest.mark.parametrize("profile", ["debian-6.12", "debian-6.12-rt"])
def test_the_fakes_header_names_its_profiles_model(fake, profile):
    mnt = fake("--workload", "none", "--profile", profile)
    inst = mnt / "tracing/instances/pm"
    inst.mkdir()
    try:
        assert preempt_model.read(inst) + "\n" == shipped(profile)
        assert (inst / "options/latency-format").read_text() == "0\n"
    finally:
        inst.rmdir()


def test_a_header_without_the_model_is_refused():
    with pytest.raises(ValueError):
        preempt_model.from_header("# tracer: nop\n#\n")
