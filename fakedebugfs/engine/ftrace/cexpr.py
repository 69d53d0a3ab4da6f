"""C expressions of ``TP_printk`` arguments, compiled to closures.

The arguments of a ``print fmt`` are C over ``REC->field``: integer,
character and string literals, casts to C types (integer casts truncate;
pointer casts scale pointer arithmetic by the pointee's size when known),
unary ``- ~ ! +``, the binary operators with C's usual arithmetic
conversions (so ``-1UL``, ``~x`` and mixed signed/unsigned comparisons give
what the compiled kernel gives), ``?:``, ``sizeof(type)``, ``REC->arr[i]``,
brace lists ``{ a, "b" }`` and calls of the functions the caller provides
(the trace helpers of :mod:`.printfmt`).  Each expression compiles to a
:class:`Node`: ``fn(rec, out)`` and its static C type.
"""

from __future__ import annotations

import re
from typing import Any, Callable, NamedTuple, Optional

from fakedebugfs.engine.ftrace import ctype as C


class ExprError(ValueError):
    """An expression this compiler does not understand."""


# --- tokens -----------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<chr>'(?:[^'\\]|\\.)+')
  | (?P<num>0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<op>->|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^~!<>?:(){}\[\],.;=])
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
            m = re.match(r"[0-9a-fA-F]*", body[i + 2:])
            if not m.group():
                raise ExprError("\\x used with no following hex digits")
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
            raise ExprError(f"cannot parse {text[pos:pos + 20]!r}")
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


def _common(a, b) -> IntT:
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


# --- the expression parser ---------------------------------------------------------

_BINARY = {
    "||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6,
    "<": 7, "<=": 7, ">": 7, ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
}
_TYPE_WORDS = {"void", "char", "short", "int", "long", "unsigned", "signed", "const",
               "volatile", "struct", "enum", "union", "bool", "_Bool"}
_DECL_WORDS = _TYPE_WORDS | {"static"}


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


class SeqMark(NamedTuple):
    """``trace_seq_buffer_ptr(p)``: where the next text printed into the
    ``trace_seq`` *seq* (a list of strings) starts."""

    seq: list
    start: int

    def text(self) -> str:
        """The C string at the mark: up to the first NUL."""
        return "".join(self.seq)[self.start:].split("\0", 1)[0]


