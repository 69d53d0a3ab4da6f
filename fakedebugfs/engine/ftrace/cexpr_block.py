"""GNU statement expressions in ``TP_printk`` arguments, for :mod:`.cexpr`:
``({ int x = ...; ...; x; })`` of the kernel's ``min()``/``max()``, and the
macros that print into ``p`` (the line's ``tmp_seq``, ``struct trace_seq``)
with ``trace_seq_printf()`` and return ``trace_seq_buffer_ptr()``: the
value of the block is that of its last expression statement, a
``trace_seq_buffer_ptr`` mark being the text printed since (as
``trace_seq_buffer_ptr`` points into the ``trace_seq`` the kernel's
``trace_raw_output_<call>`` prints from).  Locals live in a frame of slots
the compiled closures share; a known union's members are bitfields of its
word (``union`` layouts from :mod:`.kernel_enums`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from fakedebugfs.engine.ftrace import ctype as C
from fakedebugfs.engine.ftrace.cexpr_types import (DECL_WORDS, INT, UINT, ExprError, IntT, Node,
    convert)


class SeqMark(NamedTuple):
    """``trace_seq_buffer_ptr(p)``: where the next text printed into the
    ``trace_seq`` *seq* (a list of strings) starts."""

    seq: list
    start: int

    def text(self) -> str:
        """The C string at the mark: up to the first NUL."""
        return "".join(self.seq)[self.start:].split("\0", 1)[0]


class StatementExprs:
    """The statement-expression part of :class:`.cexpr.Parser` (one of its
    bases): it uses the parser's ``peek``/``take``/``at``/``expr`` and its
    ``locals``, ``frame`` and ``unions``."""

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
            text in DECL_WORDS or C.lookup(text) is not None)

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
