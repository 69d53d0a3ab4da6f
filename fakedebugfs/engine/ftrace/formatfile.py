"""A recording's own ``format`` files, ``header_page`` and ``header_event``,
parsed, so its events decode with the layout of the kernel that wrote them
(``f_show`` in kernel/trace/trace_events.c prints them; libtraceevent's
``tep_parse_event`` reads them).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

_FIELD = re.compile(r"^\s*field:\s*(?P<decl>[^;]*);\s*offset:\s*(?P<offset>\d+);"
                    r"\s*size:\s*(?P<size>\d+);(?:\s*signed:\s*(?P<signed>\d+);)?")
_NAME = re.compile(r"(?P<name>[A-Za-z_]\w*)\s*(?P<array>\[[^\]]*\])?\s*$")
_INT = {1: "B", 2: "H", 4: "I", 8: "Q"}


class FormatSyntaxError(ValueError):
    """A format text this parser cannot read (the caller names the file)."""


@dataclass(frozen=True)
class Field:
    """One ``field:`` line: ``field:<type> <name>[N];\toffset:O;\tsize:S;\tsigned:G;``."""

    name: str
    type: str  # the C type without the name, e.g. "unsigned long", "char[16]"
    offset: int
    size: int
    signed: bool
    array_len: int | None = None  # N of name[N]; 0 for name[] / name[0]
    data_loc: bool = False  # __data_loc: u32 (length << 16 | offset) to the data
    rel_loc: bool = False  # __rel_loc: the same, offset from the field's end

    @property
    def is_string(self) -> bool:
        base = self.type.split("[")[0].replace("__data_loc", "").replace("__rel_loc", "")
        return base.replace("const", "").strip() in ("char", "unsigned char", "u8") \
            and (self.array_len is not None or self.data_loc or self.rel_loc
                 or "[" in self.type)

    def decode(self, payload: bytes, endian: str):
        """The field's value in *payload*: an int, a str for char arrays and
        ``__data_loc char[]`` strings, a list of ints for other arrays, bytes
        for sizes that are not 1, 2, 4 or 8; None if the payload is too short."""
        e = "<" if endian == "little" else ">"
        if self.offset + self.size > len(payload):
            return None  # the event is shorter than its format says
        if self.data_loc or self.rel_loc:
            (word,) = struct.unpack_from(e + "I", payload, self.offset)
            start, length = word & 0xFFFF, word >> 16
            if self.rel_loc:
                start += self.offset + self.size
            raw = bytes(payload[start:start + length])
            return _cstr(raw) if self.is_string else _ints(raw, self, e)
        raw = bytes(payload[self.offset:self.offset + self.size])
        if self.array_len is not None or "[" in self.type:
            return _cstr(raw) if self.is_string else _ints(raw, self, e)
        if self.size in _INT and len(raw) == self.size:
            code = _INT[self.size]
            return struct.unpack(e + (code.lower() if self.signed else code), raw)[0]
        return raw


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _ints(raw: bytes, fld: Field, e: str):
    n = fld.array_len or 0
    elem = fld.size // n if n else 0
    if not fld.data_loc and not fld.rel_loc and elem in _INT and elem * n == len(raw):
        code = _INT[elem]
        return list(struct.unpack(f"{e}{n}{code.lower() if fld.signed else code}", raw))
    return raw


def parse_field(line: str) -> Field | None:
    """The :class:`Field` of one format line, None for other lines."""
    m = _FIELD.match(line)
    if not m:
        return None
    decl = m["decl"].strip()
    data_loc = decl.startswith("__data_loc")
    rel_loc = decl.startswith("__rel_loc")
    body = re.sub(r"^__(?:data|rel)_loc\s+", "", decl)
    # the type may carry the brackets (__data_loc char[] name) or the name may
    name_m = _NAME.search(body)
    if not name_m:
        raise FormatSyntaxError(f"no field name in {line.strip()!r}")
    name = name_m["name"]
    ctype = body[:name_m.start()].strip()
    array_len = None
    if name_m["array"]:
        inside = name_m["array"][1:-1].strip()
        array_len = int(inside, 0) if inside.isdigit() else 0
        ctype = f"{ctype}{name_m['array']}"
    elif ctype.endswith("[]"):
        array_len = 0
    size, offset = int(m["size"]), int(m["offset"])
    signed = bool(int(m["signed"])) if m["signed"] is not None else False
    if (data_loc or rel_loc) and size != 4:
        raise FormatSyntaxError(f"{name}: a __data_loc/__rel_loc field is 4 bytes, not {size}")
    return Field(name, ctype, offset, size, signed, array_len, data_loc, rel_loc)


@dataclass
class EventFormat:
    """An ``events/<system>/<event>/format`` file: name, ID, fields, print fmt."""

    system: str
    name: str
    id: int
    common: tuple[Field, ...]
    fields: tuple[Field, ...]
    print_fmt: str
    text: str = field(repr=False)

    @property
    def key(self) -> str:
        return f"{self.system}:{self.name}"

    def field(self, name: str) -> Field | None:
        for f in (*self.common, *self.fields):
            if f.name == name:
                return f
        return None

    def swap_payload(self, payload: bytes) -> bytes:
        """*payload* with every number in the other byte order (integer fields,
        elements of integer arrays, the ``__data_loc`` words); strings and the
        bytes no field covers are kept.  Replaying a big-endian recording into
        a little-endian fake (or back) needs this; the layout stays the file's."""
        out = bytearray(payload)
        for f in (*self.common, *self.fields):
            if f.offset + f.size > len(out):
                continue
            if f.data_loc or f.rel_loc:
                elem = 4
            elif f.is_string:
                continue
            elif f.array_len:
                elem = f.size // f.array_len
            else:
                elem = f.size
            if elem not in (2, 4, 8) or f.size % elem:
                continue
            for at in range(f.offset, f.offset + f.size, elem):
                out[at:at + elem] = out[at:at + elem][::-1]
        return bytes(out)

    def decode(self, payload: bytes, endian: str, common: bool = False) -> dict:
        """``{field: value}`` of *payload* (with the ``common_*`` fields if *common*)."""
        fields = (*self.common, *self.fields) if common else self.fields
        return {f.name: f.decode(payload, endian) for f in fields}


