"""Running ``fakedebugfs run`` as an unprivileged user (uid 65534) in a
private mount namespace whose /dev/fuse is a node of the test's own, as
most distributions' 0666 device: the ``nobody_dir`` fixture and
:func:`rootless`, shared by the sealed-run and mount-view tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

import fakedebugfs
import pyfuse3
from support.nobody import NOBODY, SYSTEM_PYTHON, usable as nobody_usable


@pytest.fixture
def nobody_dir():
    """A directory uid 65534 may write (tmp_path is under root's 0700 one)."""
    d = tempfile.mkdtemp(prefix="sealed-")
    os.chown(d, NOBODY, NOBODY)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def rootless(work: Path, run_args, fuse_mode=0o666, prelude="",
             root_setup="") -> subprocess.CompletedProcess:
    """``fakedebugfs run RUN_ARGS`` as uid 65534, in a private mount
    namespace whose /dev/fuse is a node of mode *fuse_mode*, after the
    shell commands *root_setup*; *prelude* (a command line) runs as root
    before dropping to uid 65534, which *exec*s the command given as "$@"."""
    if problem := nobody_usable():
        pytest.skip(problem)
    site = str(Path(pyfuse3.__file__).parents[1])
    repo = str(Path(fakedebugfs.__file__).parents[1])
    dev = work / "dev"
    dev.mkdir()
    setup = textwrap.dedent(f"""
        set -e
        mount -t tmpfs -o mode=755 tmpfs {dev}
        mknod -m {fuse_mode:o} {dev}/fuse c 10 229
        mount --bind {dev}/fuse /dev/fuse
        {root_setup}
        cd {work}
        exec {prelude} "$@"
    """)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(work),
           "XDG_RUNTIME_DIR": str(work), "FAKEDEBUGFS_BUILD": str(work / "build"),
           "PYTHONPATH": f"{repo}:{site}"}
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", setup, "setup",
           "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
           SYSTEM_PYTHON, "-m", "fakedebugfs", "run", *map(str, run_args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)


__all__ = ["nobody_dir", "rootless"]
