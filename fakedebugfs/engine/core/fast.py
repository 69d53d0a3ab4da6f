"""Whether the engine's compiled fast paths (Cython, see setup.py) run.

Each compiled module sits beside the Python module whose inner loop it
runs and gives the same bytes; ``FAKEDEBUGFS_PURE=1`` in the environment
(read once, at import) makes every caller take the Python path instead,
as a build without a compiler would.
"""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType

PURE = os.environ.get("FAKEDEBUGFS_PURE", "") not in ("", "0")


def use_fast() -> bool:
    """False when ``FAKEDEBUGFS_PURE`` asks for the Python paths."""
    return not PURE


@functools.cache
def load(name: str) -> ModuleType | None:
    """The compiled module *name* (``"fakedebugfs.engine.core.rb_fast"``), or
    None when ``FAKEDEBUGFS_PURE`` is set or it was not built; remembered,
    so a caller that must not import it early (it imports numpy) asks at
    each use."""
    if PURE:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


__all__ = ["PURE", "load", "use_fast"]
