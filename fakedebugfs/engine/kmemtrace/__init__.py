"""kmemtrace, the 2008 relay tracer of kmem events (the July and August 2008
patches; docs/kmemtrace.md)."""

from fakedebugfs.engine.kmemtrace.tracer import Kmemtrace

__all__ = ["Kmemtrace"]
