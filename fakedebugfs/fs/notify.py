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
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Optional

import pyfuse3

log = logging.getLogger(__name__)

DRAIN_TIMEOUT = 2.0  # seconds close() waits for what is queued


class EntryInvalidations:
    """A queue of ``(parent inode, name, deleted inode)`` sent in order by
    one daemon thread, started at the first; ENOENT (the kernel never
    looked the name up, or has dropped it) is not an error."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def put(self, parent: int, name: bytes, deleted: int) -> None:
        if self._closed:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._send, name="invalidate", daemon=True)
            self._thread.start()
        self._queue.put((parent, name, deleted))

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
