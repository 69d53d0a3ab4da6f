"""The trace options that change how ``trace`` and ``trace_pipe`` print an
entry: ``bin``, ``hex``, ``raw``, ``fields`` and ``latency-format``
(kernel/trace/trace.c's ``print_trace_line``, ``print_bin_fmt``,
``print_hex_fmt``, ``print_raw_fmt``, ``print_trace_fmt``, the latency
header of ``print_trace_header``/``print_lat_help_header``;
trace_output.c's event ``raw``/``hex``/``binary`` callbacks,
``print_event_fields`` and ``trace_print_lat_context``; 6.12).

After the tracer's own ``print_line`` (function_graph prints its entries
whatever these say), the first option set decides: ``bin`` (the context
and the entry's fields as raw bytes), ``hex`` (the same as hex digits,
each field a group and a space), ``raw`` (numbers in plain text), else
the usual text, in which ``fields`` prints each field of a trace event by
its type and ``latency-format`` changes the context columns.  An entry
with no callback of that kind (every ``TRACE_EVENT``, ``kernel_stack``,
the graph entries) prints ``type: N``; ``fields`` of a tracer's own entry
(``ftrace/``) is ``UNKNOWN TYPE N``, as 6.12 finds no event for it.

:func:`print_lines` is what :meth:`~.trace_output.TraceOutput.format_lines`
does while one of them is set; the plain path stays the fast one.
"""

from __future__ import annotations

import struct

from fakedebugfs.engine.ftrace.events import ENTRY
from fakedebugfs.engine.ftrace.kmemtrace_plugin import NopTracer
from fakedebugfs.engine.ftrace.output import comm_of, context_head, lat_flags, timestamp

# the options print_trace_line consults, in its order
PRINT_FLAGS = ("bin", "hex", "raw", "fields", "latency-format")
NOT_NS_CLOCKS = ("counter", "uptime", "x86-tsc")  # trace_clocks[].in_ns == 0
MARKS = ((1000000000, "$"), (100000000, "@"), (10000000, "*"), (1000000, "#"),
         (100000, "!"), (10000, "+"))
_PID_CPU_TS = struct.Struct("<iiQ")  # SEQ_PUT_FIELD of entry->pid, iter->cpu, iter->ts
_IP2 = struct.Struct("<QQ")

LAT_HELP_HEADER = (
    "#                    _------=> CPU#            \n"
    "#                   / _-----=> irqs-off/BH-disabled\n"
    "#                  | / _----=> need-resched    \n"
    "#                  || / _---=> hardirq/softirq \n"
    "#                  ||| / _--=> preempt-depth   \n"
    "#                  |||| / _-=> migrate-disable \n"
    "#                  ||||| /     delay           \n"
    "#  cmd     pid     |||||| time  |   caller     \n"
    "#     \\   /        ||||||  \\    |    /       \n"
)


def plain(options: dict) -> bool:
    """None of :data:`PRINT_FLAGS` is set: the usual text."""
    return not (options.get("bin") or options.get("hex") or options.get("raw")
                or options.get("fields") or options.get("latency-format"))


def ns2usecs(ns: int) -> int:
    """``ns2usecs``: rounded to the nearest microsecond."""
    return (ns + 500) // 1000


def trace_find_mark(d: int) -> str:
    """``trace_find_mark``: the overhead mark of a delay of *d* ns."""
    for val, sym in MARKS:
        if d > val:
            return sym
    return " "


def hex_field(value: int, size: int) -> str:
    """``SEQ_PUT_HEX_FIELD`` on little-endian x86: the value's hex digits
    (two per byte, most significant first) and a space."""
    return f"{value & ((1 << 8 * size) - 1):0{2 * size}x} "


def _surrogate(data: bytes) -> str:
    """Bytes as the text the file layer encodes back to them."""
    return data.decode("utf-8", "surrogateescape")


def _cstr(data: bytes) -> str:
    """A C string: up to its NUL."""
    return _surrogate(data.split(b"\0", 1)[0])


# --- the tracer's own entries: their raw/hex/binary callbacks (trace_output.c) -----------

def _fn_raw(tr, etype, payload) -> str:
    ip, parent = _IP2.unpack_from(payload, 8)
    return f"{ip:x} {parent:x}\n"