def parse_format(text: str, system: str | None = None) -> EventFormat:
    """Parse a ``format`` file.  *system* names the directory it came from
    (trace.dat stores it beside the text; the text itself does not say)."""
    name = ident = None
    common: list[Field] = []
    fields: list[Field] = []
    print_fmt = ""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("name:"):
            name = line[5:].strip()
        elif line.startswith("ID:"):
            try:
                ident = int(line[3:].strip())
            except ValueError:
                raise FormatSyntaxError(f"bad ID line {line!r}") from None
        elif line.startswith("print fmt:"):  # the last line; "\n" in its format string
            print_fmt = "\n".join([line[10:], *lines[i + 1:]]).strip()  # is a new line
            break
        else:
            fld = parse_field(line)
            if fld is not None:
                (common if fld.name.startswith("common_") else fields).append(fld)
    if not name or ident is None:
        raise FormatSyntaxError("no 'name:' or 'ID:' line")
    if not common and not fields:
        raise FormatSyntaxError(f"{name}: no field lines")
    return EventFormat(system or "", name, ident, tuple(common), tuple(fields), print_fmt, text)


# --- events/header_page: struct buffer_data_page -----------------------------

@dataclass(frozen=True)
class PageHeader:
    """Where ``header_page`` puts the page time, the commit word and the data:
    ``commit`` is 8 bytes on a 64-bit kernel, 4 on a 32-bit one."""

    timestamp_offset: int
    commit_offset: int
    commit_size: int
    data_offset: int
    data_size: int

    @property
    def page_size(self) -> int:
        return self.data_offset + self.data_size


