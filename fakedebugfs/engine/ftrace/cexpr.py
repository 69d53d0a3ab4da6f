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

Here are the tokens and the grammar (:class:`Parser`); the types, the
conversions and the operators' C semantics are :mod:`.cexpr_types`', GNU
statement expressions ``({ ... })`` :mod:`.cexpr_block`'s.  The names of
both that callers use are importable from here too.
"""

from __future__ import annotations

import re
from typing import Optional

from fakedebugfs.engine.ftrace import ctype as C
from fakedebugfs.engine.ftrace.cexpr_block import SeqMark, StatementExprs
from fakedebugfs.engine.ftrace.cexpr_types import (INT, LONG, TYPE_WORDS, UCHAR, UINT, ULONG,
    ExprError, FieldInfo, IntT, Node, PtrT, as_bytes, binop, common, constant, convert, element,
    field_infos, fold, index_of, number, unop)


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


# --- the expression parser ---------------------------------------------------------

_BINARY = {
    "||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6,
    "<": 7, "<=": 7, ">": 7, ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
}


class Parser(StatementExprs):
    """The grammar of a print fmt's arguments (a recursive descent, C's
    precedence): each rule returns the :class:`Node` it compiles; types and
    operators are :mod:`.cexpr_types`', statement expressions
    :class:`~.cexpr_block.StatementExprs`'."""

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
        t = common(yes.type, no.type) if isinstance(yes.type, IntT) and \
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
            left = binop(op, left, right)

    def unary(self) -> Node:
        kind, text = self.peek()
        if text in ("-", "~", "!", "+") and kind == "op":
            self.take()
            return unop(text, self.unary())
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
        if text in TYPE_WORDS or C.lookup(text) is not None:
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
            return number(text)
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
            node = Node(lambda r, o: index_of(base(r, o), index(r, o)), IntT(1, 0))
        return node


__all__ = ["ExprError", "tokenize", "Parser", "IntT", "PtrT", "Node", "FieldInfo", "SeqMark",
           "INT", "UINT", "LONG", "ULONG", "UCHAR", "constant", "fold", "convert", "field_infos",
           "element", "as_bytes"]