def _fn_hex(tr, etype, payload) -> str:
    ip, parent = _IP2.unpack_from(payload, 8)
    return hex_field(ip, 8) + hex_field(parent, 8)


def _fn_bin(tr, etype, payload) -> str:
    return _surrogate(bytes(payload[8:24]))


def _print_raw(tr, etype, payload) -> str:
    """``trace_print_raw``: ``# ip buf`` (the buffer ends with its newline)."""
    ip = int.from_bytes(payload[8:16], "little")
    return f"# {ip:x} {_cstr(bytes(payload[16:]))}"


def _repeats_raw(tr, etype, payload) -> str:
    """``trace_func_repeats_raw``: ip, parent (decimal), count, delta."""
    ip, parent = _IP2.unpack_from(payload, 8)
    count, top = struct.unpack_from("<HH", payload, 24)
    bottom = int.from_bytes(payload[28:32], "little")
    return f"{ip} {parent} {count} {top << 32 | bottom}\n"


def _raw_data(tr, etype, payload) -> str:
    """``trace_raw_data``: its ``raw`` is its ``trace``."""
    return etype.show(etype.decode(payload), tr)


# by entry name: (raw, hex, binary); None: trace_nop_print
OWN_FUNCS = {
    "function": (_fn_raw, _fn_hex, _fn_bin),
    "print": (_print_raw, None, None),
    "func_repeats": (_repeats_raw, None, None),
    "raw_data": (_raw_data, None, None),
}


def _funcs(etype) -> tuple:
    if etype is not None and etype.system == "ftrace":
        return OWN_FUNCS.get(etype.name, (None, None, None))
    return (None, None, None)


def _nop(etype, payload) -> str:
    """``trace_nop_print``."""
    return f"type: {int.from_bytes(payload[:2], 'little')}\n"


# --- fields (print_event_fields) ------------------------------------------------------------

FILTER_OTHER, FILTER_STATIC_STRING, FILTER_DYN_STRING, FILTER_RDYN_STRING, \
    FILTER_PTR_STRING, FILTER_CPUMASK = range(6)


def filter_type(ctype: str, name: str) -> int:
    """``filter_assign_type`` of a field's type as the kernel spells it
    (``char[16]``: the format file puts the array size after the name)."""
    kind = ctype + name[name.index("["):] if "[" in name else ctype
    if "__data_loc" in kind:
        if "char" in kind:
            return FILTER_DYN_STRING
        if "cpumask_t" in kind:
            return FILTER_CPUMASK
    if "__rel_loc" in kind and "char" in kind:
        return FILTER_RDYN_STRING
    if "[" in kind and "char" in kind:
        return FILTER_STATIC_STRING
    if kind in ("char *", "const char *"):
        return FILTER_PTR_STRING
    return FILTER_OTHER


def _printable(b: int) -> bool:
    """The kernel's ``isprint`` (its ctype table: Latin-1 above 0xa0 too)."""
    return 0x20 <= b <= 0x7E or b >= 0xA0


def _array(payload, loc: int, base: int) -> str:
    """``print_array``: a dynamic array's bytes, ``%02x`` comma-separated."""
    offset, length = (loc & 0xFFFF) + base, loc >> 16
    if offset + length > len(payload):
        return "<OVERFLOW>"
    return ",".join(f"{b:02x}" for b in payload[offset:offset + length])


