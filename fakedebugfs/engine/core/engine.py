"""The tracer engine: CPUs, clock, tracepoints, tasks and symbols.

Plain synchronous Python with no FUSE or trio inside.  Event sources call
:meth:`Engine.emit` (stamped with the engine clock) or hand many events at
once to :meth:`Engine.emit_batch` (each with its own timestamp: workloads,
injection, replay); the tracers of the three trees (ktrace, ftrace,
kmemtrace) attach probes to the tracepoints they serve.

The batch path: a probe that can take many events at once carries a
``batch_owner`` (the tracer object whose buffers it writes, with
``batch_ok(batch, kinds)`` and ``write_batch(batch, kinds)``).  When every
probe of every tracepoint in an :class:`~.batch.EventBatch` has one and
each owner accepts the batch, each owner encodes all of its events in one
go (in emission order per CPU: the same bytes as firing them one by one);
otherwise the events are fired one by one.
"""

from __future__ import annotations

from typing import Callable, Iterable, NamedTuple, Optional, Sequence

from fakedebugfs.engine.core.lazynp import np

from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.batch import EventBatch, from_pending
from fakedebugfs.engine.core.catalogue import TRACEPOINTS
from fakedebugfs.engine.core.clock import MonotonicClock
from fakedebugfs.engine.core.kallsyms import Kallsyms
from fakedebugfs.engine.core.tracepoint import Tracepoint


BATCH_MIN = 64  # Pending events below this many are fired one by one


class Pending(NamedTuple):
    """One event to fire: what :meth:`Engine.emit_batch` takes."""

    tp: Tracepoint
    cpu: int
    pid: int
    ts: int
    values: tuple


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
        self.user_tracepoints: dict[str, Tracepoint] = {}  # those with a printf format
        self.comms: dict[int, str] = {0: "<idle>"}
        self.emitted = 0
        self.last_ts = [0] * nr_cpus  # per CPU: the trace clock never goes back
        self.listeners: list = []  # callables run after each batch (wake-ups)
        # a source whose events of a task may come in after the task's exit
        # (run's mirror) takes the exit's pid-list removal, to run it once
        # they are in (trace_events_pid.TraceEventPids.task_exit)
        self.pid_exit_hold: Optional[Callable[[Callable[[], None]], None]] = None
        for system, name, args in TRACEPOINTS:
            self.define(system, name, args)

    def define(self, system: str, name: str, args: Sequence[str],
               fmt: str | None = None) -> Tracepoint:
        """Create (or return) the tracepoint ``system:name``; *fmt*: the
        printf format of a user-declared event (ktrace's modules), which
        puts it in ``user_tracepoints``."""
        key = f"{system}:{name}"
        tp = self.tracepoints.get(key)
        if tp is None:
            tp = self.tracepoints[key] = Tracepoint(system, name, args)
        elif tp.args != tuple(args):
            raise ValueError(f"{key} already defined with arguments {tp.args}")
        if fmt is not None:
            tp.format = fmt
            self.user_tracepoints.setdefault(key, tp)
        return tp

    def remove(self, key: str) -> None:
        """Forget a tracepoint (a module going away)."""
        self.tracepoints.pop(key, None)
        self.user_tracepoints.pop(key, None)

    def tracepoint(self, key: str) -> Tracepoint:
        return self.tracepoints[key]

    def set_comm(self, pid: int, comm: str) -> None:
        """Record a task's command name (``saved_cmdlines``)."""
        self.comms[pid] = comm[:15]

    def emit(self, tp: Tracepoint, cpu: int, pid: int, values: tuple) -> None:
        """Fire *tp* on *cpu* in task *pid*, stamped with the engine clock."""
        self.emitted += 1
        ts = self.clock.now()
        self.last_ts[cpu] = ts
        tp.fire(cpu, pid, ts, values)

    def emit_batch(self, events) -> int:
        """Fire many events, each with its own CPU, task and timestamp
        (``ts`` of each not below its CPU's last one: callers check with
        :meth:`check_ts`): an :class:`~.batch.EventBatch`, or ``Pending``
        events (made into one when there are :data:`BATCH_MIN` or more).
        Returns how many were fired."""
        if not isinstance(events, EventBatch):
            events = list(events)
            batch = from_pending(events) if len(events) >= BATCH_MIN else None
            if batch is None:
                return self._fire_each(events)
            events = batch
        n = len(events)
        if not n:
            return 0
        owners = self._batch_owners(events)
        if owners is None:
            return self._fire_each(events.events())
        for k, tp in enumerate(events.tps):
            tp.hits += len(events.where(k))
        for owner, kinds in owners.values():
            owner.write_batch(events, kinds)
        self._note_last_ts(events)
        self.emitted += n
        return n

    def _fire_each(self, events) -> int:
        n = 0
        last = self.last_ts
        for tp, cpu, pid, ts, values in events:
            last[cpu] = ts
            tp.fire(cpu, pid, ts, values)
            n += 1
        self.emitted += n
        return n

    def _batch_owners(self, batch: EventBatch):
        """``{id: (owner, kinds)}`` of the tracers that take *batch* at once,
        or None when some probe cannot (the per-event path)."""
        owners: dict = {}
        for k, tp in enumerate(batch.tps):
            for probe in tp.probes:
                owner = getattr(probe, "batch_owner", None)
                if owner is None:
                    return None
                entry = owners.setdefault(id(owner), (owner, []))
                if entry[1] and entry[1][-1][0] == k:  # two probes of one tracer on it
                    return None
                entry[1].append((k, probe))
        for owner, kinds in owners.values():
            if not owner.batch_ok(batch, kinds):
                return None
        return owners

    def _note_last_ts(self, batch: EventBatch) -> None:
        """Each CPU's last timestamp (``check_ts``)."""
        cpu = batch.cpu
        bf = fast.load("fakedebugfs.engine.core.batch_fast")
        if bf is not None and cpu.dtype == batch.ts.dtype == np.int64:
            bf.note_last_ts(cpu, batch.ts, self.last_ts)
            return
        for c in np.unique(cpu).tolist():
            self.last_ts[c] = int(batch.ts[np.flatnonzero(cpu == c)[-1]])

    def check_ts(self, cpu: int, ts: int) -> None:
        """Refuse a timestamp before *cpu*'s last event: the kernel's trace
        clock is monotonic per CPU (ValueError)."""
        if ts < self.last_ts[cpu]:
            raise ValueError(f"ts {ts} is before CPU {cpu}'s last event ({self.last_ts[cpu]}): "
                             "the trace clock never goes back")

    def batch_done(self) -> None:
        """Tell listeners (readers' wake-ups) that a burst of events ended."""
        for listener in self.listeners:
            listener()

    def cpus(self) -> Iterable[int]:
        return range(self.nr_cpus)
