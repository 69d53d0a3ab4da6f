"""The engine core: layouts, ring buffers, clocks, tracepoints, kallsyms."""
