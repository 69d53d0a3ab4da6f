"""The control socket's ``scenario`` request: a scenario file's steps (emit,
define, faults, waits, clock) checked whole before any is applied, then
run in order; a refusal names the step's FILE:LINE and changes nothing."""

from __future__ import annotations

import math

import trio

from fakedebugfs.sources.inject import InjectError
from fakedebugfs.engine.kernel import same_definition
from fakedebugfs.control.protocol import MAX_REPEAT, Refused


def _where(step, index: int) -> dict:
    """The details of a refusal naming scenario step *index*."""
    line = step.get("line") if isinstance(step, dict) else None
    return {"line": line, "index": index} if isinstance(line, int) else {"index": index}
def _repeat(req) -> int:
    """An emit's ``repeat`` (1 without one); Refused outside 1..MAX_REPEAT."""
    repeat = req.get("repeat", 1)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
        raise Refused("request", f"repeat must be a whole number from 1 to {MAX_REPEAT}, "
                                 f"got {str(repeat)[:40]}")
    return repeat


class ScenarioRequests:
    """The ``scenario`` request (a part of
    :class:`~fakedebugfs.control.service.ControlService`)."""

    async def scenario(self, req) -> dict:
        """Check every step (nothing applied if one is bad), then run them in
        order; the reply comes when the last step is done."""
        steps = req["steps"]
        if not isinstance(steps, list):
            raise Refused("scenario", "steps must be a list")
        checked = self._check_steps(steps)
        self._check_clock(steps)
        self.scenarios += 1
        try:
            for i, (step, prepared) in enumerate(zip(steps, checked)):
                try:
                    await self._run_step(step, prepared)
                except (Refused, InjectError, ValueError, TypeError) as err:
                    label = f"line {step['line']}" if step.get("line") else f"step {i + 1}"
                    raise Refused("scenario", f"{label}: {err} (the steps before it were "
                                  f"applied)", **_where(step, i)) from None
        finally:
            self.scenarios -= 1
        return {"applied": len(steps)}

    def _check_steps(self, steps: list) -> list:
        defined: dict = {}  # key -> the event an earlier step defines
        checked = []
        for i, step in enumerate(steps):
            where = _where(step, i)
            try:
                checked.append(self._check_step(step, defined))
            except (Refused, InjectError, KeyError, ValueError, TypeError) as err:
                text = f"missing {err.args[0]!r}" if isinstance(err, KeyError) else str(err)
                label = f"line {where['line']}" if where.get("line") else f"step {i + 1}"
                raise Refused("scenario", f"{label}: {text}", **where) from None
        return checked

    def _check_step(self, step, defined: dict):
        if not isinstance(step, dict):
            raise Refused("scenario", "a step is an object")
        op = step.get("op")
        if op == "sleep":
            seconds = step["seconds"]
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
                    or not math.isfinite(seconds) or seconds < 0:
                raise Refused("scenario", f"sleep takes a number of seconds >= 0, got {seconds!r}")
            return None
        if op == "define":
            return self._check_define(step, defined)
        if op == "fault":
            check = getattr(self._faults(), "check", None)
            if check is not None:
                check(step["spec"])
            return None
        if op == "emit":
            _repeat(step)
            return self._check_emit(step, defined)
        raise Refused("scenario", f"unknown step {op!r} (emit, define, fault, sleep)")

    def _check_define(self, step, defined: dict) -> None:
        """A define step made (not registered): refused as ``define`` would
        refuse it, or if an earlier step defined the event otherwise."""
        system, name, fields = step["system"], step["name"], step.get("fields") or []
        print_fmt = step.get("print_fmt")
        try:
            ev = self.kernel.check_define(system, name, fields, print_fmt)
        except (ValueError, TypeError) as err:
            raise Refused("define", str(err)) from None
        earlier = defined.get(ev.key)
        if earlier is not None and not same_definition(earlier, ev, print_fmt):
            raise Refused("define", f"event {ev.key} is defined on an earlier line "
                                    f"with another format")
        if earlier is None:
            defined[ev.key] = ev
        return None

    def _check_emit(self, step, defined: dict):
        events = step["events"]
        if not isinstance(events, list):
            raise Refused("request", "events must be a list")
        late = [ev for ev in events if isinstance(ev, dict) and ev.get("event") in defined]
        for ev in late:  # defined by an earlier step: names checked now, values when fired
            names = {f[1].split("[", 1)[0] for f in defined[ev["event"]].fields}
            fields = ev.get("fields") or {}
            if not isinstance(fields, dict):
                raise Refused("scenario", f"{ev['event']}: fields must be an object")
            unknown = sorted(set(fields) - names)
            if unknown:
                raise Refused("scenario", f"{ev['event']} has no field {unknown[0]!r}")
            self.injector.check_task(ev["event"], ev.get("cpu", 0), ev.get("pid", 0),
                                     ev.get("comm"), ev.get("ts"))
        now = self._prepare([ev for ev in events if not any(ev is e for e in late)],
                            bool(step.get("strict")))
        return None if late else now

    def _check_clock(self, steps: list) -> None:
        """The given timestamps of every emit step, in order, against each
        CPU's last event: the trace clock never goes back (Refused naming
        the step before anything is applied)."""
        last = list(self.kernel.engine.last_ts)
        for i, step in enumerate(steps):
            if step.get("op") != "emit":
                continue
            for ev in step["events"]:
                ts, cpu = ev.get("ts"), ev.get("cpu", 0)  # checked by _check_steps
                if ts is None:
                    continue
                if ts < last[cpu]:
                    label = f"line {step['line']}" if step.get("line") else f"step {i + 1}"
                    raise Refused("scenario", f"{label}: {ev['event']}: ts {ts} is before CPU "
                                  f"{cpu}'s last event ({last[cpu]}): the trace clock never "
                                  f"goes back", **_where(step, i))
                last[cpu] = ts

    async def _run_step(self, step: dict, prepared) -> None:
        op = step["op"]
        if op == "sleep":
            await trio.sleep(step["seconds"])
        elif op == "define":
            self.define(step)
        elif op == "fault":
            self.fault(step)
        elif prepared is not None:
            await self._fire(prepared, _repeat(step))
        else:
            await self.emit(step)
