"""Readers of real recordings, usable without a mount: trace-cmd's trace.dat
(versions 6 and 7) and raw captures of ``trace_pipe_raw`` pages.

::

    from fakedebugfs.sources.replay import open_recording
    rec = open_recording("trace.dat")          # or a raw capture directory
    for ev in rec.events():                    # merged by timestamp
        if ev.lost: ...                        # LostEvents(cpu, ts, count)
        else: rec.decode(ev)                   # {field: value} with the file's formats

Everything is validated when the recording is opened: a corrupt or
truncated file raises :class:`ReplayFormatError` before any event is seen.
"""

from __future__ import annotations

import os

from fakedebugfs.sources.replay.errors import ReplayFormatError
from fakedebugfs.engine.ftrace.formatfile import EventFormat, Field, parse_format
from fakedebugfs.sources.replay.recording import Buffer, CpuData, Event, LostEvents, Recording

__all__ = [
    "Buffer", "CpuData", "Event", "EventFormat", "Field", "LostEvents", "Recording",
    "ReplayFormatError", "open_recording", "parse_format", "read_rawcapture", "read_tracedat",
]


def read_tracedat(path, name: str | None = None) -> Recording:
    """Read and validate a trace.dat (v6 or v7); see :mod:`.tracedat`."""
    from fakedebugfs.sources.replay.tracedat import read_tracedat as read  # lazily: `python -m ….tracedat` runs it

    return read(path, name)


def read_rawcapture(path, endian: str | None = None, page_size: int | None = None,
                    name: str | None = None) -> Recording:
    """Read and validate a raw capture directory or tar; see :mod:`.rawcapture`."""
    from fakedebugfs.sources.replay.rawcapture import read_rawcapture as read

    return read(path, endian=endian, page_size=page_size, name=name)


def open_recording(path, name: str | None = None) -> Recording:
    """A trace.dat file or a raw capture directory (or ``.tar``/``.tar.gz`` of
    one).  *name*: what messages call it, and whose ending tells a tar
    (default: *path*; the server reads a client's file as ``/proc/self/fd/N``)."""
    path = os.fspath(path)
    label = name or path
    if os.path.isdir(path) or label.endswith((".tar", ".tar.gz", ".tgz")):
        return read_rawcapture(path, name=name)
    return read_tracedat(path, name)
