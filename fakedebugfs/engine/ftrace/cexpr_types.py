"""The C types and conversions of :mod:`.cexpr`'s expressions: what the
compiled kernel computes for a ``TP_printk`` argument.

An integer expression has a C type (:class:`IntT`: size and signedness;
:class:`PtrT`: a pointer and its pointee's size); values are converted as
C converts them (:func:`convert`: truncated to the type's width, signed
types wrapped), integer constants take the first type of C's list that
holds them (:func:`number`), and the operators apply C's usual arithmetic
conversions (:func:`common`: ``-1UL``, ``~x`` and mixed signed/unsigned
comparisons give what gcc's code gives; shift counts masked as x86 masks
them; division truncating toward zero).  The grammar is :mod:`.cexpr`'s;
the kernel's own filter parser keeps the same split
(``trace_events_filter.c``: ``parse_pred`` and the grammar apart from the
comparisons chosen per size and signedness, ``select_comparison_fn``).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

from fakedebugfs.engine.ftrace import ctype as C


class ExprError(ValueError):
    """An expression this compiler does not understand."""


class IntT(NamedTuple):
    """The C type of an integer expression: bytes and signedness."""

    size: int
    signed: int


INT, UINT, LONG, ULONG = IntT(4, 1), IntT(4, 0), IntT(8, 1), IntT(8, 0)
UCHAR = IntT(1, 0)


class PtrT(NamedTuple):
    """A pointer; *elem* is the pointee's size (None: unknown, step 1)."""

    elem: Optional[int]


class Node(NamedTuple):
    """A compiled expression: ``fn(rec, out)`` and its static C type
    (``IntT``, ``PtrT``, or None for strings, buffers and lists)."""

    fn: Callable
    type: Any = None
    const: bool = False  # needs no record: evaluated once, at compile time


def constant(value, t=None) -> Node:
    return Node(lambda r, o: value, t, True)


def fold(node: Node, *operands: Node) -> Node:
    """Constant folding: a node whose operands are all constants is
    evaluated once (the GFP flag tables of the kmem events hold hundreds of
    constant casts and shifts)."""
    if not operands or not all(op.const for op in operands):
        return node
    try:
        return constant(node.fn(None, None), node.type)
    except (ArithmeticError, TypeError, ValueError):
        return node


def common(a, b) -> IntT:
    """The usual arithmetic conversions (integer promotion to int first)."""
    a = a if isinstance(a, IntT) else ULONG
    b = b if isinstance(b, IntT) else ULONG
    a = a if a.size >= 4 else INT
    b = b if b.size >= 4 else INT
    if a.size != b.size:  # the wider type holds every value of the other
        return a if a.size > b.size else b
    return IntT(a.size, a.signed and b.signed)


_LIMITS: dict = {}  # type -> (mask, sign bit)


def _limits(t) -> tuple[int, int]:
    if isinstance(t, IntT):
        bits = 8 * t.size
        return (1 << bits) - 1, (1 << (bits - 1)) if t.signed else 0
    return (1 << 64) - 1, 0


def convert(value, t) -> int:
    """C conversion of *value* to type *t* (pointers: 64-bit unsigned)."""
    if value.__class__ is not int:
        if isinstance(value, (bytes, bytearray, str, tuple)):
            raise TypeError("a string used as a number")
        value = int(value)
    limits = _LIMITS.get(t)
    if limits is None:
        limits = _LIMITS[t] = _limits(t)
    mask, sign = limits
    value &= mask
    return value - mask - 1 if value & sign else value


# the words a type name is made of (a cast, sizeof); a declaration may be static too
TYPE_WORDS = {"void", "char", "short", "int", "long", "unsigned", "signed", "const",
              "volatile", "struct", "enum", "union", "bool", "_Bool"}
DECL_WORDS = TYPE_WORDS | {"static"}


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


def number(text: str) -> Node:
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
    return constant(value, t)


def index_of(value, i: int):
    """``a[i]``: a byte of a string or buffer, an item of an array local
    (``static const char *names[] = {...}``)."""
    if value.__class__ is tuple:
        return value[i]
    return element(as_bytes(value), i, IntT(1, 0))


def element(buf, index: int, elem: IntT) -> int:
    raw = bytes(buf[index * elem.size:(index + 1) * elem.size]).ljust(elem.size, b"\0")
    return int.from_bytes(raw, "little", signed=bool(elem.signed))


def as_bytes(value) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def truth(value) -> bool:
    return bool(value) if not isinstance(value, (str, bytes)) else True


def unop(op: str, inner: Node) -> Node:
    return fold(_unop_node(op, inner), inner)


def _unop_node(op: str, inner: Node) -> Node:
    fn, t = inner.fn, inner.type
    if op == "!":
        return Node(lambda r, o: int(not truth(fn(r, o))), INT)
    t = common(t, INT)
    if op == "-":
        return Node(lambda r, o: convert(-convert(fn(r, o), t), t), t)
    if op == "~":
        return Node(lambda r, o: convert(~convert(fn(r, o), t), t), t)
    return Node(lambda r, o: convert(fn(r, o), t), t)


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


def binop(op: str, left: Node, right: Node) -> Node:
    return fold(_binop_node(op, left, right), left, right)


def _binop_node(op: str, left: Node, right: Node) -> Node:
    a, b = left.fn, right.fn
    if op == "&&":
        return Node(lambda r, o: int(truth(a(r, o)) and truth(b(r, o))), INT)
    if op == "||":
        return Node(lambda r, o: int(truth(a(r, o)) or truth(b(r, o))), INT)
    if op in ("+", "-") and isinstance(left.type, PtrT):  # pointer arithmetic
        step, sign = left.type.elem or 1, 1 if op == "+" else -1
        return Node(lambda r, o: convert(a(r, o) + sign * step * convert(b(r, o), LONG), ULONG),
                    left.type)
    if op in ("<<", ">>"):  # the promoted left operand's type; the count as x86 masks it
        t = common(left.type, INT)
        func, count_mask = _ARITH[op], 8 * t.size - 1
        return Node(lambda r, o: convert(func(convert(a(r, o), t),
                                              convert(b(r, o), ULONG) & count_mask), t), t)
    t = common(left.type, right.type)
    if op in _COMPARE:
        cmp = _COMPARE[op]
        return Node(lambda r, o: int(cmp(convert(a(r, o), t), convert(b(r, o), t))), INT)
    if op in ("/", "%"):
        func = _ARITH[op]

        def divide(r, o):
            x, y = convert(a(r, o), t), convert(b(r, o), t)
            if y == 0:
                raise ZeroDivisionError("division by zero in print fmt")
            return convert(func(x, y), t)
        return Node(divide, t)
    func = _ARITH[op]
    return Node(lambda r, o: convert(func(convert(a(r, o), t), convert(b(r, o), t)), t), t)
