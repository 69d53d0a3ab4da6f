"""ktrace probe argument packing (the 2009 ktrace RFC's
``contain_string_arguments``, ``ring_buffer_probe``, ``string_probe``).

A ktrace event's arguments are the fields of a packed struct
(``DEFINE_KTRACE_STRUCT``) whose member sizes follow the conversions of its
format string: ``%c`` 1 byte, ``%hd`` 2, ``%d`` 4, ``%ld``/``%lld``/``%p``
8, ``%s`` a pointer whose string ``string_probe`` stores inline,
NUL-terminated.  The record in the ring buffer is a ``u16`` event id
followed by those bytes.
"""

from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass

# one conversion as the RFC's parser reads it: flags, width, qualifier, type
_CONV = re.compile(r"%[-+ #0]*\d*(hh|h|ll|l|L)?([a-zA-Z%])")

_SIGNED = {1: "b", 2: "h", 4: "i", 8: "q"}
_UNSIGNED = {1: "B", 2: "H", 4: "I", 8: "Q"}


@dataclass(frozen=True)
class Field:
    """One argument: its conversion, size in the packed struct, signedness."""

    conv: str
    size: int  # 0 for an inline string
    signed: bool

    @property
    def is_string(self) -> bool:
        return self.conv == "s"


@functools.lru_cache(maxsize=256)  # workloads ask for every event they fire
def parse_format(fmt: str) -> tuple[Field, ...]:
    """The argument fields a format string describes, in order.

    Unknown conversions are skipped, as the kernel warns and continues.
    """
    fields = []
    for match in _CONV.finditer(fmt):
        qual, conv = match.group(1), match.group(2)
        if conv == "c":
            fields.append(Field("c", 1, True))
        elif conv == "s":
            fields.append(Field("s", 0, False))
        elif conv == "p":
            fields.append(Field("p", 8, False))
        elif conv in "dioxXu":
            size = {"L": 8, "ll": 8, "l": 8, "h": 2, "hh": 2}.get(qual, 4)
            fields.append(Field(conv, size, conv in "di"))
    return tuple(fields)


class KtraceFormat:
    """Packs and unpacks the payload of one ktrace event."""

    def __init__(self, fmt: str):
        self.format = fmt
        self.fields = parse_format(fmt)
        self.has_strings = any(f.is_string for f in self.fields)
        self.sizes = tuple(f.size for f in self.fields)  # of the struct's members
        self._fixed = None
        if not self.has_strings:
            self._fixed = struct.Struct("<H" + "".join(self._code(f) for f in self.fields))

    @staticmethod
    def _code(field: Field) -> str:
        table = _SIGNED if field.signed else _UNSIGNED
        return table[field.size]

    def pack(self, event_id: int, values) -> bytes:
        """The ring-buffer payload: ``u16`` id, then the packed arguments."""
        if self._fixed is not None:
            try:  # values a C struct member holds pack as they are
                return self._fixed.pack(event_id & 0xFFFF, *values)
            except struct.error:  # out of range, or too few: convert as C does
                padded = tuple(values) + (0,) * (len(self.fields) - len(values))
                return self._fixed.pack(event_id & 0xFFFF,
                                        *(self._wrap(f, v) for f, v in zip(self.fields, padded)))
        out = [struct.pack("<H", event_id & 0xFFFF)]
        for field, value in zip(self.fields, values):
            if field.is_string:
                text = value.encode() if isinstance(value, str) else bytes(value)
                out.append(text.split(b"\0", 1)[0] + b"\0")
            else:
                out.append(struct.pack("<" + self._code(field), self._wrap(field, value)))
        return b"".join(out)

    @staticmethod
    def _wrap(field: Field, value) -> int:
        """C conversion of *value* to the member's type (truncate, wrap)."""
        bits = field.size * 8
        value = int(value) & ((1 << bits) - 1)
        if field.signed and value >= 1 << (bits - 1):
            value -= 1 << bits
        return value

    def unpack(self, payload: bytes) -> tuple[int, tuple]:
        """``(event_id, values)`` from a payload made by :meth:`pack`."""
        event_id = struct.unpack_from("<H", payload)[0]
        off = 2
        values = []
        for field in self.fields:
            if field.is_string:
                end = payload.index(b"\0", off)
                values.append(payload[off:end].decode(errors="replace"))
                off = end + 1
            else:
                code = "<" + self._code(field)
                values.append(struct.unpack_from(code, payload, off)[0])
                off += field.size
        return event_id, tuple(values)

    def render(self, values) -> str:
        """The event as text: its format string applied to its values."""
        out, last = [], 0
        fields = iter(zip(self.fields, values))
        for match in _CONV.finditer(self.format):
            out.append(self.format[last:match.start()])
            last = match.end()
            if match.group(2) == "%":
                out.append("%")
                continue
            try:
                field, value = next(fields)
            except StopIteration:
                break
            spec = match.group(0)
            if match.group(1):
                spec = spec.replace(match.group(1), "", 1)
            out.append(spec % value if field.conv != "p" else f"0x{value:x}")
        out.append(self.format[last:])
        return "".join(out)
