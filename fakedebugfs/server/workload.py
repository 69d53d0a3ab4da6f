"""The server's workload driver: a workload's events fired between FUSE requests.

The server is one trio loop: while a batch of the workload's events is
fired, no request is answered.  So the workload runs in turns of the
slicer (:mod:`fakedebugfs.fs.slices`: at most ``SLICE`` seconds each,
started and ended by FUSE requests waiting), in batches that last about
``batch_ms`` (:class:`BatchSize`), paced to ``rate`` events/s (0: flat
out).  On the kernel the events are made on other CPUs than the one a
tracing tool's ``write(2)`` runs on; here they are made as the loop finds
time, so:

* a request that comes during a batch waits for the batch's end: batches
  are kept near ``batch_ms``, and the readers' wake-up that follows every
  ``WAKE_EVERY`` (0.6 ms on average with 32 readers, up to several) is a
  turn of its own, so a request waits for one or the other, not both;
* a paced workload owes events between its batches: a write to a control
  file first fires what it owes until now (:meth:`WorkloadDriver.catch_up`),
  so that ``echo 1 > tracing_on; ls; echo 0 > tracing_on`` records what the
  simulated machine did meanwhile, as the kernel would; while no probe
  listens to any tracepoint (nothing enabled: what it fired would be
  recorded nowhere) a write does not wait for that, and the owed events
  come in the workload's next turn;
* control requests go first: a paced workload's turn waits for a tool's sweep
  of the tree to end (:meth:`~fakedebugfs.fs.slices.Slicer.quiet`), and it
  catches up after it in time, at most a second behind: what it owes
  beyond that is not generated and is counted (``skipped``, the status's
  ``workload_skipped``), never lost unsaid.
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Callable, Optional

import trio

from fakedebugfs.engine.core.tracepoint import Tracepoint
from fakedebugfs.fs.slices import slicer

log = logging.getLogger(__name__)

TICK = 0.002  # seconds between workload batches
GATHER = 0.01  # a paced workload waits up to this for its batch path's least run
WAKE_EVERY = 0.005  # seconds between wake-ups of readers while the workload runs
BATCH_MS = 1.2  # --batch-ms (api/options.py shows the same default)
IMPORT_AFTER = 0.05  # seconds after mounting before a workload's modules load
CATCH_UP_MOST = 0.02  # seconds of owed events a write fires first, at most
CATCH_UP_WORK = 0.01  # ... in at most this long (the write waits for it)


class WorkloadDriver:
    """Fires workload *wl* into *engine* (``--rate``: *rate* events/s, 0
    flat out; ``--batch-ms``); *release* gives the heap's free pages back
    at its end."""

    def __init__(self, wl, engine, rate: float = 0, batch_ms: float = BATCH_MS,
                 release: Optional[Callable[[], None]] = None):
        self.wl, self.engine = wl, engine
        self.rate, self.batch_ms = rate, batch_ms
        self.release = release
        self.start = None  # trio time of the first event (None: not started)
        self.fired = 0  # events fired (or skipped, after falling behind) since start
        self.skipped = 0  # of which skipped: owed more than a second, never generated
        self._listened, self._listened_at = False, None  # listened()'s answer, and when
        self.woken, self.last_wake = 0, 0.0
        self.last_fire = 0.0
        self.size = BatchSize(wl, batch_ms)
        self.least = max(1, getattr(wl, "batch_min", 1))  # smaller runs go one by one
        self.blocks = None  # BlockMaker, once started

    async def run(self) -> None:
        """Fire the workload until it is done, in turns of the slicer, in
        batches that last about ``batch_ms``.  Readers are woken (the
        ktrace pages published) every ``WAKE_EVERY`` seconds and before a
        pause: a wake-up per turn would split the page stores into many
        small ones, each waiting for the GIL.  A workload naming
        ``imports`` (kmem: numpy) starts IMPORT_AFTER seconds after the
        mount, its modules loaded in a worker thread: a new mount answers
        its first requests first."""
        wl, engine = self.wl, self.engine
        imports = getattr(wl, "imports", ())
        if imports:  # numpy: ~60 ms, a new mount's first requests answered first
            await trio.sleep(IMPORT_AFTER)
        for module in imports:  # in a thread: the loop answers meanwhile (GIL_SWITCH)
            await trio.to_thread.run_sync(importlib.import_module, module)
        self.start = self.last_wake = self.last_fire = trio.current_time()
        self.blocks = BlockMaker(wl, paced=bool(self.rate))
        while not wl.done:
            await self.blocks.ready()
            due = None
            if self.rate:
                due = self.owed()
                if due <= 0 or (due < self.least
                                and trio.current_time() - self.last_fire < GATHER):
                    if self.fired != self.woken:
                        self.wake()
                    await trio.sleep(TICK)
                    continue
            if self.rate:  # a tool's sweep first (flat out: all the loop gives)
                await slicer.quiet()
            async with slicer.turn(slicer.WRITER) as turn:
                if self.rate:  # (what is owed now, after the wait; none in a
                    # hist read's instant that began meanwhile: Slicer.hold)
                    due = self.owed() if slicer.held <= time.perf_counter() else 0
                self.fired += fire_until(wl, due, turn.over, self.size)
                self.last_fire = trio.current_time()
            if self.last_fire - self.last_wake >= WAKE_EVERY:
                async with slicer.turn(slicer.WRITER):  # requests waiting go first
                    self.wake()
        engine.batch_done()
        if self.release is not None:
            self.release()  # the last batches' arrays
        log.info("workload %s done: %d events", wl.name, wl.emitted)

    def owed(self) -> int:
        """How many events the paced workload owes until now (at most a
        second's: one fallen behind by more skips the rest, no burst)."""
        due = int((trio.current_time() - self.start) * self.rate) - self.fired
        if due > self.rate:
            skip = due - int(self.rate)
            self.fired += skip
            self.skipped += skip
            due = int(self.rate)
        return due

    def listened(self) -> bool:
        """Whether a probe is attached to any tracepoint (what an event
        fired now would be recorded by); kept until a probe comes or goes
        (``Tracepoint.changes``, where the kernel flips a static key)."""
        if self._listened_at != Tracepoint.changes:
            self._listened_at = Tracepoint.changes
            self._listened = any(tp.probes for tp in dict.values(self.engine.tracepoints))
        return self._listened

    def catch_up(self) -> int:
        """Before a write to a file: fire what the paced workload owes
        until now (at most ``CATCH_UP_MOST`` seconds' worth, in at most
        ``CATCH_UP_WORK``, its blocks permitting), as the simulated machine
        did it before the write; returns how many (the rest stays owed).
        Nothing for a workload flat out, not started or done, nor while no
        probe listens (what it fired would be recorded nowhere: the owed
        events come in the next turn, after the write, as a machine a
        little late)."""
        if not self.rate or self.start is None or self.wl.done or not self.listened():
            return 0
        due = min(self.owed(), int(self.rate * CATCH_UP_MOST))
        end = time.perf_counter() + CATCH_UP_WORK
        fired = fire_until(self.wl, due, lambda: time.perf_counter() >= end, self.size,
                           adapt=False)
        if fired:
            self.fired += fired
            self.last_fire = trio.current_time()
            self.wake()
        return fired

    def wake(self) -> None:
        """Readers woken: the ktrace pages published, pollers notified."""
        self.engine.batch_done()
        self.woken, self.last_wake = self.fired, trio.current_time()


class BlockMaker:
    """Makes a workload's blocks of events ahead, in slicer turns between
    requests, for a workload that can (``start_prefetch``, ``wants_block``,
    ``block_steps``: the kmem workload, whose blocks take 7-40 ms to make
    at once, which FUSE requests would wait for; its steps take a few)."""

    def __init__(self, wl, paced: bool = False):
        self.wl = wl
        self.paced = paced  # its turns wait for a tool's sweep (Slicer.quiet)
        self.steps = None  # the block being made
        self.on = hasattr(wl, "start_prefetch")
        if self.on:
            wl.start_prefetch()

    async def ready(self) -> None:
        """Take the making of the next block a turn further; until it is
        made, turn after turn if the workload has nothing left to fire."""
        if not self.on:
            return
        while True:
            if self.steps is None:
                if not self.wl.wants_block():
                    return
                self.steps = self.wl.block_steps()
            if self.paced:
                await slicer.quiet()
            async with slicer.turn(slicer.WRITER) as turn:
                for _ in self.steps:
                    if turn.over():
                        break
                else:
                    self.steps = None
            if not self.wl.exhausted():
                return


class BatchSize:
    """How many events the workload fires at once between looks at the
    FUSE queue: up to its ``batch_hint`` (the batch path's best size; 16
    without one).  A request that arrives during a batch waits for its
    end, so batches are kept near *batch_ms* milliseconds (``--batch-ms``).

    After each full batch the size is scaled by how far its time was from
    *batch_ms* (the square root of the ratio, so that one slow batch, a
    request served in between or the collector, moves it only part of the
    way): with a batch costing ``a + b n`` seconds this settles where a
    batch takes *batch_ms*, whatever the workload's rate.  (Halving after
    a slow batch, as before, sent a workload that had fallen behind down
    to the per-event path, slower per event, and kept it there.)"""

    FIRST, LEAST = 512, 16

    def __init__(self, wl, batch_ms: float):
        self.most = max(self.LEAST, int(getattr(wl, "batch_hint", 0) or 0))
        self.n = min(self.most, self.FIRST)
        self.slow = batch_ms / 1000

    def update(self, fired: int, seconds: float) -> None:
        if fired < self.n:  # a budget or the count cut it short: says nothing
            return
        scale = (self.slow / max(seconds, 1e-6)) ** 0.5
        self.n = max(self.LEAST, min(self.most, int(self.n * min(scale, 2.0))))


def even_share(left: int, most: int) -> int:
    """The next run of *left* events split into equal runs of at most
    *most*: 600 in runs of 512 are two of 300, not 512 and a tail of 88
    small enough for the workload's slower one-by-one path."""
    return -(-left // -(-left // most))


def fire_until(wl, budget: Optional[int], over: Callable[[], bool], size: BatchSize,
               adapt: bool = True) -> int:
    """Run workload *wl* in batches of *size* until *over()* (the slicer's
    turn, or a write's catch-up time), *budget* events (None: no limit) or
    its ``--count``; returns how many it fired.  *adapt*: each batch's time
    resizes *size* (a write's catch-up leaves it as the slicer's turns
    made it)."""
    fired = 0
    while not wl.done and (budget is None or fired < budget):
        n = size.n if budget is None else even_share(budget - fired, size.n)
        start = time.perf_counter()
        got = wl.run(n)
        if adapt:
            size.update(got, time.perf_counter() - start)
        fired += got
        if not got:  # waiting for its next block (BlockMaker)
            break
        if over():
            break
    return fired
