"""GFP flags as tracefs prints them (include/trace/events/mmflags.h).

``SHOW_GFP_FLAGS`` is the ``__print_flags(...)`` text of the kmem formats'
print fmt on this machine's 6.18 kernel, byte for byte; the flag table used
for printing (``show_gfp_flags``) is read back from that same text, so the
format file and the text output cannot disagree.
"""

from __future__ import annotations

import functools
import re

SHOW_GFP_FLAGS = (
    '__print_flags(REC->gfp_flags, "|", {( unsigned long)(((((((( gfp_t)(((((1UL))) << (10))|(('
    '((1UL))) << (11)))) | (( gfp_t)((((1UL))) << (6))) | (( gfp_t)((((1UL))) << (7))) | (( gfp'
    '_t)((((1UL))) << (20)))) | (( gfp_t)((((1UL))) << (1)))) | (( gfp_t)((((1UL))) << (3))) | '
    '(( gfp_t)0)) | (( gfp_t)((((1UL))) << (18))) | (( gfp_t)((((1UL))) << (19))) | (( gfp_t)(('
    '((1UL))) << (13)))) & ~(( gfp_t)(((((1UL))) << (10))|((((1UL))) << (11))))) | (( gfp_t)((('
    '(1UL))) << (10)))), "GFP_TRANSHUGE"}, {( unsigned long)((((((( gfp_t)(((((1UL))) << (10))|'
    '((((1UL))) << (11)))) | (( gfp_t)((((1UL))) << (6))) | (( gfp_t)((((1UL))) << (7))) | (( g'
    'fp_t)((((1UL))) << (20)))) | (( gfp_t)((((1UL))) << (1)))) | (( gfp_t)((((1UL))) << (3))) '
    '| (( gfp_t)0)) | (( gfp_t)((((1UL))) << (18))) | (( gfp_t)((((1UL))) << (19))) | (( gfp_t)'
    '((((1UL))) << (13)))) & ~(( gfp_t)(((((1UL))) << (10))|((((1UL))) << (11))))), "GFP_TRANSH'
    'UGE_LIGHT"}, {( unsigned long)((((( gfp_t)(((((1UL))) << (10))|((((1UL))) << (11)))) | (( '
    'gfp_t)((((1UL))) << (6))) | (( gfp_t)((((1UL))) << (7))) | (( gfp_t)((((1UL))) << (20)))) '
    '| (( gfp_t)((((1UL))) << (1)))) | (( gfp_t)((((1UL))) << (3))) | (( gfp_t)0)), "GFP_HIGHUS'
    'ER_MOVABLE"}, {( unsigned long)(((( gfp_t)(((((1UL))) << (10))|((((1UL))) << (11)))) | (( '
    'gfp_t)((((1UL))) << (6))) | (( gfp_t)((((1UL))) << (7))) | (( gfp_t)((((1UL))) << (20)))) '
    '| (( gfp_t)((((1UL))) << (1)))), "GFP_HIGHUSER"}, {( unsigned long)((( gfp_t)(((((1UL))) <'
    '< (10))|((((1UL))) << (11)))) | (( gfp_t)((((1UL))) << (6))) | (( gfp_t)((((1UL))) << (7))'
    ') | (( gfp_t)((((1UL))) << (20)))), "GFP_USER"}, {( unsigned long)(((( gfp_t)(((((1UL))) <'
    '< (10))|((((1UL))) << (11)))) | (( gfp_t)((((1UL))) << (6))) | (( gfp_t)((((1UL))) << (7))'
    ')) | (( gfp_t)((((1UL))) << (22)))), "GFP_KERNEL_ACCOUNT"}, {( unsigned long)((( gfp_t)((('
    '((1UL))) << (10))|((((1UL))) << (11)))) | (( gfp_t)((((1UL))) << (6))) | (( gfp_t)((((1UL)'
    ')) << (7)))), "GFP_KERNEL"}, {( unsigned long)((( gfp_t)(((((1UL))) << (10))|((((1UL))) <<'
    ' (11)))) | (( gfp_t)((((1UL))) << (6)))), "GFP_NOFS"}, {( unsigned long)((( gfp_t)((((1UL)'
    ')) << (5)))|(( gfp_t)((((1UL))) << (11)))), "GFP_ATOMIC"}, {( unsigned long)((( gfp_t)(((('
    '(1UL))) << (10))|((((1UL))) << (11))))), "GFP_NOIO"}, {( unsigned long)((( gfp_t)((((1UL))'
    ') << (11))) | (( gfp_t)((((1UL))) << (13)))), "GFP_NOWAIT"}, {( unsigned long)(( gfp_t)((('
    '(1UL))) << (0))), "GFP_DMA"}, {( unsigned long)(( gfp_t)((((1UL))) << (2))), "GFP_DMA32"},'
    ' {( unsigned long)(( gfp_t)(((((1UL))) << (10))|((((1UL))) << (11)))), "__GFP_RECLAIM"}, {'
    '( unsigned long)(( gfp_t)((((1UL))) << (0))), "__GFP_DMA"}, {( unsigned long)(( gfp_t)(((('
    '1UL))) << (1))), "__GFP_HIGHMEM"}, {( unsigned long)(( gfp_t)((((1UL))) << (2))), "__GFP_D'
    'MA32"}, {( unsigned long)(( gfp_t)((((1UL))) << (3))), "__GFP_MOVABLE"}, {( unsigned long)'
    '(( gfp_t)((((1UL))) << (4))), "__GFP_RECLAIMABLE"}, {( unsigned long)(( gfp_t)((((1UL))) <'
    '< (5))), "__GFP_HIGH"}, {( unsigned long)(( gfp_t)((((1UL))) << (6))), "__GFP_IO"}, {( uns'
    'igned long)(( gfp_t)((((1UL))) << (7))), "__GFP_FS"}, {( unsigned long)(( gfp_t)((((1UL)))'
    ' << (8))), "__GFP_ZERO"}, {( unsigned long)(( gfp_t)((((1UL))) << (10))), "__GFP_DIRECT_RE'
    'CLAIM"}, {( unsigned long)(( gfp_t)((((1UL))) << (11))), "__GFP_KSWAPD_RECLAIM"}, {( unsig'
    'ned long)(( gfp_t)((((1UL))) << (12))), "__GFP_WRITE"}, {( unsigned long)(( gfp_t)((((1UL)'
    ')) << (13))), "__GFP_NOWARN"}, {( unsigned long)(( gfp_t)((((1UL))) << (14))), "__GFP_RETR'
    'Y_MAYFAIL"}, {( unsigned long)(( gfp_t)((((1UL))) << (15))), "__GFP_NOFAIL"}, {( unsigned '
    'long)(( gfp_t)((((1UL))) << (16))), "__GFP_NORETRY"}, {( unsigned long)(( gfp_t)((((1UL)))'
    ' << (17))), "__GFP_MEMALLOC"}, {( unsigned long)(( gfp_t)((((1UL))) << (18))), "__GFP_COMP'
    '"}, {( unsigned long)(( gfp_t)((((1UL))) << (19))), "__GFP_NOMEMALLOC"}, {( unsigned long)'
    '(( gfp_t)((((1UL))) << (20))), "__GFP_HARDWALL"}, {( unsigned long)(( gfp_t)((((1UL))) << '
    '(21))), "__GFP_THISNODE"}, {( unsigned long)(( gfp_t)((((1UL))) << (22))), "__GFP_ACCOUNT"'
    '}, {( unsigned long)(( gfp_t)((((1UL))) << (23))), "__GFP_ZEROTAGS"}, {( unsigned long)(( '
    'gfp_t)((((1UL))) << (24))), "__GFP_NO_OBJ_EXT"}, { 0, ((void *)0) } )'
)


