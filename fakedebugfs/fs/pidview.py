"""Which pid a task of a FUSE request has in the fake's events.

The kernel gives a FUSE server each request's pid as the server's PID
namespace numbers it (``fc->pid_ns``, the mounter's).  ``fakedebugfs
run`` serves from outside its command's PID namespace (the command must
not reach the server: sandbox/cmdinit.py), yet the events must name a
``trace_marker`` writer as the command sees it, by the pid ``$$`` or
getpid() gives it there.  With :data:`INNERMOST` on (``run``'s server),
:func:`shown` gives a task's pid in the innermost PID namespace it is in
(the last ``NSpid`` of ``/proc/PID/status``, the server's own /proc).
"""

from __future__ import annotations

INNERMOST = False


def shown(pid: int) -> int:
    """*pid* (the server's numbering) as the fake's events show it."""
    if not INNERMOST or not pid:
        return pid
    try:
        with open(f"/proc/{pid}/status", "rb") as fp:
            for line in fp:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return pid


__all__ = ["INNERMOST", "shown"]
