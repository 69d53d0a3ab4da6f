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
``OutputContext.ptr``).  Expressions: ``REC->field``, ``REC->arr[i]``,
integer, character and string literals, casts to C types (integer casts
truncate; pointer casts scale pointer arithmetic by the pointee's size when
known), unary ``- ~ !``, the binary operators of C with the usual
arithmetic conversions, ``?:``, ``sizeof(type)``, and the helpers
``__get_str``, ``__get_dynamic_array``, ``__get_dynamic_array_len``,
``__print_symbolic``, ``__print_flags``, ``__print_hex``,
``__print_hex_str`` and ``__print_array`` (kernel/trace/trace_output.c).
New helpers are one entry in ``HELPERS``.

Anything else raises :class:`PrintFmtError` (a ``ValueError``) at compile
time, naming what was not understood.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, NamedTuple, Optional

from . import ctype as C


class PrintFmtError(ValueError):
    """A print fmt this interpreter cannot compile."""


# --- tokens -----------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<chr>'(?:[^'\\]|\\.)+')
  | (?P<num>0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<op>->|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^~!<>?:(){}\[\],.])
""", re.VERBOSE)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "a": "\a",
            "b": "\b", "f": "\f", "v": "\v", "e": "\x1b", "?": "?"}


def _unescape(body: str) -> str:
    """C escapes of a string or character literal."""
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "x":
            m = re.match(r"[0-9a-fA-F]+", body[i + 2:])
            out.append(chr(int(m.group(), 16) & 0xFF))
            i += 2 + len(m.group())
        elif nxt in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1:])
            out.append(chr(int(m.group(), 8) & 0xFF))
            i += 1 + len(m.group())
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise PrintFmtError(f"cannot parse {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup != "ws":
            tokens.append((m.lastgroup, m.group()))
    return tokens


# --- values and types -----------------------------------------------------------

class IntT(NamedTuple):
    """The C type of an integer expression: bytes and signedness."""

    size: int
    signed: int


INT, UINT, LONG, ULONG = IntT(4, 1), IntT(4, 0), IntT(8, 1), IntT(8, 0)


class PtrT(NamedTuple):
    """A pointer; *elem* is the pointee's size (None: unknown, step 1)."""

    elem: Optional[int]


class Node(NamedTuple):
    """A compiled expression: ``fn(rec, out)`` and its static C type
    (``IntT``, ``PtrT``, or None for strings, buffers and lists)."""

    fn: Callable
    type: Any = None


def _common(a, b) -> IntT:
    """The usual arithmetic conversions (integer promotion to int first)."""
    a = a if isinstance(a, IntT) else ULONG
    b = b if isinstance(b, IntT) else ULONG
    a = a if a.size >= 4 else INT
    b = b if b.size >= 4 else INT
    if a.size != b.size:  # the wider type holds every value of the other
        return a if a.size > b.size else b
    return IntT(a.size, a.signed and b.signed)


def _conv(value, t) -> int:
    if isinstance(value, (bytes, str)):
        raise TypeError("a string used as a number")
    if isinstance(t, IntT):
        return C.wrap(int(value), t.size, t.signed)
    return int(value) & 0xFFFFFFFFFFFFFFFF


# --- the expression parser ---------------------------------------------------------

_BINARY = {
    "||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6,
    "<": 7, "<=": 7, ">": 7, ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
}
_TYPE_WORDS = {"void", "char", "short", "int", "long", "unsigned", "signed", "const",
               "volatile", "struct", "enum", "union", "bool", "_Bool"}


class FieldInfo(NamedTuple):
    """What an expression needs to know of a field of the ``format``."""

    type: Any  # IntT for scalars and pointers' values, None otherwise
    elem: Optional[IntT]  # element type of a fixed array


