"""How fast a replay goes in the server, and how it keeps pace with readers.

As fast as possible (default), or at *speed* times the recorded pace (1 is
real time), in turns of the slicer (FUSE requests go first).  Either way
the replay keeps pace with readers: when the buffer of a CPU is full of
unread pages it waits for a reader to take some; after :data:`STALL_S`
seconds without one (:data:`IDLE_STALL_S` if no reader took anything since
the replay started) it goes on, and the ring buffer overwrites as the
kernel's does (``RB_FL_OVERWRITE``, the ``overwrite`` option) or drops.
"""

from __future__ import annotations

import time

STALL_S = 1.0  # a full buffer readers stopped taking from holds the replay this long
IDLE_STALL_S = 0.25  # ... and one no reader took anything from since the replay started
ROOM_PAGES = 2  # a CPU's buffer counts as full with fewer free pages than this


class ReplayPacing:
    """The server's pacing of a replay (a part of
    :class:`~fakedebugfs.sources.replay.replay.Replay`, which holds
    ``options``, ``kernel``, ``array``, :meth:`items` (the events to
    commit, in order), :meth:`_step` (one of them committed) and
    ``_taken0`` (the events readers had taken per CPU when it began))."""

    async def _play(self, trio, slicer) -> None:
        items = self.items()
        speed = self.options.speed
        first = None
        t0 = trio.current_time()
        ft = self.array
        pending = None
        held: dict[int, tuple] = {}  # cpu -> (events readers took, since when)
        while True:
            async with slicer.turn(slicer.WRITER) as turn:
                while True:
                    item = pending if pending is not None else next(items, None)
                    pending = None
                    if item is None:
                        return
                    cpu, ts, payload, what = item
                    if speed is not None:
                        first = ts if first is None else first
                        due = t0 + (ts - first) / 1e9 / speed
                        if due > trio.current_time():
                            pending = item
                            break
                    if payload is not None and self._full(ft.buffers[cpu], cpu, held):
                        pending = item
                        break
                    self._step(cpu, ts, payload, what)
                    if turn.over():
                        break
                self.kernel.engine.batch_done()
            if pending is None:
                continue
            if speed is not None:
                due = t0 + (pending[1] - first) / 1e9 / speed
                if due > trio.current_time():
                    await trio.sleep_until(due)
                    continue
            await trio.sleep(0.0005)  # a full buffer: readers first

    def _full(self, buf, cpu: int, held: dict) -> bool:
        """*cpu*'s buffer has no room without overwriting unread pages, and a
        reader has taken events within :data:`STALL_S` seconds (the writer's
        own overwrites do not count: ``consumed_events`` is readers' only)."""
        if buf.size - (buf.produced - buf.consumed) >= ROOM_PAGES * buf.page_size:
            return False
        now = time.monotonic()
        taken, since = held.get(cpu, (None, now))
        if taken != buf.consumed_events:
            held[cpu] = (buf.consumed_events, now)
            return True
        idle = buf.consumed_events == self._taken0[cpu]
        return now - since < (IDLE_STALL_S if idle else STALL_S)


__all__ = ["IDLE_STALL_S", "ReplayPacing", "ROOM_PAGES", "STALL_S"]
