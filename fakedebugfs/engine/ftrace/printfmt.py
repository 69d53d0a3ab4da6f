"""An interpreter of the kernel's ``print fmt`` (``TP_printk``) for the text
of ``trace`` and ``trace_pipe``.

The ``print fmt:`` line of a ``format`` file is the C source of the event's
``TP_printk(fmt, args...)``: a format string for the kernel's ``vsnprintf``
and C expressions over ``REC->field``.  :func:`compile_print_fmt` parses it
once (cached) into a :class:`PrintFmt` whose :meth:`PrintFmt.render` gives
the text ``trace_raw_output_<call>`` prints for one decoded record.

Supported: conversions ``%d %i %u %x %X %o %c %s %p %%`` with flags
``-+ #0``, width and precision (also ``*``), length ``hh h l ll z t j``;
``%p`` extensions ``%pS %pB %ps %pf %px %pK`` (symbols from the fake
kallsyms through :class:`~.output.OutputContext`, ``%p`` hashed as
``OutputContext.ptr``).  The arguments are C expressions (:mod:`.cexpr`)
that may call the helpers of ``TP_printk``: ``__get_str``,
``__get_dynamic_array``, ``__get_dynamic_array_len``,
``__print_symbolic``, ``__print_flags``, ``__print_hex``,
``__print_hex_str`` and ``__print_array`` (kernel/trace/trace_output.c),
``__get_bitmask``/``__get_cpumask`` (``%*pb`` text), and what the kernel's
headers leave in the text of 6.18's print fmts: ``jiffies_to_msecs()``
(``HZ``), ``jiffies``, ``__builtin_expect()``, ``mc_event_error_type()``,
and GNU statement expressions that print into ``p`` with
``trace_seq_printf()`` (kvmmmu) or compute ``min()`` (dma); enum
constants left unresolved come from :mod:`.kernel_enums`.  ``%p``
extensions that print the pointee of an array field (``%pU``, ``%pI4``,
``%pI6c``, ``%pISpc``, ``%pM``, ``%*pbl``) are in :mod:`.pointer_text`.
A new helper is one entry in ``HELPERS``.

Anything else raises :class:`PrintFmtError` (a ``ValueError``) at compile
time, naming what was not understood.
"""

from __future__ import annotations

import functools
import re
import time
from typing import Callable, NamedTuple, Optional

from fakedebugfs.engine.ftrace.cexpr import (INT, UCHAR, UINT, ULONG, ExprError, IntT, Node,
    Parser, PtrT, SeqMark, as_bytes, constant, convert, element, field_infos, tokenize)
from fakedebugfs.engine.ftrace.kernel_enums import KERNEL_UNIONS
from fakedebugfs.engine.ftrace.pointer_text import bitmap_string, pointee_text

PrintFmtError = ExprError  # a print fmt this interpreter cannot compile
TRACE_SEQ_SIZE = 4096  # struct trace_seq: one page per printed entry


# --- helpers of TP_printk (kernel/trace/trace_output.c) -----------------------------

def _get_str(name: str) -> Node:
    """``__get_str(field)``: the ``__data_loc`` string."""
    return Node(lambda r, o: r[name], None)


def _get_dynamic_array(name: str) -> Node:
    return Node(lambda r, o: as_bytes(r[name]), None)


def _get_dynamic_array_len(name: str) -> Node:
    return Node(lambda r, o: len(as_bytes(r[name])), ULONG)


def _entry(item) -> tuple:
    """One ``{ value, "name" }`` entry as the kernel's ``struct
    trace_print_flags`` holds it: missing members are zero, so an empty
    ``{ }`` is ``{ 0, NULL }``, the entry the kernel's loops stop at."""
    mask, name = (tuple(item) + (0, None))[:2]
    return (convert(mask, ULONG) if isinstance(mask, int) else mask, name)


def _table(entries) -> Callable:
    """``{ value, "name" }`` entries, up to the first without a name (the
    kernel's ``for (i = 0; symbol_array[i].name; i++)``): built once when
    constant (always, in the kernel's tables)."""
    def upto_null(items):
        out = []
        for mask, name in map(_entry, items):
            if not isinstance(name, str):
                break
            out.append((mask, name))
        return tuple(out)
    if all(e.const for e in entries):
        fixed = upto_null(e.fn(None, None) for e in entries)
        return lambda r, o: fixed
    fns = tuple(e.fn for e in entries)
    return lambda r, o: upto_null(f(r, o) for f in fns)


def _print_symbolic(value: Node, *table: Node) -> Node:
    """``trace_print_symbols_seq``: the name of the entry equal to the
    value, else ``0x%lx``."""
    fn, entries = value.fn, _table(table)

    def show(r, o):
        v = convert(fn(r, o), ULONG)
        for mask, name in entries(r, o):
            if convert(mask, ULONG) == v:
                return name
        return f"0x{v:x}"
    return Node(show, None)


