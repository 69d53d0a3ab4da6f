"""Probe arguments from BTF (kernel/trace/trace_btf.c and the
``CONFIG_PROBE_EVENTS_BTF_ARGS`` part of trace_probe.c, 6.12).

Where the kernel has BTF arguments (its README's ``<argname>[->field``
line: :class:`~.trace_probe.ProbeFacts`), a function's parameters are
arguments by name (``p vfs_read count``), ``$arg*`` stands for all of
them and ``$argN`` for the N-th by its name, ``$retval`` and each
parameter take the type BTF gives them, and ``->field``/``.field``
dereference structures.  The types come from the profile's ``btf`` file
(the kernel's ``/sys/kernel/btf/vmlinux``, raw), read on first use by
:class:`Btf`; a profile without it answers as a kernel whose function has
no BTF entry (``query_btf_context`` failing: ``NO_BTF_ENTRY``, ``$arg*``
``NOSUP_BTFARG``).  ``%pd``/``%pD`` (``traceprobe_expand_dentry_args``)
become the dereferences of 6.12's ``struct dentry``/``struct file``.
"""

from __future__ import annotations

import errno
import struct

from construct import Int8ul, Int16ul, Int32ul, Struct

from fakedebugfs.engine.core.layouts import packer
from fakedebugfs.engine.core.profile_files import profile_file, read_profile_file
from fakedebugfs.engine.ftrace.trace_probe import (FL_FENTRY, FL_KERNEL, FL_LOC_MASK, FL_RETURN,
    FL_TPOINT, FETCH_INSN_MAX, find_fetch_type)

# include/uapi/linux/btf.h: struct btf_header, struct btf_type
BTF_HEADER = Struct("magic" / Int16ul, "version" / Int8ul, "flags" / Int8ul,
                    "hdr_len" / Int32ul, "type_off" / Int32ul, "type_len" / Int32ul,
                    "str_off" / Int32ul, "str_len" / Int32ul)
BTF_TYPE = Struct("name_off" / Int32ul, "info" / Int32ul, "size_or_type" / Int32ul)
_HEADER, _TYPE = packer(BTF_HEADER), packer(BTF_TYPE)
BTF_MAGIC = 0xEB9F
(KIND_INT, KIND_PTR, KIND_ARRAY, KIND_STRUCT, KIND_UNION, KIND_ENUM, KIND_FWD, KIND_TYPEDEF,
 KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, KIND_FUNC, KIND_FUNC_PROTO, KIND_VAR, KIND_DATASEC,
 KIND_FLOAT, KIND_DECL_TAG, KIND_TYPE_TAG, KIND_ENUM64) = range(1, 20)
# bytes after struct btf_type: fixed, or per vlen item
_EXTRA = {KIND_INT: (4, 0), KIND_ARRAY: (12, 0), KIND_STRUCT: (0, 12), KIND_UNION: (0, 12),
          KIND_ENUM: (0, 8), KIND_FUNC_PROTO: (0, 8), KIND_VAR: (4, 0), KIND_DATASEC: (0, 12),
          KIND_DECL_TAG: (4, 0), KIND_ENUM64: (0, 12)}
MODIFIERS = (KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, KIND_TYPE_TAG)
# offsetof(struct dentry, d_name.name), offsetof(struct file, f_path.dentry): x86_64, 6.12
DENTRY_NAME, FILE_DENTRY = 0x28, 0x48
MAX_BTF_ARGS_LEN, MAX_DENTRY_ARGS_LEN = 128, 256


