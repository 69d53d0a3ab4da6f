"""The tracer engine: plain synchronous Python, no FUSE and no trio.

Ring buffers (:mod:`.ringbuffer`), the relay channel, event registries,
clocks (:mod:`.clock`), tracepoints and the binary layouts
(:mod:`.layouts`) that every view, client and test shares.
"""
