"""What a kernel probe's fetch arguments hold at a hit the fake makes
(kernel/trace/trace_probe_tmpl.h's ``process_fetch_insn`` and
trace_kprobe.c's, over what the fake knows instead of registers and memory).

The fake has no registers and no kernel memory.  What it knows at a call
of a recorded call tree (:mod:`.calltree`) is the event that started the
tree: a system call's number and arguments (``raw_syscalls:sys_enter``,
named as the fields of the profile's ``syscalls:sys_enter_<name>``), an
exec's file name (``sched:sched_process_exec``), a fork's pids.  Those
values reach a function's parameters by name, as BTF (the profile's
``btf`` file) names them (:func:`call_params`): the functions at the top
of the tree take every name they have (``do_sys_openat2(dfd, filename,
how)`` of an ``openat``: ``dfd`` and ``filename``), and a function below
one that took some takes only the names its caller had as parameters
(``getname(filename)`` under ``do_sys_openat2``, not
``path_openat(.., flags)`` under ``do_filp_open``, whose ``flags`` are
others).  A string value (the exec's file name) becomes a ``char *``
parameter pointing at it.

:func:`fetch` evaluates one argument of a probe at a call: at a
function's entry ``%di %si %dx %cx %r8 %r9`` and ``$argN`` are its
parameters in order (x86_64's calling convention), BTF names the
parameters of that name, ``%ip`` the probed address, ``$comm`` the task's
name, ``\\IMM`` and ``\\"STR"`` their values, ``+OFFS(...)`` the string at
a known address (``+0(%si):string``), ``@SYM`` the kernel data the
profile holds (:mod:`.kernel_data`); ``$retval`` (and ``%ax`` at a
return) the value returned where the fake knows it.  Everything else
(the stack, fields, other memory) is unknown: 0, and a string
the fake cannot read is stored empty, which the kernel prints as it
prints a fetch that faulted, ``(fault)``.
"""

from __future__ import annotations

import struct
import zlib
from typing import Optional

ARG_REGS = ("di", "si", "dx", "cx", "r8", "r9")  # x86_64: the first six integer parameters
USER_STRINGS = 0x7FFC00000000  # where the fake places user strings it names (exec's file)


class CallContext:
    """What the fake knows at one call: *params* (index -> value) of the
    called function, *strings* (address -> text) and the task's *comm*;
    *retval* the returned value where known."""

    __slots__ = ("params", "names", "strings", "comm", "ip", "retval", "data")

    def __init__(self, params=None, names=None, strings=None, comm: str = "", ip: int = 0,
                 retval: Optional[int] = None, data=None):
        self.params = params or {}
        self.names = names or {}
        self.strings = strings or {}
        self.comm, self.ip, self.retval = comm, ip, retval
        self.data = data  # the kernel's data the fake knows (.kernel_data), for @SYM


def event_values(ft, key: str, values) -> dict:
    """The values the event that started a tree gives, by name: a raw
    system call's arguments named after its ``syscalls:sys_enter_<name>``
    fields, another event's own arguments."""
    tps = ft.engine.tracepoints
    tp = tps.get(key)
    if tp is None or values is None:
        return {}
    named = dict(zip(tp.args, values))
    if key != "raw_syscalls:sys_enter":
        return named
    prof = getattr(ft, "profile", None)
    name = prof.syscall_names().get(named.get("id")) if prof is not None else None
    sc = tps.get(f"syscalls:sys_enter_{name[4:]}") if name and name.startswith("sys_") else None
    if sc is None:
        return {}
    args = named.get("args") or ()
    if isinstance(args, (bytes, bytearray)):  # the field's bytes (a mirrored entry)
        args = struct.unpack_from(f"<{len(args) // 8}q", args)
    return {a: args[i] for i, a in enumerate(a for a in sc.args if a != "__syscall_nr")
            if i < len(args)}


def string_address(text: str) -> int:
    """Where the fake says a user string it knows lies (deterministic)."""
    return USER_STRINGS + (zlib.crc32(text.encode(errors="surrogateescape")) & 0xFFFFFF0)


def call_params(btf, tree, known: dict) -> list:
    """Per node of *tree*: ``(params {index: value}, names {name: value},
    strings {address: text})`` of what reaches that call (see the module's
    text); None for a call that gets nothing."""
    out: list = [None] * len(tree.nodes)
    if btf is None or not known:
        return out
    passing: list = [None] * len(tree.nodes)  # the names each node hands its callees
    for k, node in enumerate(tree.nodes):
        parent = node[4]
        avail = known if parent < 0 else passing[parent]
        if avail is None:
            continue
        params = _btf_params(btf, node[3])
        taken, names, strings = _take(btf, params, avail)
        if taken:
            out[k] = (taken, names, strings)
            passing[k] = {n: avail[n] for n, _ in params if n in avail}
        elif parent < 0 or out[parent] is None:  # nothing taken yet: the entry code passes all
            passing[k] = avail
    return out


