"""The command's own mount namespace: what it may change and what it may reach.

``run`` starts its command in a mount namespace of the command's own
(a child of the one where the fake is served), arranged before exec:

* ``/proc/sys`` and ``/sys`` read-only (EROFS), every mount under ``/sys``
  included (cgroup, bpf, securityfs...) but the fake's: nothing the
  command writes there reaches the host's kernel settings or devices
  (ftracetest's ``func_hotplug.tc`` would offline a host CPU through
  ``/sys/devices/system/cpu/cpuN/online``: those files are hidden, as a
  kernel hides them for CPUs that cannot go offline, sandbox/hotplug.py);
* over that, a private writable copy (a regular file holding the host's
  value) of each sysctl tracing tools write (:data:`SYSCTL_COPIES`), so
  ``echo -1 > /proc/sys/kernel/sched_rt_runtime_us`` (ftracetest's setup)
  succeeds and reads back ``-1`` while the host's value stays;
* other fakes unreachable: a tmpfs over every fakedebugfs state directory
  (``/run/fakedebugfs``, ``/run/user/*/fakedebugfs``,
  ``/tmp/fakedebugfs-*/fakedebugfs`` and the invoking user's), where their
  control sockets live,
  keeping only this run's fake: its state file, its socket and its mount
  point, at the same paths, so ``fakedebugfs emit "$FAKEDEBUGFS_MOUNT"``
  works from inside.

Without the seal (``run --unsealed``) only the two copies tools always
needed are made (``ftrace_enabled``, ``kptr_restrict``).  The mounts go
with the namespace when the command's last process exits.
"""

from __future__ import annotations

import glob
import os

from construct import Int64ul, Struct

from fakedebugfs.native import libc
from fakedebugfs.sandbox.hotplug import hide_cpu_online

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_BIND, MS_REC = 0x1000, 0x4000
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 1  # include/uapi/linux/mount.h
MOVE_MOUNT_F_EMPTY_PATH = 0x00000004
MOUNT_ATTR_RDONLY = 0x00000001
SYS_open_tree, SYS_move_mount, SYS_mount_setattr = 428, 429, 442  # x86_64

# struct mount_attr { __u64 attr_set, attr_clr, propagation, userns_fd; }  (MOUNT_ATTR_SIZE_VER0)
mount_attr = Struct("attr_set" / Int64ul, "attr_clr" / Int64ul, "propagation" / Int64ul,
                    "userns_fd" / Int64ul)

PROC_SYS = "/proc/sys"
SYS = "/sys"
FAKE_FSTYPE = "fuse.fakedebugfs"

# The sysctls tracing tools write, each given a private writable copy:
# ftracetest (its setup sets sched_rt_runtime_us to -1 for the RT tests;
# ftrace_enabled, stack_tracer_enabled, traceoff_on_warning,
# tracepoint_printk, ftrace_dump_on_oops in test.d), trace-cmd
# (kptr_restrict to 0 around reading kallsyms; ftrace_enabled for
# function tracing), perf (perf_event_paranoid, perf_event_max_sample_rate,
# perf_event_mlock_kb, perf_event_max_stack, perf_cpu_time_max_percent),
# libtracefs (none: it writes only tracefs).
SYSCTL_COPIES = (
    "kernel/ftrace_enabled", "kernel/kptr_restrict", "kernel/sched_rt_runtime_us",
    "kernel/sched_rt_period_us", "kernel/stack_tracer_enabled", "kernel/traceoff_on_warning",
    "kernel/tracepoint_printk", "kernel/ftrace_dump_on_oops", "kernel/perf_event_paranoid",
    "kernel/perf_event_max_sample_rate", "kernel/perf_event_mlock_kb",
    "kernel/perf_event_max_stack", "kernel/perf_cpu_time_max_percent",
)
UNSEALED_COPIES = ("kernel/ftrace_enabled", "kernel/kptr_restrict")
# the value a copy starts with where the host's is not what the fake does
# (this kernel may refuse function tracing; the fake's is always on)
SYSCTL_VALUES = {"kernel/ftrace_enabled": "1\n"}
FORKSERVER_PREFIX = "fakedebugfs-forkserver-"  # (pytest_plugin.py's mkdtemp)
STATE_DIRS = ("/run/fakedebugfs", "/run/user/*/fakedebugfs", "/tmp/fakedebugfs-UID/fakedebugfs")


# --- mount API calls (new mount API, Linux 5.2/5.12) ------------------------------

def open_tree_clone(path: str) -> int:
    """open_tree(OPEN_TREE_CLONE): a detached bind mount of *path*, as an fd."""
    return libc.check(libc.syscall(SYS_open_tree, AT_FDCWD, os.fsencode(path), OPEN_TREE_CLONE),
                      f"open_tree {path}")


def move_mount_fd(fd: int, target: str) -> None:
    """move_mount() of the detached mount *fd* onto *target* (not following
    a final symlink: MOVE_MOUNT_T_SYMLINKS is not given)."""
    libc.check(libc.syscall(SYS_move_mount, fd, b"", AT_FDCWD, os.fsencode(target),
                            MOVE_MOUNT_F_EMPTY_PATH), f"move_mount to {target}")


def set_read_only(path: str, recursive: bool = False, clear: bool = False) -> None:
    """mount_setattr(2): set (or clear) MOUNT_ATTR_RDONLY on the mount at
    *path* (and every mount under it), leaving its other flags as they are
    (which a user namespace's locked mounts require)."""
    attr = mount_attr.build({"attr_set": 0 if clear else MOUNT_ATTR_RDONLY,
                             "attr_clr": MOUNT_ATTR_RDONLY if clear else 0,
                             "propagation": 0, "userns_fd": 0})
    libc.check(libc.syscall(SYS_mount_setattr, AT_FDCWD, os.fsencode(path),
                            AT_RECURSIVE if recursive else 0, attr, len(attr)),
               f"mount_setattr {path}")


