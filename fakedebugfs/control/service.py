"""The server's side of the control protocol (:mod:`.protocol`).

:class:`ControlService` answers one request at a time for a running mount:
it checks, then applies, and never raises (a refused request gets its kind
and a one-line message).  Injection, definitions and faults are the
instrument's (:mod:`fakedebugfs.instrument`); this module only routes and
waits.

The requests come in groups, each a base of :class:`ControlService` in a
module of its own: :mod:`.events` (``emit``, ``define``, ``calls``,
``insmod``, ``rmmod``), :mod:`.scenarios` (``scenario``), :mod:`.waits`
(``wait``) and :mod:`.run` (``admit``, ``watch``); this module keeps the
routing and the small ones (information, replays, faults, ``remount``).
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Optional

import trio

from fakedebugfs.version import __version__
from fakedebugfs.sources.inject import InjectError, Injector
from fakedebugfs.control.events import EventRequests
from fakedebugfs.control.protocol import PROTOCOL_VERSION, Refused, ok, refused
from fakedebugfs.control.run import PEER_OWN, RunRequests
from fakedebugfs.control.scenarios import ScenarioRequests
from fakedebugfs.control.waits import WaitRequests

log = logging.getLogger(__name__)

__all__ = ["ControlService", "PEER_OWN"]  # PEER_OWN: the server sets it per connection


class ControlService(EventRequests, WaitRequests, ScenarioRequests, RunRequests):
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