def _take(btf, params: list, avail: dict) -> tuple:
    """``(params {index: value}, names {name: value}, strings)``: the
    values of *avail* the parameters of those names take."""
    taken, names, strings = {}, {}, {}
    for i, (pname, ptype) in enumerate(params):
        if pname not in avail:
            continue
        value = avail[pname]
        if isinstance(value, (str, bytes)):
            if not _char_pointer(btf, ptype):
                continue
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            value = string_address(text)
            strings[value] = text
        elif isinstance(value, int):  # the register holds the C parameter's bits
            value &= (1 << (8 * _size(btf, ptype))) - 1
        taken[i] = names[pname] = value
    return taken, names, strings


def tracepoint_context(btf, name: str, known: dict, comm: str, ip: int) -> CallContext:
    """What a tracepoint probe on tracepoint *name* knows when it fires:
    the arguments of its ``TP_PROTO`` (its ``__probestub_`` function's
    parameters after ``__data``) that the event's fields name."""
    params = _btf_params(btf, f"__probestub_{name}")[1:] if btf is not None else []
    taken, names, strings = _take(btf, params, known)
    return CallContext(taken, names, strings, comm, ip)


def _btf_params(btf, name: str) -> list:
    """``[(name, type id)]`` of a function's BTF prototype (none for a
    compiler's clone, ``.isra.0``, whose parameters are not the source's)."""
    if "." in name:
        return []
    try:
        proto = btf.func_proto(name)
    except (OSError, ValueError):
        return []
    return btf.params(proto) if proto is not None else []


def _size(btf, tid: int) -> int:
    """Bytes of a parameter's type: an int's or enum's size, else a register's."""
    from fakedebugfs.engine.ftrace.trace_btf import KIND_ENUM, KIND_INT

    t, _ = btf.skip_modifiers(tid)
    if t is not None and t[0] in (KIND_INT, KIND_ENUM) and t[4] in (1, 2, 4, 8):
        return t[4]
    return 8


def _char_pointer(btf, tid: int) -> bool:
    from fakedebugfs.engine.ftrace.trace_btf import KIND_INT, KIND_PTR

    t, _ = btf.skip_modifiers(tid)
    if t is None or t[0] != KIND_PTR:
        return False
    elem, _ = btf.skip_modifiers(t[4])
    return elem is not None and elem[0] == KIND_INT and btf.int_data(elem) & 0xFF == 8


# --- one argument ---------------------------------------------------------------------------

def _split_type(comm: str) -> str:
    """The fetch arg without its ``:TYPE`` (an immediate string kept whole)."""
    if comm.startswith('\\"'):
        end = comm.find('"', 2)
        return comm[:end + 1] if end > 0 else comm
    return comm.split(":", 1)[0]


def _value(text: str, ctx: CallContext, at_entry: bool, is_return: bool):
    """The value of a fetch arg (no type): an int, a str, or None (unknown)."""
    if text.startswith("%"):
        reg = text[1:]
        if reg == "ip":
            return ctx.ip
        if reg == "ax" and is_return:
            return ctx.retval
        if at_entry and reg in ARG_REGS:
            return ctx.params.get(ARG_REGS.index(reg))
        return None
    if text.startswith("$"):
        var = text[1:]
        if var in ("comm", "COMM"):
            return ctx.comm
        if var == "retval":
            return ctx.retval
        if var.startswith("arg") and var[3:].isdigit():
            return ctx.params.get(int(var[3:]) - 1)
        return None
    if text.startswith('\\"'):
        return text[2:-1]
    if text.startswith("\\"):
        try:
            return int(text[1:], 0)
        except ValueError:
            return None
    if text.startswith("@"):  # the memory at a symbol (or an address)
        addr = ctx.data.address(text) if ctx.data is not None else None
        return None if addr is None else _Addr(addr)
    if text[:1] in "+-" and text.endswith(")") and "(" in text:
        open_at = text.index("(")
        offs = text[1:open_at].lstrip("u")
        try:
            delta = int(offs, 0) * (-1 if text[0] == "-" else 1)
        except ValueError:
            return None
        inner = _value(text[open_at + 1:-1], ctx, at_entry, is_return)
        if isinstance(inner, _Addr):  # a dereference inside: the pointer stored there
            raw = read_memory(ctx, int(inner), 8)
            inner = int.from_bytes(raw, "little") if raw is not None else None
        if not isinstance(inner, int):
            return None
        return _Addr((inner + delta) & 0xFFFFFFFFFFFFFFFF)
    if text[:1].isalpha() or text[:1] == "_":  # a BTF parameter (its fields unknown)
        if "->" in text or "." in text:
            return None
        return ctx.names.get(text)
    return None


