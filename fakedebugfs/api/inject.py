"""What a test puts into a running fake, over its control socket: events,
event definitions, faults, scenarios and replays (the methods of
:class:`~fakedebugfs.api.fake.Fake` of that concern; :class:`Injection`
is one of its bases).

An injected event is what the kernel records when a tracepoint fires on a
CPU in a task (``trace_event_raw_event_<call>``: the common fields from the
CPU and ``current``, the event's fields from the probe's arguments); a
definition makes ``events/<system>/<name>/`` as ``TRACE_EVENT`` does (its
``format`` from the C declarations).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence, Union


@dataclass
class Event:
    """One event to inject (the bulk form of :meth:`Fake.emit`)."""

    event: str
    fields: dict = field(default_factory=dict)
    cpu: int = 0
    pid: int = 0
    comm: Optional[str] = None
    ts: Optional[int] = None

    def wire(self) -> dict:
        out = {"event": self.event, "cpu": self.cpu, "pid": self.pid, "fields": self.fields}
        if self.comm is not None:
            out["comm"] = self.comm
        if self.ts is not None:
            out["ts"] = self.ts
        return out


class Injection:
    """Events, definitions, faults, scenarios, replays: each one control
    request (or a few) through ``self.call`` (:meth:`Fake.call`)."""

    call: Callable[..., dict]  # Fake.call: one control request

    def emit(self, event: str, *, cpu: int = 0, pid: int = 0, comm: Optional[str] = None,
             ts: Optional[int] = None, fields: Optional[dict] = None, strict: bool = False,
             repeat: int = 1, **more_fields: Any) -> int:
        """Inject one event (``system:name``); fields as keyword arguments (or
        in *fields*, for names that clash with the keywords).  *repeat*: fire
        it that many times, as ``fakedebugfs emit --repeat N`` (the server
        repeats it in turns between FUSE requests, no list of copies is
        built; refused with :class:`RequestError` outside 1..2**32).
        Returns how many events were emitted."""
        from fakedebugfs.api.scenario import emit_timeout

        ev = Event(event, {**(fields or {}), **more_fields}, cpu, pid, comm, ts)
        args = {"events": [ev.wire()], "strict": strict}
        if type(repeat) is not int or repeat != 1:
            args["repeat"] = repeat  # checked by the server, as the CLI's and a scenario's
        timeout = emit_timeout(args) if isinstance(repeat, int) else None
        return self.call("emit", io_timeout=timeout, **args)["emitted"]

    def emit_many(self, events: Iterable[Union[Event, dict]], strict: bool = False) -> int:
        """Inject many events at once: all are checked before any is fired."""
        wire = [ev.wire() if isinstance(ev, Event) else dict(ev) for ev in events]
        return self.call("emit", events=wire, strict=strict)["emitted"]

    def calls(self, tree: Sequence[Sequence], *, cpu: int = 0, pid: int = 0,
              comm: Optional[str] = None, ts: Optional[int] = None) -> int:
        """Inject function calls: *tree* is ``(depth, start ns, duration ns,
        function)`` nodes (the ``calltrees`` lines of docs/function-tracing.md),
        run through the function tracers, filters and probes as a call tree
        of the profile is, on *cpu*, in *pid*, from *ts* (default: now).
        Returns the number of calls; :class:`RequestError` for a profile
        without function tracing or a malformed tree."""
        return self.call("calls", tree=[list(n) for n in tree], cpu=cpu, pid=pid, comm=comm,
                         ts=ts)["calls"]

    def define(self, system: str, name: str, fields: Sequence[str],
               print_fmt: Optional[str] = None) -> str:
        """A new tracefs event ``events/<system>/<name>/``; *fields* are C
        declarations (``"unsigned long addr"``, ``"char comm[16]"``,
        ``"__data_loc char[] msg"``).  Returns ``system:name``."""
        args = {"system": system, "name": name, "fields": list(fields)}
        if print_fmt is not None:
            args["print_fmt"] = print_fmt
        return self.call("define", **args)["event"]

    def fault(self, kind: str, **spec: Any) -> dict:
        """Script a fault (``overrun``, ``errno``, ``stall``, ``short_read``,
        ``poll_delay``); returns it with its ``id``."""
        return self.call("fault", spec={"kind": kind, **spec})["fault"]

    def faults(self) -> list:
        return self.call("faults")["faults"]

    def clear_faults(self, id: Optional[int] = None) -> None:
        self.call("clear_faults", **({} if id is None else {"id": id}))

    def scenario(self, source: Union[str, os.PathLike]) -> int:
        """Apply a scenario file (or its text): checked whole first, then run
        in order; returns the number of steps (ScenarioError names the line)."""
        from fakedebugfs.api.scenario import apply_scenario

        return apply_scenario(self.call, source)

    def replay(self, path: Union[str, os.PathLike], *, wait: bool = True,
               timeout: Optional[float] = None, **options: Any) -> dict:
        """Replay a trace.dat (v6/v7) or a raw capture directory into this fake
        (:mod:`fakedebugfs.sources.replay`): the recording is checked whole first
        (ReplayError with its one-line error: nothing replayed), its events
        defined, then replayed.  *options*: ``speed`` (None: as fast as
        possible), ``realtime``, ``loop``, ``events`` ("kmem,sched:sched_switch"),
        ``cpu_map`` ({0: 1} or "0:1"), ``keep_timestamps``, ``buffer`` (the
        recording's), ``into`` (the fake's instance, default the top level),
        ``wait_enabled`` (start once tracing is on with one of its events
        enabled).  With *wait*, returns the finished replay's status
        (``done``, ``committed``, ``lost_marks``, ``notes``...); otherwise its
        status at the start (``replay``: its number for ``replay_status``)."""
        from fakedebugfs.api.replay import follow, start
        from fakedebugfs.sources.replay.replay import ReplayOptions

        st = start(self.call, path, ReplayOptions.make(**options))
        return follow(self.call, st["replay"], timeout=timeout) if wait else st
