"""A hist trigger's fields (``struct hist_field`` of kernel/trace/
trace_events_hist.c, 6.12): what a key, a value, a variable or an
expression is, how its text is parsed (``parse_expr``, ``parse_atom``,
``parse_field``: modifiers, constants, ``$var`` references, ``-(...)``,
``+ - * /`` evaluated left to right), its name as the ``hist`` file and the
trigger list print it (``hist_field_name``, ``expr_str``,
``hist_field_print``) and its value when the event fires
(``hist_fn_call``), read from the event's record bytes as the kernel
reads them (a signed field sign-extended to u64, a string up to its NUL).

:class:`FieldParser` is one of :class:`~.trace_events_hist.HistData`'s
bases; it needs ``ev`` (the event), ``tr``, ``err`` (``hist_err``) and
the variable lookups of the trigger.
"""

from __future__ import annotations

import errno
from typing import Optional

from fakedebugfs.engine.ftrace.kstrto import kstrtoull

U64 = (1 << 64) - 1
MAX_FILTER_STR_VAL = 256
HIST_STACKTRACE_DEPTH = 16
HIST_STACKTRACE_SIZE = HIST_STACKTRACE_DEPTH * 8
HIST_DIV_SHIFT = 20

# enum hist_field_flags
FL_HITCOUNT, FL_KEY, FL_STRING, FL_HEX = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FL_SYM, FL_SYM_OFFSET, FL_EXECNAME, FL_SYSCALL = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FL_STACKTRACE, FL_LOG2, FL_TIMESTAMP, FL_TIMESTAMP_USECS = 1 << 8, 1 << 9, 1 << 10, 1 << 11
FL_VAR, FL_EXPR, FL_VAR_REF, FL_CPU = 1 << 12, 1 << 13, 1 << 14, 1 << 15
FL_ALIAS, FL_BUCKET, FL_CONST, FL_PERCENT, FL_GRAPH = 1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20

# enum field_op_id
OP_NONE, OP_PLUS, OP_MINUS, OP_UNARY_MINUS, OP_DIV, OP_MULT = range(6)
OP_CHAR = {OP_MINUS: "-", OP_PLUS: "+", OP_DIV: "/", OP_MULT: "*"}

# get_hist_field_flags: the first that is set names the modifier
FLAG_NAMES = ((FL_HEX, "hex"), (FL_SYM, "sym"), (FL_SYM_OFFSET, "sym-offset"),
              (FL_EXECNAME, "execname"), (FL_SYSCALL, "syscall"), (FL_LOG2, "log2"),
              (FL_BUCKET, "buckets"), (FL_TIMESTAMP_USECS, "usecs"), (FL_PERCENT, "percent"),
              (FL_GRAPH, "graph"), (FL_STACKTRACE, "stacktrace"))


class HistError(Exception):
    """A refused trigger: its errno (the error_log entry already made)."""

    def __init__(self, code: int = errno.EINVAL):
        super().__init__(code)
        self.errno = code


def flags_str(flags: int) -> Optional[str]:
    for bit, name in FLAG_NAMES:
        if flags & bit:
            return name
    return None


class EvField:
    """``struct ftrace_event_field``: name, C type as the kernel keeps it
    (``char[16]``, ``__data_loc char[]``), offset, size, signedness and
    ``filter_assign_type``'s kind."""

    __slots__ = ("name", "type", "offset", "size", "is_signed", "filter_type")

    def __init__(self, name, ctype, offset, size, is_signed, filter_type=None):
        self.name, self.type, self.offset, self.size = name, ctype, offset, size
        self.is_signed = bool(is_signed)
        self.filter_type = filter_type or filter_assign_type(ctype)

    @property
    def is_string(self) -> bool:
        return self.filter_type in ("static_string", "dyn_string", "rdyn_string", "ptr_string")


def filter_assign_type(ctype: str) -> str:
    """``filter_assign_type`` (trace_events_filter.c)."""
    if "__data_loc" in ctype:
        if "char" in ctype:
            return "dyn_string"
        if "cpumask_t" in ctype:
            return "cpumask"
    if "__rel_loc" in ctype and "char" in ctype:
        return "rdyn_string"
    if "[" in ctype and "char" in ctype:
        return "static_string"
    if ctype in ("char *", "const char *"):
        return "ptr_string"
    return "other"