def mount_points() -> list[tuple[str, str]]:
    """``(mount point, fstype)`` of this namespace's mounts, in order."""
    out = []
    with open("/proc/self/mountinfo") as fp:
        for line in fp:
            left, _, right = line.partition(" - ")
            point = left.split()[4].encode().decode("unicode_escape")
            out.append((point, right.split()[0]))
    return out


def _is_mount_point(path: str) -> bool:
    return any(point == path for point, _ in mount_points())


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


# --- the steps ----------------------------------------------------------------------

def read_only_tree(top: str, keep_fstype: str = FAKE_FSTYPE) -> None:
    """*top* and every mount under it read-only, but mounts of *keep_fstype*
    (the fake's binds over /sys/kernel/{tracing,debug})."""
    if not _is_mount_point(top):
        libc.mount(top, top, None, MS_BIND | MS_REC)
    set_read_only(top, recursive=True)
    for point, fstype in mount_points():
        if fstype == keep_fstype and _under(point, top):
            set_read_only(point, clear=True)


def sysctl_copies(work: str, names=SYSCTL_COPIES) -> list[str]:
    """A writable regular file holding each sysctl's value, bound over it;
    the paths bound."""
    folder = os.path.join(work, "sysctl")
    os.makedirs(folder, exist_ok=True)
    made = []
    fakes = {point for point, fstype in mount_points() if fstype == FAKE_FSTYPE}
    for name in names:
        target = os.path.join(PROC_SYS, name)
        if target in fakes:  # the fake's own switch bound there (sandbox/procsys.py)
            continue
        try:
            with open(target) as fp:
                value = fp.read()
        except OSError:  # not on this kernel
            continue
        path = os.path.join(folder, name.replace("/", "."))
        with open(path, "w") as fp:
            fp.write(SYSCTL_VALUES.get(name, value))
        libc.mount(path, target, None, MS_BIND)
        made.append(target)
    return made


def state_dirs() -> list[str]:
    """The run directories of ``STATE_DIRS`` there are (any user's).  The
    ``/tmp`` ones are found by name first: ``/tmp/fakedebugfs-XXXXXXXX``
    are fakes' mount points, and a look inside one would be a request to
    that fake's server, busy or not."""
    found = glob.glob(STATE_DIRS[0]) + glob.glob(STATE_DIRS[1])
    try:
        names = os.listdir("/tmp")
    except OSError:
        names = []
    prefix = "fakedebugfs-"
    found += [f"/tmp/{name}/fakedebugfs" for name in names
              if name.startswith(prefix) and name[len(prefix):].isdigit()]
    # the pytest plugin's fork servers (their sockets refuse a run's command
    # anyway: server/peers.py)
    found += [f"/tmp/{name}" for name in names if name.startswith(FORKSERVER_PREFIX)]
    return found


def hide_other_fakes(keep_mnt: str, keep_files: list[str]) -> None:
    """A tmpfs over each fakedebugfs state directory, with *keep_files*
    (this fake's state file, copied, and socket, bound) and the fake's mount
    point *keep_mnt* back at their paths."""
    from fakedebugfs.control.runstate import rundir

    found = state_dirs() + [str(rundir())]
    dirs = sorted({os.path.realpath(d) for d in found if os.path.isdir(d)})
    dirs = [d for d in dirs if not any(_under(d, top) and d != top for top in dirs)]
    if not dirs:
        return
    keep_mnt = os.path.realpath(keep_mnt)
    clones: dict[str, int] = {}
    copies: dict[str, bytes] = {}
    try:
        for path in keep_files:
            if not any(_under(path, d) for d in dirs) or not os.path.exists(path):
                continue
            if os.path.isfile(path):
                with open(path, "rb") as fp:
                    copies[path] = fp.read()
            else:  # the socket: the same inode, bound
                clones[path] = open_tree_clone(path)
        if any(_under(keep_mnt, d) for d in dirs):
            clones[keep_mnt] = open_tree_clone(keep_mnt)
        for d in dirs:
            try:
                libc.mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            except PermissionError:  # another user's, which we cannot reach either
                if any(_under(path, d) for path in [keep_mnt, *keep_files]):
                    raise
                continue
            os.chmod(d, 0o755)
        for path, data in copies.items():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fp:
                fp.write(data)
        for path, fd in clones.items():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if path == keep_mnt:
                os.makedirs(path, exist_ok=True)
            else:
                open(path, "w").close()
            move_mount_fd(fd, path)
    finally:
        for fd in clones.values():
            os.close(fd)


def confine(work: str, mnt: str, keep_files: list[str], sealed: bool = True) -> None:
    """Give this process (forked, about to exec the command) a mount
    namespace of its own arranged as the module says."""
    libc.unshare(CLONE_NEWNS, "unshare(CLONE_NEWNS)")
    if not sealed:
        sysctl_copies(work, UNSEALED_COPIES)
        return
    if os.path.isdir(PROC_SYS):
        read_only_tree(PROC_SYS)
    if os.path.isdir(SYS):
        hide_cpu_online()  # CPUs that cannot go offline (sandbox/hotplug.py)
        read_only_tree(SYS)
    sysctl_copies(work)
    hide_other_fakes(mnt, keep_files)


__all__ = ["SYSCTL_COPIES", "confine", "hide_other_fakes", "move_mount_fd", "open_tree_clone",
           "read_only_tree", "set_read_only", "sysctl_copies"]
