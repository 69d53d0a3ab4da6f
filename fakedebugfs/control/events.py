"""The control socket's event requests: ``emit`` (events injected, checked
whole then fired), ``define`` (a new event type), ``calls`` (function
calls run through the function tracers) and ``insmod``/``rmmod`` (the
2009 ktrace RFC's modules: their probe sites appear and go).

What a tracepoint hit does is the engine's; this module checks the
request whole (nothing is fired if one event is bad) and fires it in
slicer turns, so that FUSE requests are answered between two runs of a
long emit: a reader of ``trace_pipe`` is not held up by a writer, as on
a kernel where events are written while readers read.
"""

from __future__ import annotations

from fakedebugfs.control.protocol import Refused
from fakedebugfs.control.scenarios import _repeat

REPEAT_RUN = 512  # events an emit fires at once between looks at the FUSE queue
PREPARE_RUN = 128  # events checked at once, likewise


class EventRequests:
    """``emit``, ``define``, ``calls``, ``insmod`` and ``rmmod`` (a part of
    :class:`~fakedebugfs.control.service.ControlService`, which holds
    ``kernel``, ``injector`` and ``_emitting``: one emit fires at a time)."""

    def _prepare(self, events, strict: bool, first: int = 0) -> list:
        if not isinstance(events, list):
            raise Refused("request", "events must be a list")
        out = []
        for i, ev in enumerate(events, first):
            if not isinstance(ev, dict) or "event" not in ev:
                raise Refused("event", f"event #{i + 1}: needs an 'event' name")
            out.append(self.injector.prepare(
                ev["event"], cpu=ev.get("cpu", 0), pid=ev.get("pid", 0), comm=ev.get("comm"),
                ts=ev.get("ts"), fields=ev.get("fields") or {}, strict=strict))
        return out

    async def _prepare_sliced(self, events, strict: bool) -> list:
        """:meth:`_prepare` of a long list in slicer turns (FUSE requests
        answered in between); nothing is fired either way."""
        if not isinstance(events, list) or len(events) <= REPEAT_RUN:
            return self._prepare(events, strict)
        from fakedebugfs.fs.slices import slicer

        out, i = [], 0
        while i < len(events):
            async with slicer.turn(slicer.WRITER) as turn:
                while i < len(events) and not turn.over():
                    out.extend(self._prepare(events[i:i + PREPARE_RUN], strict, i))
                    i += PREPARE_RUN
        return out

    async def emit(self, req) -> dict:
        """Check every event, then fire them all (or none); ``repeat`` times
        over; a long list or repeat in turns of the slicer (FUSE requests
        answered in between)."""
        events = req["events"] if "events" in req else [req]
        repeat = _repeat(req)
        prepared = await self._prepare_sliced(events, bool(req.get("strict")))
        return {"emitted": await self._fire(prepared, repeat)}

    async def _fire(self, prepared: list, repeat: int = 1) -> int:
        """Fire *prepared* *repeat* times.  Each round's timestamps are
        planned whole first (the first round refused whole if one goes
        back), then fired in slicer turns of at most REPEAT_RUN events; one
        emit at a time (another waits for its end, so no CPU's clock is
        mixed up between turns)."""
        if not prepared:
            return 0
        from fakedebugfs.fs.slices import slicer

        inj, fired = self.injector, 0
        async with self._emitting:
            if len(prepared) <= REPEAT_RUN:  # small: whole rounds at once
                fired = inj.fire(prepared)
                left, per = repeat - 1, max(1, REPEAT_RUN // len(prepared))
                while left:
                    async with slicer.turn(slicer.WRITER) as turn:
                        while left and not turn.over():
                            n = min(per, left)
                            fired += inj.fire(prepared * n)
                            left -= n
                return fired
            for _ in range(repeat):
                stamps, state, i = [], None, 0
                while i < len(prepared):  # planned whole (refused: nothing fired) ...
                    async with slicer.turn(slicer.WRITER) as turn:
                        while i < len(prepared) and not turn.over():
                            part, state = inj.plan(prepared[i:i + REPEAT_RUN], state)
                            stamps += part
                            i += REPEAT_RUN
                end, i = state[1], 0
                while i < len(prepared):  # ... then fired
                    async with slicer.turn(slicer.WRITER) as turn:
                        while i < len(prepared) and not turn.over():
                            j = i + REPEAT_RUN
                            fired += inj.fire(prepared[i:j], stamps[i:j])
                            i = j
                inj.advance(end)
        return fired

    def define(self, req) -> dict:
        system, name = req["system"], req["name"]
        fields = req.get("fields") or []
        try:
            ev = self.kernel.define_event(system, name, fields, req.get("print_fmt"))
        except (ValueError, TypeError) as err:
            raise Refused("define", str(err)) from None
        return {"event": f"{system}:{name}", "id": getattr(ev, "id", None)}

    # --- function calls -------------------------------------------------------------

    async def calls(self, req) -> dict:
        """Function calls injected: a tree run through the function tracers
        (engine/ftrace/calltree.py) on ``cpu``, in ``pid``, at ``ts``."""
        fn = self.kernel.ftrace.__dict__.get("function_trace")
        if fn is None:
            raise Refused("event", "the profile's kernel has no function tracing")
        cpu, pid, ts = req.get("cpu", 0), req.get("pid", 0), req.get("ts")
        if type(pid) is not int or ts is not None and (type(ts) is not int or ts < 0):
            raise Refused("request", "pid and ts must be integers")
        if req.get("comm"):
            self.kernel.engine.set_comm(pid, str(req["comm"]))
        async with self._emitting:
            try:
                n = fn.calls.call(req.get("tree"), cpu, pid, ts)
            except ValueError as err:
                raise Refused("event", str(err)) from None
        self.kernel.engine.batch_done()
        return {"calls": n}

    # --- ktrace modules ---------------------------------------------------------------

    def insmod(self, req) -> dict:
        names = self.kernel.insmod(req["module"], req["events"])
        self.kernel.engine.batch_done()
        return {"events": names}

    def rmmod(self, req) -> dict:
        try:
            self.kernel.rmmod(req["module"])
        except KeyError as err:
            raise Refused("request", str(err.args[0])) from None
        return {}
