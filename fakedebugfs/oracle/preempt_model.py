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

_MODEL = re.compile(r"^# latency: .*\| \(M:(.*?) VP:", re.M)


def from_header(text: str) -> str:
    """The ``M:`` model of a ``trace`` text printed with ``latency-format``."""
    m = _MODEL.search(text)
    if m is None:
        raise ValueError("no latency header (with latency-format set, over a non-empty buffer)")
    return m[1]


def read(instance: Path) -> str:
    """Set ``latency-format`` in *instance*, write a marker, read the model."""
    instance = Path(instance)
    (instance / "options/latency-format").write_text("1\n")
    try:
        (instance / "trace_marker").write_text("preempt_model\n")
        return from_header((instance / "trace").read_text())
    finally:
        (instance / "options/latency-format").write_text("0\n")


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m fakedebugfs.oracle.preempt_model INSTANCE OUT|-", file=sys.stderr)
        return 2
    model = read(Path(args[0])) + "\n"
    if args[1] == "-":
        sys.stdout.write(model)
    else:
        Path(args[1]).write_text(model)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["from_header", "read"]
