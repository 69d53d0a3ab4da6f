"""What every probe event shares (kernel/trace/trace_probe.c, 6.18).

* :class:`ProbeLog` is ``trace_probe_log``: the command's words and the
  index of the word being parsed; :meth:`ProbeLog.err` is
  ``__trace_probe_log_err``, which raises :class:`ProbeError` carrying the
  ``error_log`` entry (the command re-joined with single spaces, the caret
  at the word's start plus the offset; past the last word: after it).
* :func:`parse_event_name` is ``traceprobe_parse_event_name``
  (``[GROUP/][EVENT]``, ``GROUP.EVENT`` too).
* :func:`parse_probe_arg` is ``traceprobe_parse_probe_arg``: ``NAME=FETCHARG[:TYPE]``
  with the fetch args ``$retval $stackN $stack $comm $argN %reg @addr
  @+foffs @sym +|-[u]offs(FETCHARG) \\imm \\"str"``, the types of
  ``probe_fetch_types`` (``u8``..``x64``, ``char``, ``string``, ``ustring``,
  ``symstr``, ``symbol``, ``b<width>@<offset>/<container>``) and arrays
  ``TYPE[N]``.  Only what decides acceptance and the event's layout is
  kept of the fetch program (its ops), as the fake never reads memory.
* :func:`probe_fields` and :func:`print_fmt` are
  ``traceprobe_define_arg_fields`` and ``__set_print_fmt``; :func:`show_args`
  is ``trace_probe_print_args``.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass, field
from typing import Optional

from fakedebugfs.engine.ftrace.kstrto import kstrtoull

MAX_TRACE_ARGS = 128
MAX_ARGSTR_LEN = 63
MAX_ARRAY_LEN = 64
MAX_ARG_NAME_LEN = 32
MAX_EVENT_NAME_LEN = 64
FETCH_INSN_MAX = 16
PARAM_MAX_STACK = 16384 // 8  # THREAD_SIZE / sizeof(long), x86_64
FIELD_STRING_IP, FIELD_STRING_RETIP, FIELD_STRING_FUNC = "__probe_ip", "__probe_ret_ip", \
    "__probe_func"
RESERVED = ("common_type", "common_flags", "common_preempt_count", "common_pid", "common_tgid",
            FIELD_STRING_IP, FIELD_STRING_RETIP, FIELD_STRING_FUNC)

# TPARG_FL_*
FL_RETURN, FL_KERNEL, FL_FENTRY, FL_TEVENT, FL_USER, FL_FPROBE, FL_TPOINT = (
    1, 2, 4, 8, 16, 32, 64)
FL_LOC_MASK = 31

# trace_probe.h's ERRORS, in order (TP_ERR_<name> -> text)
ERRORS = {
    "FILE_NOT_FOUND": "Failed to find the given file",
    "NO_REGULAR_FILE": "Not a regular file",
    "BAD_REFCNT": "Invalid reference counter offset",
    "REFCNT_OPEN_BRACE": "Reference counter brace is not closed",
    "BAD_REFCNT_SUFFIX": "Reference counter has wrong suffix",
    "BAD_UPROBE_OFFS": "Invalid uprobe offset",
    "BAD_MAXACT_TYPE": "Maxactive is only for function exit",
    "BAD_MAXACT": "Invalid maxactive number",
    "MAXACT_TOO_BIG": "Maxactive is too big",
    "BAD_PROBE_ADDR": "Invalid probed address or symbol",
    "NON_UNIQ_SYMBOL": "The symbol is not unique",
    "BAD_RETPROBE": "Retprobe address must be an function entry",
    "NO_TRACEPOINT": "Tracepoint is not found",
    "BAD_TP_NAME": "Invalid character in tracepoint name",
    "BAD_ADDR_SUFFIX": "Invalid probed address suffix",
    "NO_GROUP_NAME": "Group name is not specified",
    "GROUP_TOO_LONG": "Group name is too long",
    "BAD_GROUP_NAME": "Group name must follow the same rules as C identifiers",
    "NO_EVENT_NAME": "Event name is not specified",
    "EVENT_TOO_LONG": "Event name is too long",
    "BAD_EVENT_NAME": "Event name must follow the same rules as C identifiers",
    "EVENT_EXIST": "Given group/event name is already used by another event",
    "RETVAL_ON_PROBE": "$retval is not available on probe",
    "NO_RETVAL": "This function returns 'void' type",
    "BAD_STACK_NUM": "Invalid stack number",
    "BAD_ARG_NUM": "Invalid argument number",
    "BAD_VAR": "Invalid $-valiable specified",
    "BAD_REG_NAME": "Invalid register name",
    "BAD_MEM_ADDR": "Invalid memory address",
    "BAD_IMM": "Invalid immediate value",
    "IMMSTR_NO_CLOSE": "String is not closed with '\"'",
    "FILE_ON_KPROBE": "File offset is not available with kprobe",
    "BAD_FILE_OFFS": "Invalid file offset value",
    "SYM_ON_UPROBE": "Symbol is not available with uprobe",
    "TOO_MANY_OPS": "Dereference is too much nested",
    "DEREF_NEED_BRACE": "Dereference needs a brace",
    "BAD_DEREF_OFFS": "Invalid dereference offset",
    "DEREF_OPEN_BRACE": "Dereference brace is not closed",
    "COMM_CANT_DEREF": "$comm can not be dereferenced",
    "BAD_FETCH_ARG": "Invalid fetch argument",
    "ARRAY_NO_CLOSE": "Array is not closed",
    "BAD_ARRAY_SUFFIX": "Array has wrong suffix",
    "BAD_ARRAY_NUM": "Invalid array size",
    "ARRAY_TOO_BIG": "Array number is too big",
    "BAD_TYPE": "Unknown type is specified",
    "BAD_STRING": "String accepts only memory argument",
    "BAD_SYMSTRING": "Symbol String doesn't accept data/userdata",
    "BAD_BITFIELD": "Invalid bitfield",
    "ARG_NAME_TOO_LONG": "Argument name is too long",
    "NO_ARG_NAME": "Argument name is not specified",
    "BAD_ARG_NAME": "Argument name must follow the same rules as C identifiers",
    "USED_ARG_NAME": "This argument name is already used",
    "ARG_TOO_LONG": "Argument expression is too long",
    "NO_ARG_BODY": "No argument expression",
    "BAD_INSN_BNDRY": "Probe point is not an instruction boundary",
    "FAIL_REG_PROBE": "Failed to register probe event",
    "DIFF_PROBE_TYPE": "Probe type is different from existing probe",
    "DIFF_ARG_TYPE": "Argument type or name is different from existing probe",
    "SAME_PROBE": "There is already the exact same probe event",
    "NO_EVENT_INFO": "This requires both group and event name to attach",
    "BAD_ATTACH_EVENT": "Attached event does not exist",
    "BAD_ATTACH_ARG": "Attached event does not have this field",
    "NO_EP_FILTER": "No filter rule after 'if'",
    "NOSUP_BTFARG": "BTF is not available or not supported",
    "NO_BTFARG": "This variable is not found at this probe point",
    "NO_BTF_ENTRY": "No BTF entry for this probe point",
    "BAD_VAR_ARGS": "$arg* must be an independent parameter without name etc.",
    "NOFENTRY_ARGS": "$arg* can be used only on function entry or exit",
    "DOUBLE_ARGS": "$arg* can be used only once in the parameters",
    "ARGS_2LONG": "$arg* failed because the argument list is too long",
    "ARGIDX_2BIG": "$argN index is too big",
    "NO_PTR_STRCT": "This is not a pointer to union/structure.",
    "NOSUP_DAT_ARG": "Non pointer structure/union argument is not supported.",
    "BAD_HYPHEN": "Failed to parse single hyphen. Forgot '>''?",
    "NO_BTF_FIELD": "This field is not found.",
    "BAD_BTF_TID": "Failed to get BTF type info.",
    "BAD_TYPE4STR": "This type does not fit for string.",
    "NEED_STRING_TYPE": "$comm and immediate-string only accepts string type",
    "TOO_MANY_ARGS": "Too many arguments are specified",
    "TOO_MANY_EARGS": "Too many entry arguments specified",
}

# x86_64 pt_regs names regs_query_register_offset knows
REGISTERS = ("r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx",
             "si", "di", "orig_ax", "ip", "cs", "flags", "sp", "ss")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SYSTEM = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


class ProbeError(OSError):
    """A refused probe command: the errno and, when the kernel logs one,
    ``(subsystem, command, message, position)`` for ``error_log``."""

    def __init__(self, code: int, log: Optional[tuple] = None):
        super().__init__(code, log[2] if log else errno.errorcode.get(code, ""))
        self.log = log


class ProbeLog:
    """``trace_probe_log`` of one command."""

    def __init__(self, subsystem: str, argv: list):
        self.subsystem, self.argv, self.index = subsystem, argv, 0

    def err(self, offset: int, name: str, code: int = errno.EINVAL) -> ProbeError:
        """``__trace_probe_log_err``: the error to raise."""
        pos = sum(len(a) + 1 for a in self.argv[:self.index])
        if self.index >= len(self.argv):
            pos, offset = sum(len(a) + 1 for a in self.argv), 0
        return ProbeError(code, (self.subsystem, " ".join(self.argv), ERRORS[name],
                                 pos + offset))


def is_good_name(name: str) -> bool:
    return bool(_NAME.match(name))


def is_good_system_name(name: str) -> bool:
    """``is_good_system_name``: like a C identifier, ``.`` allowed after the first."""
    return bool(_SYSTEM.match(name))


def parse_event_name(event: str, log: ProbeLog, offset: int):
    """``traceprobe_parse_event_name``: ``(group or None, event or None)``."""
    group = None
    slash = event.find("/")
    if slash < 0:
        slash = event.find(".")
    if slash >= 0:
        if slash == 0:
            raise log.err(offset, "NO_GROUP_NAME")
        if slash + 1 > MAX_EVENT_NAME_LEN:
            raise log.err(offset, "GROUP_TOO_LONG")
        group = event[:slash]
        if not is_good_system_name(group):
            raise log.err(offset, "BAD_GROUP_NAME")
        offset += slash + 1
        event = event[slash + 1:]
    if not event:
        if slash >= 0:
            return group, None
        raise log.err(offset, "NO_EVENT_NAME")
    if len(event) >= MAX_EVENT_NAME_LEN:
        raise log.err(offset, "EVENT_TOO_LONG")
    if not is_good_name(event):
        raise log.err(offset, "BAD_EVENT_NAME")
    return group, event


# --- fetch types (probe_fetch_types) -----------------------------------------------------

@dataclass(frozen=True)
class FetchType:
    name: str
    size: int
    signed: int
    fmt: str  # the print fmt conversion
    fmttype: str  # the type the format file shows
    is_string: bool = False


FETCH_TYPES = {t.name: t for t in (
    FetchType("string", 4, 1, '\\"%s\\"', "__data_loc char[]", True),
    FetchType("ustring", 4, 1, '\\"%s\\"', "__data_loc char[]", True),
    FetchType("symstr", 4, 1, '\\"%s\\"', "__data_loc char[]", True),
    FetchType("u8", 1, 0, "%u", "u8"), FetchType("u16", 2, 0, "%u", "u16"),
    FetchType("u32", 4, 0, "%u", "u32"), FetchType("u64", 8, 0, "%Lu", "u64"),
    FetchType("s8", 1, 1, "%d", "s8"), FetchType("s16", 2, 1, "%d", "s16"),
    FetchType("s32", 4, 1, "%d", "s32"), FetchType("s64", 8, 1, "%Ld", "s64"),
    FetchType("x8", 1, 0, "0x%x", "u8"), FetchType("x16", 2, 0, "0x%x", "u16"),
    FetchType("x32", 4, 0, "0x%x", "u32"), FetchType("x64", 8, 0, "0x%Lx", "u64"),
    FetchType("char", 1, 0, "'%c'", "u8"), FetchType("symbol", 8, 0, "%pS", "u64"),
)}


def find_fetch_type(name: Optional[str], flags: int) -> Optional[FetchType]:
    """``find_fetch_type``: None (``x64``) by default; a bitfield is its
    container's ``u*``; ``symbol``/``symstr`` not for uprobes."""
    if name and flags & FL_USER and name in ("symbol", "symstr"):
        return None
    if not name:
        name = "x64"
    if name[0] == "b":
        at = name.find("/")
        if at < 0:
            return None
        try:
            bits = kstrtoull(name[at + 1:].encode(), 0)
        except OSError:
            return None
        return FETCH_TYPES.get({8: "u8", 16: "u16", 32: "u32", 64: "u64"}.get(bits, ""))
    return FETCH_TYPES.get(name)