def field_infos(fields) -> dict:
    """``name -> FieldInfo`` from ``(ctype, name, offset, size, signed)``
    tuples as ``format`` lists them."""
    infos = {}
    for ctype, name, _off, size, signed in fields:
        key = name.split("[", 1)[0]
        if ctype.startswith("__data_loc") or ctype.startswith("__rel_loc"):
            infos[key] = FieldInfo(None, None)
        elif "[" in name:
            count = name[name.index("[") + 1:-1]
            if count.isdigit() and int(count) and not C.is_char(ctype):
                infos[key] = FieldInfo(None, IntT(size // int(count), signed))
            else:
                infos[key] = FieldInfo(None, None)
        elif ctype.strip().endswith("*"):
            infos[key] = FieldInfo(PtrT(None), None)
        else:
            infos[key] = FieldInfo(IntT(size or 8, signed), None)
    return infos


class _Parser:
    def __init__(self, tokens, fields: dict, symbols: dict, pointees: dict):
        self.tokens, self.pos = tokens, 0
        self.fields, self.symbols, self.pointees = fields, symbols, pointees

    # token helpers
    def peek(self, ahead: int = 0):
        i = self.pos + ahead
        return self.tokens[i] if i < len(self.tokens) else (None, None)

    def take(self, want: Optional[str] = None) -> str:
        kind, text = self.peek()
        if kind is None:
            raise PrintFmtError("unexpected end of print fmt")
        if want is not None and text != want:
            raise PrintFmtError(f"expected {want!r}, found {text!r}")
        self.pos += 1
        return text

    def at(self, text: str) -> bool:
        return self.peek()[1] == text

    # grammar
    def arguments(self) -> list[Node]:
        args = []
        while self.peek()[0] is not None:
            self.take(",")
            args.append(self.expr())
        return args

    def expr(self) -> Node:
        cond = self.binary(1)
        if not self.at("?"):
            return cond
        self.take("?")
        yes = self.expr()
        self.take(":")
        no = self.expr()
        t = _common(yes.type, no.type) if isinstance(yes.type, IntT) and \
            isinstance(no.type, IntT) else yes.type
        c, a, b = cond.fn, yes.fn, no.fn
        return Node(lambda r, o: a(r, o) if c(r, o) else b(r, o), t)

    def binary(self, level: int) -> Node:
        left = self.unary()
        while True:
            op = self.peek()[1]
            prec = _BINARY.get(op) if self.peek()[0] == "op" else None
            if prec is None or prec < level:
                return left
            self.take()
            right = self.binary(prec + 1)
            left = _binop(op, left, right)

    def unary(self) -> Node:
        kind, text = self.peek()
        if text in ("-", "~", "!", "+") and kind == "op":
            self.take()
            return _unop(text, self.unary())
        if text == "(" and self._is_type(1):
            self.take("(")
            ctype = self.type_name()
            self.take(")")
            return self.cast(ctype, self.unary())
        if text == "sizeof" and self.peek(1)[1] == "(" and self._is_type(2):
            self.take()
            self.take("(")
            ctype = self.type_name()
            self.take(")")
            size = self._sizeof(ctype)
            return Node(lambda r, o: size, ULONG)
        return self.postfix(self.primary())

    def _is_type(self, ahead: int) -> bool:
        kind, text = self.peek(ahead)
        if kind != "id":
            return False
        if text in _TYPE_WORDS or C.lookup(text) is not None:
            return True
        return text.endswith("_t") and self.peek(ahead + 1)[1] in (")", "*")

    def type_name(self) -> str:
        words = []
        while not self.at(")"):
            words.append(self.take())
        return " ".join(words).replace(" *", "*").replace("*", " *").strip()

    def _sizeof(self, ctype: str) -> int:
        if ctype in self.pointees:
            return self.pointees[ctype]
        info = C.lookup(ctype)
        if info is None:
            raise PrintFmtError(f"sizeof of unknown type {ctype!r}")
        return info.size

    def cast(self, ctype: str, inner: Node) -> Node:
        if ctype.endswith("*"):
            base = ctype[:-1].strip()
            elem = self.pointees.get(base) or (C.lookup(base).size if C.lookup(base) else None)
            fn = inner.fn
            return Node(lambda r, o: _conv(fn(r, o), ULONG), PtrT(elem))
        info = C.lookup(ctype)
        if info is None:
            raise PrintFmtError(f"cast to unknown type {ctype!r}")
        t, fn = IntT(info.size, info.signed), inner.fn
        return Node(lambda r, o: _conv(fn(r, o), t), t)

    def primary(self) -> Node:
        kind, text = self.peek()
        if kind == "num":
            self.take()
            return _number(text)
        if kind == "str":
            parts = []
            while self.peek()[0] == "str":
                parts.append(_unescape(self.take()[1:-1]))
            s = "".join(parts)
            return Node(lambda r, o: s, None)
        if kind == "chr":
            self.take()
            value = ord(_unescape(text[1:-1])[0])
            return Node(lambda r, o: value, INT)
        if text == "(":
            self.take()
            inner = self.expr()
            self.take(")")
            return inner
        if text == "{":
            return self.brace_list()
        if kind == "id":
            return self.identifier()
        raise PrintFmtError(f"unexpected {text!r}")

    def brace_list(self) -> Node:
        self.take("{")
        items = []
        while not self.at("}"):
            items.append(self.expr())
            if not self.at("}"):
                self.take(",")
        self.take("}")
        fns = tuple(n.fn for n in items)
        return Node(lambda r, o: tuple(f(r, o) for f in fns), None)

    def identifier(self) -> Node:
        name = self.take()
        if name == "REC":
            self.take("->")
            return self.field(self.take())
        if self.at("("):
            helper = HELPERS.get(name)
            if helper is None:
                raise PrintFmtError(f"unknown function {name}()")
            self.take("(")
            args = []
            while not self.at(")"):
                args.append(self.field_name() if name in _BY_FIELD else self.expr())
                if not self.at(")"):
                    self.take(",")
            self.take(")")
            return helper(*args)
        if name in self.symbols:
            value = self.symbols[name]
            return Node(lambda r, o: value, ULONG)
        raise PrintFmtError(f"unknown identifier {name!r}")

    def field_name(self) -> str:
        name = self.take()
        if name not in self.fields:
            raise PrintFmtError(f"no field {name!r}")
        return name

    def field(self, name: str) -> Node:
        info = self.fields.get(name)
        if info is None:
            raise PrintFmtError(f"no field {name!r}")
        node = Node(lambda r, o: r[name], info.type)
        if self.at("[") and info.elem is not None:
            self.take("[")
            index = self.expr().fn
            self.take("]")
            elem = info.elem
            return Node(lambda r, o: _element(r[name], index(r, o), elem), elem)
        return node

    def postfix(self, node: Node) -> Node:
        while self.at("["):  # indexing a char array or string: one byte
            self.take("[")
            index, base = self.expr().fn, node.fn
            self.take("]")
            node = Node(lambda r, o: _element(_as_bytes(base(r, o)), index(r, o), IntT(1, 0)),
                        IntT(1, 0))
        return node


def _number(text: str) -> Node:
    """An integer constant and its C type: the first of int, unsigned int
    (not for decimals), long, unsigned long that holds it, as the suffix
    allows."""
    digits = text.rstrip("uUlL")
    suffix = text[len(digits):].lower()
    decimal = not (len(digits) > 1 and digits[0] == "0")
    value = int(digits, 0 if digits[:2].lower() == "0x" else 8 if not decimal else 10)
    candidates = [INT, UINT, LONG, ULONG]
    if decimal and "u" not in suffix:
        candidates = [INT, LONG, ULONG]
    if "u" in suffix:
        candidates = [t for t in candidates if not t.signed]
    if "l" in suffix:
        candidates = [t for t in candidates if t.size == 8]
    t = next((t for t in candidates if value < 1 << (8 * t.size - t.signed)), ULONG)
    return Node(lambda r, o: value, t)


def _element(buf, index: int, elem: IntT) -> int:
    raw = bytes(buf[index * elem.size:(index + 1) * elem.size]).ljust(elem.size, b"\0")
    return int.from_bytes(raw, "little", signed=bool(elem.signed))


def _as_bytes(value) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _truth(value) -> bool:
    return bool(value) if not isinstance(value, (str, bytes)) else True


def _unop(op: str, inner: Node) -> Node:
    fn, t = inner.fn, inner.type
    if op == "!":
        return Node(lambda r, o: int(not _truth(fn(r, o))), INT)
    t = _common(t, INT)
    if op == "-":
        return Node(lambda r, o: _conv(-_conv(fn(r, o), t), t), t)
    if op == "~":
        return Node(lambda r, o: _conv(~_conv(fn(r, o), t), t), t)
    return Node(lambda r, o: _conv(fn(r, o), t), t)


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_ARITH = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": _c_div, "%": lambda a, b: a - b * _c_div(a, b), "&": lambda a, b: a & b,
    "|": lambda a, b: a | b, "^": lambda a, b: a ^ b,
    "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b,
}
_COMPARE = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _binop(op: str, left: Node, right: Node) -> Node:
    a, b = left.fn, right.fn
    if op == "&&":
        return Node(lambda r, o: int(_truth(a(r, o)) and _truth(b(r, o))), INT)
    if op == "||":
        return Node(lambda r, o: int(_truth(a(r, o)) or _truth(b(r, o))), INT)
    if op in ("+", "-") and isinstance(left.type, PtrT):  # pointer arithmetic
        step, sign = left.type.elem or 1, 1 if op == "+" else -1
        return Node(lambda r, o: _conv(a(r, o) + sign * step * _conv(b(r, o), LONG), ULONG),
                    left.type)
    if op in ("<<", ">>"):  # the type is the promoted left operand's
        t = _common(left.type, INT)
        return Node(lambda r, o: _conv(_ARITH[op](_conv(a(r, o), t), _conv(b(r, o), ULONG)), t), t)
    t = _common(left.type, right.type)
    if op in _COMPARE:
        cmp = _COMPARE[op]
        return Node(lambda r, o: int(cmp(_conv(a(r, o), t), _conv(b(r, o), t))), INT)
    if op in ("/", "%"):
        func = _ARITH[op]

        def divide(r, o):
            x, y = _conv(a(r, o), t), _conv(b(r, o), t)
            if y == 0:
                raise ZeroDivisionError("division by zero in print fmt")
            return _conv(func(x, y), t)
        return Node(divide, t)
    func = _ARITH[op]
    return Node(lambda r, o: _conv(func(_conv(a(r, o), t), _conv(b(r, o), t)), t), t)


# --- helpers of TP_printk (kernel/trace/trace_output.c) -----------------------------

def _get_str(name: str) -> Node:
    """``__get_str(field)``: the ``__data_loc`` string."""
    return Node(lambda r, o: r[name], None)


def _get_dynamic_array(name: str) -> Node:
    return Node(lambda r, o: _as_bytes(r[name]), None)


def _get_dynamic_array_len(name: str) -> Node:
    return Node(lambda r, o: len(_as_bytes(r[name])), ULONG)


def _print_symbolic(value: Node, *table: Node) -> Node:
    """``trace_print_symbols_seq``: the name of the entry equal to the
    value, else ``0x%lx``."""
    fn, tfns = value.fn, tuple(t.fn for t in table)

    def show(r, o):
        v = _conv(fn(r, o), ULONG)
        for t in tfns:
            mask, name = t(r, o)
            if _conv(mask, ULONG) == v:
                return name
        return f"0x{v:x}"
    return Node(show, None)


def _print_flags(value: Node, delim: Node, *table: Node) -> Node:
    """``trace_print_flags_seq``: names of the masks fully present, in
    table order, each clearing its bits; leftover bits as ``0x%lx``; the
    table ends at a NULL name."""
    fn, dfn, tfns = value.fn, delim.fn, tuple(t.fn for t in table)

    def show(r, o):
        flags, sep, out = _conv(fn(r, o), ULONG), dfn(r, o), []
        for t in tfns:
            mask, name = t(r, o)
            if not flags or not isinstance(name, str):
                break
            mask = _conv(mask, ULONG)
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
    return Node(lambda r, o: sep.join(f"{x:02x}" for x in _as_bytes(b(r, o))[:n(r, o)]), None)


def _print_hex_str(buf: Node, length: Node) -> Node:
    return _print_hex(buf, length, "")


def _print_array(array: Node, count: Node, el_size: Node) -> Node:
    """``trace_print_array_seq``: ``{0x1,0x2}``."""
    a, n, s = array.fn, count.fn, el_size.fn

    def show(r, o):
        data, size = _as_bytes(a(r, o)), s(r, o)
        if size not in (1, 2, 4, 8):
            return f"{{BAD SIZE:{size} 0x{data[0] if data else 0:x}}}"
        items = [_element(data, i, IntT(size, 0)) for i in range(n(r, o))]
        return "{" + ",".join(f"0x{v:x}" for v in items) + "}"
    return Node(show, None)


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
}
_BY_FIELD = {"__get_str", "__get_rel_str", "__get_dynamic_array", "__get_rel_dynamic_array",
             "__get_dynamic_array_len", "__get_rel_dynamic_array_len"}


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


