"""A recording's events and metadata made the fake's, before it is replayed.

* Each event format of the recording becomes a tracefs event of the fake
  with the recording's layout: an event the fake does not have is created
  (``events/<system>/<name>/``, its ``format`` the recording's text, the
  recording's ID when the fake has not given it to another event, as
  ``trace_add_event_call`` registers a dynamic event); an event the fake has
  with the same format (ID aside) is used as it is; one whose format differs
  takes the recording's fields and print fmt, and says so once.
* Each recorded event id maps to a :class:`Target`: the fake's event, the
  ``common_type`` to write when the ids differ, and the format to swap the
  payload's byte order with when the recording's endianness is not ours.
* ``saved_cmdlines``, ``/proc/kallsyms`` (``Engine.kallsyms``), the
  printk formats and the trace clock of the recording become the fake's.

Plain synchronous Python on the engine's objects (no FUSE, no trio).
"""

from __future__ import annotations

import logging
import re
import struct
import sys
from dataclasses import dataclass, field
from typing import Optional

from fakedebugfs.engine.ftrace.events import EventType, field_key, next_event_type
from fakedebugfs.engine.ftrace.printfmt import PrintFmtError, compile_print_fmt
from fakedebugfs.engine.ftrace.tracer import TRACE_CLOCKS
from fakedebugfs.engine.ftrace.formatfile import EventFormat
from fakedebugfs.sources.replay.recording import Recording

log = logging.getLogger(__name__)

_ID_LINE = re.compile(r"^ID: *\d+ *$", re.M)
_DECL = re.compile(r"^\s*field:\s*(?P<decl>[^;]*);\s*offset:\s*(?P<off>\d+);\s*size:\s*(?P<size>\d+);"
                   r"(?:\s*signed:\s*(?P<signed>\d+);)?")
_LAST_NAME = re.compile(r"(?P<name>[A-Za-z_]\w*(?:\s*\[[^\]]*\])?)\s*$")
HOST_ENDIAN = sys.byteorder


@dataclass
class RecordedEvent(EventType):
    """An :class:`EventType` made from a recording's ``format`` file: its
    ``format`` is the recording's text with the fake's ID."""

    text: str = ""

    def format(self) -> str:
        return _ID_LINE.sub(f"ID: {self.id}", self.text, count=1)


@dataclass
class Target:
    """Where the events of one recorded id go."""

    key: str  # "system:event" in the fake
    etype: EventType
    common_type: Optional[bytes]  # to write at offset 0 when the ids differ
    swap: Optional[EventFormat]  # swap the byte order with this format
    always: bool  # an ftrace entry: recorded whenever tracing is on, not per event


@dataclass
class Installed:
    """What :func:`install` did: targets by recorded id, and what it says."""

    targets: dict = field(default_factory=dict)  # recorded id -> Target
    created: list = field(default_factory=list)  # keys made from the recording
    adopted: list = field(default_factory=list)  # the fake's events given the file's layout
    notes: list = field(default_factory=list)  # one line each, also logged


def selected(key: str, patterns) -> bool:
    """``--events``: *key* matches one of ``system``, ``system:*``,
    ``system:event`` or ``*:event`` (all when *patterns* is empty)."""
    if not patterns:
        return True
    system, _, name = key.partition(":")
    for pat in patterns:
        psys, _, pname = pat.partition(":")
        if psys in ("", "*", system) and pname in ("", "*", name):
            return True
    return False


def install(kernel, rec: Recording, patterns=(), metadata: bool = True) -> Installed:
    """Make the formats of *rec* (those *patterns* select) and, with
    *metadata*, its cmdlines, kallsyms, printk formats and clock the fake's."""
    out = Installed()
    ft = kernel.ftrace
    swap = rec.endian != HOST_ENDIAN
    for key, fmt in sorted(rec.formats.items(), key=lambda kv: kv[1].id):
        if not selected(key, patterns):
            continue
        etype = _event_for(ft, fmt, out)
        if etype is None:
            continue
        common = None if etype.id == fmt.id else struct.pack("<H", etype.id)
        out.targets[fmt.id] = Target(etype.key, etype, common, fmt if swap else None,
                                     etype.system == "ftrace")
    if metadata:
        _metadata(kernel, rec, out)
    return out


def _note(out: Installed, text: str) -> None:
    log.warning("replay: %s", text)
    out.notes.append(text)


def _normal(text: str) -> str:
    return "\n".join(line.rstrip() for line in _ID_LINE.sub("ID: 0", text).strip().splitlines())


def _event_for(ft, fmt: EventFormat, out: Installed) -> Optional[EventType]:
    """The fake's event for *fmt*: its own, adopted or created."""
    old = ft.events.get(fmt.key)
    if old is not None:
        if _normal(old.format()) == _normal(fmt.text):
            return old
        if old.system == "ftrace":
            _note(out, f"{fmt.key}: the recording's format differs from the fake's own "
                       "ftrace entry; its events are not replayed")
            return None
        try:
            _adopt(ft, old, fmt)
        except (ValueError, PrintFmtError, struct.error) as err:
            _note(out, f"{fmt.key}: the recording's format cannot be used ({err}); "
                       "its events are not replayed")
            return None
        out.adopted.append(fmt.key)
        _note(out, f"{fmt.key}: the recording's format differs from the fake's; "
                   "the recording's layout is used")
        return old
    if fmt.system == "ftrace":
        _note(out, f"{fmt.key}: the fake has no such ftrace entry; its events are not replayed")
        return None
    try:
        etype = _create(ft, fmt)
    except (ValueError, PrintFmtError, struct.error) as err:
        _note(out, f"{fmt.key}: cannot define the event from the recording ({err}); "
                   "its events are not replayed")
        return None
    out.created.append(fmt.key)
    return etype