def _print_flags(value: Node, delim: Node, *table: Node) -> Node:
    """``trace_print_flags_seq``: names of the masks fully present, in
    table order, each clearing its bits; leftover bits as ``0x%lx``; the
    table ends at a NULL name."""
    fn, dfn, entries = value.fn, delim.fn, _table(table)

    def show(r, o):
        flags, sep, out = convert(fn(r, o), ULONG), dfn(r, o), []
        for mask, name in entries(r, o):
            if not flags or not isinstance(name, str):
                break
            mask = convert(mask, ULONG)
            if flags & mask != mask:
                continue
            flags &= ~mask
            out.append(name)
        if flags:
            out.append(f"0x{flags:x}")
        return (sep if isinstance(sep, str) else "").join(out)
    return Node(show, None)


def _print_hex(buf: Node, length: Node, sep: str = " ") -> Node:
    """``trace_print_hex_seq``: ``%2.2x`` per byte, space separated."""
    b, n = buf.fn, length.fn
    return Node(lambda r, o: sep.join(f"{x:02x}" for x in as_bytes(b(r, o))[:n(r, o)]), None)


def _print_hex_str(buf: Node, length: Node) -> Node:
    return _print_hex(buf, length, "")


def _print_array(array: Node, count: Node, el_size: Node) -> Node:
    """``trace_print_array_seq``: ``{0x1,0x2}``."""
    a, n, s = array.fn, count.fn, el_size.fn

    def show(r, o):
        data, size = as_bytes(a(r, o)), s(r, o)
        if size not in (1, 2, 4, 8):
            return f"{{BAD SIZE:{size} 0x{data[0] if data else 0:x}}}"
        count = max(0, min(n(r, o), len(data) // size))  # never past the buffer
        items = [element(data, i, IntT(size, 0)) for i in range(count)]
        return "{" + ",".join(f"0x{v:x}" for v in items) + "}"
    return Node(show, None)


def _get_bitmask(name: str) -> Node:
    """``__get_bitmask``/``__get_cpumask``: ``trace_print_bitmask_seq``,
    the dynamic array printed as ``%*pb`` over all its bits."""
    return Node(lambda r, o: bitmap_string(as_bytes(r[name])), None)


def _builtin_expect(value: Node, _expected: Node) -> Node:
    """``__builtin_expect(x, c)`` (unlikely(), IS_ERR_VALUE()): *x*."""
    return value


HZ = 250  # CONFIG_HZ of the 6.18 profile's kernel (its writeback print fmts divide by 250)
INITIAL_JIFFIES = (-300 * HZ) & 0xFFFFFFFF  # include/linux/jiffies.h (unsigned int)


def _jiffies_to_msecs(j: Node) -> Node:
    """``jiffies_to_msecs()`` (kernel/time/time.c) for HZ dividing 1000:
    ``(MSEC_PER_SEC / HZ) * j`` as ``unsigned int``."""
    fn = j.fn
    return Node(lambda r, o: convert((1000 // HZ) * convert(fn(r, o), ULONG), UINT), UINT)


def _jiffies_now(r, o) -> int:
    """``jiffies`` when the line is printed: the output context's, else
    the monotonic clock's ticks since boot."""
    now = getattr(o, "jiffies", None)
    if now is not None:
        return now() if callable(now) else now
    return (INITIAL_JIFFIES + time.monotonic_ns() // (1_000_000_000 // HZ)) & ((1 << 64) - 1)


def _mc_event_error_type(value: Node) -> Node:
    """``mc_event_error_type()`` of include/ras/ras_event.h: a
    ``__print_symbolic`` over enum hw_event_mc_err_type."""
    names = ("Corrected", "Uncorrected", "Deferred", "Fatal", "Info")
    return _print_symbolic(value, *(constant((i, n)) for i, n in enumerate(names)))


def _trace_seq_buffer_ptr(seq: Node) -> Node:
    """``trace_seq_buffer_ptr(p)``: a mark where *p*'s next text goes."""
    fn = seq.fn

    def mark(r, o):
        s = fn(r, o)
        return SeqMark(s, sum(map(len, s)))
    return Node(mark, PtrT(1))


def _trace_seq_printf(seq: Node, fmt: Node, *args: Node) -> Node:
    """``trace_seq_printf(p, fmt, ...)``: appends to *p* (the NUL of a
    ``%c`` of 0 included, as the kernel's buffer holds it)."""
    if not fmt.const:
        raise PrintFmtError("trace_seq_printf() without a literal format")
    pieces, sfn = format_pieces(fmt.fn(None, None), args), seq.fn

    def printf(r, o):
        sfn(r, o).append("".join([piece(r, o) for piece in pieces]))
        return 0
    return Node(printf, None)


HELPERS: dict[str, Callable[..., Node]] = {
    "__get_str": _get_str,
    "__get_rel_str": _get_str,
    "__get_dynamic_array": _get_dynamic_array,
    "__get_rel_dynamic_array": _get_dynamic_array,
    "__get_dynamic_array_len": _get_dynamic_array_len,
    "__get_rel_dynamic_array_len": _get_dynamic_array_len,
    "__print_symbolic": _print_symbolic,
    "__print_symbolic_u64": _print_symbolic,
    "__print_flags": _print_flags,
    "__print_flags_u64": _print_flags,
    "__print_hex": _print_hex,
    "__print_hex_str": _print_hex_str,
    "__print_array": _print_array,
    "__get_bitmask": _get_bitmask,
    "__get_rel_bitmask": _get_bitmask,
    "__get_cpumask": _get_bitmask,
    "__get_rel_cpumask": _get_bitmask,
    "__builtin_expect": _builtin_expect,
    "jiffies_to_msecs": _jiffies_to_msecs,
    "mc_event_error_type": _mc_event_error_type,
    "trace_seq_buffer_ptr": _trace_seq_buffer_ptr,
    "trace_seq_printf": _trace_seq_printf,
}
_BY_FIELD = {"__get_str", "__get_rel_str", "__get_dynamic_array", "__get_rel_dynamic_array",
             "__get_dynamic_array_len", "__get_rel_dynamic_array_len", "__get_bitmask",
             "__get_rel_bitmask", "__get_cpumask", "__get_rel_cpumask"}
VARIABLES = {"jiffies": Node(_jiffies_now, ULONG)}  # kernel globals read at print time


# --- the format string (lib/vsprintf.c) ----------------------------------------------

_CONV = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d*))?"
                   r"(?P<len>hh|h|ll|l|z|t|j|L|q)?(?P<conv>[diouxXcs%]|p[A-Za-z0-9]*)")
_LEN_SIZE = {"hh": 1, "h": 2, None: 4, "l": 8, "ll": 8, "L": 8, "q": 8, "z": 8, "t": 8, "j": 8}


class Spec(NamedTuple):
    flags: str
    width: Optional[str]
    prec: Optional[str]
    size: int
    conv: str


def parse_format(fmt: str) -> list:
    """Literal text and :class:`Spec` items of a ``vsnprintf`` format."""
    items, pos = [], 0
    for m in _CONV.finditer(fmt):
        if m.start() > pos:
            items.append(fmt[pos:m.start()])
        if m.group("conv") == "%":
            items.append("%")
        else:
            items.append(Spec(m.group("flags"), m.group("width"), m.group("prec"),
                              _LEN_SIZE[m.group("len")], m.group("conv")))
        pos = m.end()
    rest = fmt[pos:]
    if "%" in rest:
        raise PrintFmtError(f"unsupported conversion in {rest!r}")
    if rest:
        items.append(rest)
    return items


def _c_text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return "(null)" if not value else "(efault)"


def _pointer(ext: str, value, out, width: Optional[int] = None) -> str:
    """``pointer()``: ``%pS``/``%pB``/``%pF`` sym+off, ``%ps``/``%pf`` the
    name, ``%px`` the raw address; of an array (bytes) ``%pU``, ``%pI4``,
    ``%pI6c``, ``%pISpc``, ``%pM``, ``%*pb[l]`` print the pointee
    (:mod:`.pointer_text`); anything else hashed like ``%p``."""
    if value.__class__ is not int and isinstance(value, (bytes, bytearray, str)):
        text = pointee_text(ext, as_bytes(value), width)
        if text is not None:
            return text
    addr = convert(value, ULONG)
    if ext[:1] in ("S", "B", "F", "R"):
        return out.sym_offset(addr)
    if ext[:1] in ("s", "f"):
        return out.sym(addr)
    if ext[:1] == "x":
        return f"{addr:016x}"
    return out.ptr(addr)


def converter(spec: Spec, width: Optional[int], prec: Optional[int]) -> Callable:
    """``(value, out) -> text``: one conversion as the kernel's
    ``vsnprintf`` prints it, built once per conversion."""
    conv, flags = spec.conv, spec.flags
    if conv[0] == "p":
        ext = conv[1:]
        return lambda v, o: _pointer(ext, v, o, width)
    head = "%" + flags.replace("#", "") + (str(width) if width is not None else "")
    dot = "" if prec is None else f".{prec}"
    if conv == "s":
        text_fmt = head + dot + "s"
        return lambda v, o: text_fmt % _c_text(v)
    if conv == "c":
        char_fmt = head + "c"
        return lambda v, o: char_fmt % chr(convert(v, UCHAR))
    t = IntT(spec.size, 1 if conv in "di" else 0)
    num_fmt = head + dot + ("d" if conv in "diu" else conv)
    if "#" in flags and conv in "xXo":
        prefix = "0" if conv == "o" else "0" + conv
        left, zero = "-" in flags, "0" in flags

        def alternate(v, o):
            v = convert(v, t)
            text = num_fmt % v
            return _alt_form(text, prefix, left, zero, width) if v else text
        return alternate
    return lambda v, o: num_fmt % convert(v, t)


def _alt_form(text: str, prefix: str, left: bool, zero: bool, width) -> str:
    """``#``: ``0x``/``0X``/``0`` before the digits, inside the width."""
    digits = text.strip()
    if zero and not left and width:
        digits = digits.lstrip("0") or "0"
        return prefix + digits.rjust(max(0, width - len(prefix)), "0")
    body = prefix + digits
    return body.ljust(width or 0) if left else body.rjust(width or 0)


def _number_of(text: Optional[str]) -> Optional[int]:
    return None if text is None else _bounded(int(text or 0))


def _bounded(n: int) -> int:
    """A width or precision: no text is longer than the ``trace_seq``
    page the kernel prints a line into."""
    return max(-TRACE_SEQ_SIZE, min(n, TRACE_SEQ_SIZE))


def _piece(spec: Spec, args) -> Callable:
    """``(rec, out) -> text`` for one conversion and its arguments (a
    ``*`` width or precision takes one each, before the value)."""
    wfn = next(args) if spec.width == "*" else None
    pfn = next(args) if spec.prec == "*" else None
    vfn = next(args)
    if wfn is None and pfn is None:
        conv = converter(spec, _number_of(spec.width), _number_of(spec.prec))
        return lambda r, o: conv(vfn(r, o), o)

    def dynamic(r, o):
        s = spec
        width = _bounded(convert(wfn(r, o), INT)) if wfn else _number_of(spec.width)
        prec = _bounded(convert(pfn(r, o), INT)) if pfn else _number_of(spec.prec)
        if width is not None and width < 0:  # a negative width left-justifies
            s, width = spec._replace(flags=spec.flags + "-"), -width
        if prec is not None and prec < 0:  # a negative precision is none
            prec = None
        return converter(s, width, prec)(vfn(r, o), o)
    return dynamic


def format_pieces(fmt, args) -> tuple:
    """``(rec, out) -> text`` per literal and conversion of the format
    *fmt* with the argument :class:`Node` s *args*."""
    if not isinstance(fmt, str):
        raise PrintFmtError("the format is not a string literal")
    items = parse_format(fmt)
    wanted = sum(1 + (i.width == "*") + (i.prec == "*") for i in items if isinstance(i, Spec))
    if wanted != len(args):
        raise PrintFmtError(f"the format wants {wanted} arguments, {len(args)} given")
    fns = iter(a.fn for a in args)
    return tuple((lambda r, o, s=item: s) if isinstance(item, str) else _piece(item, fns)
                 for item in items)


class PrintFmt:
    """A compiled ``print fmt``: :meth:`render` of a decoded record."""

    def __init__(self, text: str, fields=(), symbols=(), pointees=()):
        self.text = text
        tokens = tokenize(text)
        if not tokens or tokens[0][0] != "str":
            raise PrintFmtError("a print fmt starts with a format string")
        parser = Parser(tokens, field_infos(fields), dict(symbols), dict(pointees),
                        HELPERS, _BY_FIELD, VARIABLES, KERNEL_UNIONS)
        try:
            fmt = parser.primary().fn(None, None)
            args = parser.arguments()
        except RecursionError:
            raise PrintFmtError("expressions nested too deeply") from None
        self.pieces = format_pieces(fmt, args)

    def render(self, rec: dict, out) -> str:
        """``trace_raw_output_<call>``'s text for *rec*."""
        return "".join([piece(rec, out) for piece in self.pieces])


@functools.lru_cache(maxsize=None)
def compile_print_fmt(text: str, fields: tuple = (), symbols: tuple = (),
                      pointees: tuple = ()) -> PrintFmt:
    """The :class:`PrintFmt` of *text* over *fields* (``format`` tuples),
    with *symbols* ``((name, value), ...)`` for kernel globals the
    expressions name and *pointees* ``((ctype, size), ...)`` for pointer
    arithmetic on types not in :mod:`.ctype`.  Parsed once per arguments."""
    return PrintFmt(text, fields, symbols, pointees)


__all__ = ["PrintFmt", "PrintFmtError", "compile_print_fmt", "HELPERS", "field_infos"]