def _pointer(ext: str, value, out) -> str:
    """``pointer()``: ``%pS``/``%pB``/``%pF`` sym+off, ``%ps``/``%pf`` the
    name, ``%px`` the raw address, anything else hashed like ``%p``."""
    addr = _conv(value, ULONG)
    if ext[:1] in ("S", "B", "F", "R"):
        return out.sym_offset(addr)
    if ext[:1] in ("s", "f"):
        return out.sym(addr)
    if ext[:1] == "x":
        return f"{addr:016x}"
    return out.ptr(addr)


def format_one(spec: Spec, value, width: Optional[int], prec: Optional[int], out) -> str:
    """One conversion of *value* as the kernel's ``vsnprintf`` prints it."""
    conv, flags = spec.conv, spec.flags
    if conv[0] == "p":
        return _pointer(conv[1:], value, out)
    head = "%" + flags.replace("#", "") + (str(width) if width is not None else "")
    if conv == "s":
        text = _c_text(value)
        return (head + ("" if prec is None else f".{prec}") + "s") % text
    if conv == "c":
        return (head + "c") % chr(_conv(value, IntT(1, 0)))
    signed = conv in "di"
    v = _conv(value, IntT(spec.size, 1 if signed else 0))
    head += "" if prec is None else f".{prec}"
    if conv in "di":
        return (head + "d") % v
    if conv == "u":
        return (head + "d") % v
    text = (head + conv) % v
    if "#" in flags and v:
        prefix = "0" if conv == "o" else "0" + conv
        text = _alt_form(text, prefix, "-" in flags, "0" in flags, width)
    return text


