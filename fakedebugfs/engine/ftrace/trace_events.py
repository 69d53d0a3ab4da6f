"""The event side of a trace array (kernel/trace/trace_events.c, 6.18).

:class:`EventProbe` is ``trace_event_raw_event_<name>`` bound to one trace
array; :class:`TraceEvents`, mixed into :class:`~.trace.TraceArray`, is
what ``trace_events.c`` keeps per trace array: which events are enabled
(``__ftrace_event_enable_disable``, with the soft mode triggers use),
``set_event`` and the per-event and per-system ``enable`` files.  Its
two bases hold the rest of the per-array event state: the ``filter``
files (:class:`~.trace_events_filter.TraceEventFilters`,
trace_events_filter.c's ``apply_*``) and the ``set_event_pid`` /
``set_event_notrace_pid`` lists
(:class:`~.trace_events_pid.TraceEventPids`:
``trace_event_ignore_this_pid``, ``event-fork``).  The event types
themselves are global (the registry, :mod:`.registry`); a new one comes
through ``Ftrace.add_event`` (``trace_add_event_call``).
"""

from __future__ import annotations

from typing import Optional

from fakedebugfs.engine.core.errors import einval
from fakedebugfs.engine.ftrace.events import EventType
from fakedebugfs.engine.ftrace.registry import LazyProbes
from fakedebugfs.engine.ftrace.trace_events_filter import TraceEventFilters
from fakedebugfs.engine.ftrace.trace_events_pid import TraceEventPids
from fakedebugfs.engine.ftrace.trigger import trigger_probe


class EventProbe:
    """``trace_event_raw_event_<name>`` of one event bound to one trace
    array: reserve, fill, filter, commit.  The event (a profile's is ~5 KB
    of codec and print fmt once built) is looked up the first time the
    probe fires or its :attr:`event` is asked for (the batch path), not
    when it is enabled: ``--enable-all`` enables 2,305 events, most of
    which a workload never fires."""

    __slots__ = ("tr", "key", "_event", "batch_owner")

    def __init__(self, tr, key: str, ev: Optional[EventType] = None):
        self.tr = tr
        self.key = key
        self._event = ev
        self.batch_owner = tr  # the batch path (write_batch)

    @property
    def event(self) -> EventType:
        ev = self._event
        if ev is None:
            ev = self._event = self.tr.events[self.key]
        return ev

    def __call__(self, cpu, pid, ts, values):
        tr, key = self.tr, self.key
        ev = self._event or self.event
        tr.firing = key  # whose stack a kernel_stack entry shows (.stacks)
        trig = tr.triggers.get(key)
        if trig is not None and trig.list:
            trigger_probe(tr, ev, trig, cpu, pid, ts, values)
            return
        if key in tr.soft_disabled or tr.pid_filtered(key, pid, values):
            return
        match = tr.filter_preds.get(key)
        if match is None:
            if tr.commit(cpu, ts, ev.encode(pid, values)) and tr.options["stacktrace"]:
                tr.stack_entry(cpu, pid, ts)  # ftrace_trace_stack after the event
            return
        vals, rec = tr.event_record(ev, cpu, pid, values)
        if match(rec) and tr.commit(cpu, ts, ev.pack(pid, vals)) and tr.options["stacktrace"]:
            tr.stack_entry(cpu, pid, ts)