# GFP flag values of 6.18 (include/linux/gfp_types.h), as the kmem formats print them
__GFP_HIGHMEM, __GFP_MOVABLE, __GFP_HIGH, __GFP_IO, __GFP_FS = 0x2, 0x8, 0x20, 0x40, 0x80
__GFP_ZERO, __GFP_DIRECT_RECLAIM, __GFP_KSWAPD_RECLAIM = 0x100, 0x400, 0x800
__GFP_NOWARN, __GFP_NORETRY, __GFP_COMP = 0x2000, 0x10000, 0x40000
__GFP_NOMEMALLOC, __GFP_HARDWALL, __GFP_ACCOUNT = 0x80000, 0x100000, 0x400000
__GFP_RECLAIM = __GFP_DIRECT_RECLAIM | __GFP_KSWAPD_RECLAIM
GFP_ATOMIC = __GFP_HIGH | __GFP_KSWAPD_RECLAIM  # 0x820
GFP_KERNEL = __GFP_RECLAIM | __GFP_IO | __GFP_FS  # 0xcc0
GFP_KERNEL_ACCOUNT = GFP_KERNEL | __GFP_ACCOUNT  # 0x400cc0
GFP_NOFS = __GFP_RECLAIM | __GFP_IO  # 0xc40
GFP_HIGHUSER_MOVABLE = GFP_KERNEL | __GFP_HARDWALL | __GFP_HIGHMEM | __GFP_MOVABLE  # 0x100cca
GFP_PGTABLE_USER = GFP_KERNEL_ACCOUNT | __GFP_ZERO  # 0x400dc0

_ENTRY = re.compile(r'\{\( unsigned long\)(.*?), "(\w+)"\}')


def _flag_table(text: str) -> tuple:
    """``(mask, name)`` pairs in print order, evaluated from the C text."""
    table = []
    for expr, name in _ENTRY.findall(text):
        py = expr.replace("( gfp_t)", "").replace("1UL", "1").replace("~", "~")
        table.append((eval(py, {"__builtins__": {}}) & 0xFFFFFFFF, name))  # noqa: S307
    return tuple(table)


GFP_FLAGS = _flag_table(SHOW_GFP_FLAGS)


def print_flags(value: int, table=GFP_FLAGS, delim: str = "|") -> str:
    """``trace_print_flags_seq``: names of the masks fully present, in table
    order, each removing its bits; leftover bits as ``0x%lx``."""
    out = []
    for mask, name in table:
        if not value:
            break
        if mask == 0 or value & mask != mask:
            continue
        out.append(name)
        value &= ~mask
    if value:
        out.append(f"0x{value:x}")
    return delim.join(out)


@functools.lru_cache(maxsize=4096)
def show_gfp_flags(value: int) -> str:
    """``(REC->gfp_flags) ? __print_flags(...) : "none"``; kept per value
    (a workload's allocations use a handful of masks)."""
    return print_flags(value) if value else "none"