def _field_text(ctype: str, name: str, off: int, size: int, payload) -> str:
    kind = filter_type(ctype, name)
    pos = payload[off:off + size]
    if kind == FILTER_STATIC_STRING:
        return _cstr(bytes(pos))
    if kind in (FILTER_DYN_STRING, FILTER_RDYN_STRING):
        loc = int.from_bytes(pos, "little")
        offset, length = loc & 0xFFFF, loc >> 16
        if kind == FILTER_RDYN_STRING:
            offset += off + 4
        if offset + length > len(payload):
            return "<OVERFLOW>"
        return _cstr(bytes(payload[offset:offset + length]))
    if kind == FILTER_PTR_STRING:
        # the fake has no kernel memory to copy the string from
        return f"(0x{int.from_bytes(pos, 'little'):016x})"
    if kind == FILTER_CPUMASK:
        return "<INVALID-TYPE>"
    if size == 1:
        b = pos[0]
        return (f"'{chr(b) if b < 0x80 else _surrogate(bytes((b,)))}'" if _printable(b) else "") \
            + f"({b})"
    if size == 2:
        v = int.from_bytes(pos, "little")
        return f"0x{v:x} ({v})"
    if size == 4:
        if "__data_loc" in ctype:
            return _array(payload, int.from_bytes(pos, "little"), 0)
        if "__rel_loc" in ctype:
            return _array(payload, int.from_bytes(pos, "little"), off + 4)
        v = int.from_bytes(pos, "little")
        return f"0x{v:x} ({v - (1 << 32) if v >> 31 else v})"
    if size == 8:
        v = int.from_bytes(pos, "little")
        return f"0x{v:x} ({v - (1 << 64) if v >> 63 else v})"
    return "<INVALID-SIZE>"


def event_fields(etype, payload) -> str:
    """``print_event_fields``: ``name:`` and `` field=value`` of each
    field in the format's order; a tracer's own entry has no event 6.12
    finds (``UNKNOWN TYPE N``)."""
    if etype.system == "ftrace":
        return f"UNKNOWN TYPE {etype.id}\n"
    if not etype.fields:
        return f"{etype.name}:No fields found\n"
    out = [f"{etype.name}:"]
    for ctype, name, off, size, _signed in etype.fields:
        key = name.split("[", 1)[0]
        if off + size > len(payload):
            out.append(f" {key}=<OVERFLOW>")
            continue
        out.append(f" {key}={_field_text(ctype, name, off, size, payload)}")
    return "".join(out) + "\n"


# --- the latency format (trace_print_lat_context, print_trace_header) --------------------

def lat_context(tr, ts: int, cpu: int, payload, next_ts: int, idx: int) -> str:
    """``trace_print_lat_context``: the task, CPU and flags columns, then
    the time since the buffer's start and the mark of the delay to the
    next entry (``trace_pipe``'s next is the entry itself: no mark)."""
    _, flags, preempt, pid = ENTRY.unpack_from(payload)
    in_ns = tr.clock not in NOT_NS_CLOCKS
    abs_ts, rel_ts = ts - getattr(tr, "time_start", 0), next_ts - ts
    if in_ns:
        abs_ts, rel_ts = ns2usecs(abs_ts), ns2usecs(rel_ts)
    comm = comm_of(tr.top.cmdlines, pid)
    if tr.options.get("verbose"):
        text = f"{comm:>16} {pid:7d} {cpu:3d} {flags:d} {preempt & 0xF:08x} {idx:08x} "
        if in_ns:
            text += (f"[{ns2usecs(ts):08x}] {abs_ts // 1000}.{abs_ts % 1000:03d}ms "
                     f"(+{rel_ts // 1000}.{rel_ts % 1000:03d}ms): ")
        else:
            text += f"[{ts:016x}] {abs_ts} (+{rel_ts}): "
        return text
    text = f"{comm[:8]:>8}-{pid:<7d} {cpu:3d}" + lat_flags(flags, preempt)
    if in_ns:
        return text + f" {abs_ts:4d}us{trace_find_mark(rel_ts * 1000)}: "
    return text + f" {abs_ts:4d}: "


def latency_header(tr, tracer: str) -> str:
    """``print_trace_header``: the tracer, the kernel's release, the
    entries, the CPU and preemption model, the (never saved) task."""
    entries = sum(tr.entries(c) for c in range(len(tr.buffers)))
    written = entries + sum(b.overrun for b in tr.buffers)
    online = getattr(tr.tracer, "online_cpus", None) or len(tr.buffers)
    profile = getattr(tr.top, "profile", None)
    release = profile.release if profile is not None else ""
    model = (profile.files.get("preempt_model") or "").strip() if profile is not None else ""
    return (f"# {tracer} latency trace v1.1.5 on {release}\n"
            "# --------------------------------------------------------------------\n"
            f"# latency: 0 us, #{entries}/{written}, CPU#{getattr(tr, 'buffer_cpu', 0)} |"
            f" (M:{model or 'unknown'} VP:0, KP:0, SP:0 HP:0 #P:{online})\n"
            "#    -----------------\n"
            "#    | task: -0 (uid:0 nice:0 policy:0 rt_prio:0)\n"
            "#    -----------------\n"
            "#\n")


