"""What the kernel shows of itself only around a ``trace_marker`` write in
an instance of the oracle guest (``preempt_model``'s latency header,
``marker_ip``'s ip): the options set, one marker written, ``trace`` read,
the options put back; and the ``python -m ... INSTANCE OUT|-`` entry both
recorders share (oracle/capture.py runs them in its instance)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


def trace_after_marker(instance: Path, options: tuple, text: str) -> str:
    """*instance*'s ``trace`` after writing *text* to its ``trace_marker``
    with each of *options* set (cleared again after)."""
    instance = Path(instance)
    opts = [instance / "options" / name for name in options]
    for opt in opts:
        opt.write_text("1\n")
    try:
        (instance / "trace_marker").write_text(text + "\n")
        return (instance / "trace").read_text()
    finally:
        for opt in opts:
            opt.write_text("0\n")


def main(prog: str, read: Callable[[Path], str], argv=None) -> int:
    """``python -m PROG INSTANCE OUT|-``: *read* (INSTANCE) as one line,
    into OUT or stdout."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(f"usage: python -m {prog} INSTANCE OUT|-", file=sys.stderr)
        return 2
    line = read(Path(args[0])) + "\n"
    if args[1] == "-":
        sys.stdout.write(line)
    else:
        Path(args[1]).write_text(line)
    return 0


__all__ = ["main", "trace_after_marker"]
