"""ktrace, the tracer of the 2009 ktrace RFC (docs/ktrace.md)."""

from fakedebugfs.engine.ktrace.tracer import DEFAULT_BUF_SIZE, Ktrace

__all__ = ["Ktrace", "DEFAULT_BUF_SIZE"]
