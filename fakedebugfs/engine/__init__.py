"""The tracer engine: plain synchronous Python, no FUSE and no trio.

    core/       what every tracer shares: the binary layouts (construct,
                beside the kernel structs they mirror), per-CPU ring buffers,
                clocks, tracepoints, kallsyms, the tracepoint catalogue, GFP names
    ftrace/     the tracer behind tracing/ (kernel/trace/trace*.c): events,
                formats, filters, text output, the 2.6.29 kmemtrace plugin
    ktrace/     the 2009 ktrace RFC's tracer (docs/ktrace.md)
    kmemtrace/  the 2008 kmemtrace relay tracer (docs/kmemtrace.md)

Each tracer package exports its tracer class; the core imports no tracer.
"""
