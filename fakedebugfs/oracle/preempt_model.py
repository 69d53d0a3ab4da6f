"""``python -m fakedebugfs.oracle.preempt_model INSTANCE OUT|-``: a
profile's ``preempt_model``, the preemption model the kernel's latency
header names after ``M:`` (``print_trace_header``: ``desktop`` for 6.12's
voluntary, ``PREEMPT(none)`` on 6.18), read off that header in INSTANCE,
a new instance of the oracle guest that its capture removes afterwards.

The header is the kernel's own answer, whatever the release prints and
whichever model a ``PREEMPT_DYNAMIC`` kernel chose at boot (``uname -v``
says only ``PREEMPT_DYNAMIC``).  It is printed only with
``latency-format`` set and the buffer not empty (``trace_default_header``),
so one line is written to the instance's ``trace_marker`` first.
``capture-profile`` never writes to a user's tracefs, so only the
oracle's capture makes this file (oracle/capture.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from fakedebugfs.oracle.marker_facts import main, trace_after_marker

_MODEL = re.compile(r"^# latency: .*\| \(M:(.*?) VP:", re.M)


def from_header(text: str) -> str:
    """The ``M:`` model of a ``trace`` text printed with ``latency-format``."""
    m = _MODEL.search(text)
    if m is None:
        raise ValueError("no latency header (with latency-format set, over a non-empty buffer)")
    return m[1]


def read(instance: Path) -> str:
    """Set ``latency-format`` in *instance*, write a marker, read the model."""
    return from_header(trace_after_marker(instance, ("latency-format",), "preempt_model"))


if __name__ == "__main__":
    sys.exit(main("fakedebugfs.oracle.preempt_model", read))


__all__ = ["from_header", "read"]