def _alt_form(text: str, prefix: str, left: bool, zero: bool, width) -> str:
    """``#``: ``0x``/``0X``/``0`` before the digits, inside the width."""
    digits = text.strip()
    if zero and not left and width:
        digits = digits.lstrip("0") or "0"
        return prefix + digits.rjust(max(0, width - len(prefix)), "0")
    body = prefix + digits
    return body.ljust(width or 0) if left else body.rjust(width or 0)


class PrintFmt:
    """A compiled ``print fmt``: :meth:`render` of a decoded record."""

    def __init__(self, text: str, fields=(), symbols=(), pointees=()):
        self.text = text
        tokens = tokenize(text)
        if not tokens or tokens[0][0] != "str":
            raise PrintFmtError("a print fmt starts with a format string")
        parser = _Parser(tokens, field_infos(fields), dict(symbols), dict(pointees))
        fmt = parser.primary().fn(None, None)
        args = parser.arguments()
        self.items = parse_format(fmt)
        wanted = sum(1 + (i.width == "*") + (i.prec == "*")
                     for i in self.items if isinstance(i, Spec))
        if wanted != len(args):
            raise PrintFmtError(f"the format wants {wanted} arguments, {len(args)} given")
        self.args = tuple(a.fn for a in args)

    def render(self, rec: dict, out) -> str:
        """``trace_raw_output_<call>``'s text for *rec*."""
        args = iter(self.args)
        parts = []
        for item in self.items:
            if isinstance(item, str):
                parts.append(item)
                continue
            width = _star(item.width, args, rec, out)
            prec = _star(item.prec, args, rec, out)
            if width is not None and width < 0:
                item, width = item._replace(flags=item.flags + "-"), -width
            parts.append(format_one(item, next(args)(rec, out), width, prec, out))
        return "".join(parts)


def _star(value, args, rec, out) -> Optional[int]:
    if value is None or value == "":
        return None if value is None else 0
    if value == "*":
        return _conv(next(args)(rec, out), INT)
    return int(value)


@functools.lru_cache(maxsize=None)
def compile_print_fmt(text: str, fields: tuple = (), symbols: tuple = (),
                      pointees: tuple = ()) -> PrintFmt:
    """The :class:`PrintFmt` of *text* over *fields* (``format`` tuples),
    with *symbols* ``((name, value), ...)`` for kernel globals the
    expressions name and *pointees* ``((ctype, size), ...)`` for pointer
    arithmetic on types not in :mod:`.ctype`.  Parsed once per arguments."""
    return PrintFmt(text, fields, symbols, pointees)


__all__ = ["PrintFmt", "PrintFmtError", "compile_print_fmt", "HELPERS", "field_infos"]
