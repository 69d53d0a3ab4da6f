"""Waiting for a fake's state (the methods of
:class:`~fakedebugfs.api.fake.Fake` of that concern; :class:`Waits` is one
of its bases): the server polls its state and answers once it holds.

:meth:`Waits.wait_consumed` waits, by default, as a recorder of
``trace_pipe_raw`` is woken by the kernel: only once a CPU's buffer is
``buffer_percent`` full, or with the ``block`` option (``trace_poll`` /
``ring_buffer_poll_wait`` and its ``full`` check), whole pages only.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any, Callable, Optional, Sequence

from fakedebugfs.api.commands import command_name
from fakedebugfs.errors import WaitTimeout

READERS_POLL = 0.2  # seconds per wait request while a reader is watched


class ReaderGone(WaitTimeout):
    """:meth:`Fake.wait_readers`: the awaited reader exited before opening the files."""


class Waits:
    """``wait_idle``, ``wait_done``, ``wait_consumed``, ``wait_readers``:
    each a ``wait`` control request through ``self.call``."""

    call: Callable[..., dict]  # Fake.call: one control request
    options: Any  # Fake.options: the MountOptions it was mounted with
    _commands: list  # Commands: (Popen, own group) started by run/popen

    def wait_idle(self, timeout: float = 30.0) -> float:
        """Wait until the workload is done, no scenario runs and every event
        is visible to readers; WaitTimeout otherwise.  Returns seconds waited."""
        return self._wait("idle", timeout)

    def wait_done(self, timeout: float = 300.0) -> float:
        """Wait until the workload reached its ``count`` and, for a fake
        mounted with ``replay=`` (the marker's too), until that replay has
        ended (it starts once a tracer enables one of its events; ReplayError
        if it failed).  Returns seconds waited; WaitTimeout otherwise."""
        start = time.monotonic()
        self._wait("done", timeout)
        if self.options.replay:
            from fakedebugfs.api.replay import follow

            left = max(0.0, timeout - (time.monotonic() - start))
            try:
                follow(self.call, 1, timeout=left)  # the mount's replay is the first
            except TimeoutError as err:
                raise WaitTimeout(f"not done after {timeout:g} s: {err}") from None
        return round(time.monotonic() - start, 6)

    def wait_consumed(self, timeout: float = 30.0, tracers: Optional[Sequence[str]] = None,
                      complete_pages: bool = True) -> float:
        """Wait until readers have taken the events in the buffers (of
        *tracers*).  By default (*complete_pages*), every whole page that
        ``trace-cmd record`` (or any poller of ``trace_pipe_raw``) takes while
        it runs: the kernel wakes it only once a CPU's buffer is
        ``buffer_percent`` full (50 by default), so fewer events than that
        stay buffered, as does the page being written, until the recorder
        stops and takes them.  ``complete_pages=False`` waits for every event, as
        a reader of ``trace_pipe`` or ``ktrace-read`` takes them."""
        args = {"complete_pages": complete_pages}
        if tracers is not None:
            args["tracers"] = list(tracers)
        return self._wait("consumed", timeout, **args)

    def wait_readers(self, path: str = "tracing/per_cpu/cpu*/trace_pipe_raw",
                     timeout: float = 30.0,
                     proc: Optional[subprocess.Popen] = None) -> float:
        """Wait until every file matching the glob *path* (relative to the
        mount) is held open by some reader: by default, until a recorder
        such as ``trace-cmd record`` reads every CPU's ``trace_pipe_raw``,
        and only that.  A tool that reads something else is waited for with
        its file: ``wait_readers(path="tracing/trace_pipe")`` for ``cat
        trace_pipe``, ``path="ktrace/buffers/cpu*"`` for a ktrace reader.
        Returns the seconds waited.  The reader is *proc*, else the
        commands of :meth:`popen` still running: once none runs,
        :class:`ReaderGone` (a WaitTimeout) is raised at once with its exit
        status, not after *timeout*."""
        watched = [proc] if proc is not None else \
            [p for p, _ in self._commands if p.poll() is None]
        if not watched:
            return self._wait("readers", timeout, path=path)
        start = time.monotonic()
        while True:
            left = timeout - (time.monotonic() - start)
            try:
                self._wait("readers", max(0.0, min(left, READERS_POLL)), path=path)
                return round(time.monotonic() - start, 6)
            except WaitTimeout as err:
                if all(p.poll() is not None for p in watched):
                    codes = ", ".join(f"{command_name(p)} exited with status {p.returncode}"
                                      for p in watched)
                    raise ReaderGone(f"the reader is gone ({codes}): {err}") from None
                if left <= READERS_POLL:
                    raise

    def _wait(self, until: str, timeout: float, **args) -> float:
        """The server waits (polling its state); the socket waits a little longer."""
        return self.call("wait", io_timeout=timeout + 10, until=until, timeout=timeout,
                         **args)["waited"]
