"""``mount -o remount,gid=N`` inside ``fakedebugfs run``, installed or not.

tracefs takes ``uid=``/``gid=`` on a remount, and tools and tests use it
(ftracetest's ``00basic/test_ownership.tc``).  On the fake, mount(8) hands
the remount of a ``fuse.fakedebugfs`` mount to ``mount.fuse3``, which runs
``fakedebugfs SOURCE DIR -o OPTIONS`` through ``/bin/sh`` with PATH unset,
so the shell's default PATH is searched
(:mod:`fakedebugfs.server.mounthelper` answers the call).  ``make install``
links the command into /usr/local/bin; where that link is missing or leads
nowhere, ``run`` makes the command reachable in its private mount
namespace: a directory holding a ``fakedebugfs`` launcher of this very
installation is bound over /usr/local/sbin, the first directory of that
PATH, when that directory is empty (nothing of the host is hidden).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys

# dash's PATH when none is set (mount(8) clears it for its helpers)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
COVERED = "/usr/local/sbin"
MS_BIND = 0x1000


def reachable() -> bool:
    """mount.fuse3's shell finds a working ``fakedebugfs``."""
    return shutil.which("fakedebugfs", path=DEFAULT_PATH) is not None


def launcher_text() -> str:
    """A shell script running this installation's CLI (this interpreter,
    this package first on its path)."""
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return ("#!/bin/sh\n# fakedebugfs run: the mount helper mount.fuse3 runs "
            "(remount uid=/gid=)\n"
            f"PYTHONPATH={shlex.quote(package_parent)}${{PYTHONPATH:+:$PYTHONPATH}} "
            f"exec {shlex.quote(sys.executable)} -m fakedebugfs \"$@\"\n")


def make_reachable(work: str, mount) -> bool:
    """In the current (private) mount namespace: bind a directory of *work*
    with the launcher over /usr/local/sbin unless ``fakedebugfs`` is
    reachable already or that directory is missing or not empty.  *mount*
    is ``mount(source, target, fstype, flags)``.  Returns whether it bound."""
    if reachable() or not os.path.isdir(COVERED) or os.listdir(COVERED):
        return False
    bindir = os.path.join(work, "mount-helper")
    os.makedirs(bindir, exist_ok=True)
    os.chmod(bindir, 0o755)
    path = os.path.join(bindir, "fakedebugfs")
    with open(path, "w") as fp:
        fp.write(launcher_text())
    os.chmod(path, 0o755)
    try:
        mount(bindir, COVERED, None, MS_BIND)
    except OSError:
        return False
    return True


__all__ = ["make_reachable", "reachable", "launcher_text"]