class Parser:
    def __init__(self, tokens, fields: dict, symbols: dict, pointees: dict,
                 functions: dict, by_field=frozenset(), variables=None, unions=None):
        self.tokens, self.pos = tokens, 0
        self.fields, self.symbols, self.pointees = fields, symbols, pointees
        self.functions, self.by_field = functions, by_field
        self.variables = variables or {}  # name -> Node read at print time (jiffies)
        self.unions = unions or {}  # "union x" -> {member: (bit offset, bits)}
        self.locals: dict = {}  # name -> (slot, IntT/PtrT/None, union layout or None)
        self.frame: list = []  # the values of the locals of statement expressions

    # token helpers
    def peek(self, ahead: int = 0):
        i = self.pos + ahead
        return self.tokens[i] if i < len(self.tokens) else (None, None)

    def take(self, want: Optional[str] = None) -> str:
        kind, text = self.peek()
        if kind is None:
            raise ExprError("unexpected end of print fmt")
        if want is not None and text != want:
            raise ExprError(f"expected {want!r}, found {text!r}")
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
        return fold(Node(lambda r, o: a(r, o) if c(r, o) else b(r, o), t), cond, yes, no)

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
            return constant(size, ULONG)
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
            raise ExprError(f"sizeof of unknown type {ctype!r}")
        return info.size

    def cast(self, ctype: str, inner: Node) -> Node:
        if ctype.endswith("*"):
            base = ctype[:-1].strip()
            elem = self.pointees.get(base) or (C.lookup(base).size if C.lookup(base) else None)
            fn = inner.fn
            return fold(Node(lambda r, o: convert(fn(r, o), ULONG), PtrT(elem)), inner)
        info = C.lookup(ctype)
        if info is None:
            raise ExprError(f"cast to unknown type {ctype!r}")
        t, fn = IntT(info.size, info.signed), inner.fn
        return fold(Node(lambda r, o: convert(fn(r, o), t), t), inner)

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
            return constant(s)
        if kind == "chr":
            self.take()
            value = ord(_unescape(text[1:-1])[0])
            return constant(value, INT)
        if text == "(" and self.peek(1)[1] == "{":
            return self.block()
        if text == "(":
            self.take()
            inner = self.expr()
            self.take(")")
            return inner
        if text == "{":
            return self.brace_list()
        if kind == "id":
            return self.identifier()
        raise ExprError(f"unexpected {text!r}")

    def brace_list(self) -> Node:
        self.take("{")
        items = []
        while not self.at("}"):
            items.append(self.expr())
            if not self.at("}"):
                self.take(",")
        self.take("}")
        fns = tuple(n.fn for n in items)
        return fold(Node(lambda r, o: tuple(f(r, o) for f in fns), None), *items)

    def identifier(self) -> Node:
        name = self.take()
        if name == "REC":
            self.take("->")
            return self.field(self.take())
        if self.at("("):
            helper = self.functions.get(name)
            if helper is None:
                raise ExprError(f"unknown function {name}()")
            self.take("(")
            args = []
            while not self.at(")"):
                args.append(self.field_name() if name in self.by_field else self.expr())
                if not self.at(")"):
                    self.take(",")
            self.take(")")
            try:
                return helper(*args)
            except (TypeError, ValueError) as err:
                raise ExprError(f"wrong arguments to {name}(): {err}") from None
        if name in self.locals:
            return self.local(name)
        if name in self.symbols:
            value = self.symbols[name]
            return constant(value, ULONG)
        if name in self.variables:
            return self.variables[name]
        raise ExprError(f"unknown identifier {name!r}")

    # GNU statement expressions: ``({ int x = ...; ...; x; })`` of the
    # kernel's min()/max() and of macros that print into ``p`` (the line's
    # ``tmp_seq``) with trace_seq_printf() and return trace_seq_buffer_ptr()
    def block(self) -> Node:
        """``({ declarations; statements; value; })``: the value of the last
        expression statement (a ``trace_seq_buffer_ptr`` mark: its text)."""
        self.take("(")
        self.take("{")
        saved = dict(self.locals)
        steps, last = [self._fresh_seq()], None
        while not self.at("}"):
            if last is not None:
                steps.append(last.fn)
            if self._at_declaration():
                steps.append(self.declaration())
                last = None
            else:
                last = self.statement()
            self.take(";")
        self.take("}")
        self.take(")")
        self.locals = saved
        if last is None:
            raise ExprError("a statement expression without a value")
        steps, value = tuple(steps), last.fn

        def run(r, o):
            for step in steps:
                step(r, o)
            v = value(r, o)
            return v.text() if v.__class__ is SeqMark else v
        return Node(run, last.type)

    def _fresh_seq(self) -> Callable:
        """``p``: the ``trace_seq`` the block prints into, empty each time."""
        slot = self._slot("p", None, None)
        frame = self.frame

        def fresh(r, o):
            frame[slot] = []
        return fresh

    def _slot(self, name: str, t, layout) -> int:
        self.frame.append(0)
        self.locals[name] = (len(self.frame) - 1, t, layout)
        return len(self.frame) - 1

    def _at_declaration(self) -> bool:
        kind, text = self.peek()
        return kind == "id" and text not in self.locals and (
            text in _DECL_WORDS or C.lookup(text) is not None)

    def declaration(self) -> Callable:
        """``[static] [const] type [*]name[[]] [= init]``: one local."""
        words, pointer = [], False
        while True:
            kind, text = self.peek()
            if kind == "id" and self.peek(1)[1] in ("=", ";", "["):
                name = self.take()
                break
            if text == "*":
                pointer = True
            elif kind == "id":
                words.append(text)
            else:
                raise ExprError(f"unexpected {text!r} in a declaration")
            self.take()
        array = self.at("[")
        while not self.at("=") and not self.at(";"):
            self.take()
        ctype = " ".join(w for w in words if w != "static")
        layout = self.unions.get(ctype) if not pointer and not array else None
        t = None
        if not pointer and not array and layout is None:
            info = C.lookup(ctype)
            if info is None:
                raise ExprError(f"a local of unknown type {ctype!r}")
            t = IntT(info.size, info.signed)
        init = None
        if self.at("="):
            self.take("=")
            init = self.expr().fn
        slot = self._slot(name, t if layout is None else UINT, layout)
        return self._store(slot, t, init)

    def _store(self, slot: int, t, init) -> Callable:
        frame = self.frame
        if init is None:
            def zero(r, o):
                frame[slot] = 0
            return zero
        if t is None:
            def assign(r, o):
                frame[slot] = init(r, o)
            return assign

        def assign_int(r, o):
            frame[slot] = convert(init(r, o), t)
        return assign_int

    def statement(self) -> Node:
        """An expression, or ``local = expr`` / ``union.word = expr``."""
        kind, name = self.peek()
        if kind == "id" and name in self.locals and self.peek(1)[1] in ("=", "."):
            slot, t, layout = self.locals[name]
            ahead = 2 if self.peek(1)[1] == "=" else 4
            if self.peek(ahead - 1)[1] == "=":
                self.take()
                if ahead == 4:
                    self.take(".")
                    member = self.take()
                    if layout is None or layout.get(member, (None, 0))[0] != 0 or \
                            layout[member][1] != 32:
                        raise ExprError(f"assignment to {name}.{member}")
                self.take("=")
                store = self._store(slot, t, self.expr().fn)
                return Node(lambda r, o: store(r, o), None)
        return self.expr()

    def local(self, name: str) -> Node:
        """A local's value; ``u.member`` a bitfield of a known union."""
        slot, t, layout = self.locals[name]
        frame = self.frame
        if layout is not None and self.at("."):
            self.take(".")
            member = self.take()
            if member not in layout:
                raise ExprError(f"no member {member!r} in {name}")
            shift, bits = layout[member]
            mask = (1 << bits) - 1
            return Node(lambda r, o: (frame[slot] >> shift) & mask, INT if bits < 32 else UINT)
        return Node(lambda r, o: frame[slot], t)

    def field_name(self) -> str:
        name = self.take()
        if name not in self.fields:
            raise ExprError(f"no field {name!r}")
        return name

    def field(self, name: str) -> Node:
        info = self.fields.get(name)
        if info is None:
            raise ExprError(f"no field {name!r}")
        node = Node(lambda r, o: r[name], info.type)
        if self.at("[") and info.elem is not None:
            self.take("[")
            index = self.expr().fn
            self.take("]")
            elem = info.elem
            return Node(lambda r, o: element(r[name], index(r, o), elem), elem)
        return node

    def postfix(self, node: Node) -> Node:
        while self.at("["):  # indexing a char array or string: one byte
            self.take("[")
            index, base = self.expr().fn, node.fn
            self.take("]")
            node = Node(lambda r, o: _index(base(r, o), index(r, o)), IntT(1, 0))
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
    return constant(value, t)


