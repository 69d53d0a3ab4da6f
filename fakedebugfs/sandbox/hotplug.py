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


__all__ = ["hide_cpu_online"]
