"""What the suite must leave on the host as it found it, read without
changing anything: the real tracefs's top level (read in a private mount
namespace, :mod:`realtracefs`), the host's tracefs and debugfs mounts, and
the kernel settings tracing tools write.

``snapshot()`` is a dict of plain values (``start()``: the one a session
begins with); ``diff(before, after)`` names what changed, one line per
item; ``changes(before)`` is that diff read again until it is settled;
``restore(before, after)`` puts back what ``diff`` named (the top level's
files, leaked instances and probes, sysctls, a tracefs mount left on the
host).  ``python -m tests.support.hoststate`` prints a snapshot as JSON, or,
given one saved earlier, the difference (``--restore``: put back).

The top level is the kernel's, shared with every tracing user of the host:
a test of ours that writes it holds :data:`realtracefs.LOCK`, so the lock
is taken (shared: readers never wait for each other) for the reads that
count; a change of the top level's files made while someone else holds
the lock long or writes those files cannot be told from ours, and
``changes`` says so instead of counting it.  Instances are told apart by
name: our tests name their scratch instances with their pid.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import select
import struct
import subprocess
import sys
import time

from . import realtracefs

# written by ftracetest, trace-cmd, perf and libbpf; perf_event_max_sample_rate is
# left out: the kernel lowers it itself when a perf interrupt takes too long
SYSCTLS = ("kernel/ftrace_enabled", "kernel/sched_rt_runtime_us", "kernel/perf_event_paranoid",
           "kernel/kptr_restrict", "kernel/traceoff_on_warning", "kernel/tracepoint_printk",
           "kernel/panic_on_warn", "vm/swappiness")
MOUNT_TYPES = ("tracefs", "debugfs")


def host_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """``MOUNTPOINT FSTYPE`` of every tracefs and debugfs mount the calling
    process's (the host's) mount namespace has, in mount order."""
    found = []
    with open(mountinfo) as fp:
        for line in fp:
            left, _, right = line.partition(" - ")
            fstype = right.split()[0] if right else ""
            if fstype in MOUNT_TYPES:
                found.append(f"{left.split()[4]} {fstype}")
    return found


def snapshot(lock: bool = False, wait: float = realtracefs.LOCK_WAIT) -> dict:
    """The host's state (reads only).  *lock*: holding realtracefs.LOCK shared
    while the top level is read (TimeoutError after *wait* seconds).  ``top``
    is None where the real tracefs cannot be read (not root, no tracefs)."""
    state = {"mounts": host_mounts(),
             "sysctl": {n: realtracefs.read_or_errno(f"/proc/sys/{n}") for n in SYSCTLS
                        if os.path.exists(f"/proc/sys/{n}")},
             "top": None}
    if realtracefs.available():
        with realtracefs.top_level_lock(wait, shared=True) if lock else contextlib.nullcontext():
            state["top"] = realtracefs.call(realtracefs.top_level)
    return state


def start(lock_wait: float = 1.0) -> dict:
    """A session's first snapshot, read holding the lock (shared): a test
    of another session holds it while the top level is not as it leaves
    it.  Held longer than *lock_wait* seconds: read anyway, and ``busy``
    says the top level's files were someone else's then."""
    try:
        return snapshot(lock=True, wait=lock_wait)
    except TimeoutError:
        state = snapshot()
        state["busy"] = f"the lock held at the start by {realtracefs._holder()}"
        return state


def _short(text) -> str:
    text = json.dumps(text)
    return text if len(text) <= 120 else text[:117] + "..."


def _numbers(name: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", name)]


def _foreign(name: str) -> bool:
    """An instance named with the pid of a live process other than this
    one: another session's scratch instance (our tests name theirs with
    their pid), to be removed by its owner."""
    return any(pid != os.getpid() and os.path.exists(f"/proc/{pid}") for pid in _numbers(name))


def _added(before: list, after: list) -> list:
    """Instances *after* has that *before* lacked, but another live
    process's scratch ones (:func:`_foreign`)."""
    return [n for n in after if n not in before and not _foreign(n)]


def _instances(before, after) -> str:
    """Instances *after* has that *before* lacked (but another live
    process's scratch ones), and those gone since (but scratch ones, which
    their owner removes): ``added [...] removed [...]`` or ''."""
    if not (isinstance(before, list) and isinstance(after, list)):
        return "" if before == after else f"{_short(before)} -> {_short(after)}"
    added = _added(before, after)
    removed = [n for n in before if n not in after and not _numbers(n)]
    return " ".join(f"{what} {names}" for what, names in (("added", added), ("removed", removed))
                    if names)


def diff(before: dict, after: dict) -> list[str]:
    """One line per difference between two snapshots; [] when equal.
    Another session's scratch instances coming and going are not one."""
    lines = []
    if before["mounts"] != after["mounts"]:
        lines.append(f"host mounts: {before['mounts']} -> {after['mounts']}")
    for name in sorted(set(before["sysctl"]) | set(after["sysctl"])):
        a, b = before["sysctl"].get(name), after["sysctl"].get(name)
        if a != b:
            lines.append(f"/proc/sys/{name}: {_short(a)} -> {_short(b)}")
    top_a, top_b = before["top"] or {}, after["top"] or {}
    for name in sorted(set(top_a) & set(top_b)):
        if name == "instances":
            change = _instances(top_a[name], top_b[name])
            if change:
                lines.append(f"real tracefs instances: {change}")
        elif top_a[name] != top_b[name]:
            lines.append(f"real tracefs {name}: {_short(top_a[name])} -> {_short(top_b[name])}")
    return lines


