"""Can this process mount a fake?  Each check returns None or one line that
names the cause and the exact fix; ``fakedebugfs mount``, the Python API,
the pytest plugin and ``fakedebugfs doctor`` ask the same questions.

How FUSE mounts (fuse(4), libfuse's ``fuse_session_mount``): root opens
``/dev/fuse`` and calls mount(2) itself; anyone else opens nothing and
runs the setuid-root ``fusermount3``, which opens the device, mounts, and
refuses ``allow_other`` unless ``/etc/fuse.conf`` says
``user_allow_other``.  A user's mount is therefore made without
``allow_other`` (only that user's processes can use it, which is what a
test needs), and its files belong to that user (tracefs' ``uid=``/``gid=``
mount options: :attr:`MountOptions.uid`).
"""

from __future__ import annotations

import os
import shutil
import stat
from typing import Optional

FUSE_DEVICE = "/dev/fuse"  # libfuse opens this path, whatever we say
FUSE_CONF = "/etc/fuse.conf"
FUSE_MAJOR, FUSE_MINOR = 10, 229  # the misc device fuse registers


def device_problem() -> Optional[str]:
    """Why ``/dev/fuse`` cannot be used by this user, with the fix."""
    dev = FUSE_DEVICE
    try:
        st = os.stat(dev)
    except FileNotFoundError:
        return (f"{dev} is missing: load the module (`sudo modprobe fuse`), or give the "
                f"container the device (`docker run --device /dev/fuse ...`)")
    except OSError as err:
        return f"{dev}: {err.strerror}"
    if not stat.S_ISCHR(st.st_mode) or (os.major(st.st_rdev), os.minor(st.st_rdev)) \
            != (FUSE_MAJOR, FUSE_MINOR):
        return (f"{dev} is not the FUSE device (character device "
                f"{FUSE_MAJOR}:{FUSE_MINOR}): give the container the device "
                f"(`docker run --device /dev/fuse ...`)")
    if not os.access(dev, os.R_OK | os.W_OK):
        from fakedebugfs.server.fusefix import device_fix_line

        mode = stat.S_IMODE(st.st_mode)
        return (f"{dev} is mode {mode:04o}, not readable and writable by uid {os.getuid()}: "
                f"{device_fix_line(dev)}, or run as root")
    return None


def fusermount() -> Optional[str]:
    """The path of ``fusermount3`` on PATH (or in /usr/bin, /bin), or None."""
    return shutil.which("fusermount3") or shutil.which(
        "fusermount3", path="/usr/local/bin:/usr/bin:/bin")


def fusermount_problem() -> Optional[str]:
    """A user's mount needs ``fusermount3`` installed setuid root."""
    if os.geteuid() == 0:
        return None
    path = fusermount()
    if path is None:
        return "no fusermount3 on PATH: a user mounts FUSE with it (`sudo apt install fuse3`)"
    st = os.stat(path)
    if not (st.st_mode & stat.S_ISUID and st.st_uid == 0):
        return f"{path} is not setuid root: `sudo chmod u+s {path}` (or reinstall fuse3)"
    return None


def user_allow_other() -> bool:
    """Whether ``/etc/fuse.conf`` lets users mount with ``allow_other``."""
    try:
        with open(FUSE_CONF) as fp:
            return any(line.split("#", 1)[0].strip() == "user_allow_other" for line in fp)
    except OSError:
        return False


def pyfuse3_problem() -> Optional[str]:
    """fakedebugfs needs pyfuse3 with its ioctl patch (ktrace's buffers)."""
    try:
        from fakedebugfs.fs.operations import has_ioctl_support
    except ImportError as err:
        return f"pyfuse3 is not importable ({err}): install fakedebugfs's patched pyfuse3 wheel"
    if not has_ioctl_support():
        return ("the installed pyfuse3 lacks fakedebugfs's patch (no ioctl handler): "
                "install the patched wheel (`make install`, or `pip install --force-reinstall "
                "--find-links build/wheels pyfuse3`)")
    return None


def mount_problem() -> Optional[str]:
    """The first reason this process cannot mount a fake, or None."""
    return device_problem() or fusermount_problem() or pyfuse3_problem()


def fuse_options() -> set[str]:
    """The FUSE mount options of a fake: ``allow_other`` only for root
    (fusermount3 refuses it to a user unless fuse.conf allows, and a user's
    fake is for that user's processes)."""
    options = {"default_permissions", "fsname=fakedebugfs", "subtype=fakedebugfs"}
    if os.geteuid() == 0:
        options.add("allow_other")
    return options