COMMON = {f.name: f for f in (
    EvField("common_type", "unsigned short", 0, 2, 0),
    EvField("common_flags", "unsigned char", 2, 1, 0),
    EvField("common_preempt_count", "unsigned char", 3, 1, 0),
    EvField("common_pid", "int", 4, 4, 1))}
GENERIC = {f.name: f for f in (  # ftrace_generic_fields: offset and size 0
    EvField("CPU", "int", 0, 0, 1, "cpu"), EvField("cpu", "int", 0, 0, 1, "cpu"),
    EvField("common_cpu", "int", 0, 0, 1, "cpu"),
    EvField("COMM", "char *", 0, 0, 1, "comm"), EvField("comm", "char *", 0, 0, 1, "comm"),
    EvField("stacktrace", "char *", 0, 0, 1, "stacktrace"),
    EvField("STACKTRACE", "char *", 0, 0, 1, "stacktrace"))}


def event_fields(ev) -> dict:
    """The event's own fields by name (kept on the event)."""
    out = ev.__dict__.get("_hist_fields")
    if out is None:
        out = {}
        for ctype, name, off, size, signed in ev.fields:
            base, bracket, rest = name.partition("[")
            out[base] = EvField(base, ctype + (bracket + rest if bracket else ""), off, size, signed)
        ev.__dict__["_hist_fields"] = out
    return out


def find_event_field(ev, name: str) -> Optional[EvField]:
    """``trace_find_event_field``: the event's, the generic, the common."""
    return event_fields(ev).get(name) or GENERIC.get(name) or COMMON.get(name)


class HistField:
    """``struct hist_field``."""

    __slots__ = ("flags", "field", "buckets", "type", "operands", "hist_data", "fn", "size",
                 "offset", "is_signed", "var_name", "var_idx", "var_hist", "operator",
                 "system", "event_name", "name", "var_ref_idx", "read_once", "var_str_idx",
                 "constant", "div_multiplier")

    def __init__(self, hist_data, flags: int = 0, field: Optional[EvField] = None):
        self.hist_data, self.flags, self.field = hist_data, flags, field
        self.buckets, self.type, self.operands = 0, None, [None, None]
        self.fn, self.size, self.offset, self.is_signed = "nop", 0, 0, False
        self.var_name, self.var_idx, self.var_hist = None, 0, None
        self.operator, self.system, self.event_name, self.name = OP_NONE, None, None, None
        self.var_ref_idx, self.read_once, self.var_str_idx = 0, False, 0
        self.constant, self.div_multiplier = 0, 0


def hist_field_name(f: HistField, level: int = 0) -> str:
    """``hist_field_name``."""
    if level > 1:
        return ""
    if f.field is not None:
        return f.field.name
    if f.flags & (FL_LOG2 | FL_ALIAS | FL_BUCKET):
        return hist_field_name(f.operands[0], level + 1) if f.operands[0] else ""
    if f.flags & FL_CPU:
        return "common_cpu"
    if f.flags & (FL_EXPR | FL_VAR_REF):
        if f.system:
            fmt = "{}.{}.${}" if f.flags & FL_VAR_REF else "{}.{}.{}"
            return fmt.format(f.system, f.event_name, f.name)
        return f.name or ""
    if f.flags & FL_TIMESTAMP:
        return "common_timestamp"
    if f.flags & FL_STACKTRACE:
        return "common_stacktrace"
    if f.flags & FL_HITCOUNT:
        return "hitcount"
    return ""


def expr_field_str(f: HistField) -> str:
    """``expr_field_str``."""
    out = ""
    if f.flags & FL_VAR_REF:
        if not f.system:
            out += "$"
    elif f.flags & FL_CONST:
        out += str(f.constant)
    out += hist_field_name(f, 0)
    if f.flags and not f.flags & FL_VAR_REF:
        name = flags_str(f.flags)
        if name:
            out += "." + name
    if f.buckets:
        out += f"={f.buckets}"
    return out


def expr_str(f: HistField, level: int = 0) -> Optional[str]:
    """``expr_str``: an expression's name; None where it has none (an
    operand that is itself an expression of a modifier: the Debian 6.12
    guest keeps such a trigger, its name printed empty)."""
    if level > 1:
        return None
    if f.operands[0] is None:
        return expr_field_str(f)
    if f.operator == OP_UNARY_MINUS:
        sub = expr_str(f.operands[0], level + 1)
        return None if sub is None else f"-({sub})"
    if f.operator not in OP_CHAR:
        return None
    return expr_field_str(f.operands[0]) + OP_CHAR[f.operator] + expr_field_str(f.operands[1])


