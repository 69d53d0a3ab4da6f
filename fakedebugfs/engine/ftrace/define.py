"""Events declared at run time: ``TRACE_EVENT()`` computed from field
declarations, as the compiler and ``trace_events.c`` would make it.

A field is one C declaration: ``"unsigned long addr"``, ``"pid_t pid"``,
``"char comm[16]"`` (a fixed array), ``"__data_loc char[] msg"`` (a
dynamic string; ``"__string msg"`` and ``"string msg"`` say the same) or
``"__data_loc u32[] vals"`` (a dynamic array).  The fields follow
``struct trace_entry`` in ``struct trace_event_raw_<name>`` with x86_64's
natural alignment (:mod:`.ctype`); a ``__data_loc`` field is a ``u32``
(``len << 16 | offset``) whose data follows the fixed part at
``offsetof(typeof(*entry), __data)``, the end of the last field, and the
entry reserves ``sizeof(*entry)`` (rounded to the largest alignment) plus
the data, as ``trace_event_get_offsets_<call>`` and
``trace_event_buffer_reserve`` do (measured on this machine's 6.18 kernel:
``kmem_cache_alloc``'s name at offset 61 of a 64-byte struct,
``sched_process_exec``'s filename at 20).

The ``format`` file prints each field as ``TP_STRUCT__entry`` stringifies
it (``field:char comm[16]``, ``field:__data_loc char[] msg``) with its
offset, size and ``is_signed_type()``.  Without a print fmt the event
prints ``name=%fmt`` for each field, the conversions chosen per type as
``synth_field_fmt`` (trace_events_synth.c) chooses them.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from fakedebugfs.engine.ftrace import ctype as C
from fakedebugfs.engine.ftrace.events import COMMON_FIELDS, EventType, next_event_type
from fakedebugfs.engine.ftrace.printfmt import PrintFmtError, compile_print_fmt

MAX_EVENT_NAME_LEN = 64  # kernel/trace/trace.h: names are at most 63 bytes
# the largest sub-buffer's data (512 KiB less its 16-byte header) less the
# 8-byte header of a long event; one bigger than the instance's sub-buffer
# is not recorded there, as ring_buffer_lock_reserve refuses it
MAX_PAYLOAD = (512 << 10) - 16 - 8
MAX_DECL_LEN = 256
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SYSTEM = re.compile(r"[A-Za-z_-][A-Za-z0-9_-]*\Z")
COMMON_NAMES = {f[1] for f in COMMON_FIELDS}


class Decl(NamedTuple):
    """One parsed field declaration."""

    ctype: str  # the element type as written (whitespace collapsed)
    name: str
    kind: str  # "scalar" | "array" | "dynamic"
    count: int  # elements of a fixed array (1 for scalars, 0 for dynamic)
    elem: C.CType  # size, alignment, signedness of one element

    @property
    def is_string(self) -> bool:
        """A ``char`` array or ``__data_loc char[]``: values are ``str``."""
        return self.kind != "scalar" and C.is_char(self.ctype)

    @property
    def format_type(self) -> str:
        return f"__data_loc {self.ctype}[]" if self.kind == "dynamic" else self.ctype

    @property
    def format_name(self) -> str:
        return f"{self.name}[{self.count}]" if self.kind == "array" else self.name


def parse_declaration(decl: str) -> Decl:
    """A :class:`Decl` for one C declaration; ValueError naming it if bad.
    Read from the right, in linear time: an optional ``;``, an optional
    ``[N]`` (``[]`` after ``__data_loc TYPE``), the name, then the type."""
    if not isinstance(decl, str):
        raise ValueError(f"field {decl!r}: a declaration is a string such as 'int count'")
    if len(decl) > MAX_DECL_LEN:
        raise ValueError(f"field {decl[:40]!r}...: a declaration is at most "
                         f"{MAX_DECL_LEN} characters")
    text = decl.strip()
    text = text[:-1].rstrip() if text.endswith(";") else text
    words = text.split()
    if len(words) == 2 and words[0] in ("__string", "string"):
        return _named(decl, Decl("char", words[1], "dynamic", 0, C.lookup("char")), words[1])
    if words and words[0] == "__data_loc":
        return _dynamic(decl, text[len("__data_loc"):])
    length = None
    if text.endswith("]"):
        open_at = text.rfind("[")
        if open_at < 0:
            raise ValueError(f"field {decl!r}: ']' without '['")
        length, text = text[open_at + 1:-1].strip(), text[:open_at].rstrip()
    name, ctype = _split_name(text)
    if not ctype:
        raise ValueError(f"field {decl!r}: expected 'TYPE NAME', 'TYPE NAME[N]' or "
                         "'__data_loc TYPE[] NAME'")
    ctype, elem = _element(decl, ctype)
    if length is None:
        return _named(decl, Decl(ctype, name, "scalar", 1, elem), name)
    return _named(decl, Decl(ctype, name, "array", _count(decl, length), elem), name)


def _split_name(text: str) -> tuple[str, str]:
    """``"unsigned int count"`` -> ``("count", "unsigned int")``: the
    trailing identifier characters and what is before them."""
    start = len(text)
    while start and (text[start - 1].isalnum() or text[start - 1] == "_") \
            and text[start - 1].isascii():
        start -= 1
    return text[start:], text[:start].rstrip()


def _dynamic(decl: str, rest: str) -> Decl:
    """``__data_loc TYPE[] NAME``."""
    at = rest.rfind("[]")
    if at < 0:
        raise ValueError(f"field {decl!r}: expected '__data_loc TYPE[] NAME'")
    name = rest[at + 2:].strip()
    ctype, elem = _element(decl, rest[:at])
    return _named(decl, Decl(ctype, name, "dynamic", 0, elem), name)


_KEYWORDS = {"void", "char", "short", "int", "long", "signed", "unsigned", "const", "volatile",
             "struct", "enum", "union", "bool", "_Bool", "__data_loc", "__string", "string"}


def _named(decl: str, d: Decl, name: str) -> Decl:
    """Refuse a name that is no C identifier, or is a type's (``unsigned
    long`` has no name)."""
    if not _IDENT.match(name):
        raise ValueError(f"field {decl!r}: {name!r} is not a field name (a C identifier)")
    if name in _KEYWORDS or C.lookup(name) is not None:
        raise ValueError(f"field {decl!r}: no field name (a type name is not one)")
    return d


def _element(decl: str, text: str) -> tuple[str, C.CType]:
    ctype = C.normalize(text)
    if "__data_loc" in ctype or "[" in ctype or "]" in ctype:
        raise ValueError(f"field {decl!r}: write a dynamic array as '__data_loc TYPE[] NAME'")
    words = ctype.replace("*", " ").split()
    if not words or not all(_IDENT.match(w) for w in words):
        raise ValueError(f"field {decl!r}: {text!r} is not a C type")
    info = C.lookup(ctype)
    if info is None:
        raise ValueError(f"field {decl!r}: unknown type {ctype!r} (use a C integer type, "
                         "a kernel typedef such as u64 or pid_t, or a pointer)")
    return ctype, info


def _count(decl: str, text: str) -> int:
    try:
        count = int(text, 0)
    except ValueError:
        raise ValueError(f"field {decl!r}: the array length {text!r} is not a number") from None
    if count <= 0:
        raise ValueError(f"field {decl!r}: an array needs a positive length "
                         "(a variable one is '__data_loc TYPE[] NAME')")
    return count


def check_names(system: str, name: str) -> None:
    """The kernel's rules for a new event (``is_good_name``,
    ``is_good_system_name``, ``MAX_EVENT_NAME_LEN``), in its words."""
    for what, value, rule in (("Group", system, _SYSTEM), ("Event", name, _IDENT)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{what} name is missing")
        if len(value) >= MAX_EVENT_NAME_LEN:
            raise ValueError(f"{what} name is too long: {value!r}")
        if not rule.match(value):
            raise ValueError(f"{what} name must follow the same rules as C identifiers: "
                             f"{value!r}")


def layout(decls) -> tuple[tuple, int, int]:
    """``(format fields, sizeof(struct), offsetof(__data))`` of
    ``struct trace_event_raw_<name>`` with *decls* after ``trace_entry``."""
    off, align, fields = 8, 4, []  # struct trace_entry: 8 bytes, aligned 4
    for d in decls:
        size, falign = (4, 4) if d.kind == "dynamic" else (d.elem.size * d.count, d.elem.align)
        off = (off + falign - 1) & -falign
        fields.append((d.format_type, d.format_name, off, size, d.elem.signed))
        off += size
        align = max(align, falign)
    return tuple(fields), (off + align - 1) & -align, off


# synth_field_fmt (trace_events_synth.c), keyed by size and signedness
_FMT = {(1, 1): "%d", (1, 0): "%u", (2, 1): "%d", (2, 0): "%u", (4, 1): "%d", (4, 0): "%u",
        (8, 1): "%lld", (8, 0): "%llu"}
_FMT_BY_TYPE = {"long": "%ld", "unsigned long": "%lu", "size_t": "%zu", "ssize_t": "%zd",
                "gfp_t": "%x", "bool": "%d", "char": "%d"}


def default_print_fmt(decls) -> str:
    """``"a=%lu b=%d s=%s", REC->a, REC->b, __get_str(s)``: each field with
    the conversion of its type; strings ``%s``, pointers ``%p``, other
    arrays ``__print_array``."""
    parts, args = [], []
    for d in decls:
        if d.is_string:
            parts.append(f"{d.name}=%s")
            args.append(f"__get_str({d.name})" if d.kind == "dynamic" else f"REC->{d.name}")
        elif d.kind == "array":
            parts.append(f"{d.name}=%s")
            args.append(f"__print_array(REC->{d.name}, {d.count}, {d.elem.size})")
        elif d.kind == "dynamic":
            parts.append(f"{d.name}=%s")
            args.append(f"__print_array(__get_dynamic_array({d.name}), "
                        f"__get_dynamic_array_len({d.name}) / {d.elem.size}, {d.elem.size})")
        elif d.ctype.endswith("*"):
            parts.append(f"{d.name}=%p")
            args.append(f"REC->{d.name}")
        else:
            base = " ".join(w for w in d.ctype.split() if w not in C.QUALIFIERS)
            conv = _FMT_BY_TYPE.get(base) or _FMT[(d.elem.size, d.elem.signed)]
            parts.append(f"{d.name}={conv}")
            args.append(f"REC->{d.name}")
    return '"' + " ".join(parts) + '"' + "".join(", " + a for a in args)


@dataclass
class DefinedEvent(EventType):
    """An :class:`EventType` made from declarations; its tracepoint's
    arguments are the field names, in order."""

    decls: tuple = ()
    elem_packers: dict = field(default_factory=dict, repr=False)

    @property
    def arg_names(self) -> tuple:
        return tuple(d.name for d in self.decls)

    def to_fields(self, values: tuple) -> dict:
        """Tracepoint values -> field values ``pack`` takes (the encoder of
        ``trace_event_raw_event_<name>``: ``strscpy`` into char arrays,
        element by element into other arrays)."""
        out = {}
        for d, v in zip(self.decls, values):
            if d.kind == "scalar":
                out[d.name] = v
            elif d.is_string:
                data = v.encode() if isinstance(v, str) else bytes(v)
                if d.kind == "array":
                    data = data.split(b"\0", 1)[0][:d.count - 1].ljust(d.count, b"\0")
                elif not data.endswith(b"\0"):
                    data += b"\0"
                out[d.name] = data
            elif isinstance(v, (str, bytes, bytearray)):  # raw bytes of an int array
                data = v.encode() if isinstance(v, str) else bytes(v)
                size = d.count * d.elem.size
                out[d.name] = data[:size].ljust(size, b"\0") if d.kind == "array" else data
            else:
                items = list(v)[:d.count] if d.kind == "array" else list(v)
                if d.kind == "array":
                    items += [0] * (d.count - len(items))
                code = self.elem_packers[d.name]
                out[d.name] = struct.pack(f"<{len(items)}{code}",
                                          *(C.wrap(int(x), d.elem.size, d.elem.signed)
                                            for x in items))
        return out

    def values(self, given: dict, strict: bool = False) -> tuple:
        """The tracepoint values for field values *given* by name, checked
        against the format: unknown name, missing field (0, ``""`` or
        ``[]`` unless *strict*), wrong type, out of range, or an entry too
        big for a page each raise ValueError naming the field."""
        names = set(self.arg_names)
        for key in given:
            if key not in names:
                raise ValueError(f"{self.key} has no field {key!r} "
                                 f"(fields: {', '.join(self.arg_names) or 'none'})")
        out, extra = [], 0
        for d in self.decls:
            if d.name not in given:
                if strict:
                    raise ValueError(f"{self.key}: field {d.name!r} is missing")
                out.append("" if d.is_string else [] if d.kind != "scalar" else 0)
                continue
            value = given[d.name]
            out.append(_check(self.key, d, value))
            if d.kind == "dynamic":
                extra += len(value.encode()) + 1 if d.is_string else len(value) * d.elem.size
        if self.size + extra > MAX_PAYLOAD:
            raise ValueError(f"{self.key}: the entry would take {self.size + extra} bytes, "
                             f"more than the largest ring-buffer sub-buffer holds ({MAX_PAYLOAD})")
        return tuple(out)


def _check(key: str, d: Decl, value):
    where = f"{key}: field {d.name!r} ({d.format_type} {d.format_name})"
    if d.is_string:
        if not isinstance(value, str):
            raise ValueError(f"{where} takes a string, not {value!r}")
        if "\0" in value:
            raise ValueError(f"{where}: a string cannot hold NUL")
        if d.kind == "array" and len(value.encode()) > d.count - 1:
            raise ValueError(f"{where}: {value!r} is longer than {d.count - 1} bytes")
        return value
    items = [value] if d.kind == "scalar" else value
    if d.kind != "scalar" and not isinstance(value, (list, tuple)):
        raise ValueError(f"{where} takes a list of integers, not {value!r}")
    if d.kind == "array" and len(items) > d.count:
        raise ValueError(f"{where} holds {d.count} elements, {len(items)} given")
    lo = -(1 << (8 * d.elem.size - 1)) if d.elem.signed else 0
    hi = (1 << (8 * d.elem.size - d.elem.signed)) - 1
    for item in items:
        if not isinstance(item, int):
            raise ValueError(f"{where} takes integers, not {item!r}")
        if not lo <= item <= hi:
            raise ValueError(f"{where}: {item} is out of range [{lo}, {hi}]")
    return value if d.kind == "scalar" else list(items)


_ELEM_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}


def build_event(system: str, name: str, fields, event_id: int,
                print_fmt: Optional[str] = None) -> DefinedEvent:
    """The :class:`DefinedEvent` ``system:name`` with id *event_id*:
    ValueError for a bad name, declaration or print fmt."""
    check_names(system, name)
    if isinstance(fields, str) or not isinstance(fields, (list, tuple)):
        raise ValueError("fields: a list of declarations such as ['int count', 'u64 lat']")
    decls = tuple(parse_declaration(f) for f in fields)
    seen = set()
    for d in decls:
        if d.name in seen or d.name in COMMON_NAMES:
            raise ValueError(f"field {d.name!r} is declared twice" if d.name in seen
                             else f"field {d.name!r}: the common fields have that name")
        seen.add(d.name)
    fmt_fields, size, data_offset = layout(decls)
    if size > MAX_PAYLOAD:
        raise ValueError(f"{system}:{name}: its fields take {size} bytes, more than the largest "
                         f"ring-buffer sub-buffer holds ({MAX_PAYLOAD})")
    text = print_fmt if print_fmt is not None else default_print_fmt(decls)
    if not isinstance(text, str) or "\n" in text:
        raise ValueError(f"print_fmt {text!r}: one line of C, '\"fmt\", args'")
    try:
        pf = compile_print_fmt(text, fmt_fields)
    except PrintFmtError as err:
        raise ValueError(f"print_fmt {text!r}: {err}") from None
    ev = DefinedEvent(
        system, name, event_id, fmt_fields, text,
        show=_show(pf),
        size=size, dyn=tuple(d.name for d in decls if d.kind == "dynamic"),
        data_offset=data_offset,
        dyn_arrays=tuple(d.name for d in decls if d.kind == "dynamic" and not d.is_string),
        decls=decls,
        elem_packers={d.name: _ELEM_CODES[d.elem.size].lower() if d.elem.signed
                      else _ELEM_CODES[d.elem.size] for d in decls if d.kind != "scalar"})
    ev.encode_values = ev.to_fields
    _trial(ev, pf)
    return ev


RESERVED_SYSTEMS = ("enable", "header_page", "header_event")  # files of tracefs' events/
RESERVED_NAMES = ("enable", "filter")  # files of events/<group>/


def same_definition(old, new, print_fmt=None) -> bool:
    """Whether defining *new* (with *print_fmt* given, or None) over *old*
    changes nothing: the same fields, and the same print fmt if one is given."""
    return old.fields == new.fields and print_fmt in (None, old.print_fmt)


def check_definition(ft, system: str, name: str, fields, print_fmt=None) -> DefinedEvent:
    """The event :func:`define_event` would make on the top-level trace
    array *ft*, made but not registered (nothing changes): ValueError for a
    name, declaration or print fmt it refuses, a group named like a file of
    ``events/`` or an event like a file of ``events/<group>/`` (tracefs
    would hold both under one name), the tracer's own ``ftrace`` system, or
    an event of that name with another format."""
    for what, taken, files, where in (("group", system, RESERVED_SYSTEMS, "events/"),
                                      ("event", name, RESERVED_NAMES, f"events/{system}/")):
        if taken in files:
            raise ValueError(f"{taken!r} is the name of the file {where}{taken}: "
                             f"choose another {what} name")
    if system == "ftrace":
        raise ValueError("system 'ftrace' holds the tracer's own entries")
    ev = build_event(system, name, fields, next_event_type(ft.by_id), print_fmt)
    old = ft.events.get(ev.key)
    if old is not None and not same_definition(old, ev, print_fmt):
        raise ValueError(f"event {ev.key} already exists with another format")
    return ev


def define_event(ft, system: str, name: str, fields, print_fmt=None) -> DefinedEvent:
    """A new event ``system:name`` of the top-level trace array *ft* from C
    field declarations (checked by :func:`check_definition`), registered as
    ``trace_add_event_call`` registers a dynamic event (``ft.add_event``:
    every instance gets it too): the id after the highest one (the
    kernel's ``ida`` gives the lowest free id above the static ones; with
    none freed that is max + 1, as a uprobe event created on this
    machine's 6.18 shows) and an engine tracepoint whose arguments are the
    field names.  An identical definition returns the existing event."""
    ev = check_definition(ft, system, name, fields, print_fmt)
    old = ft.events.get(ev.key)
    if old is not None:
        return old
    ft.engine.define(system, name, ev.arg_names)  # ValueError if taken
    ft.add_event(ev)
    return ev


def _show(pf):
    def show(rec, out):
        try:
            return pf.render(rec, out)
        except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError):
            return "[FAILED TO PARSE]"  # as libtraceevent marks it; never an EIO
    return show


def _trial(ev: DefinedEvent, pf) -> None:
    """Render a zero entry once, so a print fmt that names a field with the
    wrong kind (``%d`` of a string...) is refused at definition time."""
    from fakedebugfs.engine.ftrace.output import OutputContext

    class _Syms:
        def sym(self, addr):
            return "0x0"

        sym_offset = sym

    rec = ev.decode(ev.encode(0, ev.values({})))
    try:
        pf.render(rec, OutputContext(_Syms(), {"hash-ptr": False}))
    except ZeroDivisionError:
        pass  # zero fields divide by zero; real entries may not
    except (TypeError, ValueError, KeyError, IndexError) as err:
        raise ValueError(f"print_fmt {ev.print_fmt!r}: {err}") from None


__all__ = ["Decl", "DefinedEvent", "build_event", "check_definition", "check_names",
           "default_print_fmt", "define_event", "same_definition", "RESERVED_NAMES", "RESERVED_SYSTEMS",
           "layout", "parse_declaration", "MAX_EVENT_NAME_LEN"]
