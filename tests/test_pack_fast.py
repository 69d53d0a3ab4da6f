"""The compiled packer of tracefs payloads (engine/ftrace/pack_fast.pyx)
against the numpy path of ``EventType.pack_columns`` and against
``EventType.encode`` of each event: the same record bytes for columns of
every integer width and signedness, values that C assignment truncates,
scalars, bools, ``__data_loc`` strings (one or two fields, data starting
inside the fixed part's tail padding) and positions taken from a batch."""

from __future__ import annotations

import numpy as np
import pytest

from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.batch import Strings, column_value
from fakedebugfs.engine.ftrace import events
from fakedebugfs.engine.ftrace.events import KMEM_EVENTS, EventType

pack_fast = fast.load("fakedebugfs.engine.ftrace.pack_fast")
pytestmark = pytest.mark.skipif(pack_fast is None, reason="pack_fast not built (or FAKEDEBUGFS_PURE)")

NAMES = ("", "kmalloc-8", "dentry", "a-rather-long-cache-name-of-forty-bytes!", "x" * 7, "ext4_inode_cache")


def _two_strings():
    def enc(v):
        return dict(zip(("a", "s1", "b", "s2", "c"), v))

    return EventType("test", "two_strings", 999, (
        ("unsigned long", "a", 8, 8, 0), ("__data_loc char[]", "s1", 16, 4, 0),
        ("int", "b", 20, 4, 1), ("__data_loc char[]", "s2", 24, 4, 0),
        ("unsigned char", "c", 28, 1, 0)), '"x"', lambda r, o: "", enc, dyn=("s1", "s2"),
        data_offset=29, encode_columns=enc)


def column(rng, m: int, kind: str):
    """A column of one of the shapes a batch may carry."""
    if kind == "i64":
        return rng.integers(-(1 << 62), 1 << 62, size=m, dtype=np.int64)
    if kind == "u64":
        return rng.integers(0, 1 << 64, size=m, dtype=np.uint64)
    if kind == "i32":
        return rng.integers(-(1 << 31), 1 << 31, size=m, dtype=np.int32)
    if kind == "u16":
        return rng.integers(0, 1 << 16, size=m, dtype=np.uint16)
    if kind == "i8":
        return rng.integers(-128, 128, size=m, dtype=np.int8)
    if kind == "bool":
        return rng.random(m) < 0.5
    if kind == "strided":
        return rng.integers(0, 1 << 40, size=2 * m, dtype=np.int64)[::2]
    if kind == "one":
        return rng.integers(0, 1 << 63, size=1, dtype=np.int64)
    if kind == "npscalar":
        return np.int64(rng.integers(-1000, 1000))
    if kind == "neg":
        return -int(rng.integers(1, 1 << 40))
    return int(rng.integers(0, 1 << 64, dtype=np.uint64))  # a big Python int


KINDS = ("i64", "u64", "i32", "u16", "i8", "bool", "strided", "one", "npscalar", "neg", "big")


def payloads(groups, m: int) -> list:
    """Each event's payload bytes (up to its length's 4-byte end)."""
    out = [None] * m
    for idx, words, length, rowsel in groups:
        for j, i in enumerate(idx.tolist()):
            r = j if rowsel is None else int(rowsel[j])
            n = int(length if np.ndim(length) == 0 else length[r])
            out[i] = words[r].tobytes()[:(n + 3) & ~3]
    return out


def numpy_path(ev, *args, **kw):
    saved = events._pack_fast
    events._pack_fast = lambda: None  # as when pack_fast is not built
    try:
        return ev.pack_columns(*args, **kw)
    finally:
        events._pack_fast = saved


@pytest.mark.parametrize("ev", KMEM_EVENTS + (_two_strings(),), ids=lambda e: e.name)
@pytest.mark.parametrize("seed", range(4))
def test_packer_matches_numpy_and_encode(ev, seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 300))
    n = m + 50  # the batch the events sit in
    pid = rng.integers(-5, 1 << 33, size=n, dtype=np.int64)
    pos = np.sort(rng.choice(n, m, replace=False)).astype(np.int64)
    args = [a for a in ("a", "b", "c", "s1", "s2")] if ev.system == "test" else None
    nargs = 5 if ev.system == "test" else {"kmalloc": 6, "kfree": 2, "kmem_cache_alloc": 7,
                                           "kmem_cache_free": 3, "mm_page_alloc": 6,
                                           "mm_page_free": 4}[ev.name]
    cols = []
    for a in range(nargs):
        is_name = (ev.name in ("kmem_cache_alloc", "kmem_cache_free") and a == nargs - 1) or \
            (args is not None and a in (1, 3))
        if is_name:
            table = tuple(rng.permutation(NAMES).tolist())[:int(rng.integers(1, len(NAMES) + 1))]
            codes = rng.integers(0, len(table), size=m).astype(np.int64)
            cols.append(Strings(codes, table) if seed % 3 else table[0])
        else:
            cols.append(column(rng, m, KINDS[int(rng.integers(len(KINDS)))]))
    cols = tuple(cols)
    flags, preempt = (0, 0) if seed % 2 else (0x81, 3)
    fast_groups = ev.pack_columns(pid, cols, flags, preempt, pos=pos)
    assert len(fast_groups) == 1  # packed by the compiled packer
    got = payloads(fast_groups, m)
    assert got == payloads(numpy_path(ev, pid[pos], cols, flags, preempt), m)
    assert got == payloads(numpy_path(ev, pid, cols, flags, preempt, pos=pos), m)
    for j in range(m):  # the per-event encoder, as the probe packs one event
        values = tuple(column_value(c, j) if not isinstance(c, np.ndarray) or len(c) > 1
                       else c[0].item() for c in cols)
        values = tuple(int(v) if isinstance(v, (np.integer, np.bool_)) else v for v in values)
        p = int(pid[pos[j]]) & 0xFFFFFFFF  # common_pid: an int
        one = ev.encode(p - (p >> 31 << 32), values, flags, preempt)
        want = one + bytes(-len(one) % 4)
        assert got[j] == want, j


def test_unsupported_columns_fall_back_to_numpy():
    """A float or big-endian column is packed by the numpy path."""
    ev = KMEM_EVENTS[1]  # kfree: call_site, ptr
    pid = np.arange(4, dtype=np.int64)
    for first in (np.array([1.5, 2.0, 3.0, 4.0]), np.array([1, 2, 3, 4], ">i8")):
        cols = (first, np.arange(4, dtype=np.int64))
        groups = ev.pack_columns(pid, cols)
        assert payloads(groups, 4) == payloads(numpy_path(ev, pid, cols), 4)
