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
    __slots__ = ()

    def __getattr__(self, name: str):
        return getattr(importlib.import_module("numpy"), name)


np = _LazyNumpy()
