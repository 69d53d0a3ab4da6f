"""The event of a probe: its fields, print fmt and text
(kernel/trace/trace_probe.c's ``traceprobe_define_arg_fields``,
``__set_print_fmt``, ``trace_probe_print_args``; trace_probe_tmpl.h).
"""

from __future__ import annotations

from fakedebugfs.engine.ftrace.trace_probe import (FIELD_STRING_FUNC, FIELD_STRING_IP,
    FIELD_STRING_RETIP, FetchType)


def probe_fields(head: list, args: list) -> tuple:
    """The format's fields: *head* ``(ctype, name, size)`` from offset 8,
    then each argument packed after it (``traceprobe_define_arg_fields``:
    no alignment)."""
    fields, off = [], 8
    for ctype, name, size in head:
        fields.append((ctype, name, off, size, 0))
        off += size
    for a in args:
        if a.count and not a.type.is_string:
            fields.append((a.type.fmttype, f"{a.name}[]", off + a.offset, a.size,
                           a.type.signed))
        else:
            fields.append((a.fmttype, a.name, off + a.offset, a.size, a.type.signed))
    return tuple(fields)


def print_fmt(args: list, kind: str) -> str:
    """``__set_print_fmt``: *kind* ``normal``, ``return`` or ``event``."""
    fmt, rec = {"normal": ("(%lx)", f", REC->{FIELD_STRING_IP}"),
                "return": ("(%lx <- %lx)", f", REC->{FIELD_STRING_FUNC}, REC->{FIELD_STRING_RETIP}"),
                "event": ("", "")}[kind]
    out = '"' + fmt
    for a in args:
        out += f" {a.name}="
        out += "{" + ",".join([a.type.fmt] * a.count) + "}" if a.count else a.type.fmt
    out += '"' + rec
    for a in args:
        get = "__get_str({}{})" if a.type.is_string else "REC->{}{}"
        if a.count:
            out += "".join(", " + get.format(a.name, f"[{j}]") for j in range(a.count))
        else:
            out += ", " + get.format(a.name, "")
    return out


def show_args(rec: dict, args: list, out) -> str:
    """``trace_probe_print_args`` over a decoded entry."""
    parts = []
    for a in args:
        value = rec.get(a.name)
        if a.count and not a.type.is_string:
            raw = value if isinstance(value, (bytes, bytearray)) else b""
            items = [_one(a.type, int.from_bytes(raw[k * a.type.size:(k + 1) * a.type.size],
                                                 "little"), out) for k in range(a.count)]
            parts.append(f" {a.name}={{{','.join(items)}}}")
        else:
            parts.append(f" {a.name}={_one(a.type, value, out)}")
    return "".join(parts)


def _one(t: FetchType, value, out) -> str:
    if t.is_string:
        return f'"{value}"' if value else "(fault)"
    v = int(value or 0) & ((1 << (8 * t.size)) - 1)
    if t.signed and v >> (8 * t.size - 1):
        v -= 1 << (8 * t.size)
    if t.name.startswith("x"):
        return f"0x{v:x}"
    if t.name == "char":
        return f"'{chr(v)}'"
    if t.name == "symbol":
        return out.sym_offset(v)
    return str(v)


def make_probe_event(system: str, name: str, event_id: int, head: list, args: list,
                     kind: str, label):
    """The :class:`~.events.EventType` of a probe: *head* ``(ctype, name,
    size)`` fields first, then the arguments; ``label(rec)`` is what the
    kernel's ``print_<type>_event`` writes before the arguments."""
    from fakedebugfs.engine.ftrace.events import EventType, field_key

    fields = probe_fields(head, args)
    size = 8 + sum(h[2] for h in head) + sum(a.size for a in args)
    keys = tuple(field_key(f[1]) for f in fields)
    arrays = {a.name: a for a in args if a.count and not a.type.is_string}

    def encode(values: tuple) -> dict:
        vals = dict(zip(keys, values))
        for key, a in arrays.items():
            v = vals.get(key)
            if isinstance(v, (list, tuple)):
                mask = (1 << (8 * a.type.size)) - 1
                vals[key] = b"".join((int(x) & mask).to_bytes(a.type.size, "little")
                                     for x in list(v)[:a.count]).ljust(a.size, b"\0")
            elif not isinstance(v, (bytes, bytearray)):
                vals[key] = bytes(a.size)
        for a in args:
            if a.type.is_string and not isinstance(vals.get(a.name), (str, bytes)):
                vals[a.name] = "" if vals.get(a.name) is None else str(vals[a.name])
        return vals

    takes_output = getattr(label, "takes_output", False)

    def show(rec, out) -> str:
        head = label(rec, out) if takes_output else label(rec)
        return head + show_args(rec, args, out)
    show.reads_options = takes_output  # (no text kept across reads: trace_output._pure)

    ev = EventType(system, name, event_id, fields, print_fmt(args, kind), show,
                   encode_values=encode, size=size,
                   dyn=tuple(a.name for a in args if a.type.is_string and not a.count),
                   data_offset=size)
    return ev


__all__ = ["make_probe_event", "print_fmt", "probe_fields", "show_args"]