def parse_header_page(text: str) -> PageHeader:
    fields = {f.name: f for f in map(parse_field, text.splitlines()) if f}
    try:
        ts, commit, data = fields["timestamp"], fields["commit"], fields["data"]
    except KeyError as missing:
        raise FormatSyntaxError(f"header_page has no {missing.args[0]} field") from None
    if ts.size != 8 or ts.offset != 0:
        raise FormatSyntaxError(f"header_page timestamp is {ts.size} bytes at {ts.offset}, "
                                "not 8 at 0")
    if commit.size not in (4, 8) or commit.offset != 8:
        raise FormatSyntaxError(f"header_page commit is {commit.size} bytes at "
                                f"{commit.offset}, not 4 or 8 at 8")
    if data.offset != commit.offset + commit.size:
        raise FormatSyntaxError(f"header_page data at {data.offset}, not after the commit")
    return PageHeader(ts.offset, commit.offset, commit.size, data.offset, data.size)


# --- events/header_event: struct ring_buffer_event ---------------------------

@dataclass(frozen=True)
class EventHeader:
    """``header_event``: the 5-bit type_len / 27-bit time_delta word and the
    type_len values of padding, time extend and absolute time stamp."""

    type_len_bits: int = 5
    time_delta_bits: int = 27
    padding: int = 29
    time_extend: int = 30
    time_stamp: int = 31
    data_max_type_len: int = 28


# what every kernel since 2.6.31 prints (a raw capture may not include it)
DEFAULT_HEADER_EVENT = """\
# compressed entry header
\ttype_len    :    5 bits
\ttime_delta  :   27 bits
\tarray       :   32 bits

\tpadding     : type == 29
\ttime_extend : type == 30
\ttime_stamp : type == 31
\tdata max type_len  == 28
"""


def parse_header_event(text: str) -> EventHeader:
    def number(pattern: str) -> int:
        m = re.search(pattern, text)
        if not m:
            raise FormatSyntaxError(f"header_event has no line matching {pattern!r} "
                                    "(a ring buffer older than 2.6.31?)")
        return int(m.group(1))

    hdr = EventHeader(
        type_len_bits=number(r"type_len\s*:\s*(\d+)\s*bits"),
        time_delta_bits=number(r"time_delta\s*:\s*(\d+)\s*bits"),
        padding=number(r"padding\s*:\s*type\s*==\s*(\d+)"),
        time_extend=number(r"time_extend\s*:\s*type\s*==\s*(\d+)"),
        time_stamp=number(r"time_stamp\s*:\s*type\s*==\s*(\d+)"),
        data_max_type_len=number(r"data max type_len\s*==\s*(\d+)"),
    )
    if (hdr.type_len_bits, hdr.time_delta_bits) != (5, 27):
        raise FormatSyntaxError(f"header_event has a {hdr.type_len_bits}/"
                                f"{hdr.time_delta_bits}-bit event header, not 5/27")
    return hdr


# --- /proc/kallsyms and saved_cmdlines ---------------------------------------

def parse_cmdlines(text: str) -> dict[int, str]:
    """``saved_cmdlines``: one ``<pid> <comm>`` a line."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        pid, _, comm = line.strip().partition(" ")
        if pid.lstrip("-").isdigit():
            out[int(pid)] = comm
    return out


class Kallsyms:
    """``/proc/kallsyms`` text: ``addr type name [module]`` lines, looked up
    as ``%pS`` prints (``name+0xoff``)."""

    def __init__(self, text: str):
        syms = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 3:
                try:
                    syms.append((int(parts[0], 16), parts[2]))
                except ValueError:
                    continue
        syms.sort()
        self._addrs = [a for a, _ in syms]
        self._names = [n for _, n in syms]

    def __len__(self) -> int:
        return len(self._addrs)

    def lookup(self, addr: int) -> tuple[str, int] | None:
        import bisect

        i = bisect.bisect_right(self._addrs, addr) - 1
        if i < 0 or self._addrs[i] == 0:
            return None
        return self._names[i], addr - self._addrs[i]
