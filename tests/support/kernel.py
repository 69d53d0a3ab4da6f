"""A bare simulated kernel's instrument, for engine-level tests."""

from __future__ import annotations

import weakref

from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.instrument.faults import FaultTable

_TABLES: "weakref.WeakKeyDictionary[Kernel, FaultTable]" = weakref.WeakKeyDictionary()


def faults_of(kernel: Kernel) -> FaultTable:
    """The fault table of *kernel* (made on first use, one per kernel), as the
    server keeps one for the kernel it serves."""
    table = _TABLES.get(kernel)
    if table is None:
        table = _TABLES[kernel] = FaultTable(kernel)
    return table