def hist_field_print(f: HistField) -> str:
    """``hist_field_print``: a field as the trigger list shows it."""
    name = hist_field_name(f, 0)
    out = f"{f.var_name}=" if f.var_name else ""
    if f.flags & FL_CPU:
        out += "common_cpu"
    elif f.flags & FL_CONST:
        out += str(f.constant)
    elif name:
        if f.flags & (FL_VAR_REF | FL_ALIAS) and not f.system:
            out += "$"
        out += name
    elif f.flags & FL_TIMESTAMP:
        out += "common_timestamp"
    if f.flags and not f.flags & (FL_VAR_REF | FL_EXPR | FL_STACKTRACE):
        mod = flags_str(f.flags)
        if mod:
            out += "." + mod
    if f.buckets:
        out += f"={f.buckets}"
    return out


def contains_operator(s: str) -> tuple:
    """``contains_operator``: ``(op, position)`` of the root operator (the
    rightmost of the lowest precedence)."""
    minus, plus = s.rfind("-"), s.rfind("+")
    if minus >= 0:
        if minus == 0:
            return OP_UNARY_MINUS, 0
        if plus > minus:
            return OP_PLUS, plus
        return OP_MINUS, minus
    if plus >= 0:
        return OP_PLUS, plus
    div, mult = s.rfind("/"), s.rfind("*")
    if mult > div:
        return OP_MULT, mult
    if div >= 0:
        return OP_DIV, div
    return OP_NONE, -1


def select_value_fn(size: int, signed: bool) -> str:
    return {8: "s64", 4: "s32", 2: "s16", 1: "s8"}.get(size, "nop") if signed else \
        {8: "u64", 4: "u32", 2: "u16", 1: "u8"}.get(size, "nop")


def order_base_2(n: int) -> int:
    return (n - 1).bit_length() if n > 1 else 0


def _div_fn(divisor: HistField) -> str:
    """``hist_field_get_div_fn``."""
    div = divisor.constant
    if not div & (div - 1):
        return "div_power2"
    if div > 1 << HIST_DIV_SHIFT:
        return "div_not_power2"
    divisor.div_multiplier = (1 << HIST_DIV_SHIFT) // div
    return "div_mult_shift"


