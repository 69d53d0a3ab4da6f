"""Fetch arguments of probe events: ``traceprobe_parse_probe_arg`` and what
it calls (kernel/trace/trace_probe.c).

``NAME=FETCHARG[:TYPE]`` with the fetch args ``$retval $stackN $stack
$comm $argN %reg @addr @+foffs @sym +|-[u]offs(FETCHARG) \\imm \\"str"``,
the types of ``probe_fetch_types`` and arrays ``TYPE[N]``; where the
kernel has ``CONFIG_PROBE_EVENTS_BTF_ARGS`` (:class:`~.trace_probe.ProbeFacts`),
an argument named by itself (``count`` -> ``count``), function parameters
by name and ``$arg*``, and ``%pd``/``%pD`` (:mod:`.trace_btf`).  Only what
decides acceptance and the event's layout is kept of the fetch program
(its ops), as the fake never reads memory.
"""

from __future__ import annotations

import errno
import re
from typing import Optional

from fakedebugfs.engine.ftrace.kstrto import kstrtoull
from fakedebugfs.engine.ftrace.trace_probe import (FETCH_INSN_MAX, FETCH_TYPES, FL_FENTRY,
    FL_FPROBE, FL_KERNEL, FL_LOC_MASK, FL_RETURN, FL_TEVENT, MAX_ARG_NAME_LEN, MAX_ARGSTR_LEN,
    MAX_ARRAY_LEN, MAX_PROBE_EVENT_SIZE, PARAM_MAX_STACK, REGISTERS, RESERVED, FetchType,
    ProbeArg, ProbeError, ProbeFacts, ProbeLog, find_fetch_type, is_good_name)
from fakedebugfs.engine.ftrace.trace_btf import btf_fetch_type, check_btf_string, parse_btf_arg


class _Ctx:
    """``traceprobe_parse_context``: flags and the offset into the word."""

    def __init__(self, flags: int, log: ProbeLog, event_fields=None, facts=None,
                 funcname=None):
        self.flags, self.log, self.offset, self.event_fields = flags, log, 0, event_fields
        self.facts, self.funcname = facts or ProbeFacts(), funcname
        self.last_type = None  # the BTF type of what was fetched last
        self.proto = False  # the function's BTF prototype (False: not looked up)

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
        raise ctx.err(ctx.offset, err)  # at the argument's body (eprobes_syntax_errors.tc)
    if var.startswith("retval"):
        if not ctx.flags & FL_RETURN:
            raise ctx.err(ctx.offset, "RETVAL_ON_PROBE")
        if ctx.flags & FL_KERNEL and ctx.facts.btf_args:
            parse_btf_arg(arg, ops, ctx)
            return
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
        ctx.last_type = None  # a dereference drops the BTF type it read through
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
    elif c.isalpha() or c == "_":  # a BTF variable
        loc = ctx.flags & FL_LOC_MASK
        if loc not in (FL_KERNEL | FL_FENTRY, FL_KERNEL | FL_RETURN):
            raise ctx.err(ctx.offset, "NOSUP_BTFARG")
        if ctx.facts.btf_args:
            parse_btf_arg(arg, ops, ctx)
            return
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
                    offset: int, event_fields=None, facts=None, funcname=None) -> ProbeArg:
    """``traceprobe_parse_probe_arg`` of the *i*-th argument word *arg*
    (*args*: those before it; *offset*: where its data goes; *facts*: the
    kernel's :class:`ProbeFacts`; *funcname*: the probed function, for BTF)."""
    ctx = _Ctx(flags, log, event_fields, facts, funcname)
    eq = arg.find("=")
    if eq >= 0:
        if eq > MAX_ARG_NAME_LEN:
            raise log.err(0, "ARG_NAME_TOO_LONG")
        if eq == 0:
            raise log.err(0, "NO_ARG_NAME")
        name, body = arg[:eq], arg[eq + 1:]
    else:  # generate_probe_arg_name: with BTF args, the argument itself if a name
        name = arg.split(":", 1)[0] if ctx.facts.btf_args else ""
        name, body = (name if is_good_name(name) else f"arg{i + 1}"), arg
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
    if ctx.last_type is not None:  # the BTF type, unless one was given
        if t is None:
            parg.type = btf_fetch_type(ctx)
        elif "string" in t:
            check_btf_string(t, parg.ops, ctx)
    if ctx.facts.event_too_big and offset + parg.size > MAX_PROBE_EVENT_SIZE:
        raise ctx.err(ctx.offset, "EVENT_TOO_BIG", errno.E2BIG)
    _finalize(parg.ops, parg, t, body.find(":") + 1 if t is not None else 0, ctx)
    return parg


def same_args(a: list, b: list) -> int:
    """``trace_probe_compare_arg_type``: 0, or the first differing index + 1."""
    if len(a) != len(b):
        return min(len(a), len(b)) + 1
    for i, (x, y) in enumerate(zip(a, b)):
        if x.type != y.type or x.count != y.count or x.name != y.name:
            return i + 1
    return 0


__all__ = ["parse_probe_arg", "same_args"]
