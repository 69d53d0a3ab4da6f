"""CPU hotplug inside a sealed ``run``: CPUs that cannot go offline.

Only the host's kernel can take a CPU offline, and a sealed command must
not (``/sys`` is read-only to it: confine.py), so a write of 0 to
``/sys/devices/system/cpu/cpuN/online`` would fail with EROFS, which no
kernel answers there: ftracetest's ``func_hotplug.tc`` then failed.

A kernel shows a CPU it cannot offline by giving it no ``online``
attribute: ``register_cpu`` sets ``offline_disabled`` for a CPU that is
not hotpluggable, and ``device_add_attrs`` creates ``online`` only for a
device that may go offline (x86's CPU 0 has none).  Here every CPU is
shown that way: each ``cpuN`` directory with an ``online`` file is
covered by a tmpfs holding its other entries (each bound from the
original, symlinks made again), so ``online`` is absent (ENOENT) and the
rest is the kernel's.  ``func_hotplug.tc`` then finds no CPU to offline
and is UNRESOLVED, as on such a kernel.  The covers are made before
``/sys`` is made read-only, so they are read-only too.

A fake with more CPUs than this machine (``run --cpus 4`` on two) is a
kernel with more *possible* CPUs than present ones, as a virtual machine
with CPU slots to plug is: its tracefs has a ``per_cpu/cpuN`` for each
possible CPU and ``tracing_cpumask`` sets them all
(``for_each_tracing_cpu``), while ``/sys/devices/system/cpu/possible``
says ``0-3`` and ``offline`` the possible CPUs not online
(``print_cpus_offline``).  :func:`show_possible` binds those two files so:
``sysconf(_SC_NPROCESSORS_CONF)``, which glibc reads from ``possible``,
then counts the fake's CPUs, and what is online (``online``,
``sched_getaffinity``, ``_SC_NPROCESSORS_ONLN``) stays this machine's,
where the command's tasks really run.  libtracefs' utest checks
``tracing_cpumask`` against that count.
"""

from __future__ import annotations

import glob
import logging
import os

from fakedebugfs.native import libc

log = logging.getLogger(__name__)

MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND = 0x2, 0x4, 0x8, 0x1000
CPUS = "/sys/devices/system/cpu"


def hide_cpu_online(root: str = CPUS) -> list[str]:
    """Cover each ``cpuN`` of *root* that has an ``online`` file with its
    entries but that one; the directories covered (none where a cover
    fails: the command then sees the kernel's, read-only)."""
    done = []
    for online in sorted(glob.glob(os.path.join(root, "cpu[0-9]*", "online"))):
        folder = os.path.dirname(online)
        try:
            _cover_without(folder, "online")
        except OSError as err:
            log.debug("%s: online left visible: %s", folder, err)
            continue
        done.append(folder)
    return done


def _cover_without(folder: str, name: str) -> None:
    """*folder* covered by a tmpfs holding its entries but *name*: each
    file or directory bound from the original over an empty one of the
    same name, each symlink made again with its target."""
    fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        entries = [(e.name, e.is_symlink(), e.is_dir(follow_symlinks=False))
                   for e in os.scandir(folder) if e.name != name]
        links = {n: os.readlink(n, dir_fd=fd) for n, is_link, _ in entries if is_link}
        mode = os.stat(folder).st_mode & 0o7777
        libc.mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for entry, is_link, is_dir in entries:
            path = os.path.join(folder, entry)
            if is_link:
                os.symlink(links[entry], path)
                continue
            if is_dir:
                os.mkdir(path)
            else:
                open(path, "w").close()
            libc.mount(f"/proc/self/fd/{fd}/{entry}", path, None, MS_BIND)
        os.chmod(folder, mode)
    finally:
        os.close(fd)


def cpulist(text: str) -> set[int]:
    """The CPUs of a kernel cpulist (``0-3,6``: ``cpulist_parse``)."""
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def cpulist_text(cpus) -> str:
    """*cpus* as the kernel prints a cpulist (``%*pbl``), with its newline."""
    runs, cpus = [], sorted(cpus)
    for cpu in cpus:
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs) + "\n"


def fake_cpus(mnt: str) -> int:
    """How many CPUs the fake at *mnt* has (its ``tracing/per_cpu``), 0 if unknown."""
    try:
        return sum(1 for name in os.listdir(os.path.join(mnt, "tracing", "per_cpu"))
                   if name.startswith("cpu") and name[3:].isdigit())
    except OSError:
        return 0


def show_possible(mnt: str, work: str, root: str = CPUS) -> bool:
    """Where the fake at *mnt* has more CPUs than *root*'s ``possible``,
    bind files saying so over ``possible`` and ``offline`` (written in
    *work*); whether it did."""
    n = fake_cpus(mnt)
    try:
        with open(os.path.join(root, "possible")) as fp:
            possible = cpulist(fp.read())
        with open(os.path.join(root, "online")) as fp:
            online = cpulist(fp.read())
    except (OSError, ValueError) as err:
        log.debug("%s: possible CPUs left as they are: %s", root, err)
        return False
    if not n or max(possible, default=-1) + 1 >= n:
        return False
    shown = set(range(n)) | possible
    try:
        for name, cpus in (("possible", shown), ("offline", shown - online)):
            source = os.path.join(work, f"cpu-{name}")
            with open(source, "w") as fp:
                fp.write(cpulist_text(cpus))
            libc.mount(source, os.path.join(root, name), None, MS_BIND)
    except OSError as err:
        log.debug("%s: possible CPUs left as they are: %s", root, err)
        return False
    return True


__all__ = ["cpulist", "cpulist_text", "fake_cpus", "hide_cpu_online", "show_possible"]