IN_MODIFY = 0x2


def _written(root: str, seconds: float) -> list[str]:
    """The top level's files (realtracefs.TOP_FILES) someone writes within
    *seconds* (inotify: a tracefs file's inode is the same in every mount
    namespace, so a write from anywhere is seen)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    try:
        names = {}
        for name in realtracefs.TOP_FILES:
            wd = libc.inotify_add_watch(fd, os.path.join(root, name).encode(), IN_MODIFY)
            if wd >= 0:
                names[wd] = name
        seen = set()
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if select.select([fd], [], [], left)[0]:
                data, off = os.read(fd, 65536), 0
                while off < len(data):
                    wd, _, _, size = struct.unpack_from("iIII", data, off)
                    seen.add(names.get(wd, "?"))
                    off += 16 + size
        return sorted(seen)
    finally:
        os.close(fd)


def changes(before: dict, quiet_for: float = 6.0,
            lock_wait: float = 60.0) -> tuple[list[str], dict, list[str]]:
    """What changed since *before* (:func:`diff`), now's snapshot, and why
    the top level's changes cannot be told from someone else's (else []).
    One read when nothing changed.  Else the top level is watched for
    *quiet_for* seconds (longer than a tracing tool's start/stop cycle) and
    read again holding the lock (a test of another session that writes the
    top level holds it): a change that went away is not one; the files
    someone wrote meanwhile, or the lock held over *lock_wait* seconds (or
    at the start: :func:`start`), are the reasons (another tracing user at
    work)."""
    after = snapshot()
    lines = diff(before, after)
    if not lines:
        return [], after, []
    if before.get("busy"):
        busy = [before["busy"]]
    else:
        busy = realtracefs.call(_written, quiet_for) if after["top"] else []
    try:
        after = snapshot(lock=not busy, wait=lock_wait)
    except TimeoutError:
        busy = [f"the lock held over {lock_wait:.0f} s by {realtracefs._holder()}"]
        after = snapshot()
    return diff(before, after), after, busy


# --- putting back -------------------------------------------------------------------

def _write(path: str, data: str) -> None:
    with open(path, "w") as fp:
        fp.write(data)


def restore(before: dict, after: dict, top: bool = True) -> list[str]:
    """Put back what :func:`diff` found changed: sysctls; instances left at
    the top level (not another live session's); the top level's files
    (with *top*), holding realtracefs.LOCK; a tracefs mount the host did
    not have before is unmounted (plain umount: EBUSY while something uses
    it, then it stays and is named)."""
    notes = []
    for name, value in before["sysctl"].items():
        if after["sysctl"].get(name, value) != value and not value.startswith("!"):
            try:
                _write(f"/proc/sys/{name}", value)
                notes.append(f"/proc/sys/{name}: put back")
            except OSError as err:
                notes.append(f"/proc/sys/{name}: {err}")
    top_a, top_b = before["top"], after["top"]
    if top_a and top_b:
        if isinstance(top_a["instances"], list) and isinstance(top_b["instances"], list):
            new = _added(top_a["instances"], top_b["instances"])
            if new:  # not the top level's files: no lock
                notes += realtracefs.call(realtracefs.put_back, top_a, top_a, new)
        if top and any(top_a[n] != top_b[n] for n in realtracefs.TOP_FILES):
            try:
                notes += realtracefs.call(realtracefs.put_back, top_a, top_b, lock=True)
            except (TimeoutError, RuntimeError) as exc:
                notes.append(f"the top level not put back: {exc}")
    for entry in after["mounts"]:
        point, fstype = entry.rsplit(" ", 1)
        if fstype == "tracefs" and entry not in before["mounts"]:
            p = subprocess.run(["umount", point], capture_output=True, text=True)
            notes.append(f"umount {point}: " + ("done" if p.returncode == 0
                                                 else p.stderr.strip() or f"status {p.returncode}"))
    return notes


def main(argv: list[str]) -> int:
    """``hoststate`` prints a snapshot as JSON (``--lock``: read holding the
    lock); ``hoststate SAVED.json`` prints what changed since (exit 1 if
    anything did), and with ``--restore`` puts it back."""
    args = [a for a in argv if not a.startswith("--")]
    if not args:
        json.dump(snapshot(lock="--lock" in argv), sys.stdout, indent=1)
        print()
        return 0
    with open(args[0]) as fp:
        before = json.load(fp)
    lines, now, busy = changes(before)
    print("\n".join(lines) or "unchanged")
    if lines and busy:
        print(f"(someone else was at the real top level meanwhile: {', '.join(busy)})")
    if lines and "--restore" in argv:
        print("\n".join(restore(before, now)))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
