"""Event filters (kernel/trace/trace_events_filter.c).

``compile_filter(event, text)`` parses the filter language of
``events/<sys>/<ev>/filter`` (``field op value`` predicates joined with
``&&``, ``||``, ``!`` and parentheses) into a predicate over an event's
field values, as ``filter_match_preds`` applies it before an entry is
committed.  Numbers take ``== != < <= > >= &``; strings (``char[]`` and
``__data_loc``) take ``== != ~`` (``~`` is a glob).  Anything else is
EINVAL, as the kernel answers.
"""

from __future__ import annotations

import errno
import fnmatch
import operator
import re
from typing import Callable

TOKEN = re.compile(r'\s*(&&|\|\||==|!=|<=|>=|[()<>&~!]|"[^"]*"|\'[^\']*\'|[^\s()&|<>=!~]+)')
NUM_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
           ">": operator.gt, ">=": operator.ge, "&": lambda a, b: bool(a & b)}
STR_OPS = ("==", "!=", "~")
COMMON = {"common_pid", "common_type", "common_flags", "common_preempt_count"}

Pred = Callable[[dict], bool]


def einval(why: str) -> OSError:
    return OSError(errno.EINVAL, f"filter: {why}")


def tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or not m.group(1):
            raise einval(f"bad token at {pos}")
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


def field_kinds(event) -> dict:
    """``name -> "str" | "int"`` for the fields a filter may name."""
    kinds = {name: "int" for name in COMMON}
    kinds.update(CPU="int", cpu="int", COMM="str", comm="str")
    for ctype, name, _off, size, _signed in event.fields:
        key = name.split("[", 1)[0]
        is_str = ctype.startswith("__data_loc") or (ctype == "char" and "[" in name)
        if size or is_str:
            kinds[key] = "str" if is_str else "int"
    return kinds


class _Parser:
    def __init__(self, tokens, kinds):
        self.tokens, self.pos, self.kinds = tokens, 0, kinds

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self):
        tok = self.peek()
        if tok is None:
            raise einval("unexpected end")
        self.pos += 1
        return tok

    def expr(self) -> Pred:
        left = self.term()
        while self.peek() == "||":
            self.take()
            right = self.term()
            left = (lambda a, b: lambda r: a(r) or b(r))(left, right)
        return left

    def term(self) -> Pred:
        left = self.factor()
        while self.peek() == "&&":
            self.take()
            right = self.factor()
            left = (lambda a, b: lambda r: a(r) and b(r))(left, right)
        return left

    def factor(self) -> Pred:
        tok = self.take()
        if tok == "(":
            inner = self.expr()
            if self.take() != ")":
                raise einval("missing )")
            return inner
        if tok == "!":
            inner = self.factor()
            return lambda r: not inner(r)
        return self.predicate(tok)

    def predicate(self, name: str) -> Pred:
        kind = self.kinds.get(name)
        if kind is None:
            raise einval(f"no field {name}")
        op, value = self.take(), self.take()
        if value[:1] in "\"'":
            value = value[1:-1]
        if kind == "str":
            return _str_pred(name, op, value)
        return _num_pred(name, op, value)


def _str_pred(name: str, op: str, value: str) -> Pred:
    if op not in STR_OPS:
        raise einval(f"{op} on a string")
    if op == "~":
        return lambda r: fnmatch.fnmatchcase(_text(r.get(name)), value)
    want = op == "=="
    return lambda r: (_text(r.get(name)) == value) == want


def _num_pred(name: str, op: str, value: str) -> Pred:
    func = NUM_OPS.get(op)
    if func is None:
        raise einval(f"{op} on a number")
    try:
        number = int(value, 0)
    except ValueError:
        raise einval(f"{value} is not a number") from None
    return lambda r: _num_match(func, r.get(name, 0), number)


def _num_match(func, value, number) -> bool:
    """A number against a field; an array field (bytes) compares as one
    integer of its size when that is 1, 2, 4 or 8 bytes and never matches
    otherwise (``select_comparison_fn``'s ``filter_pred_none``)."""
    if isinstance(value, (bytes, bytearray)):
        if len(value) not in (1, 2, 4, 8):
            return False
        value = int.from_bytes(value, "little")
    return func(value, number)


def _text(value) -> str:
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode(errors="replace")
    return "" if value is None else str(value)


def compile_filter(event, text: str) -> Pred:
    """The predicate of filter *text* on *event*; EINVAL when it does not parse."""
    tokens = tokenize(text)
    if not tokens:
        raise einval("empty")
    parser = _Parser(tokens, field_kinds(event))
    pred = parser.expr()
    if parser.peek() is not None:
        raise einval(f"unexpected {parser.peek()}")
    return pred
