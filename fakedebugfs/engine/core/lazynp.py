"""numpy, imported the first time the batch path uses it.

The per-event path, a mount's start and ``fakedebugfs run`` need no numpy:
importing it costs tens of milliseconds of mount-ready time and starts its
BLAS thread pool, and ``run`` must unshare(CLONE_NEWUSER|CLONE_NEWNS) while
it has one thread.  ``from ..core.lazynp import np`` gives a stand-in whose
attributes are numpy's (a batch touches it a few times, not per event).
"""

from __future__ import annotations

import importlib


class _LazyNumpy:
    """Each numpy attribute is looked up once, then kept on the instance:
    later uses are plain attribute reads (the batch path makes hundreds per
    batch; an import_module per read cost 2 us each)."""

    def __getattr__(self, name: str):
        value = getattr(importlib.import_module("numpy"), name)
        setattr(self, name, value)
        return value


np = _LazyNumpy()
