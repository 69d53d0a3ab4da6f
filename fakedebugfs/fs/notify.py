"""Entry invalidations sent to the kernel from a thread of their own.

``FUSE_NOTIFY_DELETE`` (``invalidate_entry``) can wait in the kernel for a
directory's lock that a client holds while its request waits for this
server, so it is never sent from the loop that answers requests; pyfuse3's
``invalidate_entry_async`` does the same from a thread of pyfuse3's.  This
one is ours so that the server can drain and stop it before
``pyfuse3.close()`` destroys the session: pyfuse3's thread goes on with
what is queued after that (logging an EINVAL traceback for each node a
test removed just before closing, and calling into a session being
freed).

A request whose file operation removed nodes (a ``-:NAME`` written to
``kprobe_events``, an ``O_TRUNC`` open of ``dynamic_events``) is answered
only once their invalidations are sent (:meth:`EntryInvalidations.settled`,
awaited while the loop goes on serving; an answer the fast path made is
handed to the async handler for that): on the kernel the directory is
gone when the write returns, and a ``test -d`` right after it must not
find the kernel's cached entry.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Optional

import pyfuse3
import trio

log = logging.getLogger(__name__)

DRAIN_TIMEOUT = 2.0  # seconds close() waits for what is queued
SETTLE_TIMEOUT = 1.0  # seconds a request waits for the invalidations it caused
SETTLE_POLL = 0.0005  # seconds between looks at what the thread has sent


class EntryInvalidations:
    """A queue of ``(parent inode, name, deleted inode)`` sent in order by
    one daemon thread, started at the first; ENOENT (the kernel never
    looked the name up, or has dropped it) is not an error."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self.queued = 0  # items put so far
        self.sent = 0  # items the thread is done with (sent, or failed)

    def put(self, parent: int, name: bytes, deleted: int) -> None:
        if self._closed:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._send, name="invalidate", daemon=True)
            self._thread.start()
        self.queued += 1
        self._queue.put((parent, name, deleted))

    async def settled(self, upto: int, timeout: float = SETTLE_TIMEOUT) -> None:
        """Wait (serving on) until the first *upto* items put are sent; at
        most *timeout* seconds, as a notification can wait in the kernel
        for a directory lock a client holds."""
        if self.sent >= upto or self._closed:
            return
        with trio.move_on_after(timeout):
            while self.sent < upto and not self._closed:
                await trio.sleep(SETTLE_POLL)

    def close(self, timeout: float = DRAIN_TIMEOUT) -> bool:
        """Send what is queued, then stop; False if the thread is still
        waiting in the kernel after *timeout* seconds."""
        self._closed = True
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        self._queue.put(None)
        thread.join(timeout)
        return not thread.is_alive()

    def _send(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                pyfuse3.invalidate_entry(*item)
            except FileNotFoundError:
                pass
            except OSError as err:
                log.debug("invalidate_entry %r: %s", item[1], err)
            finally:
                self.sent += 1
