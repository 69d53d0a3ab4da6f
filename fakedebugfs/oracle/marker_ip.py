"""``python -m fakedebugfs.oracle.marker_ip INSTANCE OUT|-``: a profile's
``marker_ip``, where a ``trace_marker`` entry's ip points
(engine/ftrace/marker_ip.py), as the kernel prints it with ``sym-offset``
and ``sym-addr`` (``tracing_mark_write+0xdf/0x280 <ffffffff8123600f>``
in the Debian 6.12 guest), read in INSTANCE, a new instance of the
oracle guest that its capture removes afterwards.

One line is written to the instance's ``trace_marker`` and read back
from its ``trace``: the kernel's own ``_THIS_IP_``, which no file of
tracefs shows otherwise.  Like ``preempt_model`` it takes writes, so
only the oracle's capture makes it (oracle/capture.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from fakedebugfs.oracle.marker_facts import main, trace_after_marker

TEXT = "marker_ip"
_LINE = re.compile(r": (\S+\+0x[0-9a-f]+/0x[0-9a-f]+ <[0-9a-f]+>): " + TEXT + "$", re.M)


def from_trace(text: str) -> str:
    """The ``sym+0xoff/0xsize <addr>`` of the marker line of a ``trace``
    printed with ``sym-offset`` and ``sym-addr``."""
    m = _LINE.search(text)
    if m is None:
        raise ValueError(f"no '{TEXT}' marker line printed with sym-offset and sym-addr")
    return m[1]


def read(instance: Path) -> str:
    """Set ``sym-offset`` and ``sym-addr`` in *instance*, write a marker,
    read its ip back."""
    return from_trace(trace_after_marker(instance, ("sym-offset", "sym-addr"), TEXT))


if __name__ == "__main__":
    sys.exit(main("fakedebugfs.oracle.marker_ip", read))


__all__ = ["from_trace", "read"]
