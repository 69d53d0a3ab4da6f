"""A new tracefs (or debugfs) mount inside a sealed ``run`` is another view
of the same fake, as a second tracefs mount is of the kernel's one
tracefs (sandbox/mountview.py): ``mount -t tracefs -o ro,relatime,gid=N
nodev DIR`` succeeds, DIR shows the fake (read-only there, its files of
group N, as tracefs' ``gid=`` gives every view), nothing real is mounted,
nothing appears on the host, and any other mount is still refused."""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest

from conftest import FAKEDEBUGFS
from support.rootless import nobody_dir, rootless  # noqa: F401 (a fixture, a helper)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="starts runs as root")


def run_sh(script: str, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", "--", "sh", "-c",
                           textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout)


def fields(stdout: str) -> dict:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def test_a_new_tracefs_mount_is_a_view_of_the_fake(tmp_path):
    view = tmp_path / "view"
    view.mkdir()
    p = run_sh(f"""
        mount -t tracefs -o ro,relatime,gid=104 nodev {view}; echo mount=$?
        echo fstype=$(awk '$5 == "{view}" {{split($0, a, " - "); split(a[2], b, " "); print b[1]}}' /proc/self/mountinfo)
        echo hello > /sys/kernel/tracing/trace_marker
        echo marker=$(grep -c hello {view}/trace)
        echo 0 > /sys/kernel/tracing/tracing_on
        echo seen=$(cat {view}/tracing_on)
        echo > {view}/tracing_on 2>/dev/null; echo write=$?
        echo group=$(stat -c %g {view}/events/sched/sched_switch/enable)
        echo group_tracing=$(stat -c %g /sys/kernel/tracing/events)
    """)
    assert p.returncode == 0, p.stderr
    got = fields(p.stdout)
    assert got["mount"] == "0", p.stderr
    assert got["fstype"] == "fuse.fakedebugfs"  # nothing real
    assert got["seen"] == "0" and got["marker"] == "1"  # the same fake
    assert got["write"] != "0"  # ro: this view only
    assert got["group"] == "104" and got["group_tracing"] == "104"  # gid=: every view
    with open("/proc/self/mountinfo") as fp:
        assert str(view) not in fp.read()


def test_a_new_debugfs_mount_is_the_fakes_root_and_other_mounts_are_refused(tmp_path):
    view = tmp_path / "dbg"
    view.mkdir()
    p = run_sh(f"""
        cd {tmp_path}
        mount -t debugfs nodev dbg; echo debugfs=$?
        echo tracing=$(test -f dbg/tracing/tracing_on && echo yes)
        mount -t tmpfs none dbg 2>/dev/null; echo tmpfs=$?
        mount --bind /tmp dbg 2>/dev/null; echo bind=$?
        mount -t proc proc dbg 2>/dev/null; echo proc=$?
        mount -o remount,rw /proc/sys 2>/dev/null; echo remount=$?
        echo 1 > /proc/sys/vm/swappiness 2>/dev/null; echo sysctl=$?
    """)
    assert p.returncode == 0, p.stderr
    got = fields(p.stdout)
    assert got["debugfs"] == "0" and got["tracing"] == "yes", (p.stdout, p.stderr)
    for name in ("tmpfs", "bind", "proc", "remount", "sysctl"):
        assert got[name] != "0", (name, p.stdout)
    with open("/proc/self/mountinfo") as fp:
        assert str(view) not in fp.read()


def test_rootless_a_new_tracefs_mount_is_a_view_too(nobody_dir):
    """Rootless (uid 0 of a user namespace, run as uid 65534): the same
    view, in the command's namespace only; pids from 10000."""
    script = ("mkdir -p v && mount -t tracefs nodev v; echo mount=$?; "
              "test -f v/tracing_on && echo view=yes; echo me=$$")
    p = rootless(nobody_dir, ["--workload", "none", "--", "sh", "-c", script])
    assert p.returncode == 0, p.stderr
    got = fields(p.stdout)
    assert got.get("mount") == "0" and got.get("view") == "yes", (p.stdout, p.stderr)
    assert int(got["me"]) >= 10000
    with open("/proc/self/mountinfo") as fp:
        assert str(nobody_dir / "v") not in fp.read()
