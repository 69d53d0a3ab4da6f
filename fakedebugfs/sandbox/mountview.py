"""A new tracefs or debugfs mount inside a sealed ``run``: another view of
the same fake.

On the kernel, ``mount -t tracefs -o ro,relatime,gid=104 nodev DIR`` gives
another view of the one tracefs (its options, ``gid=`` and ``uid=``, are
the superblock's: every view shows them).  A sealed command may not call
mount(2) (seal.py), and nothing real may be mounted for it, so its
mount(2) calls go to a supervisor instead (seccomp's user notification,
SECCOMP_RET_USER_NOTIF, the listener handed by the command's init to
run's keeper, which runs :func:`supervise` in a thread):

* a new ``tracefs`` (or ``debugfs``) mount: the fake's ``tracing/`` (or
  its root) is bound at DIR in the caller's mount namespace (a detached
  copy made here, moved there by a child that entered it), read-only with
  ``ro``; ``uid=``/``gid=`` are applied to the fake as a remount's are
  (control request ``remount``); the call returns 0.  At
  /sys/kernel/tracing (debugfs: /sys/kernel/debug) the view goes over a
  read-only real mount of that type put beneath it (MOVE_MOUNT_BENEATH:
  never uncovered), as run arranged that path at its start: /proc/mounts
  then has the ``tracefs`` line libtracefs finds its tracing directory by;
  anywhere else, nothing real is mounted;
* every other mount(2) gets EPERM, as the plain filter answers.

umount2(2) comes here too (libtracefs' utest unmounts every tracefs and
debugfs it finds in /proc/mounts, then lets tracefs_tracing_dir() mount
one again).  The top mount at the path is unmounted in the caller's
namespace, with the caller's flags, when it is a view of the fake (its
root or its ``tracing/``) or a tracefs or debugfs; and so is what it
covered there, a view or the real tracefs or debugfs the namespace was
copied with, so that nothing real is ever uncovered: the path is then an
empty directory, as on a kernel after ``umount``, and a new mount there
is a view again.  Any other mount gets EPERM, a path no mount is at
EINVAL, as the kernel answers.

Nothing real is uncovered or writable, and nothing leaves the caller's
namespace.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import select
import struct

from fakedebugfs.native import libc

log = logging.getLogger(__name__)

# include/uapi/linux/seccomp.h
# struct seccomp_notif { __u64 id; __u32 pid; __u32 flags; struct seccomp_data data; }
NOTIF = struct.Struct("=QII iIQ6Q")
# struct seccomp_notif_resp { __u64 id; __s64 val; __s32 error; __u32 flags; }
NOTIF_RESP = struct.Struct("=QqiI")
SECCOMP_IOCTL_NOTIF_RECV = 0xC0502100  # _IOWR('!', 0, struct seccomp_notif)
SECCOMP_IOCTL_NOTIF_SEND = 0xC0182101  # _IOWR('!', 1, struct seccomp_notif_resp)
SECCOMP_IOCTL_NOTIF_ID_VALID = 0x40082102  # _IOW('!', 2, __u64)
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_MOVE = 0x1, 0x20, 0x1000, 0x2000
SYS_umount2 = 166  # arch/x86/entry/syscalls/syscall_64.tbl
MNT_FORCE, MNT_DETACH, MNT_EXPIRE, UMOUNT_NOFOLLOW = 0x1, 0x2, 0x4, 0x8  # include/linux/fs.h
FAKE_FSTYPE = "fuse.fakedebugfs"
# the fsopen(2) family and move_mount(2), x86_64 (include/uapi/linux/mount.h)
SYS_move_mount, SYS_fsopen, SYS_fsconfig, SYS_fsmount = 429, 430, 431, 432
FSOPEN_CLOEXEC, FSCONFIG_CMD_CREATE, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY = 1, 6, 1, 1
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_BENEATH = 0x4, 0x200
AT_FDCWD = -100
# where run's namespace has each type's real mount beneath the fake's view
# (sandbox/run.py replace_tracing_mounts): a new mount there is made the same
HOME = {"tracefs": "/sys/kernel/tracing", "debugfs": "/sys/kernel/debug"}
VIEW_ROOTS = ("/", "/tracing")  # a debugfs view is the fake's root, a tracefs view its tracing/
CLONE_NEWNS = 0x00020000
TYPES = ("tracefs", "debugfs")
STRING_MAX = 4096


def read_string(mem: int, addr: int) -> str:
    """A NUL-terminated string at *addr* of the process whose memory is *mem*."""
    if not addr:
        return ""
    data = os.pread(mem, STRING_MAX, addr)
    return data.split(b"\0", 1)[0].decode(errors="replace")


def options(data: str) -> dict[str, int]:
    """``uid=``/``gid=`` of a mount's data (tracefs' ownership options)."""
    out = {}
    for word in data.split(","):
        key, _, value = word.partition("=")
        if key in ("uid", "gid") and value.isdigit():
            out[key] = int(value)
    return out


def in_child(work) -> int:
    """``work()`` in a forked child: 0, or the errno of the OSError it
    raised.  (setns needs a process that shares its file system attributes
    with no other thread.)  The answer comes through a pipe: where the
    supervisor is a thread of an init that reaps every child (run with
    ``--mirror``), its child's exit status may be taken before it is."""
    r, w = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:
        code = errno.EPERM
        try:
            os.close(r)
            work()
            code = 0
        except OSError as err:
            code = err.errno or errno.EPERM
        finally:
            os.write(w, bytes([code & 0xFF]))
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fp:
        answer = fp.read(1)
    try:
        os.waitpid(child, 0)
    except ChildProcessError:  # (reaped by that init)
        pass
    return answer[0] if answer else errno.EPERM


