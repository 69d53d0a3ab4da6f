"""tracefs' ownership options: ``mount -o remount,gid=N`` (and ``uid=``)
gives every file the new owner, forgetting chown/chgrp; a file's own
chgrp wins over the mount's; files under ``instances/`` follow the
``instances`` directory (``set_tracefs_inode_owner``, ``instance_inode``).

mount(8) reaches the fake through mount.fuse3, which runs ``fakedebugfs``
found on the default PATH (``make install`` links it into /usr/local/bin).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import run_cli

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

pytestmark = pytest.mark.skipif(
    shutil.which("fakedebugfs", path=DEFAULT_PATH) is None or shutil.which("mount.fuse3") is None,
    reason="mount(8) cannot reach fakedebugfs: run `make install` (it links the command "
           "into /usr/local/bin; fuse3 provides mount.fuse3)")

ENABLE = "events/sched/sched_switch/enable"


def remount(mnt, options: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", "-o", f"remount,{options}", str(mnt)], capture_output=True,
                          text=True, timeout=60)


def gid(path) -> int:
    return os.stat(path).st_gid


def test_remount_gid_is_every_files_group_until_chgrp(fake):
    mnt = fake("--workload", "none")
    tracing = mnt / "tracing"
    assert remount(mnt, "gid=4242").returncode == 0
    for rel in (".", "events", "events/sched", ENABLE, "events/timer/timer_cancel/format"):
        assert gid(tracing / rel) == 4242, rel
    assert os.stat(tracing / ENABLE).st_uid == 0

    os.chown(tracing / "events", -1, 7)  # its own group; not its children's
    assert gid(tracing / "events") == 7
    assert gid(tracing / "events/sched") == 4242

    assert remount(mnt, "gid=0,uid=1234").returncode == 0  # forgets the chgrp
    assert gid(tracing / "events") == 0
    assert os.stat(tracing / ENABLE).st_uid == 1234


def test_instances_follow_the_instances_directory(fake):
    mnt = fake("--workload", "none")
    instances = mnt / "tracing" / "instances"
    os.chown(instances, -1, 555)
    (instances / "foo").mkdir()
    for rel in ("foo", "foo/events", "foo/" + ENABLE, "foo/trace"):
        assert gid(instances / rel) == 555, rel
    assert gid(mnt / "tracing" / ENABLE) == 0  # the top level keeps the mount's
    (instances / "foo").rmdir()


def test_bad_ids_and_plain_mounts_are_refused(fake):
    mnt = fake("--workload", "none")
    p = remount(mnt, "gid=abc")
    assert p.returncode != 0
    assert "Bad value for 'gid'" in p.stderr
    assert gid(mnt / "tracing") == 0
    other = mnt.parent / "elsewhere"
    other.mkdir()
    p = subprocess.run(["mount", "-t", "fuse.fakedebugfs", "fakedebugfs", str(other)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "fakedebugfs mount DIR" in p.stderr
    assert not os.path.ismount(other)


def test_remount_inside_run_changes_the_fake(tmp_path):
    """Inside ``run``, /sys/kernel/tracing is the fake: the kernel's
    selftest (test_ownership.tc) remounts it with the group it tests."""
    script = ("mount -o remount,gid=4321 /sys/kernel/tracing && "
              f"stat -c %g /sys/kernel/tracing/{ENABLE} /sys/kernel/tracing")
    p = run_cli("run", "--workload", "none", "--", "sh", "-c", script, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["4321", "4321"]
