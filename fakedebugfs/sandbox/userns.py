"""The rootless side of ``fakedebugfs run``: a user namespace of our own.

Without root, ``run`` unshares a user namespace and a mount namespace
(user_namespaces(7)).  Mapped to uid 0 in it, with every capability over
the new mount namespace, it can mount FUSE there (fuse is FS_USERNS_MOUNT),
bind mounts over directories and files, and mount over the
``/proc/mounts`` symlink itself.  It cannot mount tracefs or debugfs (they
are not FS_USERNS_MOUNT), so no real ``tracefs`` line can be made: the
``tracefs`` and ``debugfs`` lines that trace-cmd and libtracefs look for
in ``/proc/mounts`` (docs/tracefs.md#how-tools-find-the-tracing-directory)
come from a mounts file written here and mounted over that symlink.
"""

from __future__ import annotations

import ctypes
import errno
import os

from fakedebugfs.native import libc

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
AT_FDCWD = -100
OPEN_TREE_CLONE = 1  # include/uapi/linux/mount.h
MOVE_MOUNT_F_EMPTY_PATH = 0x00000004
SYS_open_tree = 428  # x86_64 (arch/x86/entry/syscalls/syscall_64.tbl)
SYS_move_mount = 429

PROC_MOUNTS = "/proc/mounts"
# The lines a real kernel's /proc/mounts has for the two (fs/proc_namespace.c)
TRACEFS_LINE = "tracefs /sys/kernel/tracing tracefs rw,nosuid,nodev,noexec,relatime 0 0\n"
DEBUGFS_LINE = "debugfs /sys/kernel/debug debugfs rw,nosuid,nodev,noexec,relatime 0 0\n"

# sysctls that forbid unprivileged user namespaces, with the value that does
SETTINGS = (
    ("/proc/sys/kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone"),
    ("/proc/sys/user/max_user_namespaces", "0", "user.max_user_namespaces"),
    ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
     "kernel.apparmor_restrict_unprivileged_userns"),
)

_libc = libc.LIBC


class UsernsError(Exception):
    """Why a rootless run cannot have its namespace; one line."""


def forbidding_setting() -> str | None:
    """The sysctl (``name = value``) that forbids unprivileged user
    namespaces on this system, if one does."""
    for path, bad, name in SETTINGS:
        try:
            with open(path) as fp:
                value = fp.read().strip()
        except OSError:
            continue
        if value == bad:
            return f"{name} = {value}"
    return None


def explain(err: int, what: str) -> str:
    setting = forbidding_setting()
    if setting:
        return (f"{what}: {os.strerror(err)}: this system forbids unprivileged user "
                f"namespaces ({setting}); run as root, or allow them")
    if err == errno.EINVAL:  # unshare(CLONE_NEWUSER) of a multithreaded process
        return f"{what}: {os.strerror(err)} (a thread was started before it: a bug of run)"
    if err == errno.ENOSPC:
        return (f"{what}: {os.strerror(err)}: the user namespace limit is reached "
                f"(user.max_user_namespaces)")
    return (f"{what}: {os.strerror(err)}: this system forbids unprivileged user namespaces "
            f"(a container's seccomp profile or a security module?); run as root")


def check_fuse() -> None:
    """FUSE in a user namespace opens /dev/fuse as ourselves (the setuid
    fusermount3 cannot help there)."""
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        try:
            mode = f"mode {os.stat('/dev/fuse').st_mode & 0o777:04o}"
        except OSError:
            mode = "missing"
        raise UsernsError(f"/dev/fuse is not readable and writable by uid {os.getuid()} "
                          f"({mode}): a rootless run mounts FUSE in a user namespace and "
                          f"needs it (most distributions make it 0666)")


def _write(path: str, text: str) -> None:
    with open(path, "w") as fp:
        fp.write(text)


def enter() -> None:
    """unshare(CLONE_NEWUSER | CLONE_NEWNS) and map our uid and gid to 0
    (setgroups denied first, as an unprivileged gid_map requires)."""
    uid, gid = os.geteuid(), os.getegid()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        raise UsernsError(explain(ctypes.get_errno(), "unshare(CLONE_NEWUSER|CLONE_NEWNS)"))
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
    except OSError as err:
        raise UsernsError(explain(err.errno, "writing the user namespace's uid_map")) from None


def mounts_text(own_types=("tracefs", "debugfs")) -> str:
    """This namespace's /proc/self/mounts with tracefs and debugfs at
    their usual places first and no other line of those types."""
    with open("/proc/self/mounts") as fp:
        lines = [line for line in fp if line.split(" ", 3)[2] not in own_types]
    return TRACEFS_LINE + DEBUGFS_LINE + "".join(lines)


def mount_over_symlink(source: str, target: str) -> None:
    """Mount *source* (a file) over the symlink *target* itself, not where
    it points: open_tree(OPEN_TREE_CLONE) + move_mount() without
    MOVE_MOUNT_T_SYMLINKS.  mount(2) would follow ``/proc/mounts`` to
    ``/proc/<our pid>/mounts``, which only we read."""
    fd = _libc.syscall(SYS_open_tree, AT_FDCWD, os.fsencode(source), OPEN_TREE_CLONE)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"open_tree {source}: {os.strerror(err)}")
    try:
        if _libc.syscall(SYS_move_mount, fd, b"", AT_FDCWD, os.fsencode(target),
                         MOVE_MOUNT_F_EMPTY_PATH) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"move_mount {source} to {target}: {os.strerror(err)}")
    finally:
        os.close(fd)


def publish_mounts(work: str) -> str:
    """Write :func:`mounts_text` to *work*/mounts and mount it over
    /proc/mounts; returns the mount point to undo."""
    path = os.path.join(work, "mounts")
    with open(path, "w") as fp:
        fp.write(mounts_text())
    mount_over_symlink(path, PROC_MOUNTS)
    return PROC_MOUNTS
