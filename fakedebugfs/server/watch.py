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

An exec also hits the uprobes on the binary it loads: each enabled entry
probe on that file (same device and inode) fires once, after the exec's
``sched_process_exec``, as if the probed instruction ran once in the new
image (:func:`~fakedebugfs.engine.ftrace.trace_uprobe.exec_hits`); its
``__probe_ip`` is where the task mapped that file offset (the exec's first
executable mapping, else ``/proc/PID/maps`` while the task lives, else the
offset itself).
"""

from __future__ import annotations

import logging
import os

import trio

from fakedebugfs.engine.ftrace.trace_uprobe import exec_hits, hit_fields
from fakedebugfs.sources.inject import InjectError
from fakedebugfs.sources.procevents import ProcessEvents

log = logging.getLogger(__name__)

DRAIN_EVERY = 0.005  # seconds between drains when no open asks for one
# the tracepoints the process events become (sources/procevents.py)
SIDEBAND = ("sched:sched_switch", "sched:sched_process_fork", "sched:sched_process_exit",
            "sched:sched_process_exec")
EXEC_EVENT = "sched:sched_process_exec"


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
        return self.uprobes_enabled()

    def _dyn(self):
        """The fake's dynamic events (None before its tracing tree is made)."""
        return getattr(self.injector.kernel.ftrace, "dyn_events", None)

    def uprobes_enabled(self) -> bool:
        """A uprobe event is enabled: an exec may hit it."""
        dyn = self._dyn()
        return bool(dyn is not None and dyn.list) and any(dyn.busy(p.key) for p in dyn.list)

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
        uprobes = any(ev["event"] == EXEC_EVENT for ev in events) and self.uprobes_enabled()
        for ev in events:
            tp = tracepoints.get(ev["event"])
            # nothing attached: the static key is off
            if ev["event"] not in self.mirrored and (tp is None or tp.probes):
                try:
                    prepared.append(self.injector.prepare(
                        ev["event"], cpu=ev["cpu"], pid=ev["pid"], comm=ev.get("comm"),
                        fields=ev.get("fields") or {}))
                except (InjectError, ValueError) as err:
                    log.debug("process event left out: %s", err)
            if uprobes and ev["event"] == EXEC_EVENT:
                prepared += self.uprobe_hits(ev)
        if prepared:
            self.injector.fire(prepared)

    def uprobe_hits(self, ev: dict) -> list:
        """The uprobe events one exec (*ev*) hits, prepared."""
        filename = (ev.get("fields") or {}).get("filename") or ""
        try:
            st = os.stat(filename)
        except (OSError, ValueError):
            return []
        out = []
        comm = ev.get("comm") or ""
        for probe in exec_hits(self._dyn(), (st.st_dev, st.st_ino)):
            ip = mapped_address(ev["pid"], st.st_ino, probe.offset, ev.get("mapping"))
            for fields in (hit_fields(probe, ip, comm), {"__probe_ip": ip}):
                try:
                    out.append(self.injector.prepare(probe.key, cpu=ev["cpu"], pid=ev["pid"],
                                                     comm=comm, fields=fields))
                    break
                except (InjectError, ValueError) as err:
                    log.debug("uprobe hit left out: %s", err)
        return out

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


def mapped_address(pid: int, ino: int, offset: int, mapping=None) -> int:
    """The address at which task *pid* mapped the file offset *offset* of
    the file of inode *ino*: in *mapping* (the exec's first executable
    mapping of it, (addr, len, pgoff)), else in ``/proc/PID/maps`` (start,
    pgoff, inode), else *offset* itself (gone, or never mapped there)."""
    if mapping is not None:
        addr, length, pgoff = mapping
        if pgoff <= offset < pgoff + length:
            return addr + offset - pgoff
    try:
        with open(f"/proc/{pid}/maps") as fp:
            lines = fp.read().splitlines()
    except OSError:
        return offset
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 5 or parts[4] != str(ino):
            continue
        try:
            start, end = (int(x, 16) for x in parts[0].split("-"))
            pgoff = int(parts[2], 16)
        except ValueError:
            continue
        if pgoff <= offset < pgoff + end - start:
            return start + offset - pgoff
    return offset
