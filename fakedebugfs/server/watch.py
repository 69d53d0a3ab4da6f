"""The server's side of ``fakedebugfs run``'s process events.

``run`` asks the server (control request ``watch``) to watch its command
before the command execs; the server opens the perf side-band buffers
(:mod:`fakedebugfs.sources.procevents`) and injects what they report:

* every ``DRAIN_EVERY`` (a task; not on each perf wake-up, which a busy
  command would make for every switch), and
* before every FUSE open of a file that is not static
  (:meth:`Watches.sync`, the adapter's ``on_open``), when a tracer listens
  to one of the tracepoints they stand for (:data:`SIDEBAND`),

so a reader that opens ``trace`` right after its child was switched out
finds the switch there, as it would on the kernel, where the tracepoint
and the reader share one ring buffer.  With nothing attached to those
tracepoints a drain injects nothing (each event is left out, as a static
key that is off costs the kernel nothing), so an open does not pay for
one: ``trace-cmd reset`` makes some 7,000 opens, and the watched command's
own switches around each of them are new records every time.
"""

from __future__ import annotations

import logging

import trio

from fakedebugfs.sources.inject import InjectError
from fakedebugfs.sources.procevents import ProcessEvents

log = logging.getLogger(__name__)

DRAIN_EVERY = 0.005  # seconds between drains when no open asks for one
# the tracepoints the process events become (sources/procevents.py)
SIDEBAND = ("sched:sched_switch", "sched:sched_process_fork", "sched:sched_process_exit",
            "sched:sched_process_exec")


class Watches:
    """The commands watched by one server; events go to *injector*."""

    def __init__(self, injector, nr_cpus: int):
        self.injector = injector
        self.nr_cpus = nr_cpus
        self.watched: list[ProcessEvents] = []
        self.mirrored = ()  # events --mirror takes from the kernel itself (not injected)

    def add(self, pid: int, parent: int, parent_comm: str) -> ProcessEvents:
        """Watch *pid* (forked by *parent*, not yet exec'd); OSError where
        the kernel refuses (perf_event_paranoid, seccomp)."""
        pe = ProcessEvents(pid, self.nr_cpus)
        self.watched.append(pe)
        self.inject([pe.fork_event(parent, parent_comm)])
        return pe

    def listened(self) -> bool:
        """A probe is attached to one of the :data:`SIDEBAND` tracepoints
        (an enabled event in any trace array, ``event-fork``'s follower...)."""
        tracepoints = self.injector.kernel.engine.tracepoints
        for name in SIDEBAND:
            tp = tracepoints.get(name)
            if tp is not None and tp.probes:
                return True
        return False

    def sync(self) -> None:
        """Before an open: inject what the watched buffers hold now, if
        anything listens (else the next :meth:`follow` round takes the
        records in, for the tasks' names and execs it keeps)."""
        if self.listened():
            self.drain()

    def drain(self) -> None:
        """Inject whatever the watched buffers hold now."""
        for pe in self.watched:
            events = pe.drain()
            if events:
                self.inject(events)

    def inject(self, events: list[dict]) -> None:
        """Fire each event the fake can show; one it cannot (an event the
        profile lacks, a pid of another namespace) is left out alone, and
        one no tracer listens to costs nothing (a context switch with
        ``sched_switch`` off)."""
        prepared = []
        tracepoints = self.injector.kernel.engine.tracepoints
        for ev in events:
            if ev["event"] in self.mirrored:
                continue
            tp = tracepoints.get(ev["event"])
            if tp is not None and not tp.probes:  # nothing attached: the static key is off
                continue
            try:
                prepared.append(self.injector.prepare(
                    ev["event"], cpu=ev["cpu"], pid=ev["pid"], comm=ev.get("comm"),
                    fields=ev.get("fields") or {}))
            except (InjectError, ValueError) as err:
                log.debug("process event left out: %s", err)
        if prepared:
            self.injector.fire(prepared)

    async def follow(self) -> None:
        """Drain every ``DRAIN_EVERY`` seconds, until cancelled (a reader
        blocked in ``trace_pipe`` is woken by what this injects)."""
        while True:
            await trio.sleep(DRAIN_EVERY)
            self.drain()

    def close(self) -> None:
        for pe in self.watched:
            pe.close()
        self.watched = []
