"""An :class:`~.events.EventType` from the text of a ``format`` file
(``f_show`` of kernel/trace/trace_events.c prints it), for every event of a
kernel profile and for anyone else who has a format's text (replayed
recordings): :func:`event_from_format`.

The text is parsed by :func:`fakedebugfs.replay.formats.parse_format` (one
parser for format files in the project); the fields keep the spelling the
file prints (``char comm[16]``, ``__data_loc char[] name``) so the event's
``format`` file is the text it came from, byte for byte.  The event's text
in ``trace`` follows its ``print fmt`` (:mod:`.printfmt`), compiled on first
use; a print fmt the interpreter cannot run prints the fields as
``name=value``.  Tracepoint values are the field values in format order
(:func:`tracepoint_args` names them), missing ones 0 or empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .events import EventType, field_key
from .printfmt import PrintFmtError, compile_print_fmt
from ...replay.formats import parse_format

_DECL = re.compile(r"^\s*field:\s*(?P<decl>[^;]*);\s*offset:\s*(?P<off>\d+);\s*size:\s*"
                   r"(?P<size>\d+);(?:\s*signed:\s*(?P<signed>\d+);)?", re.M)
_LAST_NAME = re.compile(r"(?P<name>[A-Za-z_]\w*(?:\s*\[[^\]]*\])?)\s*$")
_ID_LINE = re.compile(r"^ID: *\d+ *$", re.M)
_CHAR_LOC = re.compile(r"__(?:data|rel)_loc\s+(const\s+)?(unsigned\s+)?char\b")


def format_fields(text: str) -> tuple:
    """``(c type, name, offset, size, signed)`` of the non-common fields of a
    format text, spelled as the file prints them."""
    fields = []
    for m in _DECL.finditer(text):
        decl = m["decl"].strip()
        nm = _LAST_NAME.search(decl)
        if not nm:
            raise ValueError(f"no field name in {decl!r}")
        name = re.sub(r"\s+", "", nm["name"])
        if not name.startswith("common_"):
            fields.append((decl[:nm.start()].strip(), name, int(m["off"]), int(m["size"]),
                           int(m["signed"] or 0)))
    return tuple(fields)


def tracepoint_args(text: str) -> tuple:
    """The tracepoint arguments of a generic event: its field names."""
    return tuple(field_key(f[1]) for f in format_fields(text))


@dataclass
class FormatEvent(EventType):
    """An event whose ``format`` is a kernel's text (its ID line the event's)."""

    text: str = ""

    def format(self) -> str:
        return _ID_LINE.sub(f"ID: {self.id}", self.text, count=1)


def event_from_format(text: str, system: str, event_id: int | None = None) -> FormatEvent:
    """The event of ``events/<system>/<name>/format`` *text* (its own ID
    unless *event_id*); ValueError for a text that is not a format."""
    fmt = parse_format(text, system)
    fields = format_fields(text)
    locs = [(c, n) for c, n, *_ in fields if c.startswith(("__data_loc", "__rel_loc"))]
    ev = FormatEvent(system, fmt.name, fmt.id if event_id is None else event_id, fields,
                     fmt.print_fmt, _lazy_show(fmt.print_fmt, fields), text=text,
                     dyn=tuple(field_key(n) for _, n in locs),
                     dyn_arrays=tuple(field_key(n) for c, n in locs if not _CHAR_LOC.match(c)))
    ev.encode_values = _encoder(ev)
    ev.arg_names = tuple(field_key(f[1]) for f in fields)
    return ev


def _encoder(ev: EventType):
    """Tracepoint values (field values in format order, or a dict by
    name) -> field values; missing ones are 0 (strings: empty)."""
    names = tuple(field_key(f[1]) for f in ev.fields)
    arrays = {field_key(f[1]): f for f in ev.fields if "[" in f[1] and not f[1].endswith("[]")}

    def encode(values) -> dict:
        given = dict(values) if isinstance(values, dict) else dict(zip(names, values))
        out = {}
        for n in names:
            v = given.get(n)
            if v is None:
                v = "" if n in ev.dyn else b"" if n in arrays else 0
            if n in arrays:
                v = _array_bytes(v, arrays[n])
            elif n in ev.dyn and not isinstance(v, (str, bytes, bytearray)):
                v = bytes(v) if isinstance(v, (list, tuple)) else ""
            out[n] = v
        return out
    return encode


def _array_bytes(value, fld) -> bytes:
    """A fixed array's bytes: a string (``char comm[16]``), a list of its
    elements (``unsigned long args[6]``, little-endian), or bytes."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (list, tuple)):
        m = re.search(r"\[(\d+)\]", fld[1])
        elem = fld[3] // int(m[1]) if m and int(m[1]) else 1
        return b"".join((int(x) & ((1 << 8 * elem) - 1)).to_bytes(elem, "little")
                        for x in value)
    return value if isinstance(value, (bytes, bytearray)) else b""


def _lazy_show(print_fmt: str, fields: tuple):
    """The event's text: its print fmt, compiled when first shown; the
    fields as ``name=value`` when the interpreter cannot run it."""
    state = {}
    names = [field_key(n) for _, n, *_ in fields]

    def show(rec, out):
        if "pf" not in state:
            try:
                state["pf"] = compile_print_fmt(print_fmt, fields)
            except (PrintFmtError, ValueError, KeyError, TypeError):
                state["pf"] = None
        pf = state["pf"]
        if pf is not None:
            try:
                return pf.render(rec, out)
            except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError,
                    AttributeError):
                pass
        return " ".join(f"{n}={rec.get(n)}" for n in names)
    return show


__all__ = ["FormatEvent", "event_from_format", "format_fields", "tracepoint_args"]