def detached_real(fstype: str) -> int | None:
    """A read-only mount of the real *fstype* attached nowhere (fsopen,
    fsmount), as an fd; None where the kernel refuses it (a user namespace)."""
    fs = libc.syscall(SYS_fsopen, fstype.encode(), FSOPEN_CLOEXEC)
    if fs < 0:
        return None
    try:
        if libc.syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, None, None, 0) < 0:
            return None
        fd = libc.syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY)
        return fd if fd >= 0 else None
    finally:
        os.close(fs)


def bind_view(source: str, pid: int, target: str, read_only: bool,
              fstype: str | None = None) -> int:
    """Bind *source* (this namespace's) at *target* in the mount namespace
    of *pid*: 0, or the errno (:func:`in_child`).  With *fstype*, a
    read-only real mount of it goes beneath the view (MOVE_MOUNT_BENEATH,
    never seen uncovered), so that /proc/mounts has the line a kernel's
    mount would add (libtracefs finds its tracing directory by a
    ``tracefs`` line), as run's own views have (sandbox/run.py
    ``replace_tracing_mounts``); where it cannot be made, the view alone."""
    from fakedebugfs.sandbox import confine

    def work():
        fd = confine.open_tree_clone(source)
        real = detached_real(fstype) if fstype else None
        ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
        libc.check(libc.LIBC.setns(ns, CLONE_NEWNS), "setns")
        confine.move_mount_fd(fd, target)
        if read_only:
            confine.set_read_only(target)
        if real is not None and libc.syscall(
                SYS_move_mount, real, b"", AT_FDCWD, os.fsencode(target),
                MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_BENEATH) < 0:
            log.debug("%s: no %s line beneath the view", target, fstype)

    return in_child(work)


def handle(mem: int, pid: int, args: tuple, mnt: str) -> int:
    """What mount(2) of process *pid* (its memory *mem*) returns: 0 (done
    as the module says) or a negative errno."""
    source, target, fstype, flags, data = args[0], args[1], args[2], args[3], args[4]
    fstype = read_string(mem, fstype)
    if fstype not in TYPES or flags & (MS_REMOUNT | MS_BIND | MS_MOVE):
        return -errno.EPERM
    path = read_string(mem, target)
    if not path:
        return -errno.ENOENT
    if not path.startswith("/"):
        path = os.path.join(os.readlink(f"/proc/{pid}/cwd"), path)
    view = os.path.join(mnt, "tracing") if fstype == "tracefs" else mnt
    if not os.path.isdir(view):
        return -errno.ENODEV  # (a fake without tracing/: no tracefs to show)
    beneath = fstype if HOME.get(fstype) == os.path.normpath(path) else None
    code = bind_view(view, pid, path, bool(flags & MS_RDONLY), beneath)
    if code:
        return -code
    ids = options(read_string(mem, data))
    if ids:
        from fakedebugfs.control.client import ControlClient

        with ControlClient(mnt) as client:
            client.call("remount", **ids)
    return 0