def recorded_fields(fmt: EventFormat) -> tuple:
    """``(c type, name, offset, size, signed)`` of the non-common fields of
    *fmt*, as the ``format`` file prints them (``char comm[16]``,
    ``__data_loc char[] name``), by offset: the tuples :class:`EventType` takes."""
    fields = []
    for line in fmt.text.splitlines():
        m = _DECL.match(line)
        if not m:
            continue
        decl = m["decl"].strip()
        nm = _LAST_NAME.search(decl)
        if not nm:
            raise ValueError(f"no field name in {decl!r}")
        name = re.sub(r"\s+", "", nm["name"])
        if name.startswith("common_"):
            continue
        ctype = decl[:nm.start()].strip()
        fields.append((ctype, name, int(m["off"]), int(m["size"]), int(m["signed"] or 0)))
    return tuple(sorted(fields, key=lambda f: f[2]))  # EventType packs them in offset order


def _layout(fmt: EventFormat) -> dict:
    """The :class:`EventType` arguments for *fmt*'s layout."""
    fields = recorded_fields(fmt)
    dyn = tuple(field_key(n) for c, n, *_ in fields if c.startswith("__data_loc"))
    arrays = tuple(field_key(n) for c, n, *_ in fields
                   if c.startswith("__data_loc") and not re.match(r"__data_loc\s+(const\s+)?"
                                                                  r"(unsigned\s+)?char\b", c))
    return dict(fields=fields, print_fmt=fmt.print_fmt, show=_show(fmt.print_fmt, fields),
                dyn=dyn, dyn_arrays=arrays)


def _show(print_fmt: str, fields: tuple):
    """The event's text in the fake's own ``trace`` files: its print fmt
    interpreted, or its fields ``name=value`` when the interpreter cannot."""
    try:
        pf = compile_print_fmt(print_fmt, fields)
    except (PrintFmtError, ValueError, KeyError, TypeError):
        pf = None
    names = [field_key(n) for _, n, *_ in fields]

    def show(rec, out):
        if pf is not None:
            try:
                return pf.render(rec, out)
            except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError):
                pass
        return " ".join(f"{n}={rec.get(n)!r}" if isinstance(rec.get(n), (bytes, str))
                        else f"{n}={rec.get(n)}" for n in names)
    return show


def _encoder(names: tuple, dyn: tuple, previous=None):
    """Tracepoint values -> field values for a replayed event's probe (the
    fake's own firings of an adopted event: fields by name, missing ones 0)."""
    def encode(values) -> dict:
        given = previous(values) if previous else dict(zip(names, values))
        return {n: given.get(n, "" if n in dyn else 0) for n in names + dyn}
    return encode


def _create(ft, fmt: EventFormat) -> EventType:
    """A new event from the recording (``trace_add_event_call``): the file's
    id when free, else the one after the highest."""
    event_id = fmt.id if fmt.id not in ft.by_id else next_event_type(ft.by_id)
    etype = RecordedEvent(fmt.system, fmt.name, event_id, text=fmt.text, **_layout(fmt))
    etype.encode_values = _encoder(etype.names, etype.dyn)
    # on every instance too; the engine's tracepoint is made when it has none
    # (one it has already is other tracers' view of the event: kept)
    ft.add_event(etype)
    return etype


def _adopt(ft, ev: EventType, fmt: EventFormat) -> None:
    """The fake's event *ev* takes the recording's fields and print fmt, in
    place (its directory stays; ``format`` shows the new layout); the
    fake's own firings of it fill the fields they share by name."""
    layout = _layout(fmt)
    previous = ev.encode_values or (lambda values, names=ev.names: dict(zip(names, values)))

    def change() -> None:
        for name, value in layout.items():
            setattr(ev, name, value)
        ev.size, ev.data_offset = 0, None
        ev.__post_init__()
        ev.encode_values = _encoder(ev.names, ev.dyn, previous)
    ft.retype_event(ev, change)  # in every trace array


def _metadata(kernel, rec: Recording, out: Installed) -> None:
    """cmdlines, kallsyms, printk formats and clock of *rec* become the fake's."""
    engine, ft = kernel.engine, kernel.ftrace
    for pid, comm in rec.cmdlines.items():
        if pid > 0:
            engine.set_comm(pid, comm)
    if rec.kallsyms.strip():
        engine.kallsyms.load_text(rec.kallsyms)
    ft.printk_formats = rec.printk_formats
    clock = next((b.clock for b in rec.buffers if b.clock), None) or rec.options.get("traceclock")
    if isinstance(clock, str):
        m = re.search(r"\[([\w-]+)\]", clock)
        clock = m.group(1) if m else clock.strip()
        if clock in TRACE_CLOCKS and clock != ft.clock:
            ft.set_clock(clock)  # resets the buffers, as writing trace_clock does
        elif clock not in TRACE_CLOCKS:
            _note(out, f"trace clock {clock!r} of the recording is not one the fake has; "
                       f"the fake keeps {ft.clock!r}")