class FieldParser:
    """``parse_expr`` and its helpers, on a :class:`HistData`."""

    def create_hist_field(self, field: Optional[EvField], flags: int,
                          var_name: Optional[str] = None) -> Optional[HistField]:
        """``create_hist_field``: None where the kernel returns NULL."""
        hf = HistField(self, flags, field)
        if flags & (FL_EXPR | FL_ALIAS):
            pass
        elif flags & FL_VAR_REF:
            hf.fn = "var_ref"
        elif flags & FL_HITCOUNT:
            hf.fn, hf.size, hf.type = "counter", 8, "u64"
        elif flags & FL_CONST:
            hf.fn, hf.size, hf.type = "const", 8, "u64"
        elif flags & FL_STACKTRACE:
            hf.fn = "stack" if field else "nop"
            hf.size, hf.type = HIST_STACKTRACE_SIZE, "unsigned long[]"
        elif flags & (FL_LOG2 | FL_BUCKET):
            hf.fn = "log2" if flags & FL_LOG2 else "bucket"
            op = self.create_hist_field(field, flags & ~(FL_LOG2 | FL_BUCKET))
            if op is None:
                return None
            hf.operands[0] = op
            hf.size, hf.type = op.size, op.type
        elif flags & FL_TIMESTAMP:
            hf.fn, hf.size, hf.type = "timestamp", 8, "u64"
        elif flags & FL_CPU:
            hf.fn, hf.size, hf.type = "cpu", 4, "unsigned int"
        elif field is None:
            pass
        elif field.is_string and field.filter_type != "ptr_string":
            flags |= FL_STRING
            hf.size, hf.type = MAX_FILTER_STR_VAL, field.type
            hf.fn = {"static_string": "string", "dyn_string": "dynstring",
                     "rdyn_string": "reldynstring"}[field.filter_type]
            if field.filter_type == "static_string":
                hf.size = field.size
        elif field.filter_type == "stacktrace":
            flags |= FL_STACKTRACE
            hf.size, hf.type, hf.fn = MAX_FILTER_STR_VAL, field.type, "stack"
        else:
            hf.size, hf.is_signed, hf.type = field.size, field.is_signed, field.type
            hf.fn = select_value_fn(field.size, field.is_signed)
            if hf.fn == "nop":
                return None
        hf.field, hf.flags, hf.var_name = field, flags, var_name
        return hf

    def parse_field(self, field_str: str, flags: int) -> tuple:
        """``parse_field``: ``(field or None, flags, buckets)``."""
        field_name, dot, modifier = field_str.partition(".")
        buckets = 0
        if dot:
            bit = {"hex": FL_HEX, "sym": FL_SYM, "symXoffset": FL_SYM_OFFSET,
                   "syscall": FL_SYSCALL, "stacktrace": FL_STACKTRACE, "log2": FL_LOG2,
                   "usecs": FL_TIMESTAMP_USECS}.get(modifier)
            if modifier == "execname" and field_name == "common_pid":
                bit = FL_EXECNAME
            if bit is not None:
                flags |= bit
            elif modifier.startswith("bucket"):
                rest = modifier[6:]
                rest = rest[1:] if rest.startswith("s") else rest
                if not rest.startswith("="):
                    self.err("BAD_FIELD_MODIFIER", self.errpos(rest))
                rest = rest[1:]
                try:
                    buckets = kstrtoull(rest.encode(errors="surrogateescape"), 0)
                except OSError:
                    buckets = 0
                if not buckets:
                    self.err("BAD_FIELD_MODIFIER", self.errpos(rest))
                flags |= FL_BUCKET
            elif modifier.startswith(("percent", "graph")) and not flags & (FL_VAR | FL_KEY):
                flags |= FL_PERCENT if modifier.startswith("percent") else FL_GRAPH
            else:
                self.err("BAD_FIELD_MODIFIER", self.errpos(modifier))
        field = None
        if field_name == "common_timestamp":
            flags |= FL_TIMESTAMP
            self.enable_timestamps = True
            if flags & FL_TIMESTAMP_USECS:
                self.attrs.ts_in_usecs = True
        elif field_name == "common_stacktrace":
            flags |= FL_STACKTRACE
        elif field_name == "common_cpu":
            flags |= FL_CPU
        elif field_name == "hitcount":
            flags |= FL_HITCOUNT
        else:
            field = find_event_field(self.ev, field_name)
            if field is None or not field.size:
                if field is not None and field.filter_type == "cpu":
                    flags |= FL_CPU
                elif field is not None and field.filter_type == "stacktrace":
                    flags |= FL_STACKTRACE
                    field = None
                else:
                    self.err("FIELD_NOT_FOUND", self.errpos(field_name))
        if modifier == "stacktrace" and (field is None or field.filter_type != "stacktrace"):
            self.err("BAD_FIELD_MODIFIER", self.errpos(field_str))
        return field, flags, buckets

    def parse_atom(self, s: str, flags: int, var_name: Optional[str]) -> HistField:
        """``parse_atom``: a constant, a ``[sys.event.]$var`` reference or a
        field with its modifier."""
        if s[:1].isdigit():
            try:
                constant = kstrtoull(s.encode(errors="surrogateescape"), 0)
            except OSError:
                self.err("EXPECT_NUMBER", self.errpos(s))
            hf = self.create_hist_field(None, flags | FL_CONST, var_name)
            hf.constant = constant
            return hf
        ref_system = ref_event = None
        ref_var = s
        first = s.find(".")
        if first >= 0 and s.find(".", first + 1) >= 0:
            ref_system, rest = s.split(".", 1)
            ref_event, ref_var = rest.split(".", 1)
        local = self.local_field_var_ref(ref_system, ref_event, ref_var)
        if local is None:
            ref = self.parse_var_ref(ref_system, ref_event, ref_var)
            if ref is not None:
                return self.create_alias(ref, var_name) if var_name else ref
        else:
            s = local
        field, flags, buckets = self.parse_field(s, flags)
        hf = self.create_hist_field(field, flags, var_name)
        if hf is None:
            raise HistError(errno.ENOMEM)
        hf.buckets = buckets
        return hf

    def create_alias(self, ref: HistField, var_name: str) -> HistField:
        """``create_alias``: a variable that is another's value."""
        alias = self.create_hist_field(None, FL_ALIAS | FL_VAR, var_name)
        alias.fn, alias.operands[0] = ref.fn, ref
        self.init_var_ref(alias, ref, ref.system, ref.event_name)
        alias.var_ref_idx = ref.var_ref_idx
        return alias

    def parse_unary(self, s: str, flags: int, var_name, n_sub: list) -> HistField:
        """``parse_unary``: ``-(expr)`` only."""
        n_sub[0] += 1
        if n_sub[0] > 3:
            self.err("TOO_MANY_SUBEXPR", self.errpos(s))
        s = s[1:]
        if "(" not in s:
            raise HistError()
        s = s[1:]
        close = s.rfind(")")
        if close < 0:
            raise HistError()
        if close + 1 != len(s):
            self.err("UNARY_MINUS_SUBEXPR", self.errpos(s))
        s = s[:close]
        expr = self.create_hist_field(None, flags | FL_EXPR, var_name)
        op = self.parse_expr(s, 0, None, n_sub)
        if op.flags & FL_STRING:
            self.err("INVALID_STR_OPERAND", self.errpos(s))
        expr.flags |= op.flags & (FL_TIMESTAMP | FL_TIMESTAMP_USECS)
        expr.fn, expr.operands[0] = "uminus", op
        expr.size, expr.is_signed, expr.operator = op.size, op.is_signed, OP_UNARY_MINUS
        expr.name, expr.type = expr_str(expr), op.type
        return expr

    def parse_expr(self, s: str, flags: int, var_name: Optional[str], n_sub: list) -> HistField:
        """``parse_expr``."""
        if n_sub[0] > 3:
            self.err("TOO_MANY_SUBEXPR", self.errpos(s))
        op, pos = contains_operator(s)
        if op == OP_NONE:
            return self.parse_atom(s, flags, var_name)
        if op == OP_UNARY_MINUS:
            return self.parse_unary(s, flags, var_name, n_sub)
        n_sub[0] += 1
        left, right = s[:pos], s[pos + 1:]
        if not left or not right:
            raise HistError()
        op1 = self.parse_expr(left, 0, None, n_sub)
        if op1.flags & FL_STRING:
            self.err("INVALID_STR_OPERAND", self.errpos(left))
        op2 = self.parse_expr(right, 0, None, n_sub)
        if op2.flags & FL_STRING:
            self.err("INVALID_STR_OPERAND", self.errpos(right))
        fn = {OP_MINUS: "minus", OP_PLUS: "plus", OP_DIV: "div", OP_MULT: "mult"}[op]
        var1, var2 = self.check_expr_operands(op1, op2)
        f1 = var1.flags if var1 else op1.flags
        f2 = var2.flags if var2 else op2.flags
        combine = f1 & f2 & FL_CONST
        flags |= FL_CONST if combine else FL_EXPR
        flags |= op1.flags & (FL_TIMESTAMP | FL_TIMESTAMP_USECS)
        expr = self.create_hist_field(None, flags, var_name)
        op1.read_once = op2.read_once = True
        expr.operands = [op1, op2]
        if op == OP_DIV and f2 & FL_CONST:
            divisor = var2.constant if var2 else op2.constant
            if not divisor:
                self.err("DIVISION_BY_ZERO", self.errpos(right), errno.EDOM)
            op2.constant = divisor
            fn = _div_fn(op2)
        expr.fn = fn
        if combine:
            expr.operands = [var1 or op1, var2 or op2]
            expr.constant = hist_fn_call(expr, None)
            expr.fn, expr.operands = "const", [None, None]
            expr.name = expr_str(expr)
        else:
            expr.size, expr.is_signed, expr.operator = op1.size, op1.is_signed, op
            expr.type = op1.type
            expr.name = expr_str(expr)
        return expr

    def check_expr_operands(self, op1: HistField, op2: HistField) -> tuple:
        """``check_expr_operands``: the variables behind references, and
        both sides in the same timestamp units."""
        var1 = var2 = None
        f1, f2 = op1.flags, op2.flags
        if f1 & (FL_VAR_REF | FL_ALIAS):
            var1 = find_var_field(op1.var_hist, op1.name)
            if var1 is None:
                raise HistError()
            f1 = var1.flags
        if f2 & (FL_VAR_REF | FL_ALIAS):
            var2 = find_var_field(op2.var_hist, op2.name)
            if var2 is None:
                raise HistError()
            f2 = var2.flags
        if (f1 & FL_TIMESTAMP_USECS) != (f2 & FL_TIMESTAMP_USECS):
            self.err("TIMESTAMP_MISMATCH", 0)
        return var1, var2

    def init_var_ref(self, ref: HistField, var: HistField, system, event_name) -> None:
        """``init_var_ref``."""
        ref.var_idx, ref.var_hist = var.var_idx, var.var_hist
        ref.size, ref.is_signed = var.size, var.is_signed
        ref.flags |= var.flags & (FL_TIMESTAMP | FL_TIMESTAMP_USECS | FL_STACKTRACE)
        ref.system, ref.event_name = system, event_name
        ref.name = var.var_name or var.name
        ref.type = var.type


