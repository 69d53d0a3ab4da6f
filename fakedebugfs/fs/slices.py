"""Long work in short slices that never keep a FUSE request waiting.

The server is one trio loop: while the workload fires events or a reader's
text is formatted, no request is answered.  So every piece of long work (the
workload, ``trace`` and ``trace_pipe`` formatting) runs in *turns*:

* one turn at a time, so the loop's batches hold at most one slice of long
  work and short requests (``tracing_on``) get through between; turns
  alternate between the writer (the workload) and the readers;
* a turn starts only when no FUSE request is waiting to be read from
  ``/dev/fuse`` (checked with a zero-timeout poll), or when it has waited
  ``MAX_DEFER`` for that, so a steady stream of requests cannot starve it;
* a turn lasts ``SLICE`` seconds at most, and ends early when a request
  arrives after its first ``MIN_WORK`` seconds: the worker asks
  :meth:`Turn.over` between small steps (it polls ``/dev/fuse`` at most
  every ``POLL_EVERY`` seconds).

This is what keeps the kernel's promise that a control write does not wait
for the tracer: there, writers and readers run on other CPUs.

Control requests go first.  A tool's sweep of the tree (``trace-cmd
stat``, ``reset``, ``perf list``: thousands of LOOKUP, OPEN, READ and
RELEASE in a row) leaves ``/dev/fuse`` empty only for the tool's own turn
between two requests (10-30 us), long enough for a turn to start and keep
the next request waiting.  So the background sources (the workload, the
mirror's drain) wait for the sweep to end first (:meth:`Slicer.quiet`: no
control request, a lookup, getattr, open, write or opendir, for ``QUIET``
seconds, or ``QUIET_MOST`` at most), without holding the turn meanwhile,
and catch up afterwards: a paced workload fires what it owes then
(server/workload.py; one flat out, ``--rate 0``, does not wait: it was
asked for all the loop can give).  Reads of the data files
(``trace_pipe_raw``...) do not count: a recorder must not hold up the
events it reads.
"""

from __future__ import annotations

import os
import select
import time
from collections import deque
from contextlib import asynccontextmanager

import trio

SLICE = 0.001  # seconds of long work per turn
MAX_DEFER = 0.02  # a turn waits at most this long for the request queue to empty
MIN_WORK = 0.0002  # a turn works this long before a waiting request ends it
POLL_EVERY = 0.0001  # seconds between looks at /dev/fuse during a turn
QUIET = 0.002  # a background turn waits for this long without a control request ...
QUIET_MOST = 0.02  # ... for at most this long (a tool sweeping for seconds)


class Turn:
    """One turn of long work: :meth:`over` says when to stop."""

    __slots__ = ("slicer", "deadline", "next_poll")

    def __init__(self, slicer: "Slicer", seconds: float):
        now = time.perf_counter()
        self.slicer = slicer
        self.deadline = now + seconds
        self.next_poll = now + MIN_WORK

    def over(self) -> bool:
        """The slice is used up, or a FUSE request is waiting."""
        now = time.perf_counter()
        if now >= self.deadline:
            return True
        if now < self.next_poll:
            return False
        self.next_poll = now + POLL_EVERY
        return self.slicer.pending()


class Slicer:
    """Turns of long work, one at a time, alternating between the writer
    (the workload) and the readers (FIFO among them), so that neither
    starves the other however many readers there are."""

    WRITER, READER = "writer", "reader"

    def __init__(self, slice_s: float = SLICE, max_defer: float = MAX_DEFER):
        self.slice_s = slice_s
        self.max_defer = max_defer
        self._busy = False
        self._waiting = {self.WRITER: deque(), self.READER: deque()}
        self._poll: select.poll | None = None
        #: perf_counter() of the last control request (fs/fastpath.py sets it)
        self.last_control = 0.0
        self.quiet_s, self.quiet_most = QUIET, QUIET_MOST
        #: perf_counter() until which background turns wait, beside the
        #: quiet (:meth:`hold`)
        self.held = 0.0

    def attach(self, fd: int | None = None) -> None:
        """Watch the FUSE device *fd* (default: this process's ``/dev/fuse``)."""
        if fd is None:
            fd = fuse_fd()
        self._poll = None
        if fd is not None:
            self._poll = select.poll()
            self._poll.register(fd, select.POLLIN)

    def pending(self) -> bool:
        """A request is waiting in ``/dev/fuse`` for the loop to read it."""
        return self._poll is not None and bool(self._poll.poll(0))

    def hold(self, until: float) -> None:
        """Background turns wait until perf_counter() reaches *until* (a few
        milliseconds ahead: the instant of an event's ``hist`` read,
        trees/tracing_hist.py), whatever the quiet says."""
        self.held = max(self.held, until)

    async def quiet(self) -> None:
        """Wait until no control request has come for ``quiet_s`` seconds
        (at most ``quiet_most``), and past a :meth:`hold`: a background
        source's turn comes after a tool's sweep, not inside it.  The loop
        sleeps meanwhile, so the requests are answered at the pace of a
        mount without a workload.  A checkpoint always."""
        now = time.perf_counter()
        give_up = now + self.quiet_most
        while True:
            wait = max(min(self.last_control + self.quiet_s, give_up), self.held) - now
            if wait <= 0:
                break
            await trio.sleep(wait)
            now = time.perf_counter()
        await trio.lowlevel.checkpoint()

    @asynccontextmanager
    async def turn(self, kind: str = READER):
        """Wait for a turn; yields the :class:`Turn` whose ``over()`` the
        work asks between steps.  Leaving the block hands the turn on."""
        await self._acquire(kind)
        try:
            give_up = time.perf_counter() + self.max_defer
            while self.pending() and time.perf_counter() < give_up:
                await trio.sleep(0)
            yield Turn(self, self.slice_s)
        finally:
            self._release(kind)
        await trio.lowlevel.checkpoint()

    async def _acquire(self, kind: str) -> None:
        if not self._busy:
            self._busy = True
            await trio.lowlevel.checkpoint()  # a turn is always a checkpoint
            return
        handed = trio.Event()
        self._waiting[kind].append(handed)
        try:
            await handed.wait()
        except BaseException:
            if handed.is_set():  # the turn came with the cancellation: pass it on
                self._release(kind)
            else:
                self._waiting[kind].remove(handed)
            raise

    def _release(self, kind: str) -> None:
        other = self.READER if kind == self.WRITER else self.WRITER
        queue = self._waiting[other] or self._waiting[kind]
        if queue:
            queue.popleft().set()  # still busy: the turn is handed over
        else:
            self._busy = False


def fuse_fd() -> int | None:
    """The descriptor of ``/dev/fuse`` this process serves (pyfuse3 keeps
    it to itself)."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in fds:
        try:
            if os.readlink(f"/proc/self/fd/{name}") == "/dev/fuse":
                return int(name)
        except OSError:
            continue
    return None


#: The server's one slicer: the workload and the readers' formatting share it.
slicer = Slicer()

