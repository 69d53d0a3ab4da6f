"""How to give a user the FUSE device when ``/dev/fuse`` is not readable
and writable by them (mode 0600, owned by root), least invasive first, each
with its exact commands, and which one this machine allows first.

The kernel's fuse module registers ``/dev/fuse`` (misc device 10:229);
devtmpfs makes the node 0600 root:root and udev (or the container
runtime) gives it its mode: 0666 on most distributions today, root:fuse
0660 on older ones, whose users joined the ``fuse`` group.  The fixes:

1. in a container, its ``/dev`` is its own: a mode given there changes
   nothing on the host, and ``docker run --device /dev/fuse`` is how a
   container gets the device at all;
2. the distribution's ``fuse`` group (when ``/etc/group`` has one): the
   user joins it, and the device is made the group's (0660);
3. a POSIX ACL for this user alone (``setfacl``, package ``acl``), until
   the device node is made again (a reboot, the module reloaded);
4. a udev rule, which makes the group's 0660 last across reboots;
5. ``chmod 0666``: every user of the machine, until the node is made again.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
from dataclasses import dataclass
from typing import Optional

UDEV_RULE = "/etc/udev/rules.d/60-fuse-group.rules"


@dataclass
class Fix:
    """One way to give the user the device: *commands* to run, what it
    changes (*scope*), and why this machine cannot take it (*not_here*:
    empty when it can)."""

    name: str
    commands: str
    scope: str
    not_here: str = ""


def in_container() -> bool:
    """A Docker or Podman container (their marker files), or a runtime
    that says so in ``container=`` (systemd-nspawn, LXC)."""
    return os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv") \
        or bool(os.environ.get("container"))


def user_name(uid: Optional[int] = None) -> str:
    uid = os.getuid() if uid is None else uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _fuse_group() -> Optional[grp.struct_group]:
    try:
        return grp.getgrnam("fuse")
    except KeyError:
        return None


def device_fixes(dev: str, user: Optional[str] = None) -> list[Fix]:
    """The fixes for device *dev* (fusecheck.FUSE_DEVICE), least invasive
    first."""
    user = user or user_name()
    container = in_container()
    fixes = [Fix("container", f"as the container's root, `chmod 0666 {dev}` (or in its "
                              f"entrypoint); it gets the device with `docker run --device {dev}`",
                 "this container's own /dev: nothing on the host changes",
                 "" if container else "not in a container")]
    group = _fuse_group()
    try:
        dev_gid = os.stat(dev).st_gid
    except OSError:
        dev_gid = -1
    join = f"sudo usermod -aG fuse {user}"
    if group is not None and dev_gid == group.gr_gid:
        fixes.append(Fix("fuse group", f"`{join}`, then log in again",
                         "this user joins the group the device already has"))
    else:
        fixes.append(Fix("fuse group", f"`sudo chgrp fuse {dev} && sudo chmod 0660 {dev} && "
                                       f"{join}`, then log in again",
                         "the group's members only, until the device is made again (the "
                         "udev rule makes it last)",
                         "" if group is not None else "/etc/group has no fuse group"))
    fixes.append(Fix("ACL", f"`sudo setfacl -m u:{user}:rw {dev}`",
                     "this user only, until the device is made again (a reboot)",
                     "" if shutil.which("setfacl") else
                     "no setfacl (`sudo apt install acl` first)"))
    rule = 'KERNEL=="fuse", GROUP="fuse", MODE="0660"'
    fixes.append(Fix("udev rule", f"`sudo groupadd -f fuse && {join} && echo '{rule}' | sudo "
                                  f"tee {UDEV_RULE} && sudo udevadm trigger --name-match=fuse`",
                     "the fuse group's members, lasting across reboots",
                     "" if shutil.which("udevadm") and not container else
                     ("a container's devices are not udev's" if container else "no udevadm")))
    fixes.append(Fix("chmod", f"`sudo chmod 0666 {dev}`",
                     "every user of the machine (the mode most distributions give it), until "
                     "the device is made again"))
    return fixes


def pick(fixes: list[Fix]) -> Fix:
    """The least invasive fix this machine can take (chmod at worst)."""
    return next(fix for fix in fixes if not fix.not_here)


def device_fix_line(dev: str) -> str:
    """The picked fix, for a one-line problem: its commands and scope."""
    fix = pick(device_fixes(dev))
    return f"{fix.commands} ({fix.scope}; other fixes: `fakedebugfs doctor`)"


def device_fix_lines(dev: str) -> list[str]:
    """The fixes in order, for ``fakedebugfs doctor``, with the one picked."""
    fixes = device_fixes(dev)
    chosen = pick(fixes)
    lines = [f"fixes for {dev}, least invasive first:"]
    for i, fix in enumerate(fixes, 1):
        mark = "->" if fix is chosen else "  "
        why = f" [not here: {fix.not_here}]" if fix.not_here else ""
        lines.append(f"{mark} {i}. {fix.name}: {fix.commands}: {fix.scope}{why}")
    lines.append(f"this machine: {fixes.index(chosen) + 1} ({chosen.name}); or run as root")
    return lines
