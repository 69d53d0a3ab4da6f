"""The hist triggers' map (kernel/trace/tracing_map.c, tracing_map.h, 6.12).

A :class:`TracingMap` is what a hist trigger aggregates into: a table of
``2 << map_bits`` slots and a pool of ``1 << map_bits`` elements.  A key
(bytes, ``key_size`` of them) is hashed with the kernel's ``jhash``
(:func:`jhash`, seed 0; a hash of 0 becomes 1); its slot walk starts at
the hash's top ``map_bits + 1`` bits and goes on slot by slot
(``__tracing_map_insert``).  Every insert or lookup that finds or makes
an element counts a hit; an insert with the pool used up counts a drop.
Nothing is ever removed but by :meth:`TracingMap.clear`.

Reading the map (``tracing_map_sort_entries``) takes the elements in slot
order, sorts them by their key bytes first (``detect_dups``' ``memcmp``
sort), then by the first sort key, then each run of equal first keys by
the second (``sort_secondary``).  Each sort is the kernel's ``sort()``
(lib/sort.c: a bottom-up heapsort, not stable, :func:`sort`), so entries
with equal sort values come out in the order the kernel prints them.
"""

from __future__ import annotations

from typing import Callable, Optional

TRACING_MAP_BITS_DEFAULT = 11
TRACING_MAP_BITS_MAX = 17
TRACING_MAP_BITS_MIN = 7
TRACING_MAP_KEYS_MAX = 3
TRACING_MAP_VALS_MAX = 3
TRACING_MAP_FIELDS_MAX = TRACING_MAP_KEYS_MAX + TRACING_MAP_VALS_MAX
TRACING_MAP_VARS_MAX = 16
TRACING_MAP_SORT_KEYS_MAX = 2

U32 = 0xFFFFFFFF
U64 = (1 << 64) - 1
JHASH_INITVAL = 0xDEADBEEF


