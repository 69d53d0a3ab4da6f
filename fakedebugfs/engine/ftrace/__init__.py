"""ftrace, the tracer behind ``tracing/`` (kernel/trace/trace.c, trace_events.c)."""

from fakedebugfs.engine.ftrace.tracer import DEFAULT_BUFFER_KB, TRACE_CLOCKS, Ftrace, FtraceConfig

__all__ = ["Ftrace", "FtraceConfig", "DEFAULT_BUFFER_KB", "TRACE_CLOCKS"]