# --- print_trace_line -------------------------------------------------------------------

def print_lines(tr, events) -> str:
    """:meth:`~.trace_output.TraceOutput.format_lines` under the options:
    each ``(ts, cpu, payload[, next ts, index])`` printed as
    ``print_trace_line`` prints it after the tracer's ``print_line``
    (``trace`` gives the next entry's time and the entry's index; for a
    ``trace_pipe`` entry the next is itself and the index is the pipe's)."""
    opts = tr.options
    ctx = opts["context-info"]
    # the nop tracer has no print_line
    tracer_line = None if type(tr.tracer) is NopTracer else tr.tracer.print_line
    out = []
    for item in events:
        ts, cpu, payload = item[0], item[1], item[2]
        if len(payload) < 8:
            continue
        etype = tr.by_id.get(payload[0] | payload[1] << 8)
        if tracer_line is not None and etype is not None:
            tr.iter_ts = ts
            line = tracer_line(tr, etype, etype.decode(payload))
            if line is not None:
                out.append(line)
                continue
        if opts.get("bin"):
            out.append(_bin(tr, etype, ts, cpu, payload, ctx))
        elif opts.get("hex"):
            out.append(_hex(tr, etype, ts, cpu, payload, ctx))
        elif opts.get("raw"):
            out.append(_raw(tr, etype, ts, cpu, payload, ctx))
        else:
            next_ts = item[3] if len(item) > 3 else ts
            idx = item[4] if len(item) > 4 else getattr(tr, "pipe_idx", 0)
            out.append(_fmt(tr, etype, ts, cpu, payload, ctx, next_ts, idx))
    return "".join(out)


def _pid(payload) -> int:
    return int.from_bytes(payload[4:8], "little", signed=True)


def _bin(tr, etype, ts, cpu, payload, ctx) -> str:
    head = _surrogate(_PID_CPU_TS.pack(_pid(payload), cpu, ts)) if ctx else ""
    if etype is None:
        return head
    own = _funcs(etype)[2]
    return head + (own(tr, etype, payload) if own else _nop(etype, payload))


def _hex(tr, etype, ts, cpu, payload, ctx) -> str:
    head = (hex_field(_pid(payload), 4) + hex_field(cpu, 4) + hex_field(ts, 8)) if ctx else ""
    if etype is not None:
        own = _funcs(etype)[1]
        head += own(tr, etype, payload) if own else _nop(etype, payload)
    return head + "\n"


def _raw(tr, etype, ts, cpu, payload, ctx) -> str:
    head = f"{_pid(payload)} {cpu} {ts} " if ctx else ""
    if etype is None:
        return head + f"{int.from_bytes(payload[:2], 'little')} ?\n"
    own = _funcs(etype)[0]
    return head + (own(tr, etype, payload) if own else _nop(etype, payload))


def _fmt(tr, etype, ts, cpu, payload, ctx, next_ts, idx) -> str:
    """``print_trace_fmt``: the context (the latency one under
    ``latency-format``), then the event's fields or its own text."""
    head = ""
    if ctx:
        if tr.options.get("latency-format"):
            head = lat_context(tr, ts, cpu, payload, next_ts, idx)
        else:
            _, flags, preempt, pid = ENTRY.unpack_from(payload)
            tgid = tr.top.tgids.find(pid) if tr.options.get("record-tgid") else None
            head = context_head(tr.top.cmdlines, cpu, pid, flags, preempt,
                                tr.options["irq-info"], tgid) + timestamp(ts) + ": "
    if etype is None:
        return head + f"Unknown type {int.from_bytes(payload[:2], 'little')}\n"
    if tr.options.get("fields"):
        return head + event_fields(etype, payload)
    _, label, show, arg, _ = tr._kind(etype.id, None)
    return f"{head}{label}{show(etype.decode(payload), arg)}\n"


__all__ = ["PRINT_FLAGS", "LAT_HELP_HEADER", "plain", "print_lines", "event_fields",
           "lat_context", "latency_header", "ns2usecs", "hex_field"]