def _rol32(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & U32


def _mix(a: int, b: int, c: int) -> tuple:
    """``__jhash_mix`` (include/linux/jhash.h)."""
    a = (a - c) & U32; a ^= _rol32(c, 4); c = (c + b) & U32
    b = (b - a) & U32; b ^= _rol32(a, 6); a = (a + c) & U32
    c = (c - b) & U32; c ^= _rol32(b, 8); b = (b + a) & U32
    a = (a - c) & U32; a ^= _rol32(c, 16); c = (c + b) & U32
    b = (b - a) & U32; b ^= _rol32(a, 19); a = (a + c) & U32
    c = (c - b) & U32; c ^= _rol32(b, 4); b = (b + a) & U32
    return a, b, c


def _final(a: int, b: int, c: int) -> int:
    """``__jhash_final``: the hash is c."""
    c ^= b; c = (c - _rol32(b, 14)) & U32
    a ^= c; a = (a - _rol32(c, 11)) & U32
    b ^= a; b = (b - _rol32(a, 25)) & U32
    c ^= b; c = (c - _rol32(b, 16)) & U32
    a ^= c; a = (a - _rol32(c, 4)) & U32
    b ^= a; b = (b - _rol32(a, 14)) & U32
    c ^= b; c = (c - _rol32(b, 24)) & U32
    return c


def jhash(key: bytes, initval: int = 0) -> int:
    """``jhash(key, length, initval)``: Bob Jenkins' lookup3 as the kernel
    has it, the 32-bit words read little-endian (x86)."""
    length = len(key)
    a = b = c = (JHASH_INITVAL + length + initval) & U32
    k = 0
    while length > 12:
        a = (a + int.from_bytes(key[k:k + 4], "little")) & U32
        b = (b + int.from_bytes(key[k + 4:k + 8], "little")) & U32
        c = (c + int.from_bytes(key[k + 8:k + 12], "little")) & U32
        a, b, c = _mix(a, b, c)
        length -= 12
        k += 12
    if length == 0:
        return c
    tail = key[k:k + length].ljust(12, b"\0")
    a = (a + int.from_bytes(tail[0:4], "little")) & U32
    b = (b + int.from_bytes(tail[4:8], "little")) & U32
    c = (c + int.from_bytes(tail[8:12], "little")) & U32
    return _final(a, b, c)


def sort(items: list, cmp: Callable) -> None:
    """lib/sort.c's ``sort_r`` on a list in place, step for step (elements
    of 8 bytes: the kernel's offsets are kept to find parents the way it
    does), so elements that compare equal end where the kernel's end."""
    size = 8
    num = len(items)
    n, a = num * size, (num // 2) * size
    lsbit = size & -size
    shift = 0
    if not a:
        return

    def parent(i: int) -> int:
        i -= size
        i -= size & -(i & lsbit)
        return i // 2

    def swap(x: int, y: int) -> None:
        items[x // size], items[y // size] = items[y // size], items[x // size]

    def cmp_at(x: int, y: int) -> int:
        return cmp(items[x // size], items[y // size])

    while True:
        if a:
            a -= size << shift
        elif n > 3 * size:
            n -= size
            swap(0, n)
            shift = 1 if cmp_at(size, 2 * size) <= 0 else 0
            a = size << shift
            n -= size
            swap(a, n)
        else:
            break
        b = a
        while True:
            c = 2 * b + size
            d = c + size
            if d >= n:
                break
            b = c if cmp_at(c, d) > 0 else d
        if d == n:
            b = c
        while b != a and cmp_at(a, b) >= 0:
            b = parent(b)
        c = b
        while b != a:
            b = parent(b)
            swap(b, c)
    n -= size
    swap(0, n)
    if n == size * 2 and cmp_at(0, size) > 0:
        swap(0, size)


def _sign(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def cmp_num(size: int, signed: bool) -> Callable:
    """``tracing_map_cmp_num``: the u64 at the key's offset seen as the
    field's C type (``tracing_map_cmp_none`` for other sizes)."""
    if size not in (1, 2, 4, 8):
        return lambda x, y: 0
    bits = 8 * size
    if signed:
        def conv(v):
            return _sign(v, bits)
    else:
        mask = (1 << bits) - 1

        def conv(v):
            return v & mask
    return lambda x, y: (conv(x) > conv(y)) - (conv(x) < conv(y))


def cmp_string(x: bytes, y: bytes) -> int:
    """``tracing_map_cmp_string``: ``strcmp``."""
    x, y = x.split(b"\0", 1)[0], y.split(b"\0", 1)[0]
    return (x > y) - (x < y)


class Field:
    """``struct tracing_map_field``: a sum, or a key at *offset*."""

    __slots__ = ("kind", "offset", "size", "cmp")

    def __init__(self, kind: str, cmp: Callable, offset: int = 0, size: int = 8):
        self.kind, self.cmp, self.offset, self.size = kind, cmp, offset, size


class Elt:
    """``struct tracing_map_elt``: the key, one sum per field, the
    variables, and the hist trigger's private data (``hist_elt_data``)."""

    __slots__ = ("key", "sums", "vars", "var_set", "private")

    def __init__(self, key: bytes, n_fields: int, n_vars: int):
        self.key = key
        self.sums = [0] * n_fields
        self.vars = [0] * n_vars
        self.var_set = [False] * n_vars
        self.private = None

    def update_sum(self, i: int, n: int) -> None:
        self.sums[i] = (self.sums[i] + n) & U64

    def set_var(self, i: int, n) -> None:
        self.vars[i] = n
        self.var_set[i] = True

    def read_var_once(self, i: int):
        self.var_set[i] = False
        return self.vars[i]


class TracingMap:
    """``struct tracing_map`` (``tracing_map_create`` + ``tracing_map_init``)."""

    def __init__(self, map_bits: int, key_size: int, elt_init: Optional[Callable] = None):
        if not TRACING_MAP_BITS_MIN <= map_bits <= TRACING_MAP_BITS_MAX:
            raise ValueError(map_bits)
        self.map_bits = map_bits
        self.max_elts = 1 << map_bits
        self.map_size = 1 << (map_bits + 1)
        self.key_size = key_size
        self.fields: list[Field] = []
        self.key_idx: list[int] = []
        self.n_vars = 0
        self.elt_init = elt_init  # ops->elt_init: an element's private data
        self.clear()

    # --- fields (tracing_map_add_*) -----------------------------------------------

    def add_sum_field(self) -> int:
        self.fields.append(Field("sum", lambda x, y: (x > y) - (x < y)))
        return len(self.fields) - 1

    def add_key_field(self, offset: int, cmp: Callable, size: int = 8) -> int:
        self.fields.append(Field("key", cmp, offset, size))
        self.key_idx.append(len(self.fields) - 1)
        return len(self.fields) - 1

    def add_var(self) -> int:
        self.n_vars += 1
        return self.n_vars - 1

    # --- insert, lookup, clear ------------------------------------------------------

    def clear(self) -> None:
        """``tracing_map_clear``: no element, hits and drops 0."""
        self.slots: list = [None] * self.map_size  # (hash, Elt)
        self.index: dict = {}  # key bytes -> Elt (the walk's outcome, kept)
        self.hits = 0
        self.drops = 0
        self.next_elt = 0

    def insert(self, key: bytes, lookup_only: bool = False) -> Optional[Elt]:
        """``__tracing_map_insert``: the element of *key* (made if new)."""
        elt = self.index.get(key)
        if elt is not None:
            if not lookup_only:
                self.hits += 1
            return elt
        if lookup_only:
            return None
        key_hash = jhash(key) or 1
        idx = key_hash >> (32 - (self.map_bits + 1))
        mask = self.map_size - 1
        while True:
            idx &= mask
            if self.slots[idx] is None:
                if self.next_elt >= self.max_elts:  # get_free_elt: pool used up
                    self.drops += 1
                    return None
                self.next_elt += 1
                elt = Elt(key, len(self.fields), self.n_vars)
                if self.elt_init is not None:
                    self.elt_init(elt)
                self.slots[idx] = (key_hash, elt)
                self.index[key] = elt
                self.hits += 1
                return elt
            idx += 1

    def lookup(self, key: bytes) -> Optional[Elt]:
        return self.insert(key, lookup_only=True)

    # --- reading: tracing_map_sort_entries --------------------------------------------

    def _cmp_for(self, idx: int, descending: bool) -> Callable:
        field = self.fields[idx]
        if field.kind == "key":
            off, size, fcmp = field.offset, field.size, field.cmp
            if fcmp is cmp_string:
                def cmp(a, b):
                    return fcmp(a.key[off:off + size], b.key[off:off + size])
            else:
                def cmp(a, b):
                    return fcmp(int.from_bytes(a.key[off:off + 8], "little"),
                                int.from_bytes(b.key[off:off + 8], "little"))
        else:
            def cmp(a, b):
                x, y = a.sums[idx], b.sums[idx]
                return (x > y) - (x < y)
        if descending:
            return lambda a, b: -cmp(a, b)
        return cmp

    def sort_entries(self, sort_keys: list) -> list:
        """The elements in the order the ``hist`` file prints them;
        *sort_keys* is ``[(field_idx, descending), ...]`` (1 or 2)."""
        entries = [slot[1] for slot in self.slots if slot is not None]
        if len(entries) < 2:
            return entries
        sort(entries, lambda a, b: (a.key > b.key) - (a.key < b.key))  # detect_dups
        primary = self._cmp_for(*sort_keys[0])
        sort(entries, primary)
        if len(sort_keys) > 1:
            self._sort_secondary(entries, primary, self._cmp_for(*sort_keys[1]))
        return entries

    @staticmethod
    def _sort_secondary(entries: list, primary: Callable, secondary: Callable) -> None:
        """``sort_secondary``: each run of entries equal by *primary*
        sorted by *secondary* (the kernel's loop, its last-pair rule included)."""
        n = len(entries)
        start, n_sub = 0, 1
        for i in range(n - 1):
            if primary(entries[i], entries[i + 1]) == 0:
                n_sub += 1
                if i < n - 2:
                    continue
            if n_sub < 2:
                start, n_sub = i + 1, 1
                continue
            run = entries[start:start + n_sub]
            sort(run, secondary)
            entries[start:start + n_sub] = run
            start, n_sub = i + 1, 1


__all__ = ["TracingMap", "Elt", "jhash", "sort", "cmp_num", "cmp_string",
           "TRACING_MAP_BITS_DEFAULT", "TRACING_MAP_BITS_MAX", "TRACING_MAP_BITS_MIN",
           "TRACING_MAP_KEYS_MAX", "TRACING_MAP_VALS_MAX", "TRACING_MAP_VARS_MAX",
           "TRACING_MAP_SORT_KEYS_MAX"]
