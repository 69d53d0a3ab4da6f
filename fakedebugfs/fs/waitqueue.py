"""Wait queues (``wait_queue_head_t``) for blocking reads and poll.

A tree's file operations wait on a queue; whoever produces data wakes it.
Waking sets the event blocked readers await and notifies every poll handle
registered since the last wake-up (``PollHandle.notify``), which makes the
kernel poll again.
"""

from __future__ import annotations

import errno
import logging
import weakref

import trio

log = logging.getLogger(__name__)

_queues: "weakref.WeakSet[WaitQueue]" = weakref.WeakSet()
_shutting_down = False


def shutdown() -> None:
    """The server is going away: every sleeper gets EINTR now, so no FUSE
    request stays in flight and the request loop can end."""
    global _shutting_down
    _shutting_down = True
    for queue in list(_queues):
        queue.wake()


class WaitQueue:
    def __init__(self):
        self._event = trio.Event()
        self._pollers: dict[int, object] = {}
        _queues.add(self)

    def add_poller(self, fh: int, handle) -> None:
        """Remember the newest poll handle of open file *fh*."""
        self._pollers[fh] = handle

    def forget(self, fh: int) -> None:
        self._pollers.pop(fh, None)

    async def wait(self) -> None:
        """Sleep until the next :meth:`wake` (EINTR when the server stops)."""
        if not _shutting_down:
            await self._event.wait()
        if _shutting_down:
            raise OSError(errno.EINTR, "file system shutting down")

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