# --- fetch args ---------------------------------------------------------------------------

@dataclass
class ProbeArg:
    """``struct probe_arg``."""

    name: str
    comm: str  # the fetch arg as written
    type: FetchType
    count: int = 0  # array length (0: not an array)
    offset: int = 0  # in the entry's argument data
    ops: list = field(default_factory=list)  # the fetch program's ops

    @property
    def fmttype(self) -> str:
        return f"{self.type.fmttype}[{self.count}]" if self.count else self.type.fmttype

    @property
    def size(self) -> int:
        return self.type.size * (self.count or 1)


class _Ctx:
    """``traceprobe_parse_context``: flags and the offset into the word."""

    def __init__(self, flags: int, log: ProbeLog, event_fields=None):
        self.flags, self.log, self.offset, self.event_fields = flags, log, 0, event_fields

    def err(self, offset: int, name: str, code: int = errno.EINVAL) -> ProbeError:
        return self.log.err(offset, name, code)


def _kstrtoul(text: str, base: int = 0) -> int:
    return kstrtoull(text.encode(), base)


def _kstrtol(text: str) -> int:
    neg = text.startswith("-")
    value = _kstrtoul(text[1:] if neg or text.startswith("+") else text)
    return -value if neg else value


def _parse_vars(arg: str, ops: list, ctx: _Ctx) -> None:
    """``parse_probe_vars``: *arg* starts with ``$``."""
    var = arg[1:]
    err = "BAD_VAR"
    if ctx.flags & FL_TEVENT:
        if var in (ctx.event_fields or ()):
            ops.append("TP_ARG")
            return
        if var in ("comm", "COMM"):
            ops.append("COMM")
            return
        ctx.offset = 0
        raise ctx.err(ctx.offset, err)
    if var.startswith("retval"):
        if not ctx.flags & FL_RETURN:
            raise ctx.err(ctx.offset, "RETVAL_ON_PROBE")
        ops.append("RETVAL")
        return
    if var.startswith("stack"):
        rest = var[5:]
        if not rest:
            ops.append("STACKP")
            return
        if rest[0].isdigit():
            try:
                param = _kstrtoul(rest, 10)
            except OSError:
                raise ctx.err(ctx.offset, err) from None
            if ctx.flags & FL_KERNEL and param > PARAM_MAX_STACK:
                raise ctx.err(ctx.offset, "BAD_STACK_NUM")
            ops.append("STACK")
            return
        raise ctx.err(ctx.offset, err)
    if var in ("comm", "COMM"):
        ops.append("COMM")
        return
    if var.startswith("arg"):  # CONFIG_HAVE_FUNCTION_ARG_ACCESS_API (x86_64)
        try:
            param = _kstrtoul(var[3:], 10)
        except OSError:
            raise ctx.err(ctx.offset, err) from None
        if not param or param > PARAM_MAX_STACK:
            raise ctx.err(ctx.offset, "BAD_ARG_NUM")
        loc = ctx.flags & FL_LOC_MASK
        if loc in (FL_KERNEL | FL_FENTRY, FL_KERNEL | FL_RETURN):
            ops.append("ARG")
            return
        raise ctx.err(ctx.offset, "NOFENTRY_ARGS")
    raise ctx.err(ctx.offset, err)


