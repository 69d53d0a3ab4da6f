"""Trace clocks.

The kernel stamps every event with its trace clock ("local" by default, a
nanosecond count close to CLOCK_MONOTONIC).  :class:`MonotonicClock` is that;
:class:`VirtualClock` is a deterministic clock that only moves when a
workload advances it, so a given seed yields byte-identical buffers.
"""

from __future__ import annotations

import time


class MonotonicClock:
    """Nanoseconds of CLOCK_MONOTONIC, like the kernel's ``local`` clock."""

    name = "local"
    deterministic = False

    def now(self) -> int:
        return time.monotonic_ns()

    def advance(self, ns: int) -> None:
        """Real time advances by itself; workloads' advances are ignored."""


class VirtualClock:
    """A clock that starts at *start* ns and moves only by :meth:`advance`."""

    name = "local"
    deterministic = True

    def __init__(self, start: int = 1_000_000_000):
        self._now = start

    def now(self) -> int:
        return self._now

    def advance(self, ns: int) -> None:
        self._now += max(0, int(ns))


def make_clock(kind: str):
    """The clock named by the ``--clock`` option: ``monotonic`` or ``virtual``."""
    if kind == "monotonic":
        return MonotonicClock()
    if kind == "virtual":
        return VirtualClock()
    raise ValueError(f"unknown clock {kind!r} (monotonic, virtual)")
