"""``mount -o remount,uid=U,gid=G DIR`` on a fake, as on tracefs.

mount(8) hands a ``fuse.fakedebugfs`` mount to ``mount.fuse3``, which runs
``fakedebugfs SOURCE DIR -o OPTIONS`` through ``/bin/sh`` with no PATH of its
own (so ``make install`` links the command into /usr/local/bin).  A fake is
made by ``fakedebugfs mount``, so the only mount(8) call answered here is a
remount; of its options, tracefs' ``uid=`` and ``gid=`` are sent to the
server (``tracefs_parse_param``: decimal ids, the last one given wins), the
generic ones (``rw``, ``relatime``, FUSE's ``user_id=`` …) are left alone.

The server is the one whose mount point DIR is, else, inside ``fakedebugfs
run``, the command's own (``$FAKEDEBUGFS_MOUNT``: there DIR is
/sys/kernel/tracing or /sys/kernel/debug).
"""

from __future__ import annotations

import os
import re
import sys

OWNERSHIP = ("uid", "gid")


def is_helper_call(argv: list[str]) -> bool:
    """``SOURCE DIR -o OPTIONS``: how mount.fuse3 runs a FUSE file system's
    command (the caller checks that SOURCE is not one of our subcommands,
    as in ``fakedebugfs kmemtraced DIR -o FILE``)."""
    return len(argv) == 4 and argv[2] == "-o" and not argv[0].startswith("-")


def parse_options(text: str) -> tuple[bool, dict]:
    """``(remount, {"uid": U, "gid": G})`` from a comma-separated option
    list (newlines count as commas); ValueError for a bad id, with the
    kernel's words."""
    remount, ids = False, {}
    for opt in re.split(r"[,\n]", text):
        name, _, value = opt.strip().partition("=")
        if name == "remount":
            remount = True
        elif name in OWNERSHIP:
            if not re.fullmatch(r"\d+", value) or int(value) >= 2**32 - 1:
                raise ValueError(f"Bad value for '{name}'")
            ids[name] = int(value)
    return remount, ids


def server_of(mountpoint: str) -> str:
    """The mount point whose server serves *mountpoint*."""
    from fakedebugfs.control import runstate

    if runstate.read_state(mountpoint) is None and os.environ.get("FAKEDEBUGFS_MOUNT"):
        return os.environ["FAKEDEBUGFS_MOUNT"]
    return mountpoint


def main(argv: list[str]) -> int:
    """Run as mount.fuse3 runs us; one line on stderr and exit 1 on refusal."""
    from fakedebugfs.control.client import ControlClient
    from fakedebugfs.errors import FakeError

    _source, mountpoint, _, options = argv
    try:
        remount, ids = parse_options(options)
    except ValueError as err:
        print(f"fakedebugfs: {mountpoint}: {err}", file=sys.stderr)
        return 1
    if not remount:
        print(f"fakedebugfs: {mountpoint}: a fake is mounted with `fakedebugfs mount DIR`; "
              "mount(8) can only remount one (-o remount,uid=N,gid=N)", file=sys.stderr)
        return 1
    if not ids:
        return 0  # nothing of tracefs' to change
    try:
        with ControlClient(server_of(mountpoint)) as client:
            client.call("remount", **ids)
    except (FakeError, OSError) as err:
        print(f"fakedebugfs: {mountpoint}: {err}", file=sys.stderr)
        return 1
    return 0
