"""The control socket's ``wait`` request: idle, consumed, done and readers,
each a condition on the fake polled until it holds or the timeout passes."""

from __future__ import annotations

import fnmatch
import math

import trio

from fakedebugfs.control.protocol import Refused

WAIT_POLL = 0.005  # seconds between checks of a wait condition
READERS_DEFAULT = "tracing/per_cpu/cpu*/trace_pipe_raw"


class WaitRequests:
    """The ``wait`` request (a part of
    :class:`~fakedebugfs.control.service.ControlService`)."""

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