def _parse_arg(arg: str, ops: list, ctx: _Ctx) -> None:
    """``parse_probe_arg``: the fetch program of *arg*, recursively."""
    c = arg[:1]
    before = len(ops)
    if c == "$":
        _parse_vars(arg, ops, ctx)
    elif c == "%":
        if ctx.flags & (FL_TEVENT | FL_FPROBE):
            raise ctx.err(ctx.offset, "BAD_VAR")
        if arg[1:] not in REGISTERS:
            raise ctx.err(ctx.offset, "BAD_REG_NAME")
        ops.append("REG")
    elif c == "@":
        if arg[1:2].isdigit():
            try:
                _kstrtoul(arg[1:])
            except OSError:
                raise ctx.err(ctx.offset, "BAD_MEM_ADDR") from None
            ops.append("IMM")
        elif arg[1:2] == "+":
            if ctx.flags & FL_KERNEL:
                raise ctx.err(ctx.offset, "FILE_ON_KPROBE")
            try:
                _kstrtol(arg[2:])
            except OSError:
                raise ctx.err(ctx.offset, "BAD_FILE_OFFS") from None
            ops.append("FOFFS")
        else:
            if not ctx.flags & FL_KERNEL:
                raise ctx.err(ctx.offset, "SYM_ON_UPROBE")
            ops += ["SYMBOL", "IMM"]
        if len(ops) >= FETCH_INSN_MAX - 1:
            raise ctx.err(ctx.offset, "TOO_MANY_OPS")
        ops.append("DEREF")
    elif c in ("+", "-"):
        deref = "DEREF"
        if arg[1:2] == "u":
            deref = "UDEREF"
            arg = arg[0] + arg[2:]
        if arg[0] == "+":
            arg = arg[1:]
        at = arg.find("(")
        if at < 0:
            raise ctx.err(ctx.offset, "DEREF_NEED_BRACE")
        try:
            _kstrtol(arg[:at])
        except OSError:
            raise ctx.err(ctx.offset, "BAD_DEREF_OFFS") from None
        ctx.offset += at + 1 + (1 if arg[:1] != "-" else 0)
        inner = arg[at + 1:]
        close = inner.rfind(")")
        if close < 0:
            raise ctx.err(ctx.offset + len(inner), "DEREF_OPEN_BRACE")
        cur = ctx.offset
        _parse_arg(inner[:close], ops, ctx)
        ctx.offset = cur
        if ops[-1] in ("COMM", "DATA"):
            raise ctx.err(ctx.offset, "COMM_CANT_DEREF")
        if len(ops) >= FETCH_INSN_MAX - 1:
            raise ctx.err(ctx.offset, "TOO_MANY_OPS")
        ops.append(deref)
    elif c == "\\":
        if arg[1:2] == '"':
            body = arg[2:]
            if not body or body[-1] != '"':
                raise ctx.err(ctx.offset + 2 + len(body), "IMMSTR_NO_CLOSE")
            ops.append("DATA")
        else:
            imm = arg[1:]
            try:
                if imm[:1].isdigit():
                    _kstrtoul(imm)
                elif imm[:1] in ("-", "+"):
                    _kstrtol(imm)
                else:
                    raise OSError(errno.EINVAL, imm)
            except OSError:
                raise ctx.err(ctx.offset + 1, "BAD_IMM") from None
            ops.append("IMM")
    elif c.isalpha() or c == "_":  # a BTF variable: no BTF here (CONFIG_PROBE_EVENTS_BTF_ARGS off)
        loc = ctx.flags & FL_LOC_MASK
        if loc not in (FL_KERNEL | FL_FENTRY, FL_KERNEL | FL_RETURN):
            raise ctx.err(ctx.offset, "NOSUP_BTFARG")
        raise ctx.err(ctx.offset, "NOSUP_BTFARG", errno.EOPNOTSUPP)
    if len(ops) == before:
        raise ctx.err(ctx.offset, "BAD_FETCH_ARG")


