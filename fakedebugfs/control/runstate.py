"""Where a mount's server says who it is: ``<rundir>/<key>.json`` (pid,
mount point, control socket) beside ``<key>.sock`` and ``<key>.log``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path

from fakedebugfs.errors import FakeError


RUNDIR_ENV = "FAKEDEBUGFS_RUNDIR"
# in a fake's keeper's work folder: what its command launchers read to join
# its namespace (sandbox/keeper.py tell_launchers, native/join.c --info)
JOIN_INFO = "join-info"


class UnsafeRunDir(FakeError):
    """A state directory another user could change: refused, not used."""

    kind = "rundir"


def rundir() -> Path:
    """/run/fakedebugfs for root, else $XDG_RUNTIME_DIR/fakedebugfs or
    /tmp/fakedebugfs-UID/fakedebugfs; $FAKEDEBUGFS_RUNDIR if set (a rootless
    `run` sets it: uid 0 in its user namespace is not root).  Each directory
    this makes is made 0700 and, made now or found, must be a real directory
    (not a symlink) owned by this user that no one else can write to
    (:class:`UnsafeRunDir` otherwise: in a shared /tmp another user could
    have made it first, to plant a symlink where the log is written or a
    state file pointing clients at a socket of theirs)."""
    if os.environ.get(RUNDIR_ENV):
        return private_dir(Path(os.environ[RUNDIR_ENV]))
    if os.geteuid() == 0:
        return private_dir(Path("/run/fakedebugfs"))
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return private_dir(Path(runtime) / "fakedebugfs")
    return private_dir(private_dir(Path(f"/tmp/fakedebugfs-{os.geteuid()}")) / "fakedebugfs")


def private_dir(path: Path) -> Path:
    """*path* made (0700, its parents too) if missing, then checked: a
    directory, not a symlink, owned by the effective user, writable by no
    one else; one found open to others is made 0700 (only the fake's
    owner reaches its sockets and logs)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return private_dir(path)
    try:
        st = os.lstat(path)
    except OSError as err:
        raise UnsafeRunDir(f"{path}: {err.strerror}") from None
    why = None
    if stat.S_ISLNK(st.st_mode):
        why = "is a symbolic link"
    elif not stat.S_ISDIR(st.st_mode):
        why = "is not a directory"
    elif st.st_uid != os.geteuid():
        why = f"belongs to uid {st.st_uid}, not to this user ({os.geteuid()})"
    elif st.st_mode & 0o022:
        why = f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    if not why and st.st_mode & 0o077:  # (a 0755 one made before): the owner's alone
        os.chmod(path, 0o700)
    if why:
        raise UnsafeRunDir(f"state directory {path} {why}: another user could replace the "
                           f"files fakedebugfs keeps there; remove it, or set {RUNDIR_ENV} "
                           f"(or XDG_RUNTIME_DIR) to a directory of your own")
    return path


def open_private(path, flags: int, mode: int = 0o600) -> int:
    """``os.open`` of a file in the state directory, never through a
    symlink (``O_NOFOLLOW``: ELOOP for one)."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def canonical(mountpoint: str) -> str:
    """The mount point's real path, resolved without touching the mount
    itself (a server must never send itself a request; a dead mount fails)."""
    path = os.path.abspath(mountpoint)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def key(mountpoint: str) -> str:
    return hashlib.sha1(canonical(mountpoint).encode()).hexdigest()[:16]


def paths(mountpoint: str) -> dict[str, Path]:
    k, d = key(mountpoint), rundir()
    return {"state": d / f"{k}.json", "sock": d / f"{k}.sock", "log": d / f"{k}.log"}


def write_state(mountpoint: str, **fields) -> None:
    p = paths(mountpoint)
    fields.update(mountpoint=canonical(mountpoint), sock=str(p["sock"]))
    tmp = p["state"].with_suffix(".tmp")
    with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as fp:
        fp.write(json.dumps(fields))
    tmp.replace(p["state"])


def read_state(mountpoint: str) -> dict | None:
    try:
        with os.fdopen(open_private(paths(mountpoint)["state"], os.O_RDONLY)) as fp:
            return json.loads(fp.read(1 << 20))
    except (OSError, ValueError):
        return None


def clear_state(mountpoint: str, drop_log: bool = False) -> None:
    """Forget a mount; with *drop_log*, also its log unless something in it
    (a warning, an error, a traceback) is worth keeping."""
    p = paths(mountpoint)
    for name in ("state", "sock"):
        try:
            p[name].unlink()
        except FileNotFoundError:
            pass
    if drop_log:
        try:
            with os.fdopen(open_private(p["log"], os.O_RDONLY), errors="replace") as fp:
                text = fp.read()
        except OSError:
            return
        if not any(word in text for word in ("WARNING", "ERROR", "Traceback")):
            p["log"].unlink(missing_ok=True)


FSTYPE = "fuse.fakedebugfs"  # how /proc/mounts lists a fakedebugfs mount


def mounted_fstype(mountpoint: str) -> str | None:
    """The type of what is mounted at *mountpoint* (the topmost mount), or None."""
    real = canonical(mountpoint)
    found = None
    with open("/proc/self/mounts") as fp:
        for line in fp:
            fields = line.split()
            if len(fields) > 2 and unescape(fields[1]) == real:
                found = fields[2]
    return found


def unescape(field: str) -> str:
    """A /proc/mounts field: the kernel writes space, tab, newline and
    backslash as octal escapes (``\\040 \\011 \\012 \\134``, ``mangle()``)."""
    if "\\" not in field:
        return field
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def is_mounted(mountpoint: str) -> bool:
    return mounted_fstype(mountpoint) is not None


def alive(pid: int) -> bool:
    """Whether process *pid* runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is not alive
        with open(f"/proc/{pid}/stat") as fp:
            return fp.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
