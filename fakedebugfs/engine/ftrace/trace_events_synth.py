"""Synthetic events (kernel/trace/trace_events_synth.c, trace_synth.h, 6.12).

``echo 'name type field[; type field...]' >> synthetic_events`` defines
``events/synthetic/<name>/``; ``!name`` removes it (EBUSY while a hist
trigger's action refers to it, a hist trigger is on it, or it is enabled
in a trace array; ENOENT for no such event); opening the file with
O_TRUNC removes them all (nothing if one is busy).  What is reproduced:

* the grammar: ``check_command`` (a name and at least one ``type name``),
  ``parse_synth_field`` (``unsigned`` prefixes, ``char[N]`` strings of at
  most 256 bytes, ``char[]`` dynamic strings, ``long[]`` stacks, the
  numeric types of ``synth_field_size``), ``is_good_name`` for names and
  fields, at most 64 fields; each refusal logged in the top level's
  ``error_log`` as ``synthetic_events: error: <text>`` with the command
  and the kernel's caret;
* the event's layout (``synth_event_define_fields``: ``struct
  trace_entry`` then one u64 slot per field, 256 bytes for a fixed string,
  ``__data_loc`` slots for dynamic ones), its ``format`` with the print
  fmt ``set_synth_event_print_fmt`` makes, and its text in ``trace``
  (``print_synth_event``: ``name: field=value ...``, values printed as the
  kernel's union members are, the ``verbose`` option's formats);
* ``synthetic_events`` listing each as ``name\\ttype field; ...``.

A synthetic event fires from a hist trigger's action
(:meth:`SynthEvent.fire`, ``trace_synth``): on the triggering event's
CPU, task and time, into every trace array that enabled it.
"""

from __future__ import annotations

import errno
from typing import Optional

from fakedebugfs.engine.ftrace.events import EventType, next_event_type
from fakedebugfs.engine.ftrace.kstrto import kstrtoull
from fakedebugfs.engine.ftrace.trace_probe import ProbeError

SYNTH_SYSTEM = "synthetic"
SYNTH_FIELDS_MAX = 64
STR_VAR_LEN_MAX = 256
WRITE_BUFSIZE = 4096
U64 = (1 << 64) - 1

ERRORS = {
    "BAD_NAME": "Illegal name",
    "INVALID_CMD": "Command must be of the form: <name> field[;field] ...",
    "INVALID_DYN_CMD": "Command must be of the form: s or -:[synthetic/]<name> field[;field] ...",
    "EVENT_EXISTS": "Event already exists",
    "TOO_MANY_FIELDS": "Too many fields",
    "INCOMPLETE_TYPE": "Incomplete type",
    "INVALID_TYPE": "Invalid type",
    "INVALID_FIELD": "Invalid field",
    "INVALID_ARRAY_SPEC": "Invalid array specification",
}
# synth_field_size and synth_field_fmt
SIZES = {"s64": 8, "u64": 8, "s32": 4, "u32": 4, "s16": 2, "u16": 2, "s8": 1, "u8": 1,
         "char": 1, "unsigned char": 1, "int": 4, "unsigned int": 4, "long": 8,
         "unsigned long": 8, "bool": 1, "pid_t": 4, "gfp_t": 4}
FMTS = {"s64": "%lld", "u64": "%llu", "s32": "%d", "u32": "%u", "s16": "%d", "u16": "%u",
        "s8": "%d", "u8": "%u", "char": "%d", "unsigned char": "%u", "int": "%d",
        "unsigned int": "%u", "long": "%ld", "unsigned long": "%lu", "bool": "%d",
        "pid_t": "%d", "gfp_t": "%x"}
SPACES = " \t\n\v\f\r"