def _arg_type(arg: str, parg_count: list, ctx: _Ctx):
    """``parse_probe_arg_type``: ``(fetcharg, type text or None, fetch type, count)``."""
    t = None
    count = 0
    colon = arg.find(":")
    if colon >= 0:
        t = arg[colon + 1:]
        arg = arg[:colon]
        bracket = t.find("[")
        if bracket >= 0:
            t2 = t[bracket + 1:]
            t = t[:bracket]
            close = t2.find("]")
            t2_at = colon + 1 + bracket + 1
            if close < 0:
                raise ctx.err(ctx.offset + t2_at + len(t2), "ARRAY_NO_CLOSE")
            if t2[close + 1:]:
                raise ctx.err(ctx.offset + t2_at + close + 1, "BAD_ARRAY_SUFFIX")
            try:
                count = _kstrtoul(t2[:close])
            except OSError:
                count = 0
            if not count or count > 0xFFFFFFFF:
                raise ctx.err(ctx.offset + t2_at, "BAD_ARRAY_NUM")
            if count > MAX_ARRAY_LEN:
                raise ctx.err(ctx.offset + t2_at, "ARRAY_TOO_BIG")
    offs = colon + 1 if colon >= 0 else 0  # the type's first byte (t - arg, after t++)
    if not ctx.flags & FL_TEVENT and (arg in ("$comm", "$COMM") or arg.startswith('\\"')):
        if count or (t is not None and t != "string"):
            raise ctx.err(ctx.offset + offs, "NEED_STRING_TYPE")
        ftype = FETCH_TYPES["string"]
    else:
        ftype = find_fetch_type(t, ctx.flags)
    if ftype is None:
        raise ctx.err(ctx.offset + offs, "BAD_TYPE")
    return arg, t, ftype, count