def _index(value, i: int):
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


def _truth(value) -> bool:
    return bool(value) if not isinstance(value, (str, bytes)) else True


def _unop(op: str, inner: Node) -> Node:
    return fold(_unop_node(op, inner), inner)


def _unop_node(op: str, inner: Node) -> Node:
    fn, t = inner.fn, inner.type
    if op == "!":
        return Node(lambda r, o: int(not _truth(fn(r, o))), INT)
    t = _common(t, INT)
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


def _binop(op: str, left: Node, right: Node) -> Node:
    return fold(_binop_node(op, left, right), left, right)


def _binop_node(op: str, left: Node, right: Node) -> Node:
    a, b = left.fn, right.fn
    if op == "&&":
        return Node(lambda r, o: int(_truth(a(r, o)) and _truth(b(r, o))), INT)
    if op == "||":
        return Node(lambda r, o: int(_truth(a(r, o)) or _truth(b(r, o))), INT)
    if op in ("+", "-") and isinstance(left.type, PtrT):  # pointer arithmetic
        step, sign = left.type.elem or 1, 1 if op == "+" else -1
        return Node(lambda r, o: convert(a(r, o) + sign * step * convert(b(r, o), LONG), ULONG),
                    left.type)
    if op in ("<<", ">>"):  # the promoted left operand's type; the count as x86 masks it
        t = _common(left.type, INT)
        func, count_mask = _ARITH[op], 8 * t.size - 1
        return Node(lambda r, o: convert(func(convert(a(r, o), t),
                                              convert(b(r, o), ULONG) & count_mask), t), t)
    t = _common(left.type, right.type)
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
