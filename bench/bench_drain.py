"""The ``trace_pipe_raw`` drain alone: the ``trace_pipe_raw_MB_per_s`` row
of bench_tracecmd.py (one reader, 64 KiB non-blocking reads of a full 8 MiB
per-CPU buffer, the fake's and the kernel's drains in turn, each pair's
ratio, the load), without its trace-cmd record ladder (docs/cost.md, "The
drain figure").

    python -m bench drain                 # the row as a table
"""

from __future__ import annotations

import os
import shutil
import tempfile

from .bench_tracecmd import bench_raw


def run() -> list[dict]:
    if os.geteuid() != 0:
        return []
    workdir = tempfile.mkdtemp(prefix="bench-drain-")
    try:
        return [bench_raw(workdir)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    from . import print_rows

    print_rows(run())
