"""Where a mount's server says who it is: ``<rundir>/<key>.json`` (pid,
mount point, control socket) beside ``<key>.sock`` and ``<key>.log``."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path


RUNDIR_ENV = "FAKEDEBUGFS_RUNDIR"


def rundir() -> Path:
    """/run/fakedebugfs for root, else $XDG_RUNTIME_DIR or /tmp; $FAKEDEBUGFS_RUNDIR
    if set (a rootless `run` sets it: uid 0 in its user namespace is not root)."""
    if os.environ.get(RUNDIR_ENV):
        base = Path(os.environ[RUNDIR_ENV])
    elif os.geteuid() == 0:
        base = Path("/run/fakedebugfs")
    else:
        base = Path(os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/fakedebugfs-{os.getuid()}") / "fakedebugfs"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


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
    tmp.write_text(json.dumps(fields))
    tmp.replace(p["state"])


def read_state(mountpoint: str) -> dict | None:
    try:
        return json.loads(paths(mountpoint)["state"].read_text())
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
            text = p["log"].read_text(errors="replace")
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