def _bitfield(bf: str, ftype: FetchType) -> bool:
    """``__parse_bitfield_probe_arg``'s check of ``b<width>@<offset>/<size>``."""
    m = re.match(r"b(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)@(0[xX][0-9a-fA-F]+|0[0-7]*|"
                 r"[1-9][0-9]*)/", bf)
    if not m:
        return False
    width, offset = int(m[1], 0), int(m[2], 0)
    return width != 0 and width + offset <= 8 * ftype.size


def _finalize(ops: list, parg: ProbeArg, t: Optional[str], t_off: int, ctx: _Ctx) -> None:
    """``finalize_fetch_insn``: the store op, the bitfield, the array."""
    last = ops[-1]
    if parg.type.is_string:
        if parg.type.name == "symstr":
            if last not in ("REG", "STACK", "RETVAL", "ARG", "DEREF", "TP_ARG"):
                raise ctx.err(ctx.offset + t_off, "BAD_SYMSTRING")
        elif last not in ("DEREF", "UDEREF", "IMM", "COMM", "DATA", "TP_ARG"):
            raise ctx.err(ctx.offset + t_off, "BAD_STRING")
        if parg.type.name == "symstr" or last in ("IMM", "COMM", "DATA", "TP_ARG") or parg.count:
            if len(ops) >= FETCH_INSN_MAX - 1:
                raise ctx.err(ctx.offset, "TOO_MANY_OPS")
            ops.append("ST_STRING")
        else:
            ops[-1] = "ST_STRING"
        store = "ST_STRING"
    elif last in ("DEREF", "UDEREF"):
        ops[-1] = store = "ST_MEM"
    else:
        if len(ops) >= FETCH_INSN_MAX - 1:
            raise ctx.err(ctx.offset, "TOO_MANY_OPS", errno.E2BIG)
        ops.append("ST_RAW")
        store = "ST_RAW"
    if t is not None and t[:1] == "b" and not _bitfield(t, parg.type):
        raise ctx.err(ctx.offset + t_off, "BAD_BITFIELD")
    if parg.count:
        if store not in ("ST_MEM", "ST_STRING"):
            raise ctx.err(ctx.offset + t_off, "BAD_STRING")
        ops.append("LP_ARRAY")