class Btf:
    """A raw BTF blob (``/sys/kernel/btf/vmlinux``) at *path*, read when first asked."""

    def __init__(self, path):
        self.path = path
        self.types = None  # id -> (kind, name_off, vlen, kflag, size_or_type, extra offset)

    def _load(self) -> None:
        data = read_profile_file(self.path)  # btf or btf.xz
        h = BTF_HEADER.parse(data[:BTF_HEADER.sizeof()])
        if h.magic != BTF_MAGIC:
            raise ValueError(f"{self.path}: not BTF")
        base = h.hdr_len
        self.data, self.strs = data, base + h.str_off
        types, funcs = [None], {}
        off, end = base + h.type_off, base + h.type_off + h.type_len
        while off < end:
            name_off, info, sot = _TYPE.unpack_from(data, off)
            kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
            fixed, each = _EXTRA.get(kind, (0, 0))
            types.append((kind, name_off, vlen, kflag, sot, off + 12))
            if kind == KIND_FUNC:
                funcs.setdefault(self.name(name_off), len(types) - 1)
            off += 12 + fixed + each * vlen
        self.types, self.funcs = types, funcs

    def name(self, name_off: int) -> str:
        start = self.strs + name_off
        return self.data[start:self.data.index(b"\0", start)].decode(errors="replace")

    def type(self, tid: int):
        if self.types is None:
            self._load()
        return self.types[tid] if 0 < tid < len(self.types) else None

    def skip_modifiers(self, tid: int):
        """``btf_type_skip_modifiers``: ``(type, tid)`` past typedefs and qualifiers."""
        t = self.type(tid)
        while t is not None and t[0] in MODIFIERS:
            tid = t[4]
            t = self.type(tid)
        return t, tid

    def func_proto(self, name: str):
        """``btf_find_func_proto``: the FUNC_PROTO of function *name*, or None."""
        if self.types is None:
            self._load()
        fid = self.funcs.get(name)
        if fid is None:
            return None
        proto = self.type(self.types[fid][4])
        return proto if proto is not None and proto[0] == KIND_FUNC_PROTO else None

    def params(self, proto) -> list:
        """``btf_get_func_param``: ``[(name, type id)]``."""
        return [(self.name(n), t) for n, t in
                (struct.unpack_from("<II", self.data, proto[5] + 8 * i) for i in range(proto[2]))]

    def int_data(self, t) -> int:
        return struct.unpack_from("<I", self.data, t[5])[0]

    def member(self, t, wanted: str):
        """``btf_find_struct_member``: ``(bit offset, bitfield size, type id)``
        of *wanted* in struct/union *t* (anonymous members searched after), or None."""
        stack, cur = [], 0
        while True:
            for i in range(t[2]):
                name_off, mtype, moff = struct.unpack_from("<III", self.data, t[5] + 12 * i)
                bit = moff & 0xFFFFFF if t[3] else moff
                if not name_off:
                    inner, itid = self.skip_modifiers(mtype)
                    if inner is not None and inner[0] in (KIND_STRUCT, KIND_UNION):
                        stack.append((itid, cur + bit))
                elif self.name(name_off) == wanted:
                    return cur + bit, (moff >> 24 if t[3] else 0), mtype
            if not stack:
                return None
            tid, cur = stack.pop()
            t = self.type(tid)


def btf_of(profile):
    """The :class:`Btf` of *profile*'s ``btf`` file, or None."""
    path = profile_file(getattr(profile, "path", None), "btf")
    return Btf(path) if path is not None else None


def _entry_or_return(flags: int) -> bool:
    return flags & FL_LOC_MASK in (FL_KERNEL | FL_FENTRY, FL_KERNEL | FL_RETURN)


def query_btf_context(ctx):
    """``query_btf_context``: ``(proto, params)`` of ``ctx.funcname``, or None."""
    if ctx.proto is False:
        btf = ctx.facts.btf
        proto = btf.func_proto(ctx.funcname) if btf is not None and ctx.funcname else None
        if proto is None:
            ctx.proto = None
        else:
            params = btf.params(proto)
            if ctx.flags & FL_TPOINT:
                params = params[1:]
            ctx.proto = (proto, params)
    return ctx.proto


def _split_field(varname: str, ctx):
    """``split_next_field``: ``(name, rest or None, index of rest, is_ptr)``."""
    for i, c in enumerate(varname):
        if c == "-":
            if varname[i + 1:i + 2] == ">":
                return varname[:i], varname[i + 2:], i + 2, True
            raise ctx.err(ctx.offset + i, "BAD_HYPHEN")
        if c == ".":
            return varname[:i], varname[i + 1:], i + 1, False
    return varname, None, 0, False


