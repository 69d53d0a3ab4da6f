"""Static tracepoints (include/linux/tracepoint.h).

A tracepoint is a named hook with fixed arguments.  Event sources (workloads,
replays, injection) fire it; the tracers of each tree attach probes to it, as
ftrace, ktrace and kmemtrace attach to the same kernel tracepoints.
"""

from __future__ import annotations

from typing import Callable, Sequence

# probe(cpu, pid, ts, values): values are the tracepoint's arguments, in order
Probe = Callable[[int, int, int, tuple], None]


class Tracepoint:
    """``struct tracepoint``: system, name, argument names and probes."""

    __slots__ = ("system", "name", "args", "probes", "hits", "format")
    # probes attached or detached on any tracepoint so far (where the kernel
    # flips a tracepoint's static key): what caches of "does anything
    # listen" follow (server/watch.py)
    changes = 0

    def __init__(self, system: str, name: str, args: Sequence[str]):
        self.system = system
        self.name = name
        self.args = tuple(args)
        self.probes: tuple[Probe, ...] = ()
        self.hits = 0
        self.format = None  # printf-style format of a user-declared event

    @property
    def key(self) -> str:
        return f"{self.system}:{self.name}"

    def index(self, arg: str) -> int:
        """Position of argument *arg* in the values a probe receives."""
        return self.args.index(arg)

    def register(self, probe: Probe) -> None:
        """``tracepoint_probe_register``; a probe is attached at most once."""
        if probe not in self.probes:
            self.probes = self.probes + (probe,)
            Tracepoint.changes += 1

    def unregister(self, probe: Probe) -> None:
        """``tracepoint_probe_unregister``."""
        self.probes = tuple(p for p in self.probes if p != probe)
        Tracepoint.changes += 1

    def fire(self, cpu: int, pid: int, ts: int, values: tuple) -> None:
        """Call every attached probe (``__DO_TRACE``)."""
        self.hits += 1
        for probe in self.probes:
            probe(cpu, pid, ts, values)

    def __repr__(self) -> str:
        return f"<Tracepoint {self.key}{self.args}>"