def parse_probe_arg(args: list, i: int, arg: str, flags: int, log: ProbeLog,
                    offset: int, event_fields=None) -> ProbeArg:
    """``traceprobe_parse_probe_arg`` of the *i*-th argument word *arg*
    (*args*: those before it; *offset*: where its data goes)."""
    ctx = _Ctx(flags, log, event_fields)
    eq = arg.find("=")
    if eq >= 0:
        if eq > MAX_ARG_NAME_LEN:
            raise log.err(0, "ARG_NAME_TOO_LONG")
        if eq == 0:
            raise log.err(0, "NO_ARG_NAME")
        name, body = arg[:eq], arg[eq + 1:]
    else:
        name, body = f"arg{i + 1}", arg
    if not is_good_name(name):
        raise log.err(0, "BAD_ARG_NAME")
    if name in RESERVED or any(a.name == name for a in args):
        raise log.err(0, "USED_ARG_NAME")
    ctx.offset = eq + 1 if eq >= 0 else 0
    if len(body) > MAX_ARGSTR_LEN:
        raise ctx.err(ctx.offset, "ARG_TOO_LONG", errno.E2BIG)
    if not body:
        raise ctx.err(ctx.offset, "NO_ARG_BODY")
    fetch, t, ftype, count = _arg_type(body, [], ctx)
    parg = ProbeArg(name, body, ftype, count, offset)
    _parse_arg(fetch, parg.ops, ctx)
    _finalize(parg.ops, parg, t, body.find(":") if t is not None else 0, ctx)
    return parg


def same_args(a: list, b: list) -> int:
    """``trace_probe_compare_arg_type``: 0, or the first differing index + 1."""
    if len(a) != len(b):
        return min(len(a), len(b)) + 1
    for i, (x, y) in enumerate(zip(a, b)):
        if x.type != y.type or x.count != y.count or x.name != y.name:
            return i + 1
    return 0


# --- the event: fields, print fmt, output ---------------------------------------------------

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

    def show(rec, out) -> str:
        return label(rec) + show_args(rec, args, out)

    ev = EventType(system, name, event_id, fields, print_fmt(args, kind), show,
                   encode_values=encode, size=size,
                   dyn=tuple(a.name for a in args if a.type.is_string and not a.count),
                   data_offset=size)
    return ev


__all__ = ["ERRORS", "FETCH_TYPES", "MAX_TRACE_ARGS", "MAX_EVENT_NAME_LEN", "ProbeArg",
           "ProbeError", "ProbeLog", "make_probe_event", "find_fetch_type", "is_good_name", "parse_event_name",
           "parse_probe_arg", "print_fmt", "probe_fields", "same_args", "show_args"]