class TraceEvents(TraceEventFilters, TraceEventPids):
    """``trace_events.c``'s state of one trace array (its
    ``trace_event_file`` flags; the filters and pid lists from its bases)
    and the operations of its event files.  Needs ``engine``, ``events``,
    ``top``, ``commit`` and ``log_err`` of the trace array it is part of."""

    enabled: set  # keys with this array's probe registered
    soft_mode: dict  # key -> soft users (``sm_ref``: enable_event triggers, own triggers)
    soft_disabled: set  # keys in soft mode not recording (SOFT_DISABLED)
    probes: LazyProbes  # key -> EventProbe, made when first enabled here
    on_event_added: list  # callables(EventType): a new events/ directory
    on_event_removed: list  # callables(key): an events/ directory goes

    def _init_events(self) -> None:
        self.enabled = set()
        self.soft_mode = {}
        self.soft_disabled = set()
        self._init_event_filters()
        self.probes = LazyProbes(self)
        self._init_event_pids()
        self.on_event_added = []
        self.on_event_removed = []
        # (key, on) before this array's enable of an event starts (an
        # OSError refuses it) or ends: mirroring's hook (sources/mirror.py
        # opens and closes the real tracepoint)
        self.on_enable_change: list = self.top.on_enable_change \
            if self.top is not self else []
        # (tr, key, on) once an array's probe of an event is registered or
        # unregistered (an event probe holds its attached event in trigger
        # mode in that array: trace_eprobe.EprobeHits)
        self.on_enabled: list = self.top.on_enabled if self.top is not self else []

    # --- the events ----------------------------------------------------------------

    def event_keys(self) -> list[str]:
        """``system:name`` of the events with tracepoints (``available_events``;
        kept between calls: :meth:`EventRegistry.with_tracepoints`)."""
        return list(self.events.with_tracepoints(self.engine.tracepoints)[0])

    def event_keys_by_system(self) -> dict[str, list[str]]:
        """:meth:`event_keys` by system, in order (``events/``'s system
        directories, made when it is first looked into)."""
        by_system = self.events.with_tracepoints(self.engine.tracepoints)[1]
        return {system: list(keys) for system, keys in by_system.items()}

    def systems(self) -> list[str]:
        return sorted({key.split(":")[0] for key in self.event_keys()})

    def make_probe(self, ev) -> EventProbe:
        """``trace_event_raw_event_<name>`` bound to this trace array, for
        *ev* (an :class:`EventType`, or its key: the event is then looked
        up, which builds a profile's event, when the probe first fires)."""
        if isinstance(ev, str):
            return EventProbe(self, ev)
        return EventProbe(self, ev.key, ev)

    def event_record(self, ev: EventType, cpu: int, pid: int, values) -> tuple[dict, dict]:
        """The field values of one firing and the record filters see (the
        fields with ``common_pid``, ``CPU`` and ``COMM``; an event's own
        field of one of those names wins, as ``trace_find_event_field``
        looks at the event's fields first: ``comm`` of sched_wakeup is the
        wakee's)."""
        vals = ev.encode_values(values) if ev.encode_values else dict(values)
        comm = self.engine.comms.get(pid, "")
        rec = {"common_pid": pid, "CPU": cpu, "cpu": cpu, "COMM": comm, "comm": comm}
        rec.update(vals)
        return vals, rec

    # --- enable and soft mode ---------------------------------------------------------

    def set_event(self, key: str, on: bool) -> None:
        """``ftrace_event_enable_disable``: a hard enable or disable."""
        self.enable_disable(key, on, soft=False)

    def enable_disable(self, key: str, on: bool, soft: bool) -> None:
        """``__ftrace_event_enable_disable``: *soft* uses of an event
        (triggers) count in ``sm_ref``; while any holds it the event stays
        registered and a disable only sets SOFT_DISABLED.  The tracepoint
        is looked up when it is (un)registered: a disable of an event that
        is off (``events/enable`` <- 0 walks all 2,305) builds no profile
        event's tracepoint."""
        if key not in self.engine.tracepoints:
            raise KeyError(key)
        refs = self.soft_mode.get(key, 0)
        if not on:
            if soft:
                refs = max(0, refs - 1)
                self.soft_mode[key] = refs
                if refs > 0:
                    return
                disable = key in self.soft_disabled
            else:
                disable = refs == 0
            if disable and key in self.enabled:
                for hook in self.on_enable_change:
                    hook(key, False)
                self.engine.tracepoints[key].unregister(self.probes[key])
                self.enabled.discard(key)
                for hook in self.on_enabled:
                    hook(self, key, False)
            if refs > 0:
                self.soft_disabled.add(key)
            else:
                self.soft_disabled.discard(key)
            return
        if not soft:
            self.soft_disabled.discard(key)
        else:
            self.soft_mode[key] = refs + 1
            if refs + 1 > 1:
                return
        if key not in self.enabled:
            for hook in self.on_enable_change:
                hook(key, True)
            if soft:
                self.soft_disabled.add(key)
            self.engine.tracepoints[key].register(self.probes[key])
            self.enabled.add(key)
            for hook in self.on_enabled:
                hook(self, key, True)

    def event_enable_show(self, key: str) -> str:
        """``event_enable_read``: 1 if enabled and not soft-disabled, ``*``
        in soft mode."""
        on = key in self.enabled and key not in self.soft_disabled
        star = "*" if key in self.soft_disabled or self.soft_mode.get(key, 0) else ""
        return f"{int(on)}{star}\n"

    def keys_matching(self, system: Optional[str], name: Optional[str]) -> list[str]:
        """``__ftrace_set_clr_event`` matching: None or ``*`` matches all."""
        if system not in (None, "*", "") and name not in (None, "*", ""):
            key = f"{system}:{name}"  # one event's own files: no walk of the catalogue
            ok = system != "ftrace" and key in self.events and key in self.engine.tracepoints
            return [key] if ok else []
        if system not in (None, "*", "") and name in (None, "*", ""):
            # one system's events (its enable and filter files): the
            # registry's index of the system, the tracepoint asked for those only
            if system == "ftrace" or ":" in system:
                return []
            tracepoints = self.engine.tracepoints
            return [key for key in self.events.system_keys(system) if key in tracepoints]
        out = []
        for key in self.event_keys():
            sys_, ev = key.split(":")
            if system not in (None, "*", "") and system != sys_:
                continue
            if name not in (None, "*", "") and name != ev:
                continue
            out.append(key)
        return out

    def keys_to_disable(self, system: Optional[str], name: Optional[str]) -> list[str]:
        """Of ``keys_matching(system, name)``, those a hard disable changes
        (enabled, or held in soft mode): an ``enable`` <- 0 (``events/enable``:
        all 2,305) calls :meth:`set_event` for these only, each other one
        being off already, which the call would leave as it is."""
        used = self.enabled | self.soft_disabled | {k for k, n in self.soft_mode.items() if n}
        if not used:
            return []
        if system in (None, "*", "") and name in (None, "*", ""):
            tracepoints = self.engine.tracepoints
            return sorted(k for k in used
                          if not k.startswith("ftrace:") and k in self.events and k in tracepoints)
        return [key for key in self.keys_matching(system, name) if key in used]

    def enable_state(self, keys) -> str:
        """``0``, ``1`` or ``X`` (mixed), as ``events/enable`` prints it."""
        states = {key in self.enabled for key in keys}
        return "X" if len(states) > 1 else "1" if states == {True} else "0"

    def set_event_line(self, line: str) -> None:
        """``ftrace_set_clr_event`` of one ``set_event`` word:
        ``[!]match`` (an event or a system name), ``[!]sys:event`` where
        an empty part or ``*`` matches all; EINVAL if nothing matched."""
        on = not line.startswith("!")
        word = line[1:] if not on else line
        match, sep, rest = word.partition(":")
        system = name = None
        if sep:
            system = None if match in ("", "*") else match
            name = None if rest in ("", "*") else rest
            match = None
        keys = [key for key in self.event_keys()
                if _event_matches(key, match, system, name)]
        if not keys:
            raise einval(word)
        for key in keys:
            self.set_event(key, on)


def _event_matches(key: str, match, system, name) -> bool:
    """``__ftrace_set_clr_event_nolock``'s test for one event."""
    sys_, ev = key.split(":", 1)
    if match is not None and match not in (ev, sys_):
        return False
    if system is not None and system != sys_:
        return False
    return name is None or name == ev


__all__ = ["EventProbe", "TraceEvents"]
