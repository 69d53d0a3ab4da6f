"""Pushing bytes into the kernel's page cache of a mappable file.

``notify_store`` makes new content visible in existing mappings at once
(docs/fuse.md#mmap-and-the-page-cache); a file nobody has looked up yet has no cache to fill,
which is not an error.
"""

from __future__ import annotations

import logging

import pyfuse3

log = logging.getLogger(__name__)


def store_pages(inode: int, offset: int, data) -> None:
    """``notify_store`` *data* at *offset* of *inode*, ignoring absent caches."""
    try:
        pyfuse3.notify_store(inode, offset, bytes(data))
    except OSError as err:
        log.debug("notify_store(%d, %d): %s", inode, offset, err)