def _top(proc: int, point: str) -> tuple[str, str] | None:
    """(fstype, root) of the top mount at *point* in the mount namespace of
    the process whose /proc directory is the fd *proc*: of the mounts at
    *point*, the one no other there is mounted on (a mount put beneath
    another is listed after it); None where no mount is."""
    found = {}
    with open(os.open("mountinfo", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc)) as fp:
        for line in fp:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if _unescape(fields[4]) == point:
                found[fields[0]] = (fields[1], right.split()[0], _unescape(fields[3]))
    parents = {parent for parent, _, _ in found.values()}
    for ident, (_, fstype, root) in found.items():
        if ident not in parents:
            return fstype, root
    return None


def _unescape(field: str) -> str:
    """A mountinfo path (space, tab, newline and backslash as octal escapes)."""
    return field.encode().decode("unicode_escape")


def _a_view(fstype: str, root: str) -> bool:
    """A mount that may go: a view of the fake, or a tracefs or debugfs."""
    return fstype in TYPES or (fstype == FAKE_FSTYPE and root in VIEW_ROOTS)


def unmount_view(pid: int, target: str, flags: int) -> int:
    """Unmount *target* in the mount namespace of *pid* (see the module):
    0, or the errno (:func:`in_child`)."""

    def work():
        # the caller's /proc entry, opened here: the namespace's own /proc
        # (the command's PID namespace) does not show this process
        proc = os.open(f"/proc/{pid}", os.O_PATH | os.O_DIRECTORY)
        ns = os.open("ns/mnt", os.O_RDONLY, dir_fd=proc)
        libc.check(libc.LIBC.setns(ns, CLONE_NEWNS), "setns")
        point = os.path.normpath(target) if flags & UMOUNT_NOFOLLOW else os.path.realpath(target)
        top = _top(proc, point)
        if top is None:
            raise OSError(errno.EINVAL if os.path.lexists(point) else errno.ENOENT, point)
        if not _a_view(*top):
            raise OSError(errno.EPERM, point)
        libc.umount2(point, flags | UMOUNT_NOFOLLOW)
        while (top := _top(proc, point)) and _a_view(*top):  # what it covered
            libc.umount2(point, MNT_DETACH | UMOUNT_NOFOLLOW)

    return in_child(work)


def handle_umount(mem: int, pid: int, args: tuple) -> int:
    """What umount2(2) of process *pid* (its memory *mem*) returns: 0 or a
    negative errno."""
    flags = args[1] & 0xFFFFFFFF
    if flags & ~(MNT_FORCE | MNT_DETACH | MNT_EXPIRE | UMOUNT_NOFOLLOW) or (
            flags & MNT_EXPIRE and flags & (MNT_FORCE | MNT_DETACH)):
        return -errno.EINVAL
    path = read_string(mem, args[0])
    if not path:
        return -errno.ENOENT
    if not path.startswith("/"):
        path = os.path.join(os.readlink(f"/proc/{pid}/cwd"), path)
    return -unmount_view(pid, path, flags)


def supervise(listener: int, mnt: str) -> None:
    """Answer the mount(2) calls of every process sealed with *listener*'s
    filter until the last of them is gone (see the module)."""
    poller = select.poll()
    poller.register(listener, select.POLLIN)
    buf = bytearray(NOTIF.size)
    try:
        while True:
            events = poller.poll()
            if any(ev & (select.POLLHUP | select.POLLERR) for _, ev in events):
                return
            buf[:] = bytes(NOTIF.size)
            try:
                fcntl.ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, buf)
            except OSError as err:
                if err.errno in (errno.EINTR, errno.ENOENT):
                    continue  # (the caller went meanwhile)
                raise
            nid, pid, _flags, nr, _arch, _ip, *args = NOTIF.unpack(buf)
            try:
                result = _answer(listener, nid, pid, nr, tuple(args), mnt)
            except Exception as err:  # noqa: BLE001: a caller's bytes never end the keeper
                log.debug("mount of pid %d: %s", pid, err)
                result = -errno.EPERM
            resp = NOTIF_RESP.pack(nid, 0, min(result, 0), 0)
            try:
                fcntl.ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, bytearray(resp))
            except OSError:  # (the caller went, or was interrupted)
                pass
    finally:
        os.close(listener)


def _answer(listener: int, nid: int, pid: int, nr: int, args: tuple, mnt: str) -> int:
    mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    try:
        # the id still valid: *pid* is the caller, not a process that took its pid
        fcntl.ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, bytearray(struct.pack("=Q", nid)))
        if nr == SYS_umount2:
            return handle_umount(mem, pid, args)
        return handle(mem, pid, args, mnt)
    finally:
        os.close(mem)


__all__ = ["bind_view", "handle", "handle_umount", "in_child", "options", "supervise",
           "unmount_view"]
