"""tracefs' ownership options: ``mount -o remount,gid=N`` (and ``uid=``)
gives every file the new owner, forgetting chown/chgrp; a file's own
chgrp wins over the mount's; files under ``instances/`` follow the
``instances`` directory (``set_tracefs_inode_owner``, ``instance_inode``).

mount(8) reaches the fake through mount.fuse3, which runs ``fakedebugfs``
found on the default PATH (``make install-system`` links it into
/usr/local/bin).  The tests run mount(8) in a private mount namespace whose
/usr/local/bin holds this checkout's command: the one tested, and the
host's /usr/local/bin is left as it is.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import FAKEDEBUGFS, run_cli

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount.fuse3") is None,
    reason="mount(8) with the fuse3 package's mount.fuse3, as root, in a private mount "
           "namespace (unshare)")

# mount(8) with this checkout's fakedebugfs where mount.fuse3 looks for it
MOUNT8 = ('mount -t tmpfs -o mode=0755 fakedebugfs-bin /usr/local/bin && '
          'ln -s "$1" /usr/local/bin/fakedebugfs && shift && exec mount "$@"')


def mount8(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", MOUNT8,
                           "sh", FAKEDEBUGFS, *map(str, args)], capture_output=True, text=True,
                          timeout=60)

ENABLE = "events/sched/sched_switch/enable"


def remount(mnt, options: str) -> subprocess.CompletedProcess:
    return mount8("-o", f"remount,{options}", mnt)


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
    p = mount8("-t", "fuse.fakedebugfs", "fakedebugfs", other)
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
