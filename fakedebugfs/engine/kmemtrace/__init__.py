"""kmemtrace, the 2008 relay tracer of kmem events (seeds 003 and 004)."""

from fakedebugfs.engine.kmemtrace.tracer import Kmemtrace

__all__ = ["Kmemtrace"]
