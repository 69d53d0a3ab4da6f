"""The server's side of the control protocol (:mod:`.protocol`).

:class:`ControlService` answers one request at a time for a running mount:
it checks, then applies, and never raises (a refused request gets its kind
and a one-line message).  Injection, definitions and faults are the
instrument's (:mod:`fakedebugfs.instrument`); this module only routes and
waits.
"""

from __future__ import annotations

import contextvars
import logging
import os
from typing import Callable, Optional

import trio

from fakedebugfs.version import __version__
from fakedebugfs.sources.inject import InjectError, Injector
from fakedebugfs.control.protocol import PROTOCOL_VERSION, Refused, ok, refused
from fakedebugfs.control.scenarios import ScenarioRequests, _repeat
from fakedebugfs.control.waits import WaitRequests

log = logging.getLogger(__name__)

REPEAT_RUN = 512  # events an emit fires at once between looks at the FUSE queue
PREPARE_RUN = 128  # events checked at once, likewise


# whether the connection being answered is from the server's own PID
# namespace (its owner outside any run: fakedebugfs/server/peers.py)
PEER_OWN: contextvars.ContextVar = contextvars.ContextVar("peer_own", default=True)


class ControlService(WaitRequests, ScenarioRequests):
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
            "watch": self.watch, "remount": self.remount, "admit": self.admit,
            "calls": self.calls,
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
        status["replayed"] = self.server.replayed()
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


    # --- waiting --------------------------------------------------------------------


    # Each condition is made once per wait: (holds, why_not), both callables.


    # --- process events of `run`'s command ------------------------------------------

    def admit(self, req) -> dict:
        """Let the processes of *pid*'s PID namespace use this socket (a
        ``run``'s command, a keeper's): asked only from the server's own
        namespace (:mod:`fakedebugfs.server.peers`)."""
        pid = req["pid"]
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise Refused("request", f"pid must be a process id > 0, got {pid!r}")
        if not PEER_OWN.get():
            raise Refused("request", "admit is asked from outside any run")
        try:
            self.server.peers.admit(pid)
        except OSError as err:
            raise Refused("request", f"cannot admit pid {pid}: {err}") from None
        return {"pid": pid}

    def watch(self, req) -> dict:
        """``run``: watch command *pid* (forked by *parent*, not yet exec'd)
        and inject its fork/exec/exit and context switches
        (:mod:`fakedebugfs.server.watch`)."""
        pid, parent = req["pid"], req["parent"]
        for name, value in (("pid", pid), ("parent", parent)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise Refused("request", f"{name} must be a process id > 0, got {value!r}")
        if req.get("fds") is not None:
            return self._watch_opened(req, pid, parent)
        if pid == os.getpid():  # pid 0 or -1 would be this server, or every task
            raise Refused("request", "the server does not watch itself")
        if not PEER_OWN.get():  # (a pid of this server's namespace)
            raise Refused("request", "watch is asked from outside any run")
        try:
            self.server.watch(pid, parent, str(req.get("parent_comm", "")))
        except OSError as err:
            raise Refused("watch", f"cannot watch pid {pid}: {err.strerror or err}") from None
        return {"pid": pid}

    def _watch_opened(self, req, pid: int, parent: int) -> dict:
        """``watch`` with the perf events opened by ``run``'s command init in
        the command's PID namespace (*fds*: their CPUs), sent with the proc
        of that namespace: pids are the command's, and nothing is opened
        here on a pid of another namespace."""
        cpus = req["fds"]
        if not isinstance(cpus, list) or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpus):
            raise Refused("request", "fds must be a list of CPU numbers")
        if len(self.fds) < 1 + 2 * len(cpus):
            raise Refused("request", f"fds: {1 + 2 * len(cpus)} file descriptors expected "
                                     f"(the proc, then each CPU's ring and switches)")
        taken = [self.fds.pop(0) for _ in range(1 + 2 * len(cpus))]
        proc_fd, rest = taken[0], taken[1:]
        opened = [(cpu, rest[2 * i], rest[2 * i + 1]) for i, cpu in enumerate(cpus)]
        try:
            self.server.watch(pid, parent, str(req.get("parent_comm", "")), opened,
                              f"/proc/self/fd/{proc_fd}")
        except (OSError, ValueError) as err:  # (the perf events were closed by then)
            os.close(proc_fd)
            raise Refused("watch", f"cannot watch pid {pid}: {err}") from None
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


