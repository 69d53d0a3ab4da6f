"""The command's own cgroup (v2) for ``--mirror tree``: its tracepoints
are opened for that cgroup (``PERF_FLAG_PID_CGROUP``), so the kernel
keeps the samples of the command's tree only, whatever forked when."""

from __future__ import annotations

import errno
import logging
import os
from typing import Optional

log = logging.getLogger("fakedebugfs.sources.mirror")


def cgroup2_root() -> Optional[str]:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup``, or
    ``.../unified`` beside v1 controllers), or None."""
    try:
        with open("/proc/self/mounts") as fp:
            for line in fp:
                parts = line.split()
                if len(parts) > 2 and parts[2] == "cgroup2":
                    return parts[1]
    except OSError:
        pass
    return None


def outer_pid(pid: int, proc: str) -> Optional[int]:
    """The pid this process's namespace gives the task that *proc* (the
    proc of a PID namespace under this one) numbers *pid*: the task of
    this namespace whose ``NSpid`` line ends with *pid* one level down
    (cgroup.procs takes the writer's numbers)."""
    if proc == "/proc":
        return pid
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fp:
                ns = next((line.split()[1:] for line in fp if line.startswith("NSpid:")), [])
        except OSError:
            continue
        if len(ns) >= 2 and ns[1] == str(pid):
            return int(name)
    return None


def command_cgroup(pid: int, proc: str) -> tuple:
    """A cgroup (v2) of its own for the command *pid* (numbered by the
    *proc* of its PID namespace), which its descendants stay in:
    ``(directory fd, path)``, or ``(None, None)`` where one cannot be made
    (the tree is then told by the leaders' forks)."""
    root = cgroup2_root()
    if root is None:
        return None, None
    # (run's server and command are pids 2 and 3 of their own PID
    # namespace in every run: a random part keeps two runs' apart; with
    # one name, the second run fell back to every task's samples)
    path = os.path.join(root, f"fakedebugfs-mirror-{os.getpid()}-{pid}-{os.urandom(6).hex()}")
    try:
        os.mkdir(path)
        outer = outer_pid(pid, proc)
        if outer is None:
            raise OSError(errno.ESRCH, f"pid {pid} of the command's namespace not found")
        with open(os.path.join(path, "cgroup.procs"), "w") as fp:
            fp.write(str(outer))
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        log.info("mirror: no cgroup for the command (%s): forks tell its tree", err)
        try:
            os.rmdir(path)
        except OSError:
            pass
        return None, None
    return fd, path


__all__ = ["cgroup2_root", "outer_pid", "command_cgroup"]
