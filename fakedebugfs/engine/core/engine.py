"""The tracer engine: CPUs, clock, tracepoints, tasks and symbols.

Plain synchronous Python with no FUSE or trio inside.  Event sources call
:meth:`Engine.emit`; the tracers of the three trees (ktrace, ftrace,
kmemtrace) attach probes to the tracepoints they serve.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from .catalogue import TRACEPOINTS
from .clock import MonotonicClock
from .kallsyms import Kallsyms
from .tracepoint import Tracepoint


class Engine:
    """One simulated machine: ``nr_cpus`` CPUs sharing a clock and tracepoints."""

    def __init__(self, nr_cpus: int = 2, clock=None, seed: int = 0):
        if nr_cpus < 1:
            raise ValueError("at least one CPU")
        self.nr_cpus = nr_cpus
        self.clock = clock or MonotonicClock()
        self.seed = seed
        self.kallsyms = Kallsyms()
        self.tracepoints: dict[str, Tracepoint] = {}
        self.comms: dict[int, str] = {0: "<idle>"}
        self.emitted = 0
        self.listeners: list = []  # callables run after each batch (wake-ups)
        for system, name, args in TRACEPOINTS:
            self.define(system, name, args)

    def define(self, system: str, name: str, args: Sequence[str]) -> Tracepoint:
        """Create (or return) the tracepoint ``system:name``."""
        key = f"{system}:{name}"
        tp = self.tracepoints.get(key)
        if tp is None:
            tp = self.tracepoints[key] = Tracepoint(system, name, args)
        elif tp.args != tuple(args):
            raise ValueError(f"{key} already defined with arguments {tp.args}")
        return tp

    def remove(self, key: str) -> None:
        """Forget a tracepoint (a module going away)."""
        self.tracepoints.pop(key, None)

    def tracepoint(self, key: str) -> Tracepoint:
        return self.tracepoints[key]

    def set_comm(self, pid: int, comm: str) -> None:
        """Record a task's command name (``saved_cmdlines``)."""
        self.comms[pid] = comm[:15]

    def emit(self, tp: Tracepoint, cpu: int, pid: int, values: tuple) -> None:
        """Fire *tp* on *cpu* in task *pid*, stamped with the engine clock."""
        self.emitted += 1
        tp.fire(cpu, pid, self.clock.now(), values)

    def batch_done(self) -> None:
        """Tell listeners (readers' wake-ups) that a burst of events ended."""
        for listener in self.listeners:
            listener()

    def cpus(self) -> Iterable[int]:
        return range(self.nr_cpus)
