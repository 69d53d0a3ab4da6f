"""tracefs event types: ids, fields, ``format`` files, payload codecs and
the text each prints (``struct trace_event_call`` + ``TRACE_EVENT()``).

Field offsets, sizes, signedness, ids and print fmt lines are those of this
machine's 6.18 kernel (``fixtures/tracefs/events/*/*/format``).  A payload
starts with ``struct trace_entry`` (``layouts.trace_entry``) and is
``sizeof(struct trace_event_raw_<name>)`` bytes (the fixed part rounded up
to 8) plus its ``__data_loc`` strings.  ``kmem_alloc``/``kmem_free`` are the
entries of the 2.6.29 kmemtrace ftrace plugin (``struct kmemtrace_alloc_entry``,
``struct kmemtrace_free_entry``, as 2.6.30's ``trace_entries`` showed them).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable, Optional

from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.lazynp import np

from fakedebugfs.engine.core.gfp import SHOW_GFP_FLAGS, __GFP_ACCOUNT, show_gfp_flags
from fakedebugfs.engine.core.layouts import packer, trace_entry

COMMON_FIELDS = (
    ("unsigned short", "common_type", 0, 2, 0),
    ("unsigned char", "common_flags", 2, 1, 0),
    ("unsigned char", "common_preempt_count", 3, 1, 0),
    ("int", "common_pid", 4, 4, 1),
)
ENTRY = packer(trace_entry)  # struct trace_entry
COMMON_KEYS = tuple(f[1] for f in COMMON_FIELDS)
VMEMMAP_BASE = 0xFFFFEA0000000000  # struct page array (x86_64, no KASLR)
STRUCT_PAGE_SIZE = 64

_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}

# trace_output.c's TRACE_EVENT_TYPE_MAX: the largest number struct
# trace_entry's u16 type holds.  The kernel numbers its events from the
# bottom (alloc_trace_event_type: the lowest free number); the fake's own
# entries whose numbers a profile's kernel gives others take numbers from the
# top down, at OWN_TYPES and above, out of the way of the events defined.
TRACE_EVENT_TYPE_MAX = 0xFFFF
OWN_TYPES = 0xFF00


def next_event_type(by_id) -> int:
    """``alloc_trace_event_type`` for a new event (defined, dynamic,
    synthetic): the number after the highest one an event has (the fake's
    own entries at OWN_TYPES and above left out)."""
    return max((i for i in by_id if i < OWN_TYPES), default=0) + 1


def _strings():
    """``batch.Strings`` (imported on first use)."""
    if not _STRINGS:
        from fakedebugfs.engine.core.batch import Strings

        _STRINGS.append(Strings)
    return _STRINGS[0]


_STRINGS: list = []
_ARANGE: list = []


def _arange(m: int):
    """``np.arange(m)`` as a view of one kept array (read only)."""
    if not _ARANGE or len(_ARANGE[0]) < m:
        a = np.arange(max(m, 1 << 16))
        a.flags.writeable = False
        _ARANGE[:] = [a]
    return _ARANGE[0][:m]


def _pack_fast():
    """The compiled packer (``pack_fast.pyx``), loaded on first use (it
    imports numpy), or None."""
    return fast.load("fakedebugfs.engine.ftrace.pack_fast")


@dataclass
class EventType:
    """One tracefs event: ``events/<system>/<name>/``."""

    system: str
    name: str
    id: int
    fields: tuple  # (c type, name, offset, size, signed) after the common ones
    print_fmt: str
    show: Callable  # (rec: dict, out: "OutputContext") -> str
    encode_values: Optional[Callable] = None  # tracepoint values -> field values
    size: int = 0  # sizeof the fixed part
    dyn: tuple = ()  # names of __data_loc fields, in payload order
    data_offset: Optional[int] = None  # where __data_loc data starts (default: size)
    dyn_arrays: tuple = ()  # __data_loc fields decoded as bytes, not strings
    # the batch path: tracepoint argument columns -> field columns (None: one by one)
    encode_columns: Optional[Callable] = None
    packer: struct.Struct = field(init=False)
    # a syscall event: its line shows no event name (print_syscall_enter/exit)
    bare = False

    def __post_init__(self):
        end = max((off + size for _, _, off, size, _ in self.fields), default=8)
        self.size = self.size or (end + 7) & ~7
        if self.data_offset is None:
            self.data_offset = self.size
        fmt, pos = "<", 8
        for ctype, name, off, size, signed in self.fields:
            fmt += "x" * (off - pos)
            code = _CODES.get(size, f"{size}s" if size else "") if "[" not in name else \
                f"{size}s" if size else ""  # arrays are bytes, whatever their size
            fmt += code.lower() if signed and "[" not in name else code
            pos = off + size
        fmt += "x" * (self.size - pos)
        self.packer = struct.Struct(fmt)
        packed = [f for f in self.fields if f[3]]
        self.names = tuple(field_key(f[1]) for f in packed)
        self._masks = tuple((field_key(f[1]), _mask(f), _mask(f) + 1 >> 1 if f[4] else 0)
                            for f in packed)
        # decode: struct trace_entry and the fixed part in one unpack
        self._unpacker = struct.Struct(ENTRY.format + self.packer.format.lstrip("<"))
        self._keys = COMMON_KEYS + self.names
        self._trailing = tuple((field_key(name), off) for _, name, off, size, _ in self.fields
                               if size == 0)

    @property
    def key(self) -> str:
        return f"{self.system}:{self.name}"

    def format(self) -> str:
        """The ``format`` file (``f_show`` of trace_events.c)."""
        lines = [f"name: {self.name}\n", f"ID: {self.id}\n", "format:\n"]
        for ctype, name, off, size, signed in COMMON_FIELDS:
            lines.append(_field_line(ctype, name, off, size, signed))
        lines.append("\n")
        for ctype, name, off, size, signed in self.fields:
            lines.append(_field_line(ctype, name, off, size, signed))
        lines.append(f"\nprint fmt: {self.print_fmt}\n")
        return "".join(lines)

    def encode(self, pid: int, values: tuple, flags: int = 0, preempt: int = 0) -> bytes:
        """The payload for tracepoint *values* (``trace_event_raw_event_<name>``)."""
        vals = self.encode_values(values) if self.encode_values else values
        return self.pack(pid, vals, flags, preempt)

    def pack(self, pid: int, vals: dict, flags: int = 0, preempt: int = 0) -> bytes:
        """``struct trace_event_raw_<name>`` with *vals*: the fixed part, then
        the ``__data_loc`` strings (``u32`` of ``len << 16 | offset``)."""
        tail = b""
        if self.dyn:
            vals = dict(vals)
            for name in self.dyn:
                data = vals[name].encode() + b"\0" if isinstance(vals[name], str) else vals[name]
                vals[name] = (len(data) << 16) | (self.data_offset + len(tail))
                tail += data
        head = ENTRY.pack(self.id, flags, preempt, pid)
        try:  # fast path: every value already fits its field
            body = self.packer.pack(*[vals[n] for n in self.names])
        except struct.error:  # C assignment: truncate, reinterpret signedness
            body = self.packer.pack(*[_wrap(vals[n], mask, sign) for n, mask, sign in self._masks])
        if self.data_offset != self.size:  # the data starts inside the tail padding
            return (head + body)[:self.data_offset] + tail.ljust(
                len(tail) + self.size - self.data_offset, b"\0")
        return head + body + tail

    def record_dtype(self) -> np.dtype:
        """``struct trace_event_raw_<name>`` (fixed part) as a numpy
        structured dtype: the layout :meth:`pack` writes, for
        :meth:`pack_columns`."""
        dt = self.__dict__.get("_dtype")
        if dt is None:
            names, formats, offsets = [], [], []
            for ctype, name, off, size, signed in COMMON_FIELDS + self.fields:
                if not size:
                    continue
                names.append(field_key(name))
                offsets.append(off)
                if size in _CODES and "[" not in name:
                    formats.append(f"<{'i' if signed else 'u'}{size}")
                else:
                    formats.append(f"V{size}")
            dt = self.__dict__["_dtype"] = np.dtype(
                {"names": names, "formats": formats, "offsets": offsets, "itemsize": self.size})
        return dt

    def pack_columns(self, pid, cols, flags: int = 0, preempt: int = 0, pos=None) -> list:
        """:meth:`encode` of many events at once: *pid* (m,) (or the batch's,
        taken at positions *pos*) and the tracepoint's argument columns
        (:mod:`..core.batch`).  Returns :func:`~..core.batch.payload_group`
        tuples, one per payload size in words (``__data_loc`` strings make
        sizes differ; the bytes past a payload up to its 4-byte end are
        zeros in a page either way); packed by the compiled packer
        (``pack_fast``), one group with a length per row."""
        vals = self.encode_columns(cols)
        m = len(pid) if pos is None else len(pos)
        packed = self._pack_fast(pid, pos, vals, m, flags, preempt) if _pack_fast() else None
        if packed is not None:
            return packed
        from fakedebugfs.engine.core.batch import group_positions, payload_group

        if pos is not None:
            pid = pid[pos]
        tails = self._dyn_tails(vals, m) if self.dyn else None
        width = self.size if tails is None else (self.size + 4 * tails[0].shape[1] + 3) & ~3
        rec = np.zeros(m, self._dtype_of(width))
        rec["common_type"] = self.id
        if flags:
            rec["common_flags"] = flags
        if preempt:
            rec["common_preempt_count"] = preempt
        rec["common_pid"] = pid
        for name in self.names:
            if name not in self.dyn:
                value = vals[name]
                rec[name] = value if isinstance(value, np.ndarray) else np.asarray(value)
        rows = rec.view(np.uint8).reshape(m, width)
        if tails is None:
            return [payload_group(np.arange(m), rows)]
        table, locs, nw_class, sizes, which = tails
        for name, loc in zip(self.dyn, locs):
            rec[name] = loc[which]
        cut = self.data_offset  # the strings start there (the fixed part's tail padding)
        if cut != self.size:
            rows[:, cut:self.size] = 0
        if cut % 4 == 0:
            rows.view(np.uint32)[:, cut >> 2:(cut >> 2) + table.shape[1]] = table[which]
        else:
            tb = table.view(np.uint8)
            rows[:, cut:cut + tb.shape[1]] = tb[which]
        words = rows.view(np.uint32)
        out = []
        for nw, idx in zip(sizes, group_positions(nw_class[which], len(sizes))):
            if len(idx):
                out.append(payload_group(idx, words, nw * 4, idx))
        return out

    def _pack_fast(self, pid, pos, vals, m: int, flags: int, preempt: int):
        """:meth:`pack_columns` by the compiled packer: the same record
        bytes, one group (a length per row with ``__data_loc`` strings);
        None when a column is not one it packs (the numpy path then does)."""
        plan = self.__dict__.get("_plan")
        if plan is None:
            fields = self._fast_fields()
            plan = self.__dict__["_plan"] = False if fields is None else \
                _pack_fast().Plan(self.id, self.size, fields, np, _arange)
        if not plan:
            return None
        if not self.dyn:
            return plan.pack(vals, pid, pos, m, flags, preempt)
        table, locs, nw_class, sizes, which = self._dyn_tails(vals, m)
        if which.dtype != np.int64:
            return None
        return plan.pack(vals, pid, pos, m, flags, preempt,
                         self._fast_dyn(table, locs, nw_class, sizes), which,
                         (self.size + 4 * table.shape[1] + 3) & ~3)

    def _fast_fields(self):
        """``(name, offset, size)`` of the integer fields the compiled
        packer fills (``__data_loc`` ones apart), or None when the record
        has a field it does not pack (byte arrays, odd sizes)."""
        if "_fast" not in self.__dict__:
            out = []
            for ctype, name, off, size, signed in self.fields:
                key = field_key(name)
                if not size or key in self.dyn:
                    continue
                if size not in _CODES or "[" in name:
                    out = None
                    break
                out.append((key, off, size))
            self.__dict__["_fast"] = out
        return self.__dict__["_fast"]

    def _fast_dyn(self, table, locs, nw_class, sizes):
        """The compiled packer's ``DynTable`` of a string table (made once
        per table)."""
        cache = self.__dict__.setdefault("_fast_dyns", {})
        made = cache.get(id(table))
        if made is None or made[0] is not table:
            if len(cache) >= 64:
                cache.clear()
            made = cache[id(table)] = (table, _pack_fast().DynTable(
                self.data_offset, self.size, table, list(zip(self._dyn_offsets(), locs)),
                np.asarray(sizes, np.int64)[nw_class]))
        return made[1]

    def _dyn_offsets(self) -> list:
        """The offset of each ``__data_loc`` field, in :attr:`dyn` order."""
        at = {field_key(f[1]): f[2] for f in self.fields}
        return [at[name] for name in self.dyn]

    def _dtype_of(self, width: int) -> np.dtype:
        """:meth:`record_dtype` with items of *width* bytes (room for strings)."""
        cache = self.__dict__.setdefault("_dtypes", {})
        dt = cache.get(width)
        if dt is None:
            base = self.record_dtype()
            dt = cache[width] = np.dtype({
                "names": base.names, "formats": [base.fields[n][0] for n in base.names],
                "offsets": [base.fields[n][1] for n in base.names], "itemsize": width})
        return dt

    def _dyn_tails(self, vals, m):
        """The ``__data_loc`` strings of each event: ``(table, locs,
        nw_class, sizes, which)``: every combination of the string tables'
        entries as zero-padded words, the location word of each field per
        combination, each combination's payload size class and the sizes in
        words of the classes, and each event's combination (made once per
        set of string tables)."""
        Strings = _strings()
        combo = None
        cols = []
        for name in self.dyn:
            col = vals[name]
            if not isinstance(col, Strings):
                col = Strings(np.zeros(m, np.int64), (col,))
            codes = col.codes if col.codes.dtype == np.int64 else col.codes.astype(np.int64)
            combo = codes if combo is None else combo * len(col.table) + codes
            cols.append(col)
        tables = tuple(col.table for col in cols)
        # the same table objects batch after batch: found by identity first
        # (hashing the names again each batch costs more than the packing)
        seen = self.__dict__.setdefault("_tails_seen", {})
        hit = seen.get(tuple(map(id, tables)))
        if hit is not None and hit[0] == tables:  # (compared by identity first)
            return hit[1] + (combo,)
        cache = self.__dict__.setdefault("_tails", {})
        made = cache.get(tables)
        if made is None:
            made = self._tail_table(cols)
            if len(cache) < 64:
                cache[tables] = made
        if len(seen) >= 64:
            seen.clear()
        seen[tuple(map(id, tables))] = (tables, made)
        return made + (combo,)

    def _tail_table(self, cols) -> tuple:
        count = 1
        for col in cols:
            count *= len(col.table)
        tails, locs = [], [[] for _ in cols]
        for key in range(count):
            codes = []
            for col in reversed(cols):  # mixed radix, last field least significant
                key, code = divmod(key, len(col.table))
                codes.append(code)
            tail = b""
            for f, (col, code) in enumerate(zip(cols, reversed(codes))):
                text = col.table[code]
                data = text.encode() + b"\0" if isinstance(text, str) else bytes(text)
                locs[f].append((len(data) << 16) | (self.data_offset + len(tail)))
                tail += data
            tails.append(tail)
        words = (max((len(t) for t in tails), default=0) + 3) >> 2
        table = np.zeros((len(tails), words * 4), np.uint8)
        for i, t in enumerate(tails):
            table[i, :len(t)] = np.frombuffer(t, np.uint8)
        nws = [(self.size + len(t) + 3) >> 2 for t in tails]
        sizes = sorted(set(nws))
        nw_class = np.array([sizes.index(w) for w in nws], np.int64)
        return (table.view(np.uint32), [np.array(x, np.int64) for x in locs], nw_class, sizes)

    def decode(self, payload: bytes) -> dict:
        """Field values by name, ``__data_loc`` strings resolved."""
        if len(payload) < self.size:
            padded = payload + bytes(self.size - len(payload))
        else:
            padded = payload
        rec = dict(zip(self._keys, self._unpacker.unpack_from(padded)))
        for name in self.dyn:
            loc = rec[name]
            raw = payload[loc & 0xFFFF:(loc & 0xFFFF) + (loc >> 16)]
            rec[name] = raw if name in self.dyn_arrays else \
                raw.split(b"\0", 1)[0].decode(errors="replace")
        for key, off in self._trailing:  # a trailing array: the bytes after the fixed part
            rec[key] = payload[off:]
        return rec


def field_key(name: str) -> str:
    """``prev_comm[16]`` -> ``prev_comm``: the key of a field in records."""
    return name.split("[", 1)[0]


def _mask(f) -> int:
    """All bits of an integer field; 0 for arrays and odd sizes (bytes)."""
    return (1 << (8 * f[3])) - 1 if f[3] in _CODES and "[" not in f[1] else 0


def _wrap(value, mask: int, sign: int):
    """C assignment to a field: truncate, then reinterpret if signed
    (byte arrays, mask 0, are passed as they are)."""
    if not mask:
        return value
    value &= mask
    return value - 2 * sign if sign and value & sign else value


def _field_line(ctype, name, off, size, signed) -> str:
    return f"\tfield:{ctype} {name};\toffset:{off};\tsize:{size};\tsigned:{signed};\n"


# --- the text each event prints (TP_printk) ------------------------------

def _show_kmalloc(r, out):
    return (f"call_site={out.sym_offset(r['call_site'])} ptr={out.ptr(r['ptr'])} "
            f"bytes_req={r['bytes_req']} bytes_alloc={r['bytes_alloc']} "
            f"gfp_flags={show_gfp_flags(r['gfp_flags'])} node={r['node']} "
            f"accounted={'true' if r['gfp_flags'] & __GFP_ACCOUNT else 'false'}")


def _show_kmem_cache_alloc(r, out):
    return (f"call_site={out.sym_offset(r['call_site'])} ptr={out.ptr(r['ptr'])} "
            f"name={r['name']} bytes_req={r['bytes_req']} bytes_alloc={r['bytes_alloc']} "
            f"gfp_flags={show_gfp_flags(r['gfp_flags'])} node={r['node']} "
            f"accounted={'true' if r['accounted'] else 'false'}")


def _show_kfree(r, out):
    return f"call_site={out.sym_offset(r['call_site'])} ptr={out.ptr(r['ptr'])}"


def _show_kmem_cache_free(r, out):
    return f"call_site={out.sym_offset(r['call_site'])} ptr={out.ptr(r['ptr'])} name={r['name']}"


def _page(pfn: int) -> int:
    return VMEMMAP_BASE + pfn * STRUCT_PAGE_SIZE


def _show_mm_page_alloc(r, out):
    return (f"page={out.ptr(_page(r['pfn']))} pfn=0x{r['pfn']:x} order={_s32(r['order'])} "
            f"migratetype={r['migratetype']} gfp_flags={show_gfp_flags(r['gfp_flags'])}")


def _show_mm_page_free(r, out):
    return f"page={out.ptr(_page(r['pfn']))} pfn=0x{r['pfn']:x} order={_s32(r['order'])}"


def _s32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def _show_print(r, out):
    """``trace_print_print``: ``seq_print_ip_sym`` of the ip (``+off/size``
    with ``sym-offset``, `` <addr>`` with ``sym-addr``), then ``: %s`` (the
    buffer ends with its newline)."""
    text = r["buf"].split(b"\0", 1)[0].decode(errors="surrogateescape")  # bytes as written
    ip, opts = r["ip"], getattr(out, "options", None) or {}
    where = out.sym_offset(ip) if ip and opts.get("sym-offset") else out.sym(ip)
    if ip and opts.get("sym-addr"):
        where += f" <{ip:016x}>"
    return f"{where}: {text.rstrip(chr(10))}"


def _show_function(r, out):
    return f" {out.sym(r['ip'])} <-- {out.sym(r['parent_ip'])}"


def _show_raw_data(r, out):
    """``trace_raw_data``: ``# <id> buf:`` and every byte of the entry
    (the ring buffer's 4-byte rounding included)."""
    return f"# {r['id']:x} buf:" + "".join(f" {b:02x}" for b in r["buf"])


def _show_kmem_alloc(r, out):
    return (f"type:{r['type_id']} call_site:{out.sym_offset(r['call_site'])} "
            f"ptr:{out.ptr(r['ptr'])} req:{r['bytes_req']} alloc:{r['bytes_alloc']} "
            f"flags:{r['gfp_flags']:x} node:{r['node']}")


def _show_kmem_free(r, out):
    return f"type:{r['type_id']} call_site:{out.sym_offset(r['call_site'])} ptr:{out.ptr(r['ptr'])}"


def _show_unknown(r, out):
    return ""


# --- encoders: tracepoint arguments (engine.core.catalogue) -> fields ----------

KMEM_ALLOC_ARGS = ("call_site", "ptr", "bytes_req", "bytes_alloc", "gfp_flags", "node")


def _enc_kmalloc(v):
    return dict(zip(KMEM_ALLOC_ARGS, v))


def _enc_kmem_cache_alloc(v):
    rec = dict(zip(KMEM_ALLOC_ARGS + ("name",), v))
    rec["accounted"] = int(bool(rec["gfp_flags"] & __GFP_ACCOUNT))
    return rec


def _enc_kmem_cache_alloc_columns(v):
    rec = dict(zip(KMEM_ALLOC_ARGS + ("name",), v))
    rec["accounted"] = (np.asarray(rec["gfp_flags"]) & __GFP_ACCOUNT) != 0
    return rec


def _enc_kfree(v):
    return {"call_site": v[0], "ptr": v[1]}


def _enc_kmem_cache_free(v):
    return {"call_site": v[0], "ptr": v[1], "name": v[2]}


def _enc_mm_page_alloc(v):
    pfn, order, gfp, migratetype = v[:4]
    return {"pfn": pfn, "order": order, "gfp_flags": gfp, "migratetype": migratetype}


def _enc_mm_page_free(v):
    return {"pfn": v[0], "order": v[1]}




def _f(ctype, name, off, size, signed=0):
    return (ctype, name, off, size, signed)


def _gfp_fmt(head: str, args: str, tail: str) -> str:
    return f'"{head}", {args}(REC->gfp_flags) ? {SHOW_GFP_FLAGS} : "none"{tail}'


KMEM_EVENTS = (
    EventType("kmem", "kmalloc", 658, (
        _f("unsigned long", "call_site", 8, 8), _f("const void *", "ptr", 16, 8),
        _f("size_t", "bytes_req", 24, 8), _f("size_t", "bytes_alloc", 32, 8),
        _f("unsigned long", "gfp_flags", 40, 8), _f("int", "node", 48, 4, 1)),
        _gfp_fmt("call_site=%pS ptr=%p bytes_req=%zu bytes_alloc=%zu gfp_flags=%s node=%d "
                 "accounted=%s", "(void *)REC->call_site, REC->ptr, REC->bytes_req, "
                 "REC->bytes_alloc, ", ", REC->node, (1 && (REC->gfp_flags & ( unsigned long)"
                 "(( gfp_t)((((1UL))) << (22))))) ? \"true\" : \"false\""),
        _show_kmalloc, _enc_kmalloc, encode_columns=_enc_kmalloc),
    EventType("kmem", "kfree", 657, (
        _f("unsigned long", "call_site", 8, 8), _f("const void *", "ptr", 16, 8)),
        '"call_site=%pS ptr=%p", (void *)REC->call_site, REC->ptr', _show_kfree, _enc_kfree,
        encode_columns=_enc_kfree),
    EventType("kmem", "kmem_cache_alloc", 659, (
        _f("unsigned long", "call_site", 8, 8), _f("const void *", "ptr", 16, 8),
        _f("__data_loc char[]", "name", 24, 4), _f("size_t", "bytes_req", 32, 8),
        _f("size_t", "bytes_alloc", 40, 8), _f("unsigned long", "gfp_flags", 48, 8),
        _f("int", "node", 56, 4, 1), _f("bool", "accounted", 60, 1)),
        _gfp_fmt("call_site=%pS ptr=%p name=%s bytes_req=%zu bytes_alloc=%zu gfp_flags=%s "
                 "node=%d accounted=%s", "(void *)REC->call_site, REC->ptr, __get_str(name), "
                 "REC->bytes_req, REC->bytes_alloc, ",
                 ", REC->node, REC->accounted ? \"true\" : \"false\""),
        _show_kmem_cache_alloc, _enc_kmem_cache_alloc, dyn=("name",),
        encode_columns=_enc_kmem_cache_alloc_columns),
    EventType("kmem", "kmem_cache_free", 656, (
        _f("unsigned long", "call_site", 8, 8), _f("const void *", "ptr", 16, 8),
        _f("__data_loc char[]", "name", 24, 4)),
        '"call_site=%pS ptr=%p name=%s", (void *)REC->call_site, REC->ptr, __get_str(name)',
        _show_kmem_cache_free, _enc_kmem_cache_free, dyn=("name",),
        encode_columns=_enc_kmem_cache_free),
    EventType("kmem", "mm_page_alloc", 653, (
        _f("unsigned long", "pfn", 8, 8), _f("unsigned int", "order", 16, 4),
        _f("unsigned long", "gfp_flags", 24, 8), _f("int", "migratetype", 32, 4, 1)),
        _gfp_fmt("page=%p pfn=0x%lx order=%d migratetype=%d gfp_flags=%s",
                 "REC->pfn != -1UL ? (((struct page *)vmemmap_base) + (REC->pfn)) : "
                 "((void *)0), REC->pfn != -1UL ? REC->pfn : 0, REC->order, REC->migratetype, ",
                 ""),
        _show_mm_page_alloc, _enc_mm_page_alloc, encode_columns=_enc_mm_page_alloc),
    EventType("kmem", "mm_page_free", 655, (
        _f("unsigned long", "pfn", 8, 8), _f("unsigned int", "order", 16, 4)),
        '"page=%p pfn=0x%lx order=%d", (((struct page *)vmemmap_base) + (REC->pfn)), '
        'REC->pfn, REC->order', _show_mm_page_free, _enc_mm_page_free,
        encode_columns=_enc_mm_page_free),
)

# enum trace_type of kernel/trace/trace.h (6.18) for the ftrace/ entries
# shown, and the kmemtrace plugin's TRACE_KMEM_ALLOC/FREE (17, 18 in 2.6.29; where the
# profile's kernel gives those numbers to other entries, timerlat and raw_data in
# 6.12, osnoise and timerlat in 6.18, .registry gives them free ones).
TRACE_FN, TRACE_PRINT, TRACE_BPRINT, TRACE_BPUTS, TRACE_RAW_DATA = 1, 5, 6, 15, 19
TRACE_KMEM_ALLOC, TRACE_KMEM_FREE = 17, 18

FTRACE_EVENTS = (
    EventType("ftrace", "function", TRACE_FN, (
        _f("unsigned long", "ip", 8, 8), _f("unsigned long", "parent_ip", 16, 8),
        _f("unsigned long", "args[]", 24, 0)),
        '" %ps <-- %ps", (void *)REC->ip, (void *)REC->parent_ip', _show_function, size=24),
    EventType("ftrace", "print", TRACE_PRINT, (
        _f("unsigned long", "ip", 8, 8), _f("char", "buf[]", 16, 0)),
        '"%ps: %s", (void *)REC->ip, REC->buf', _show_print, size=16),
    EventType("ftrace", "bprint", TRACE_BPRINT, (
        _f("unsigned long", "ip", 8, 8), _f("const char *", "fmt", 16, 8),
        _f("u32", "buf[]", 24, 0)),
        '"%ps: %s", (void *)REC->ip, REC->fmt', _show_unknown, size=24),
    EventType("ftrace", "bputs", TRACE_BPUTS, (
        _f("unsigned long", "ip", 8, 8), _f("const char *", "str", 16, 8)),
        '"%ps: %s", (void *)REC->ip, REC->str', _show_unknown),
    EventType("ftrace", "raw_data", TRACE_RAW_DATA, (
        _f("unsigned int", "id", 8, 4), _f("char", "buf[]", 12, 0)),
        '"id:%04x %08x", REC->id, (int)REC->buf[0]', _show_raw_data, size=12),
    EventType("ftrace", "kmem_alloc", TRACE_KMEM_ALLOC, (
        _f("enum kmemtrace_type_id", "type_id", 8, 4, 1), _f("unsigned long", "call_site", 16, 8),
        _f("const void *", "ptr", 24, 8), _f("size_t", "bytes_req", 32, 8),
        _f("size_t", "bytes_alloc", 40, 8), _f("gfp_t", "gfp_flags", 48, 4),
        _f("int", "node", 52, 4, 1)),
        '"type:%u call_site:%lx ptr:%p req:%lu alloc:%lu flags:%x node:%d", REC->type_id, '
        'REC->call_site, REC->ptr, REC->bytes_req, REC->bytes_alloc, REC->gfp_flags, REC->node',
        _show_kmem_alloc),
    EventType("ftrace", "kmem_free", TRACE_KMEM_FREE, (
        _f("enum kmemtrace_type_id", "type_id", 8, 4, 1), _f("unsigned long", "call_site", 16, 8),
        _f("const void *", "ptr", 24, 8)),
        '"type:%u call_site:%lx ptr:%p", REC->type_id, REC->call_site, REC->ptr',
        _show_kmem_free),
)
