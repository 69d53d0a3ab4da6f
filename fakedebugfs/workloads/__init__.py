"""Event sources: deterministic workloads that fire the engine's tracepoints.

A workload is synchronous: ``run(budget)`` fires up to *budget* events and
returns how many it fired; ``done`` turns true once ``--count`` is reached.
The server's driver paces it (``--rate``) and wakes readers between batches.
"""

from __future__ import annotations

from .classic import ClassicWorkload
from .slab import SlabFaultsWorkload
from .synthetic import SyntheticWorkload


def SlabWorkload(kernel, **kwargs):
    """``kmem``: the slab simulator in numpy blocks (:mod:`.slab_batch`,
    imported when a kmem workload is made: numpy is not loaded before)."""
    from .slab_batch import SlabWorkload as workload

    return workload(kernel, **kwargs)


WORKLOADS = {"default": SyntheticWorkload, "classic": ClassicWorkload, "kmem": SlabWorkload,
             "kmem-faults": SlabFaultsWorkload, "none": None}


def register(name: str, factory) -> None:
    """Make a workload available to ``--workload NAME``."""
    WORKLOADS[name] = factory


def make_workload(name: str, kernel, seed: int = 0, count: int | None = None):
    """The workload called *name*, or None for ``none``."""
    try:
        factory = WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r} (choose from {', '.join(WORKLOADS)})") from None
    return None if factory is None else factory(kernel, seed=seed, count=count)