class SynthError(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.errno = code


def is_good_name(name: str) -> bool:
    """``is_good_name`` (trace.h)."""
    if not name or not (name[0].isascii() and (name[0].isalpha() or name[0] == "_")):
        return False
    return all(c.isascii() and (c.isalnum() or c == "_") for c in name[1:])


class SynthField:
    """``struct synth_field``."""

    def __init__(self, type_: str, name: str, size: int):
        self.type, self.name, self.size = type_, name, size
        self.is_dynamic = False
        self.is_string = "char[" in type_
        self.is_stack = not self.is_string and "long[" in type_
        self.is_signed = not (type_.startswith("u") or type_ == "gfp_t")
        self.offset = 0

    @property
    def fmt(self) -> str:
        if self.is_string or self.is_stack:
            return "%s"
        return FMTS.get(self.type, "%llu")


class SynthEvent:
    """``struct synth_event``: its fields, its users (``ref``) and its
    :class:`~.events.EventType` in the registry."""

    def __init__(self, name: str, fields: list, ft=None):
        self.name, self.fields, self.ft = name, fields, ft
        self.ref = 0
        self.key = f"{SYNTH_SYSTEM}:{name}"
        self.n_u64 = 0
        for f in fields:  # synth_event_define_fields
            f.offset = 8 + 8 * self.n_u64
            self.n_u64 += STR_VAR_LEN_MAX // 8 if f.is_string and not f.is_dynamic else 1

    # --- the event ---------------------------------------------------------------

    def print_fmt(self) -> str:
        """``__set_synth_event_print_fmt``."""
        head = ", ".join(f"{f.name}={f.fmt}" for f in self.fields)
        args = ""
        for f in self.fields:
            if f.is_string and f.is_dynamic:
                args += f", __get_str({f.name})"
            elif f.is_stack:
                args += f", __get_stacktrace({f.name})"
            else:
                args += f", REC->{f.name}"
        return f'"{head}"' + args

    def event_type(self, ev_id: int) -> EventType:
        decl = []
        for f in self.fields:
            if f.is_dynamic:
                decl.append((f.type, f.name, f.offset, 8, int(f.is_signed)))
            elif f.is_string:  # its format shows "char name[]" (no length: field->len 0)
                decl.append(("char", f"{f.name}[]", f.offset, f.size, int(f.is_signed)))
            else:
                decl.append((f.type, f.name, f.offset, f.size, int(f.is_signed)))
        dyn = tuple(f.name for f in self.fields if f.is_dynamic)
        return EventType(SYNTH_SYSTEM, self.name, ev_id, tuple(decl), self.print_fmt(),
                         self.show_text, encode_values=self.encode_values,
                         size=8 + 8 * self.n_u64, dyn=dyn,
                         dyn_arrays=tuple(f.name for f in self.fields if f.is_stack))

    def encode_values(self, values) -> dict:
        """The tracepoint's values (the action's variables) as field values:
        each number cut to its field's size, strings as bytes."""
        if isinstance(values, dict):
            return values
        out = {}
        for f, v in zip(self.fields, values):
            if f.is_string or f.is_stack:
                raw = v if isinstance(v, bytes) else str(v if v != 0 else "").encode()
                raw = raw.split(b"\0", 1)[0]
                out[f.name] = raw + b"\0" if f.is_dynamic else raw[:f.size]
            else:
                out[f.name] = (v if isinstance(v, int) else 0) & ((1 << (8 * f.size)) - 1)
        return out

    def show_text(self, rec: dict, out) -> str:
        """``print_synth_event``."""
        verbose = out.options.get("verbose", False) if hasattr(out, "options") else False
        parts = []
        last = len(self.fields) - 1
        for i, f in enumerate(self.fields):
            text = f"{f.fmt} " if verbose else ""
            val = rec.get(f.name)
            if f.is_string:
                s = val.decode(errors="replace") if isinstance(val, bytes) else str(val or "")
                text += f"{f.name}={s.split(chr(0), 1)[0]}"
            elif f.is_stack:
                text += f"{f.name}=STACK:\n"
                raw = val or b""
                for j in range(1, len(raw) // 8):
                    text += f"=> {out.sym_offset(int.from_bytes(raw[8 * j:8 * j + 8], 'little'))}\n"
            else:
                text += f"{f.name}={_num(f, int(val or 0))}"
                if f.type == "gfp_t":
                    from fakedebugfs.engine.core.gfp import show_gfp_flags

                    text += f" ({show_gfp_flags(int(val or 0))})"
            parts.append(text + ("" if i == last else " "))
        return "".join(parts)  # (the line's "<name>: " is the output's own)

    def check_field(self, hf, pos: int) -> bool:
        """``check_synth_field``: may the hist field feed field *pos*?"""
        if pos >= len(self.fields):
            return False
        f = self.fields[pos]
        if "char[" in (hf.type or "") and f.is_string and f.is_dynamic:
            return True
        from_stack = bool(hf.flags & (1 << 8))  # HIST_FIELD_FL_STACKTRACE
        if from_stack != f.is_stack:
            return False
        if f.is_stack:
            return True
        if f.type != hf.type:
            if f.size != hf.size or (not f.is_string and f.is_signed != bool(hf.is_signed)):
                return False
        return True

    def fire(self, tr, cpu: int, pid: int, ts: int, values: list) -> None:
        """``trace_synth``: every probe on the event's tracepoint."""
        tp = tr.engine.tracepoints.get(self.key)
        if tp is not None and tp.probes:
            tp.fire(cpu, pid, ts, tuple(values))

    # --- as a dynamic event (dyn_event_operations: synth_event_ops) ---------------

    kind = "synth"

    def show(self) -> str:  # noqa: F811 (dynamic_events' line; the trace text is show_text)
        """``synth_event_show``: ``s:synthetic/<line>``."""
        return f"s:{SYNTH_SYSTEM}/" + self.line()

    def match(self, system, event: str, argv) -> bool:
        """``synth_event_match``."""
        return self.name == event and (system is None or system == SYNTH_SYSTEM)

    @property
    def in_use(self) -> bool:
        """``synth_event_is_busy``."""
        return self.ref != 0

    def release(self) -> int:
        """``synth_event_release``: 0 or EBUSY."""
        try:
            release(self.ft, self)
        except SynthError as err:
            return err.errno
        except OSError as err:
            return err.errno
        return 0

    def line(self) -> str:
        """``__synth_event_show``."""
        fields = "; ".join(f"{f.type.replace('__data_loc ', '', 1)} {f.name}" for f in self.fields)
        return f"{self.name}\t{fields}\n"


def _num(f: SynthField, val: int) -> str:
    """A number as ``print_synth_event`` prints its union member."""
    bits = 8 * f.size if f.size in (1, 2, 4) else 64
    val &= (1 << bits) - 1
    fmt = f.fmt
    if fmt == "%x":
        return f"{val:x}"
    signed = fmt in ("%d", "%ld", "%lld")
    width = 32 if fmt == "%d" else 64  # %d reads an int; the value was promoted
    if signed and bits >= width and val >> (width - 1):
        val -= 1 << width
    return str(val)


def parse_synth_field(argv: list, errs) -> tuple:
    """``parse_synth_field``: (field, words used)."""
    prefix = ""
    if argv[0] == "unsigned":
        if len(argv) < 3:
            errs.err("INCOMPLETE_TYPE", errs.pos(argv[0]))
        prefix, field_type, field_name, used = "unsigned ", argv[1], argv[2], 3
    else:
        field_type, field_name, used = argv[0], argv[1] if len(argv) > 1 else None, 2
    if field_name is None:
        errs.err("INVALID_FIELD", errs.pos(field_type))
    bracket = field_name.find("[")
    array = field_name[bracket:] if bracket >= 0 else ""
    name = field_name[:bracket] if bracket >= 0 else field_name
    if not is_good_name(name):
        errs.err("BAD_NAME", errs.pos(field_name))
    type_ = prefix + field_type + array
    size = synth_field_size(type_)
    if size < 0:
        if array:
            errs.err("INVALID_ARRAY_SPEC", errs.pos(field_name))
        errs.err("INVALID_TYPE", errs.pos(field_type))
    dynamic = False
    if size == 0:
        if "char[" in type_ or "long[" in type_:
            type_, size, dynamic = "__data_loc " + type_, 8, True
        else:
            errs.err("INVALID_TYPE", errs.pos(field_type))
    field = SynthField(type_, name, size)
    field.is_dynamic = dynamic
    return field, used


def synth_field_size(type_: str) -> int:
    """``synth_field_size``: 0 for an unknown type or a dynamic array,
    negative for a bad string length."""
    if type_ in SIZES:
        return SIZES[type_]
    if "char[" in type_:
        start = type_.index("char[") + 5
        end = type_.find("]")
        if end < 0 or end < start or len(type_) > end + 1:
            return -1
        digits = type_[start:end]
        if len(digits) > 3:
            return -1
        if not digits:
            return 0
        try:
            size = kstrtoull(digits.encode(errors="surrogateescape"), 0)
        except OSError:
            return -1
        return -1 if size > STR_VAR_LEN_MAX else size
    return 0


class SynthErrs:
    """``last_cmd`` of trace_events_synth.c and ``synth_err``."""

    def __init__(self, ft, cmd: str):
        self.ft, self.cmd = ft, cmd

    def pos(self, text: Optional[str]) -> int:
        if text is None or not self.cmd:
            return 0
        found = self.cmd.find(text)
        return found if found >= 0 else 0

    def err(self, name: str, pos: int, code: int = errno.EINVAL):
        self.ft.log_err("synthetic_events", self.cmd.encode(errors="surrogateescape"),
                        ERRORS[name], pos)
        raise SynthError(code)


def synth_events(ft) -> list:
    """The top level's synthetic events, in creation order."""
    return ft.top.__dict__.setdefault("synth_events", [])


def find_synth_event(tr, name: str) -> Optional[SynthEvent]:
    for se in synth_events(tr):
        if se.name == name:
            return se
    return None


def create_or_delete(ft, raw: str) -> None:
    """``create_or_delete_synth_event`` of one command."""
    raw = raw.lstrip(SPACES)
    if not raw:
        return
    errs = SynthErrs(ft, raw)
    first = raw.split(";", 1)[0]
    if first[:1] != "!" and len(first.split()) < 3:  # check_command
        errs.err("INVALID_CMD", 0)
    cut = min((i for i, c in enumerate(raw) if c in " \t"), default=-1)
    if cut < 0 and raw[0] != "!":
        errs.err("INVALID_CMD", 0)
    name = raw[:cut] if cut >= 0 else raw
    if name[0] == "!":
        delete(ft, name[1:])
        return
    create_event(ft, errs, name, raw[cut:].lstrip(SPACES))


def create_event(ft, errs: SynthErrs, name: str, raw_fields: str) -> SynthEvent:
    """``__create_synth_event``."""
    if not name:
        errs.err("INVALID_CMD", 0)
    if not is_good_name(name):
        errs.err("BAD_NAME", errs.pos(name))
    if find_synth_event(ft, name) is not None:
        errs.err("EVENT_EXISTS", errs.pos(name), errno.EEXIST)
    fields: list[SynthField] = []
    for part in raw_fields.split(";"):
        argv = part.split()
        used = 0
        while len(argv) > used:
            field, n = parse_synth_field(argv[used:], errs)
            used += n
            if len(fields) == SYNTH_FIELDS_MAX:
                errs.err("TOO_MANY_FIELDS", 0)
            fields.append(field)
        if used > len(argv):
            errs.err("INVALID_CMD", 0)
    if not fields:
        errs.err("INVALID_CMD", 0)
    top = ft.top
    se = SynthEvent(name, fields, top)
    key = se.key
    if key in top.events:  # trace_add_event_call: the name is taken
        raise SynthError(errno.EEXIST)
    ev = se.event_type(next_event_type(top.by_id))
    top.engine.define(SYNTH_SYSTEM, name, tuple(f.name for f in fields))
    top.add_event(ev)
    synth_events(top).append(se)
    dyn = top.__dict__.get("dyn_events")
    if dyn is not None:  # dyn_event_add: dynamic_events lists it too
        dyn.list.append(se)
    return se


def delete(ft, name: str) -> None:
    """``synth_event_delete`` / ``destroy_synth_event``."""
    se = find_synth_event(ft, name)
    if se is None:
        raise SynthError(errno.ENOENT)
    release(ft, se)


def release(ft, se: SynthEvent) -> None:
    if se.ref or _has_triggers(ft, se.key):
        raise SynthError(errno.EBUSY)
    ft.top.remove_event(se.key)  # EBUSY while enabled
    synth_events(ft).remove(se)
    dyn = ft.top.__dict__.get("dyn_events")
    if dyn is not None and se in dyn.list:
        dyn.list.remove(se)


def _has_triggers(ft, key: str) -> bool:
    return any(tr.triggers.get(key) is not None and tr.triggers[key].list
               for tr in ft.top.arrays())


def release_all(ft) -> None:
    """``dyn_events_release_all``: all or none."""
    events = synth_events(ft)
    if any(se.ref or _has_triggers(ft, se.key) or
           any(se.key in tr.enabled for tr in ft.top.arrays()) for se in events):
        raise SynthError(errno.EBUSY)
    for se in list(events):
        release(ft, se)


def write(ft, data: bytes) -> int:
    """``trace_parse_run_command`` with ``create_or_delete_synth_event``."""
    if b"\0" in data:
        raise OSError(errno.EINVAL, "NUL in a command")
    for raw in data.split(b"\n"):
        if len(raw) >= WRITE_BUFSIZE - 1:
            raise OSError(errno.EINVAL, "Line length is too long")
        line = raw.split(b"#", 1)[0].strip(SPACES.encode()).decode(errors="surrogateescape")
        if line:
            try:
                create_or_delete(ft, line)
            except SynthError as err:
                raise OSError(err.errno, errno.errorcode.get(err.errno, "")) from None
    return len(data)


def show(ft) -> str:
    return "".join(se.line() for se in synth_events(ft))


# --- dynamic_events: the "s:" commands (create_synth_event) ------------------------------

def create(argv: list, dyn):
    """``create_synth_event``: ``s:[synthetic/]name field[;field]...``;
    ECANCELED for another type's command.  Returns the command to
    :func:`register` (the kernel registers it at once)."""
    raw = " ".join(argv)
    if not raw.startswith("s:"):
        raise ProbeError(errno.ECANCELED)
    errs = SynthErrs(dyn.ft, raw)
    try:
        cut = min((i for i, c in enumerate(raw) if c in " \t"), default=-1)
        if cut < 0:
            errs.err("INVALID_CMD", 0)
        name = raw[2:cut]
        fields = raw[cut:].lstrip(SPACES)
        if "/" in name:
            if not name.startswith(SYNTH_SYSTEM + "/"):
                errs.err("INVALID_DYN_CMD", 0)
            name = name[len(SYNTH_SYSTEM) + 1:]
        if len((name + raw[cut:]).split(";", 1)[0].split()) < 3:  # check_command
            errs.err("INVALID_CMD", 0)
        return ("synth", name, fields, errs)
    except SynthError as err:
        raise ProbeError(err.errno) from None


def register(cmd, dyn) -> None:
    _, name, fields, errs = cmd
    try:
        create_event(dyn.ft, errs, name, fields)
    except SynthError as err:
        raise ProbeError(err.errno) from None


__all__ = ["SYNTH_FIELDS_MAX", "SYNTH_SYSTEM", "SynthEvent", "SynthField", "create_or_delete",
           "find_synth_event", "release_all", "show", "synth_events", "write"]
