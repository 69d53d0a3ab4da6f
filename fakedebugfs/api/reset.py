""":meth:`Fake.reset`: a fake back to its mount-time settings, through its
files as ``trace-cmd reset`` goes through tracefs (``tracing_on`` off,
instances removed, tracer, events, options, clock and buffer sizes written
back, buffers emptied by an ``O_TRUNC`` open of ``trace``)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

# tracing/ files whose text is kept and written back when it changed
VALUES = ("current_tracer", "buffer_subbuf_size_kb", "buffer_size_kb", "tracing_on")
CLEARED = ("set_event_pid", "set_event_notrace_pid",  # O_TRUNC empties them
           # the function tracer's, where the profile has them
           "set_ftrace_filter", "set_ftrace_notrace", "set_ftrace_pid", "set_ftrace_notrace_pid",
           "set_graph_function", "set_graph_notrace", "stack_trace_filter")
BUSY_WAIT = 5.0  # seconds an instance may stay busy (a reader closing)


def _read(path: Path):
    try:
        return path.read_text()
    except OSError:
        return None


def settings(root: Path) -> dict:
    """What :func:`apply` writes back, read from the fake at *root*."""
    t = root / "tracing"
    out = {name: _read(t / name) for name in VALUES}
    out["trace_options"] = _read(t / "trace_options")
    clock = _read(t / "trace_clock") or ""
    out["trace_clock"] = next((w[1:-1] for w in clock.split() if w.startswith("[")), None)
    out["all_events"] = _read(t / "events" / "enable") == "1\n"  # "X": some, "0": none
    out["set_event"] = [] if out["all_events"] else (_read(t / "set_event") or "").split()
    out["ktrace"] = {p.name: _read(p) for p in sorted((root / "ktrace" / "events").glob("*"))}
    out["ktrace_enabled"] = _read(root / "ktrace" / "enabled")
    out["kmemtrace_enabled"] = _read(root / "kmemtrace" / "enabled")
    return out


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _truncate(path: Path) -> None:
    if path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_TRUNC))


def _remove_function_probes(t: Path) -> None:
    """The function commands of ``set_ftrace_filter`` (an O_TRUNC keeps
    them): ``!func:command[:0]`` for each line listed, the ``:0`` taking
    the counted one."""
    listed = _read(t / "set_ftrace_filter") or ""
    for line in listed.splitlines():
        head, _, state = line.rpartition(":")
        if not head or ":mod:" in line or line.startswith("#"):
            continue
        undo = "!" + head + (":0" if state.startswith("count=") else "")
        try:
            fd = os.open(t / "set_ftrace_filter", os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, undo.encode() + b"\n")
            finally:
                os.close(fd)
        except OSError:
            pass


def _remove_instances(t: Path) -> None:
    """``rmdir instances/*``; EBUSY while a reader still holds one."""
    deadline = time.monotonic() + BUSY_WAIT
    for inst in sorted((t / "instances").iterdir()):
        while True:
            try:
                inst.rmdir()
                break
            except OSError as err:
                if err.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)


def apply(root: Path, saved: dict) -> None:
    """Write *saved* (:func:`settings`) back into the fake at *root*."""
    t = root / "tracing"
    _write(t / "tracing_on", "0")
    _remove_instances(t)
    if saved["current_tracer"] and _read(t / "current_tracer") != saved["current_tracer"]:
        _write(t / "current_tracer", saved["current_tracer"].strip())
    _truncate(t / "set_event")  # every event off (ftrace_clear_events)
    if saved["all_events"]:
        _write(t / "events" / "enable", "1")
    else:
        fd = os.open(t / "set_event", os.O_WRONLY | os.O_APPEND)
        try:
            for key in saved["set_event"]:  # one word per write, as the kernel takes it
                os.write(fd, key.encode())
        finally:
            os.close(fd)
    _remove_function_probes(t)
    for name in CLEARED:
        _truncate(t / name)
    if (t / "max_graph_depth").exists() and _read(t / "max_graph_depth") != "0\n":
        _write(t / "max_graph_depth", "0")
    if saved["trace_options"]:
        now = set((_read(t / "trace_options") or "").split())
        for word in saved["trace_options"].split():
            if word not in now:
                _write(t / "trace_options", word)
    if saved["trace_clock"]:
        _write(t / "trace_clock", saved["trace_clock"])
    for name in ("buffer_subbuf_size_kb", "buffer_size_kb"):
        if saved[name] and _read(t / name) != saved[name]:
            _write(t / name, saved[name].strip())
    _truncate(t / "trace")  # every CPU's buffer emptied
    for name, text in saved["ktrace"].items():
        path = root / "ktrace" / "events" / name
        if text is not None and _read(path) != text:
            _write(path, text.strip())
    if (root / "ktrace" / "reset").exists():
        _write(root / "ktrace" / "reset", "1")
    for path, text in ((root / "ktrace" / "enabled", saved["ktrace_enabled"]),
                       (root / "kmemtrace" / "enabled", saved["kmemtrace_enabled"])):
        if text is not None and _read(path) != text:
            _write(path, text.strip())
    if saved["tracing_on"]:
        _write(t / "tracing_on", saved["tracing_on"].strip())