class _Addr(int):
    """A dereferenced address: a string fetch reads the text there, a
    number fetch the memory there (unknown to the fake)."""


def read_memory(ctx: CallContext, addr: int, size: int) -> Optional[bytes]:
    """*size* bytes of kernel memory at *addr* where the fake knows them:
    inside a string it placed, an object of its own (its text, then NULs
    up to the next 8 bytes: the ``kmalloc`` object a ``kstrdup`` fills;
    ``+0(%di):char[4]`` of ``"ng"`` is ``{'n','g','\\0','\\0'}`` in the
    guest), else None (``copy_from_kernel_nofault`` failing)."""
    for base, text in ctx.strings.items():
        raw = text.encode(errors="surrogateescape") + b"\0"
        raw += bytes(-len(raw) % 8)
        if base <= addr and addr + size <= base + len(raw):
            return raw[addr - base:addr - base + size]
    return ctx.data.read(addr, size) if ctx.data is not None else None


def read_string(ctx: CallContext, addr: int) -> str:
    """``fetch_store_string``: the NUL-terminated text at *addr*, "" (printed
    ``(fault)``) where the fake knows no string there."""
    for base, text in ctx.strings.items():
        raw = text.encode(errors="surrogateescape")
        if base <= addr <= base + len(raw):
            return raw[addr - base:].decode(errors="surrogateescape")
    known = ctx.data.string(addr) if ctx.data is not None else None
    return known if known is not None else ""


def _bitfield(comm: str):
    """``(width, offset)`` of a ``:b<width>@<offset>/<size>`` type, else None."""
    t = comm.rpartition(":")[2]
    if not t.startswith("b") or "@" not in t or "/" not in t:
        return None
    try:
        width, _, rest = t[1:].partition("@")
        return int(width, 0), int(rest.partition("/")[0], 0)
    except ValueError:
        return None


def _from_memory(arg, ctx: CallContext, addr: int):
    """A number (or an array's numbers) read at *addr* as the arg's type
    (``probe_mem_read``, then ``fetch_apply_bitfield``); 0 where unknown."""
    size, n = arg.type.size, arg.count or 1
    raw = read_memory(ctx, addr, size * n)
    if raw is None:
        return [0] * arg.count if arg.count else 0
    vals = [int.from_bytes(raw[i * size:(i + 1) * size], "little", signed=bool(arg.type.signed))
            for i in range(n)]
    bf = _bitfield(arg.comm)
    if bf is not None:
        bits = 8 * size
        width, offset = bf
        vals = [((v & ((1 << bits) - 1)) >> offset) & ((1 << width) - 1) for v in vals]
    return vals if arg.count else vals[0]


def fetch(arg, ctx: CallContext, at_entry: bool = True, is_return: bool = False):
    """The value one :class:`~.trace_probe.ProbeArg` records at a call."""
    v = _value(_split_type(arg.comm), ctx, at_entry, is_return)
    if arg.type.name == "symstr":  # the value's symbol, as sprint_symbol prints it
        if isinstance(v, _Addr):
            raw = read_memory(ctx, int(v), 8)
            v = int.from_bytes(raw, "little") if raw is not None else None
        if not isinstance(v, int):
            return ""
        return ctx.data.symbol(v) if ctx.data is not None else f"0x{v:x}"
    if arg.type.is_string:
        if isinstance(v, str):
            return v
        if isinstance(v, int):  # the address the string is at (a char * parameter too)
            return read_string(ctx, int(v))
        return ""
    if isinstance(v, _Addr):
        return _from_memory(arg, ctx, int(v))
    if not isinstance(v, int):
        return [0] * arg.count if arg.count else 0
    return [v] + [0] * (arg.count - 1) if arg.count else v


def probe_values(probe, ctx: CallContext, head: dict, at_entry: bool = True) -> dict:
    """The fields of one hit of *probe*: *head* (``__probe_ip`` ...) and
    each argument fetched."""
    vals = dict(head)
    for arg in probe.args:
        vals[arg.name] = fetch(arg, ctx, at_entry, probe.is_return)
    return vals


__all__ = ["CallContext", "call_params", "event_values", "fetch", "probe_values",
           "read_memory", "read_string", "string_address"]