def parse_btf_arg(varname: str, ops: list, ctx) -> None:
    """``parse_btf_arg``: a parameter by name (or ``$retval``), then its fields."""
    if not ctx.funcname:
        raise_bare(errno.EINVAL)
    name, field, at, is_ptr = _split_field(varname, ctx)
    if not is_ptr and field is not None:
        raise ctx.err(ctx.offset + at, "NOSUP_DAT_ARG", errno.EOPNOTSUPP)
    btf = ctx.facts.btf
    if ctx.flags & FL_RETURN and name == "$retval":
        ops.append("RETVAL")
        found = query_btf_context(ctx)
        if found is None:
            if field is not None:
                raise ctx.err(ctx.offset + at, "NO_BTF_ENTRY", errno.ENOENT)
            return
        tid = found[0][4]
        if tid == 0:
            raise ctx.err(ctx.offset, "NO_RETVAL", errno.ENOENT)
    else:
        found = query_btf_context(ctx)
        if found is None or not found[1]:
            raise ctx.err(ctx.offset, "NO_BTF_ENTRY", errno.ENOENT)
        for pname, ptid in found[1]:
            if pname == name:
                ops.append("ARG" if ctx.flags & FL_FENTRY else "EDATA")
                tid = ptid
                break
        else:
            raise ctx.err(ctx.offset, "NO_BTFARG", errno.ENOENT)
    t, tid = btf.skip_modifiers(tid)
    if t is None:
        raise ctx.err(ctx.offset, "BAD_BTF_TID")
    ctx.last_type, ctx.last_bitsize, ctx.last_bitoffs = t, 0, 0
    if field is not None:
        ctx.offset += at
        _parse_btf_field(field, t, ops, ctx)


def _parse_btf_field(fieldname: str, t, ops: list, ctx) -> None:
    """``parse_btf_field``: ``->a.b->c``, each ``->`` one dereference."""
    btf = ctx.facts.btf
    while fieldname is not None:
        if t[0] != KIND_PTR:
            raise ctx.err(ctx.offset, "NO_PTR_STRCT")
        t, _ = btf.skip_modifiers(t[4])
        if t is None:
            raise ctx.err(ctx.offset, "BAD_BTF_TID")
        bitoffs, is_ptr = 0, False
        while True:
            name, rest, at, is_ptr = _split_field(fieldname, ctx)
            if t[0] not in (KIND_STRUCT, KIND_UNION):
                raise ctx.err(ctx.offset, "BAD_BTF_TID")
            found = btf.member(t, name)
            if found is None:
                raise ctx.err(ctx.offset, "NO_BTF_FIELD", errno.ENOENT)
            bit, ctx.last_bitsize, mtid = found
            bitoffs += bit
            t, _ = btf.skip_modifiers(mtid)
            if t is None:
                raise ctx.err(ctx.offset, "BAD_BTF_TID")
            if rest is None:
                fieldname = None
                break
            ctx.offset += at
            fieldname = rest
            if is_ptr:
                break
        if len(ops) >= FETCH_INSN_MAX - 1:
            raise ctx.err(ctx.offset, "TOO_MANY_OPS")
        ops.append("DEREF")
        ctx.last_bitoffs = bitoffs % 8
        ctx.last_type = t


def btf_fetch_type(ctx):
    """``find_fetch_type_from_btf_type``: the fetch type of ``ctx.last_type``."""
    t = ctx.last_type
    name = None
    if t[0] == KIND_ENUM:
        name = "s32"
    elif t[0] == KIND_ENUM64:
        name = "s64"
    elif t[0] == KIND_PTR:
        name = "x64"
    elif t[0] == KIND_INT:
        data = ctx.facts.btf.int_data(t)
        bits, signed = data & 0xFF, (data >> 24) & 1
        if bits in (8, 16, 32, 64):
            name = f"{'s' if signed else 'u'}{bits}"
        elif not signed:
            name = "u64"
    return find_fetch_type(name, ctx.flags)


