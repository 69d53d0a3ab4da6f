"""Event sources: deterministic workloads that fire the engine's tracepoints.

A workload is synchronous: ``run(budget)`` fires up to *budget* events and
returns how many it fired; ``done`` turns true once ``--count`` is reached.
The server's driver paces it (``--rate``) and wakes readers between batches.
"""

from __future__ import annotations

from fakedebugfs.sources.workloads.classic import ClassicWorkload
from fakedebugfs.sources.workloads.slab import SlabFaultsWorkload
from fakedebugfs.sources.workloads.synthetic import SyntheticWorkload


class Deferred:
    """A workload made the first time one of its attributes is used (its
    ``name`` and ``imports`` excepted).  ``imports``: the modules making it
    needs; the server imports them in a thread shortly after mounting, so
    that a new mount answers first (:meth:`Server.drive_workload
    <fakedebugfs.server.server.Server.drive_workload>`)."""

    def __init__(self, make, name: str, imports=()):
        self.make, self.name, self.imports = make, name, tuple(imports)
        self.made = None

    def __getattr__(self, attr: str):
        if attr in ("make", "made"):  # not set yet (a copy being made)
            raise AttributeError(attr)
        if self.made is None:
            self.made = self.make()
        return getattr(self.made, attr)


def SlabWorkload(kernel, **kwargs):
    """``kmem``: the slab simulator in numpy blocks (:mod:`.slab_batch`,
    imported when the workload is first used: numpy is not loaded before,
    neither by ``fakedebugfs mount`` before it forks the server nor by the
    server before it answers)."""
    if kwargs.get("seed", 0) < 0:  # numpy's SeedSequence refuses it: say so at mount
        raise ValueError(f"the kmem workload's seed must not be negative, got {kwargs['seed']}")

    def make():
        from fakedebugfs.sources.workloads.slab_batch import SlabWorkload as workload

        return workload(kernel, **kwargs)
    return Deferred(make, kwargs.get("name", "kmem"),
                    imports=("numpy.random", f"{__name__}.slab_batch"))


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
