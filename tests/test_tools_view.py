"""What tools see of the fake beyond the catalogue (issue 11, item 4):
statfs() magic inside ``fakedebugfs run``, the pid of trace_marker entries,
saved_cmdlines, the errno of creating a file, exec'd comms, stack entries.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

import pytest

from conftest import FAKEDEBUGFS, build_c, run_cli

ROOT = os.geteuid() == 0
DEBUGFS_MAGIC, TRACEFS_MAGIC = 0x64626720, 0x74726163


def fake_run(*cmd, options=(), timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([FAKEDEBUGFS, "run", *options, "--", *cmd], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.skipif(not ROOT, reason="fakedebugfs run needs root")
def test_statfs_inside_run_reports_debugfs_and_tracefs_magic(tmp_path):
    prog = build_c("statfs_magic.c", tmp_path)
    paths = ["/sys/kernel/tracing", "/sys/kernel/tracing/trace", "/sys/kernel/debug",
             "/sys/kernel/debug/ktrace", "/sys/kernel/debug/tracing/events"]
    res = fake_run(str(prog), *paths)
    assert res.returncode == 0, res.stderr
    got = {p: (int(a, 16), int(b, 16)) for p, a, b in map(str.split, res.stdout.splitlines())}
    for path in paths:
        magic = TRACEFS_MAGIC if "tracing" in path else DEBUGFS_MAGIC
        assert got[path] == (magic, magic), path


def test_creating_a_missing_file_answers_as_the_kernel(fake):
    """open(O_CREAT) and mknod() of a new name: EACCES (tracefs and debugfs
    have no create/mknod; 6.18 answers EACCES for both), mkdir outside
    instances/: EPERM."""
    mnt = fake("--workload", "none")
    for d in ("tracing", "tracing/events", "ktrace", "kmemtrace"):
        path = str(mnt / d / "newfile")
        with pytest.raises(PermissionError) as exc:
            os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        assert exc.value.errno == errno.EACCES, d
        with pytest.raises(PermissionError) as exc:
            os.mknod(path)
        assert exc.value.errno == errno.EACCES, d
        with pytest.raises(PermissionError) as exc:
            os.mkdir(path + ".d")
        assert exc.value.errno == errno.EPERM, d
