"""fakedebugfs benchmarks: ``python -m bench [NAME ...]`` (``make bench``).

Each ``bench/bench_<name>.py`` module exposes ``run() -> list[dict]``; a row
is ``{"name", "fake", "real", "unit"}`` plus an optional ``"detail"`` (any
JSON).  ``fake`` is the figure measured on fakedebugfs, ``real`` the same
measurement on the real kernel, or None when the real kernel has nothing
to compare (printed ``n/a``).  ``python -m bench`` runs every module (or
those named) and prints one table; a module that fails gets an ``error``
row and the command exits nonzero.  To add rows, drop in a new module.
"""

from __future__ import annotations

import pkgutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PREFIX = "bench_"


def available() -> list[str]:
    """Names of the benchmark modules (without ``bench_``), sorted."""
    return sorted(m.name[len(PREFIX):] for m in pkgutil.iter_modules([str(HERE)])
                  if m.name.startswith(PREFIX))