def check_btf_string(typename: str, ops: list, ctx) -> None:
    """``check_prepare_btf_string_fetch``: a ``char *`` is dereferenced
    for ``string``; other types do not fit."""
    btf, t = ctx.facts.btf, ctx.last_type
    if t[0] == KIND_ARRAY:
        elem, _ = btf.skip_modifiers(struct.unpack_from("<I", btf.data, t[5])[0])
        if elem is not None and elem[0] == KIND_INT and btf.int_data(elem) & 0xFF == 8:
            return
    # btf_type_is_char_ptr reads type->type whatever the kind: an integer's
    # size is taken for a type id (6.12 takes "count:string" on a size_t
    # when BTF type 8 is an 8-bit unsigned int, as in its vmlinux)
    elem, _ = btf.skip_modifiers(t[4])
    if elem is not None and elem[0] == KIND_INT and btf.int_data(elem) & 0xFF == 8 \
            and not (btf.int_data(elem) >> 24) & 1:
        if len(ops) >= FETCH_INSN_MAX - 1:
            raise ctx.err(ctx.offset, "TOO_MANY_OPS", errno.E2BIG)
        ops.append("UDEREF" if typename[:1] == "u" else "DEREF")
        return
    raise ctx.err(ctx.offset, "BAD_TYPE4STR")


def raise_bare(code: int):
    from fakedebugfs.engine.ftrace.trace_probe import ProbeError

    raise ProbeError(code)


def expand_meta_args(argv: list, ctx, log) -> list:
    """``traceprobe_expand_meta_args`` over the fetch-arg words *argv*
    (``$arg*`` and ``$argN`` made parameter names where BTF has them)."""
    if not ctx.facts.btf_args:
        return argv
    args_idx, found = -1, False
    for i, word in enumerate(argv):
        if word.startswith("$arg"):
            log.index = i + 2
            if not _entry_or_return(ctx.flags):
                raise log.err(0, "NOFENTRY_ARGS")
            if word[4:5].isdigit():
                found = True
                continue
            if word[4:5] != "*":
                raise log.err(0, "BAD_VAR")
            if 0 <= args_idx < len(argv):
                raise log.err(0, "DOUBLE_ARGS")
            found, args_idx = True, i
    if not found:
        return argv
    proto = query_btf_context(ctx)
    if proto is None or not proto[1]:
        if args_idx != -1:
            raise log.err(0, "NOSUP_BTFARG", errno.EOPNOTSUPP)
        return argv
    params, out, used = proto[1], [], 0
    for i, word in enumerate(argv):
        log.index = i + 2
        if i == args_idx:
            for pname, _ in params:
                used += len(pname) + 1
                if used > MAX_BTF_ARGS_LEN:
                    raise log.err(0, "ARGS_2LONG", errno.E2BIG)
                out.append(pname)
            continue
        if word.startswith("$arg"):
            digits = len(word[4:]) - len(word[4:].lstrip("0123456789"))
            n, rest = int(word[4:4 + digits] or 0), word[4 + digits:]
            if rest and rest[0] != ":":
                raise log.err(0, "BAD_VAR", errno.ENOENT)
            if n == 0:
                raise log.err(0, "BAD_ARG_NUM")
            if n - 1 >= len(params):
                raise log.err(0, "NO_BTFARG", errno.ENOENT)
            new = params[n - 1][0] + rest
            used += len(new) + 1
            if used > MAX_BTF_ARGS_LEN:
                raise log.err(0, "ARGS_2LONG", errno.E2BIG)
            out.append(new)
        else:
            out.append(word)
    return out


def expand_dentry_args(argv: list) -> list:
    """``traceprobe_expand_dentry_args``: ``ARG:%pd`` is the dentry's name,
    ``ARG:%pD`` the name of the file's dentry."""
    out = []
    for word in argv:
        if len(word) >= 4 and word[-4:-1] == ":%p" and word[-1] in "dD":
            body = word[:-4]
            name, eq, fetch = body.partition("=")
            if not eq:
                name, fetch = "", body
            prefix = f"{name}=" if eq else ""
            if word[-1] == "d":
                word = f"{prefix}+0x0(+0x{DENTRY_NAME:x}({fetch})):string"
            else:
                word = f"{prefix}+0x0(+0x{DENTRY_NAME:x}(+0x{FILE_DENTRY:x}({fetch}))):string"
        out.append(word)
    return out


__all__ = ["Btf", "btf_of", "btf_fetch_type", "check_btf_string", "expand_dentry_args",
           "expand_meta_args", "parse_btf_arg", "query_btf_context"]
