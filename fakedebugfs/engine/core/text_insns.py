"""The instruction boundaries of a profile's kernel text: what x86's
``can_probe`` (arch/x86/kernel/kprobes/core.c) decodes when a kprobe is
registered at ``SYM+OFFS``.

``can_probe`` finds the function holding the address
(``kallsyms_lookup_size_offset``), decodes its instructions from the
function's start until it reaches or passes the address, and refuses
(``arch_prepare_kprobe`` returns -EILSEQ; trace_kprobe logs
``BAD_INSN_BNDRY``) an address that falls inside an instruction, or one
at an "exception" instruction (``is_exception_insn``: ``int3``, ``int N``,
``into``, ``int1``, ``ud0``/``ud1``/``ud2``).  A ``ud2`` is refused
before that, with EINVAL: it is a ``BUG()``/``WARN()`` site, which
``check_kprobe_address_safe`` finds in the bug table (``find_bug``); the
table takes every ``ud0``/``ud1``/``ud2`` for one.

The fake has no kernel text: a profile's ``text_insns`` file keeps, for
each text symbol's address, the lengths of the instructions from there to
the next symbol, made once from the kernel package's image
(:mod:`fakedebugfs.oracle.text_insns`).  Where a profile has no such
file, or a symbol no record, every offset is taken (the fake's behaviour
before it had the table).
"""

from __future__ import annotations

import bisect
from array import array
from typing import Optional

from construct import Bytes, Const, GreedyBytes, Int32ul, Int64ul, Struct, this

# the profile file ``text_insns`` (the fake's own layout, no kernel struct):
# the text symbols' addresses as 32-bit offsets from *base*, ascending,
# then for each of them its instructions' lengths, one byte each (INT_INSN
# set for int3/int N/into/int1, UD_INSN for ud0/ud1/ud2), a 0 after the last
TEXT_INSNS = Struct(
    "magic" / Const(b"fdbinsn1"),
    "base" / Int64ul,
    "count" / Int32ul,
    "starts" / Bytes(this.count * 4),
    "lengths" / GreedyBytes,
)
INT_INSN, UD_INSN, LENGTH = 0x80, 0x40, 0x3F
NAME = "text_insns"
# what TextInsns.probe_point answers
BOUNDARY, INSIDE, EXCEPTION, BUG = "boundary", "inside", "exception", "bug"


def pack(starts: list, records: list) -> bytes:
    """The file of *starts* (ascending addresses) and *records* (one
    bytes of lengths per start, INT_INSN/UD_INSN marked)."""
    base = starts[0] if starts else 0
    offsets = array("I", (s - base for s in starts))
    return TEXT_INSNS.build(dict(base=base, count=len(starts), starts=offsets.tobytes(),
                                 lengths=b"".join(r + b"\0" for r in records)))


class TextInsns:
    """One profile's table, read from *data* (the file's bytes)."""

    def __init__(self, data: bytes):
        parsed = TEXT_INSNS.parse(data)
        self.base = parsed.base
        self.starts = array("I")
        self.starts.frombytes(parsed.starts)
        self.records = parsed.lengths.split(b"\0")

    def probe_point(self, func: int, addr: int) -> Optional[str]:
        """What is at *addr* of the function starting at *func*: BOUNDARY
        (an instruction starts there), INSIDE (it falls in one), EXCEPTION
        (an int3/int N/into/int1 starts there), BUG (a ud0/ud1/ud2); None
        when the table has no record of *func* or does not reach *addr*."""
        i = bisect.bisect_left(self.starts, func - self.base)
        if i == len(self.starts) or self.starts[i] + self.base != func:
            return None
        pos, target = 0, addr - func
        for byte in self.records[i]:
            if pos == target:
                return BUG if byte & UD_INSN else EXCEPTION if byte & INT_INSN else BOUNDARY
            if pos > target:
                return INSIDE
            pos += byte & LENGTH
        return INSIDE if pos > target else None


__all__ = ["TEXT_INSNS", "INT_INSN", "UD_INSN", "LENGTH", "NAME", "BOUNDARY", "INSIDE",
           "EXCEPTION", "BUG", "TextInsns", "pack"]
