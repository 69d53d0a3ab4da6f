"""An :class:`~.events.EventType` from the text of a ``format`` file
(``f_show`` of kernel/trace/trace_events.c prints it), for every event of a
kernel profile and for anyone else who has a format's text (replayed
recordings): :func:`event_from_format`.

The text is parsed by :func:`fakedebugfs.sources.replay.formats.parse_format` (one
parser for format files in the project); the fields keep the spelling the
file prints (``char comm[16]``, ``__data_loc char[] name``) so the event's
``format`` file is the text it came from, byte for byte.  The event's text
in ``trace`` follows its ``print fmt`` (:mod:`.printfmt`), compiled on first
use; a print fmt the interpreter cannot run prints the fields as
``name=value``.  Tracepoint values are the field values in format order
(:func:`tracepoint_args` names them), missing ones 0 or empty.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass

from fakedebugfs.engine.ftrace.events import EventType, field_key
from fakedebugfs.engine.ftrace.printfmt import PrintFmtError, compile_print_fmt
from fakedebugfs.engine.ftrace.formatfile import parse_format
from fakedebugfs.engine.ftrace.kernel_enums import KERNEL_ENUMS

_DECL = re.compile(r"^\s*field:\s*(?P<decl>[^;]*);\s*offset:\s*(?P<off>\d+);\s*size:\s*"
                   r"(?P<size>\d+);(?:\s*signed:\s*(?P<signed>\d+);)?", re.M)
_LAST_NAME = re.compile(r"(?P<name>[A-Za-z_]\w*(?:\s*\[[^\]]*\])?)\s*$")
_ID_LINE = re.compile(r"^ID: *\d+ *$", re.M)
# enum constants and globals some 6.18 print fmts still name (no
# TRACE_DEFINE_ENUM for them), with their values in the kernel's headers:
# include/linux/hrtimer_types.h, uapi/linux/ioprio.h, linux/pm_qos.h, and
# x86_64's vmemmap_base (no KASLR) with sizeof(struct page)
KERNEL_SYMBOLS = (
    *((f"HRTIMER_MODE_{name}", value) for name, value in (
        ("ABS", 0), ("REL", 1), ("PINNED", 2), ("SOFT", 4), ("HARD", 8),
        ("ABS_PINNED", 2), ("REL_PINNED", 3), ("ABS_SOFT", 4), ("REL_SOFT", 5),
        ("ABS_PINNED_SOFT", 6), ("REL_PINNED_SOFT", 7), ("ABS_HARD", 8), ("REL_HARD", 9),
        ("ABS_PINNED_HARD", 10), ("REL_PINNED_HARD", 11))),
    ("IOPRIO_CLASS_NONE", 0), ("IOPRIO_CLASS_RT", 1), ("IOPRIO_CLASS_BE", 2),
    ("IOPRIO_CLASS_IDLE", 3), ("IOPRIO_CLASS_INVALID", 7),
    ("PM_QOS_ADD_REQ", 0), ("PM_QOS_UPDATE_REQ", 1), ("PM_QOS_REMOVE_REQ", 2),
    ("DEV_PM_QOS_RESUME_LATENCY", 1), ("DEV_PM_QOS_LATENCY_TOLERANCE", 2),
    ("DEV_PM_QOS_MIN_FREQUENCY", 3), ("DEV_PM_QOS_MAX_FREQUENCY", 4), ("DEV_PM_QOS_FLAGS", 5),
    ("vmemmap_base", 0xFFFFEA0000000000),
    *KERNEL_ENUMS,
)
POINTEES = (("struct page", 64),)
_CHAR_LOC = re.compile(r"__(?:data|rel)_loc\s+(const\s+)?(unsigned\s+)?char\b")


@functools.lru_cache(maxsize=4096)
def format_fields(text: str) -> tuple:
    """``(c type, name, offset, size, signed)`` of the non-common fields of a
    format text, spelled as the file prints them."""
    fields = []
    for m in _DECL.finditer(text):
        decl = m["decl"].strip()
        nm = _LAST_NAME.search(decl)
        if not nm:
            raise ValueError(f"no field name in {decl!r}")
        name = nm["name"]
        if " " in name or "\t" in name:
            name = re.sub(r"\s+", "", name)
        if not name.startswith("common_"):
            fields.append((decl[:nm.start()].strip(), name, int(m["off"]), int(m["size"]),
                           int(m["signed"] or 0)))
    return tuple(fields)


def tracepoint_args(text: str) -> tuple:
    """The tracepoint arguments of a generic event: its field names (one
    string per name, shared by every event that has it).  The parsed fields
    are not kept (:func:`format_fields`' cache is for events being built:
    ``--enable-all`` makes the tracepoints of 2,305 events, ~2 MB of fields
    most of which no workload fires)."""
    return tuple(sys.intern(field_key(f[1])) for f in format_fields.__wrapped__(text))


@dataclass
class FormatEvent(EventType):
    """An event whose ``format`` is a kernel's text (its ID line the event's)."""

    text: str = ""

    def format(self) -> str:
        return _ID_LINE.sub(f"ID: {self.id}", self.text, count=1)


def event_from_format(text: str, system: str, event_id: int | None = None) -> FormatEvent:
    """The event of ``events/<system>/<name>/format`` *text* (its own ID
    unless *event_id*); ValueError for a text that is not a format."""
    name, ident, print_fmt = _header(text)
    fields = format_fields(text)
    locs = [(c, n) for c, n, *_ in fields if c.startswith(("__data_loc", "__rel_loc"))]
    ev = FormatEvent(system, name, ident if event_id is None else event_id, fields,
                     print_fmt, _lazy_show(print_fmt, fields), text=text,
                     dyn=tuple(field_key(n) for _, n in locs),
                     dyn_arrays=tuple(field_key(n) for c, n in locs if not _CHAR_LOC.match(c)))
    ev.encode_values = _encoder(ev)
    ev.arg_names = tuple(field_key(f[1]) for f in fields)
    chars = {field_key(f[1]): f[3] for f in fields if _is_chars(f)}
    if all((f[3] in (1, 2, 4, 8) and "[" not in f[1] or _is_chars(f))
           and not f[0].startswith(("__data_loc", "__rel_loc")) for f in fields):
        # integers and char arrays (comms): the batch path's columns
        ev.encode_columns = _column_encoder(ev.arg_names, chars)
    if system == "syscalls" and name.startswith(("sys_enter_", "sys_exit_")):
        ev.show, ev.bare = _syscall_show(name, ev.arg_names), True
    return ev


def _is_chars(field) -> bool:
    """A ``char name[N]`` field (a comm), N known."""
    return field[0] == "char" and field[1].endswith("]") and field[3] > 0


def _column_encoder(names: tuple, chars: dict = {}):  # noqa: B006 (read only)
    """Tracepoint argument columns (one per field, in format order) ->
    field columns, for an event of integer fields and char arrays
    (*chars*: name -> size; :func:`~..core.batch.char_array`)."""
    if not chars:
        def encode(cols) -> dict:
            return dict(zip(names, cols))
        encode.positional = True  # the batch path checks the tracepoint's arguments are *names*
        return encode
    from fakedebugfs.engine.core.batch import char_array

    def encode_chars(cols) -> dict:
        out = dict(zip(names, cols))
        for name, size in chars.items():
            out[name] = char_array(out[name], size, size)
        return out
    encode_chars.positional = True
    return encode_chars


def by_name_columns(ev: EventType, own):
    """The batch path's column encoder of a profile's *ev* whose format
    differs from the fake's own event of that name (Debian 6.12's
    ``kmem_cache_alloc``: ``accounted`` and no ``name``): the own event's
    column encoder *own* (tracepoint arguments -> its fields' columns),
    then *ev*'s fields picked by name, a missing one 0 (a string empty),
    as the per-event path's ``theirs(own(values))`` picks them; None for a
    format with fields it cannot give (arrays other than ``char[N]``,
    ``__rel_loc``, non-string ``__data_loc``)."""
    if own is None or getattr(own, "positional", False):
        return None
    dyn = set(ev.dyn) - set(ev.dyn_arrays)
    chars = {field_key(f[1]): f[3] for f in ev.fields if _is_chars(f)}
    names = tuple(field_key(f[1]) for f in ev.fields)
    for f in ev.fields:
        n = field_key(f[1])
        if n in dyn:
            if not _CHAR_LOC.match(f[0]) or f[0].startswith("__rel_loc"):
                return None
        elif n not in chars and (f[3] not in (1, 2, 4, 8) or "[" in f[1]
                                 or f[0].startswith(("__data_loc", "__rel_loc"))):
            return None
    from fakedebugfs.engine.core.batch import char_array

    def encode(cols) -> dict:
        given = own(cols)
        out = {}
        for n in names:
            v = given.get(n)
            if n in chars:
                v = char_array(b"" if v is None else v, chars[n], chars[n])
            elif v is None:
                v = "" if n in dyn else 0
            out[n] = v
        return out
    return encode


def _syscall_show(name: str, args: tuple):
    """``print_syscall_enter``/``print_syscall_exit`` (kernel/trace/
    trace_syscalls.c): the syscall events print ``sys_openat(dfd: 0xffffff9c,
    ...)`` and ``sys_openat -> 0x3``, not their print fmt and no event name
    (each argument ``0x%lx``, or ``%lu`` below 10 as 6.18 prints them)."""
    enter = name.startswith("sys_enter_")
    call = "sys_" + name[len("sys_enter_" if enter else "sys_exit_"):]
    params = tuple(a for a in args if a != "__syscall_nr")

    def show(rec, out):
        if not enter:
            return f"{call} -> 0x{rec.get('ret', 0) & 0xFFFFFFFFFFFFFFFF:x}"
        vals = ((p, rec.get(p, 0) & 0xFFFFFFFFFFFFFFFF) for p in params)
        return f"{call}(" + ", ".join(f"{p}: {v:#x}" if v >= 10 else f"{p}: {v}"
                                     for p, v in vals) + ")"
    return show


_NAME_LINE = re.compile(r"^name: *(\S+)", re.M)
_ID_NUM = re.compile(r"^ID: *(\d+)", re.M)
# the print fmt runs to the end of the text: its format string is the C
# literal as compiled, so a "\n" in the source is a new line in the file
_PRINT_FMT = re.compile(r"^print fmt: *(.*)", re.M | re.S)


def _header(text: str) -> tuple:
    """``(name, id, print fmt)`` of a format text: a kernel's own text is
    read with three searches; anything else goes through the full parser
    (:func:`fakedebugfs.sources.replay.formats.parse_format`, ValueError if bad)."""
    name, ident, pf = _NAME_LINE.search(text), _ID_NUM.search(text), _PRINT_FMT.search(text)
    if name and ident:
        return name[1], int(ident[1]), pf[1].strip() if pf else ""
    fmt = parse_format(text)
    return fmt.name, fmt.id, fmt.print_fmt


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


def _plain(value):
    """A field in the ``name=value`` fallback: char arrays as text."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return value


def _lazy_show(print_fmt: str, fields: tuple):
    """The event's text: its print fmt, compiled when first shown; the
    fields as ``name=value`` when the interpreter cannot run it."""
    state = {}
    names = [field_key(n) for _, n, *_ in fields]

    def show(rec, out):
        if "pf" not in state:
            try:
                state["pf"] = compile_print_fmt(print_fmt, fields, KERNEL_SYMBOLS, POINTEES)
            except (PrintFmtError, ValueError, KeyError, TypeError):
                state["pf"] = None
        pf = state["pf"]
        if pf is not None:
            try:
                return pf.render(rec, out)
            except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError,
                    AttributeError):
                pass
        return " ".join(f"{n}={_plain(rec.get(n))}" for n in names)
    return show


__all__ = ["FormatEvent", "by_name_columns", "event_from_format", "format_fields", "tracepoint_args"]