def find_var_field(hist_data, var_name: str) -> Optional[HistField]:
    """``find_var_field``: the variable of that name in *hist_data*."""
    if hist_data is None:
        return None
    for f in hist_data.fields:
        if f is not None and f.flags & FL_VAR and f.var_name == var_name:
            return f
    return None


def _read(payload: bytes, field: EvField, signed: bool) -> int:
    return int.from_bytes(payload[field.offset:field.offset + field.size], "little",
                          signed=signed) & U64


def cstr(data: bytes) -> bytes:
    return data.split(b"\0", 1)[0]


def hist_fn_call(hf: HistField, ctx) -> object:
    """``hist_fn_call``: the field's value (an int, u64; bytes for strings)."""
    fn = hf.fn
    if fn in ("u64", "u32", "u16", "u8"):
        return _read(ctx.payload, hf.field, False)
    if fn in ("s64", "s32", "s16", "s8"):
        return _read(ctx.payload, hf.field, True)
    if fn == "counter":
        return 1
    if fn == "const":
        return hf.constant
    if fn == "var_ref":
        return ctx.var_ref_vals[hf.var_ref_idx] if ctx is not None and ctx.elt is not None else 0
    if fn == "timestamp":
        ts = ctx.ts
        if hf.hist_data.attrs.ts_in_usecs and ctx.clock_in_ns:
            ts = (ts + 500) // 1000
        return ts
    if fn == "cpu":
        return ctx.cpu
    if fn == "string":
        f = hf.field
        return cstr(ctx.payload[f.offset:f.offset + f.size])
    if fn in ("dynstring", "reldynstring"):
        f = hf.field
        loc = int.from_bytes(ctx.payload[f.offset:f.offset + 4], "little")
        start = (loc & 0xFFFF) + (f.offset + 4 if fn == "reldynstring" else 0)
        return cstr(ctx.payload[start:start + (loc >> 16)])
    if fn == "execname":
        return ctx.elt.private.comm.encode() if ctx.elt is not None else b"(no comm)"
    if fn == "stack":
        return b""
    ops = hf.operands
    if ops[0] is None:  # HIST_FIELD_FN_NOP (a stacktrace this fake cannot walk)
        return 0
    if fn == "log2":
        return order_base_2(hist_fn_call(ops[0], ctx))
    if fn == "bucket":
        val = hist_fn_call(ops[0], ctx)
        return (val // hf.buckets * hf.buckets) & U64
    if fn == "uminus":
        return -hist_fn_call(ops[0], ctx) & U64
    if fn == "div_power2":
        return hist_fn_call(ops[0], ctx) >> ((ops[1].constant & -ops[1].constant).bit_length() - 1)
    if fn == "div_not_power2":
        return hist_fn_call(ops[0], ctx) // ops[1].constant
    if fn == "div_mult_shift":
        val1 = hist_fn_call(ops[0], ctx)
        if val1 < 1 << HIST_DIV_SHIFT:
            return ((val1 * ops[1].div_multiplier + (1 << HIST_DIV_SHIFT) - 1) & U64) \
                >> HIST_DIV_SHIFT
        return val1 // ops[1].constant
    val1, val2 = hist_fn_call(ops[0], ctx), hist_fn_call(ops[1], ctx)
    if isinstance(val1, bytes) or isinstance(val2, bytes):
        return 0
    if fn == "plus":
        return (val1 + val2) & U64
    if fn == "minus":
        return (val1 - val2) & U64
    if fn == "mult":
        return (val1 * val2) & U64
    if fn == "div":
        if not val2:
            return U64
        if not val2 & (val2 - 1):
            return val1 >> ((val2 & -val2).bit_length() - 1)
        return val1 // val2
    return 0


__all__ = ["EvField", "FieldParser", "HistError", "HistField", "MAX_FILTER_STR_VAL",
           "event_fields", "expr_field_str", "find_event_field", "find_var_field",
           "hist_field_name", "hist_field_print", "hist_fn_call", "flags_str"]
