"""The server's side of the control protocol (:mod:`.protocol`).

:class:`ControlService` answers one request at a time for a running mount:
it checks, then applies, and never raises (a refused request gets its kind
and a one-line message).  Injection, definitions and faults are the
instrument's (:mod:`fakedebugfs.instrument`); this module only routes and
waits.
"""

from __future__ import annotations

import fnmatch
import logging
import math
import os
from typing import Callable, Optional

import trio

from fakedebugfs.version import __version__
from fakedebugfs.sources.inject import InjectError, Injector
from fakedebugfs.engine.kernel import same_definition
from fakedebugfs.control.protocol import MAX_REPEAT, PROTOCOL_VERSION, ok, refused

log = logging.getLogger(__name__)

REPEAT_RUN = 512  # events an emit fires at once between looks at the FUSE queue
PREPARE_RUN = 128  # events checked at once, likewise
WAIT_POLL = 0.005  # seconds between checks of a wait condition
READERS_DEFAULT = "tracing/per_cpu/cpu*/trace_pipe_raw"


class Refused(Exception):
    """A request refused with *kind* (nothing applied)."""

    def __init__(self, kind: str, message: str, **details):
        super().__init__(message)
        self.kind = kind
        self.details = details


class ControlService:
    """Answers control requests for one :class:`~fakedebugfs.server.server.Server`."""

    def __init__(self, server):
        self.server = server
        self.kernel = server.kernel
        self.injector = Injector(self.kernel)
        self.scenarios = 0  # running now
        self.fds: list = []  # the connection's SCM_RIGHTS fds, while a request is handled
        self._emitting = trio.Lock()  # one emit fires at a time (long ones in turns)
        self.commands: dict[str, Callable] = {
            "hello": self.hello, "status": self.status, "emit": self.emit,
            "define": self.define, "fault": self.fault, "faults": self.faults,
            "clear_faults": self.clear_faults, "scenario": self.scenario, "wait": self.wait,
            "insmod": self.insmod, "rmmod": self.rmmod, "kallsyms": self.kallsyms,
            "replay": self.replay, "replay_status": self.replay_status,
            "watch": self.watch, "remount": self.remount,
        }

    async def handle(self, req, fds: Optional[list] = None) -> dict:
        """The reply to one decoded request; *fds*: the connection's file
        descriptors sent with SCM_RIGHTS, for a request that takes one
        (``replay`` with ``fd``)."""
        self.fds = fds if fds is not None else []
        try:
            if not isinstance(req, dict):
                raise Refused("request", "a request is a JSON object")
            version = req.get("v", 1)
            if version != PROTOCOL_VERSION:
                raise Refused("protocol", f"control protocol {version!r} is not spoken here "
                                          f"(this server speaks {PROTOCOL_VERSION})")
            handler = self.commands.get(req.get("cmd"))
            log.debug("control: %s", req.get("cmd"))
            if handler is None:
                raise Refused("request", f"unknown command {req.get('cmd')!r} "
                                         f"(known: {', '.join(self.commands)})")
            result = handler(req)
            if hasattr(result, "__await__"):
                result = await result
            return ok(**result)
        except Refused as err:
            return refused(err.kind, str(err), **err.details)
        except InjectError as err:
            return refused("event", str(err))
        except KeyError as err:
            return refused("request", f"missing argument {err.args[0]!r}")
        except (ValueError, TypeError) as err:
            return refused("request", str(err))
        except RecursionError:
            return refused("request", "a request nested too deep to handle")
        except Exception as err:  # a client's bytes never stop the server
            log.exception("control request %.100s failed", req.get("cmd"))
            return refused("error", f"internal error: {type(err).__name__}: {str(err)[:200]}")

    # --- information ------------------------------------------------------------

    def hello(self, req) -> dict:
        return {"protocol": PROTOCOL_VERSION, "version": __version__, "pid": os.getpid(),
                "mountpoint": self.server.mountpoint, "cpus": self.kernel.engine.nr_cpus,
                "clock": "virtual" if self.kernel.engine.clock.deterministic else "monotonic"}

    def kallsyms(self, req) -> dict:
        """The engine's symbols as ``/proc/kallsyms`` (``run --attach`` binds them)."""
        return {"text": self.kernel.engine.kallsyms.proc_kallsyms()}

    def status(self, req) -> dict:
        status = self.server.status()
        status["injected"] = self.injector.injected
        status["replayed"] = self.server._replays.committed() if self.server._replays else 0
        return status

    # --- events -------------------------------------------------------------------

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

    # --- replays (fakedebugfs.sources.replay) --------------------------------------------------

    def replays(self):
        """The server's replay runner."""
        return self.server.replays()

    async def replay(self, req) -> dict:
        """Open and check a recording, install its events, replay it in the
        background (kind ``replay`` if refused: nothing was replayed)."""
        from fakedebugfs.sources.replay import ReplayFormatError

        fd = None
        if req.get("fd"):  # taken now, before any wait: another request may come meanwhile
            if not self.fds:
                raise Refused("replay", "fd: no file descriptor came with the request "
                                        "(send it with SCM_RIGHTS)")
            fd = self.fds.pop(0)
        try:
            result = await self.replays().start(req, fd)
        except (ReplayFormatError, OSError, ValueError, TypeError) as err:
            text = f"{err.filename}: {err.strerror}" if isinstance(err, OSError) \
                and err.filename else str(err)
            raise Refused("replay", text) from None
        return result

    async def replay_status(self, req) -> dict:
        return await self.replays().status(req)

    # --- faults ---------------------------------------------------------------------

    def _faults(self):
        table = getattr(self.server, "faults", None)
        if table is None:
            raise Refused("fault", "this server has no fault table")
        return table

    def fault(self, req) -> dict:
        spec = req["spec"]
        if not isinstance(spec, dict):
            raise Refused("fault", "spec must be an object with a 'kind'")
        try:
            added = self._faults().add(spec)
        except (ValueError, TypeError) as err:
            raise Refused("fault", str(err)) from None
        self.kernel.engine.batch_done()  # lost pages and flags reach readers now
        return {"fault": added}

    def faults(self, req) -> dict:
        return {"faults": self._faults().list()}

    def clear_faults(self, req) -> dict:
        self._faults().clear(req.get("id"))
        return {}

    # --- scenarios ------------------------------------------------------------------

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

    # --- waiting --------------------------------------------------------------------

    async def wait(self, req) -> dict:
        """Return once the condition holds; kind ``timeout`` otherwise."""
        until = req.get("until", "idle")
        timeout = float(req.get("timeout", 30))
        if not math.isfinite(timeout) or timeout < 0:
            raise Refused("request", f"timeout must be >= 0 seconds, got {timeout}")
        makers = {"idle": self._idle, "done": self._done, "consumed": self._consumed,
                  "readers": self._readers}
        make = makers.get(until)
        if make is None:
            raise Refused("request", f"wait until {until!r}? (idle, consumed, done, readers)")
        holds, why_not = make(req)
        start = trio.current_time()
        with trio.move_on_after(timeout):
            while not holds():
                await trio.sleep(WAIT_POLL)
            return {"waited": round(trio.current_time() - start, 6)}
        raise Refused("timeout", f"not {until} after {timeout:g} s: {why_not()}")

    # Each condition is made once per wait: (holds, why_not), both callables.

    def _done(self, req):
        return (lambda: self.server.done), (lambda: "the workload is still running")

    def _idle(self, req):
        """The workload is done, no scenario runs, every finished ktrace page
        is visible to readers."""
        def why_not() -> str:
            if not self.server.done:
                return "the workload is still running"
            if self.scenarios:
                return "a scenario is still running"
            return "ktrace pages are still being published"

        return (lambda: self.server.done and not self.scenarios and self.kernel.published()), \
            why_not

    def _consumed(self, req):
        tracers, whole = req.get("tracers"), bool(req.get("complete_pages"))
        return (lambda: not self.kernel.unread(tracers, whole)), \
            (lambda: f"unread {self.kernel.unread(tracers, whole)}")

    def _readers(self, req):
        """Every file matching ``path`` (a glob; default every CPU's
        ``trace_pipe_raw``) is open: a recorder such as trace-cmd is reading.
        The files are found once; each check compares the open files' nodes."""
        pattern = req.get("path", READERS_DEFAULT).lstrip("/")
        wanted = self._matching_files(pattern)
        if not wanted:
            raise Refused("request", f"no file matches {pattern!r}")

        def missing() -> set:
            return wanted - self.server.open_nodes()

        return (lambda: not missing()), \
            (lambda: "not open: " + ", ".join(sorted(n.path().lstrip("/") for n in missing())))

    def _matching_files(self, pattern: str) -> set:
        ops = self.server.ops
        if ops is None:
            return set()
        return {node for node in list(ops.table.nodes.values())
                if not node.is_dir and fnmatch.fnmatchcase(node.path().lstrip("/"), pattern)}

    # --- process events of `run`'s command ------------------------------------------

    def watch(self, req) -> dict:
        """``run``: watch command *pid* (forked by *parent*, not yet exec'd)
        and inject its fork/exec/exit and context switches
        (:mod:`fakedebugfs.server.watch`)."""
        pid, parent = req["pid"], req["parent"]
        for name, value in (("pid", pid), ("parent", parent)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise Refused("request", f"{name} must be a process id > 0, got {value!r}")
        if pid == os.getpid():  # pid 0 or -1 would be this server, or every task
            raise Refused("request", "the server does not watch itself")
        try:
            self.server.watch(pid, parent, str(req.get("parent_comm", "")))
        except OSError as err:
            raise Refused("watch", f"cannot watch pid {pid}: {err.strerror or err}") from None
        return {"pid": pid}

    # --- mount options ----------------------------------------------------------------

    def remount(self, req) -> dict:
        """``mount -o remount,uid=U,gid=G``: tracefs' ownership options
        (the mount helper, ``fakedebugfs SOURCE DIR -o OPTIONS``, sends them)."""
        ids = {}
        for name in ("uid", "gid"):
            value = req.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32 - 1:
                raise Refused("request", f"{name} must be a user or group id, got {value!r}")
            ids[name] = value
        ops = self.server.ops
        if ops is None:
            raise Refused("remount", "not mounted yet")
        return {"nodes": ops.remount(**ids), **ids}

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
