"""libc through ctypes: the one handle the package uses, with the few
system calls Python's ``os`` lacks (mount(2), umount2(2), unshare(2),
prctl(2), capget/capset(2), and raw ``syscall()`` for open_tree,
move_mount and perf_event_open).

Each wrapper raises :class:`OSError` with the errno and what was asked,
as ``os`` functions do, instead of returning -1.
"""

from __future__ import annotations

import ctypes
import os

PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                       ctypes.c_ulong, ctypes.c_void_p]
LIBC.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
LIBC.unshare.argtypes = [ctypes.c_int]


def errno_error(what: str) -> OSError:
    """The OSError for the errno the last call left, with *what* was asked."""
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def check(ret: int, what: str) -> int:
    """*ret* of a libc call, or the OSError its errno says when it is < 0
    (``ret != 0`` for calls that return 0 on success)."""
    if ret < 0:
        raise errno_error(what)
    return ret


def _b(s):
    return None if s is None else os.fsencode(s)


def mount(source, target, fstype=None, flags: int = 0) -> None:
    """mount(2) without data."""
    check(LIBC.mount(_b(source), _b(target), _b(fstype), flags, None),
          f"mount {source} on {target}")


def umount2(target, flags: int) -> None:
    """umount2(2)."""
    check(LIBC.umount2(_b(target), flags), f"umount {target}")


def unshare(flags: int, what: str = "unshare") -> None:
    """unshare(2)."""
    check(LIBC.unshare(flags), what)


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    """prctl(2); its return value (some options answer through it)."""
    return LIBC.prctl(option, arg2, arg3, arg4, arg5)


def set_pdeathsig(sig: int) -> None:
    """PR_SET_PDEATHSIG: *sig* is sent to this process when its parent dies."""
    check(prctl(PR_SET_PDEATHSIG, sig), "prctl(PR_SET_PDEATHSIG)")


def syscall(number: int, *args) -> int:
    """A raw system call; its return value (< 0 and errno set on failure)."""
    return LIBC.syscall(number, *args)


__all__ = ["LIBC", "check", "errno_error", "mount", "prctl", "set_pdeathsig", "syscall",
           "umount2", "unshare"]
