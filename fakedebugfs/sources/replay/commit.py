"""What a replayed event becomes in the fake: the kernel's
``trace_event_buffer_commit`` of a probe, given the recorded payload.

A replayed event is recorded as a fired one would be: only while tracing is
on, on a CPU of ``tracing_cpumask``, with its event enabled and not soft
disabled (an ftrace entry such as ``print`` needs no enable; a tracer's
entries, ``function`` or ``funcgraph_*``, only while that tracer is
current), its pid in ``set_event_pid`` if set and not in
``set_event_notrace_pid`` (``trace_event_ignore_this_pid``), and through
the event's filter.  Its triggers run as a fired event's do
(``event_triggers_call``, then ``event_triggers_post_call``): a hist
trigger aggregates the replayed record.  A recording's lost-events mark
becomes the same loss in the fake's ring buffer.
"""

from __future__ import annotations

from typing import Optional

from fakedebugfs.engine.ftrace.trigger import event_triggers_call, run_trigger

# the ftrace entries a tracer writes (trace_functions.c, trace_functions_graph.c):
# replayed while that tracer is current, as the kernel writes them only then
TRACER_ENTRIES = {"ftrace:function": "function", "ftrace:func_repeats": "function",
                  "ftrace:funcgraph_entry": "function_graph",
                  "ftrace:funcgraph_exit": "function_graph"}


class ReplayCommit:
    """Committing replayed events and losses (a part of
    :class:`~fakedebugfs.sources.replay.replay.Replay`, which holds
    ``kernel``, ``array`` (the trace array replayed into), ``installed``
    (the recording's events in the fake) and ``lost_marks``)."""

    def commit(self, cpu: int, ts: int, payload: bytes, target) -> bool:
        """One event into *cpu*'s ring buffer if the fake records it now
        (``trace_event_buffer_commit`` of a probe: enabled and not soft
        disabled, its pid not ignored, through its filter)."""
        ft = self.array
        if target is None or not ft.tracing_on:
            return False
        if target.swap is not None:
            payload = target.swap.swap_payload(payload)
        if target.common_type is not None:
            payload = target.common_type + payload[2:]
        post = self._triggers(ft, cpu, ts, payload, target)
        done = self._record(ft, cpu, ts, payload, target)
        for t in post:  # event_triggers_post_call
            run_trigger(ft, t, cpu, int.from_bytes(payload[4:8], "little", signed=True), ts)
        return done

    def _record(self, ft, cpu: int, ts: int, payload: bytes, target) -> bool:
        if not target.always and (target.key not in ft.enabled
                                  or target.key in ft.soft_disabled):
            return False
        made_by = TRACER_ENTRIES.get(target.key)
        if made_by is not None and getattr(ft.tracer, "name", None) != made_by:
            return False  # a tracer's entry: written while that tracer is current
        if ft.event_pids or ft.filter_preds or ft.notrace_pids:
            if not self._passes(ft, cpu, payload, target):
                return False
        return ft.commit(cpu, ts, payload)

    def _triggers(self, ft, cpu: int, ts: int, payload: bytes, target) -> list:
        """The event's triggers (``event_triggers_call``), as a fired event
        runs them: a hist trigger aggregates the replayed record."""
        trig = ft.triggers.get(target.key)
        if trig is None or not trig.list or target.key not in ft.enabled:
            return []
        pid = int.from_bytes(payload[4:8], "little", signed=True)
        if ft.ignore_pid(pid):
            return []
        fields = target.etype.decode(payload)
        seen = self.__dict__.setdefault("comms_seen", {})
        for who, what in (("prev_pid", "prev_comm"), ("next_pid", "next_comm")):
            name = fields.get(what)
            if who in fields and isinstance(name, (str, bytes)):  # the task's comm then
                seen[fields[who]] = name if isinstance(name, str) else \
                    name.split(b"\0", 1)[0].decode(errors="replace")
        comm = seen.get(pid) or self.kernel.engine.comms.get(pid, "")
        rec = {"common_pid": pid, "CPU": cpu, "cpu": cpu, "COMM": comm, "comm": comm}
        rec.update(fields)
        return event_triggers_call(ft, trig, rec, cpu, pid, ts, payload)

    def _passes(self, ft, cpu: int, payload: bytes, target) -> bool:
        pid = int.from_bytes(payload[4:8], "little", signed=True)
        if ft.ignore_pid(pid):  # trace_event_ignore_this_pid
            return False
        match = ft.filter_preds.get(target.key)
        if match is None:
            return True
        comm = self.kernel.engine.comms.get(pid, "")
        rec = dict(target.etype.decode(payload), CPU=cpu, cpu=cpu, COMM=comm, comm=comm)
        return bool(match(rec))

    def lose(self, cpu: int, count: Optional[int]) -> None:
        """The recording's lost-events mark: the same loss in the fake."""
        ft = self.array
        if ft.tracing_on:
            ft.buffers[cpu].lose_now(count)
            ft.written += 1  # a finished page: wake page readers
        self.lost_marks += 1

    def ready_to_start(self) -> bool:
        """``wait_enabled``: tracing is on and a replayed event is enabled
        (or the tracer whose entries the recording holds is current)."""
        ft = self.array
        tracer = getattr(ft.tracer, "name", None)
        return ft.tracing_on and any(t.key in ft.enabled or TRACER_ENTRIES.get(t.key) == tracer
                                     for t in self.installed.targets.values())


__all__ = ["ReplayCommit", "TRACER_ENTRIES"]
