"""Wait queues (``wait_queue_head_t``) for blocking reads and poll.

A tree's file operations wait on a queue; whoever produces data wakes it.
Waking sets the event blocked readers await and notifies every poll handle
registered since the last wake-up (``PollHandle.notify``), which makes the
kernel poll again.
"""

from __future__ import annotations

import logging

import trio

log = logging.getLogger(__name__)


class WaitQueue:
    def __init__(self):
        self._event = trio.Event()
        self._pollers: dict[int, object] = {}

    def add_poller(self, fh: int, handle) -> None:
        """Remember the newest poll handle of open file *fh*."""
        self._pollers[fh] = handle

    def forget(self, fh: int) -> None:
        self._pollers.pop(fh, None)

    async def wait(self) -> None:
        """Sleep until the next :meth:`wake`."""
        await self._event.wait()

    def wake(self) -> None:
        """``wake_up_interruptible``: release sleepers and pollers."""
        self._event.set()
        self._event = trio.Event()
        pollers, self._pollers = self._pollers, {}
        for handle in pollers.values():
            try:
                handle.notify()
            except OSError as err:  # the poller went away
                log.debug("poll notify failed: %s", err)
