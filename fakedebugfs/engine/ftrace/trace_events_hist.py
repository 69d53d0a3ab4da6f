"""Hist triggers (kernel/trace/trace_events_hist.c, 6.12): the ``hist``
trigger command, ``enable_hist``/``disable_hist``, and the ``hist`` file.

``echo 'hist:keys=...[:vals=...][:sort=...][:size=N][:name=X][:clock=C]
[:nohitcount][:pause|:cont|:clear][:var=expr,...][:onmatch(...)|:onmax(...)
|:onchange(...)] [if FILTER]' > events/<sys>/<ev>/trigger``.  The parse
follows ``event_hist_trigger_parse``: the filter is split off where an
``if`` stands between blanks, ``.sym-offset`` is read as ``.symXoffset``,
the attributes are parsed (``parse_hist_trigger_attrs``), the
:class:`~.hist_data.HistData` is made (values, variables, keys, sort
keys, map), the filter compiled; then removal (``!hist:...``: nothing
matching is no error, EBUSY while another trigger uses one of its
variables), ``:pause``/``:cont``/``:clear`` of a matching trigger, or a
new trigger: EEXIST for a match (``Hist trigger already exists``),
``name=`` joining the histogram of that name (``Named hist trigger
doesn't match ...`` when its fields differ), ENOENT for ``:cont``/``:clear``
with nothing to act on, a ``common_timestamp`` switching the trace
array's clock.  A hist trigger joins the end of the event's trigger list
(``list_add_tail``) where the other commands join its head.

:func:`hist_show` is ``hist_show``: for each hist trigger of the event,
``# event histogram``, the trigger's line, the entries in the map's order
(:mod:`.tracing_map`), the snapshot details and ``Totals``.
"""

from __future__ import annotations

import errno
import logging
from typing import Optional

from fakedebugfs.engine.ftrace import hist_batch
from fakedebugfs.engine.ftrace.hist_actions import hist_vars
from fakedebugfs.engine.ftrace.hist_data import (
    CLOCKS_IN_NS, HIST_ACTIONS_MAX, Ctx, HistAttrs, HistCmd, HistData, hist_err, hist_triggers)
from fakedebugfs.engine.ftrace.hist_fields import (
    FL_BUCKET, FL_EXECNAME, FL_EXPR, FL_GRAPH, FL_HEX, FL_LOG2, FL_PERCENT, FL_STACKTRACE,
    FL_STRING, FL_SYM, FL_SYM_OFFSET, FL_SYSCALL, FL_VAR, FL_VAR_REF, HistError, hist_field_name,
    hist_field_print)
from fakedebugfs.engine.ftrace.kstrto import kstrtoull
from fakedebugfs.engine.ftrace.trace_events_synth import SYNTH_SYSTEM, find_synth_event
from fakedebugfs.engine.ftrace.tracing_map import (
    TRACING_MAP_BITS_MAX, TRACING_MAP_BITS_MIN, TRACING_MAP_VARS_MAX)

log = logging.getLogger(__name__)
U64 = (1 << 64) - 1
UINT_MAX = 0xFFFFFFFF
TEXT_SPACES = " \t\n\v\f\r"


class HistTrigger:
    """``struct event_trigger_data`` of a ``hist`` trigger."""

    cmd = "hist"
    needs_rec = True  # EVENT_CMD_FL_NEEDS_REC
    post = False
    target = None
    count = -1

    def __init__(self, tr, key: str, hist_data: HistData):
        self.tr, self.key, self.hist_data = tr, key, hist_data
        self.filter_str: Optional[str] = None
        self.pred = None
        self.paused = False
        self.name: Optional[str] = None  # data->name of a named trigger
        self.named_data: Optional["HistTrigger"] = None

    def same(self, other) -> bool:
        return False  # hist triggers match by hist_trigger_match

    def line(self) -> str:
        """``event_hist_trigger_print``."""
        hd = self.hist_data
        out = "hist:" + (f"{self.name}:" if self.name else "") + "keys="
        keys = hd.fields[hd.n_vals:]
        out += ",".join(f"{hf.field.name}.stacktrace" if hf.flags & FL_STACKTRACE and hf.field
                        else "common_stacktrace" if hf.flags & FL_STACKTRACE
                        else hist_field_print(hf) for hf in keys)
        out += ":vals="
        vals, variables = [], []
        for i, hf in enumerate(hd.fields[:hd.n_vals]):
            if hf.flags & FL_VAR:
                variables.append(hist_field_print(hf))
            elif i == 0:
                if not hd.attrs.no_hitcount:
                    vals.append("hitcount")
            else:
                vals.append(hist_field_print(hf))
        out += ",".join(vals)
        if variables:
            out += ":" + ",".join(variables)
        first_key_idx = hd.n_vals - hd.n_vars
        sorts = []
        for idx, desc in hd.sort_keys:
            if idx == 0:
                text = "hitcount"
            else:
                text = hist_field_print(hd.fields[idx + hd.n_vars if idx >= first_key_idx else idx])
            sorts.append(text + (".descending" if desc else ""))
        out += ":sort=" + ",".join(sorts) + f":size={1 << hd.map.map_bits}"
        if hd.enable_timestamps:
            out += f":clock={hd.attrs.clock}"
        if hd.attrs.no_hitcount:
            out += ":nohitcount"
        out += hd.print_actions_spec()
        if self.filter_str is not None:
            out += f" if {self.filter_str}"
        return out + (" [paused]\n" if self.paused else " [active]\n")

    def free(self, tr, key: str) -> None:
        """``event_hist_trigger_free`` once the trigger left the list
        (``clear_event_triggers`` of a removed instance)."""
        unregister(tr, key, self)

    def fire(self, tr, rec: dict, cpu: int, pid: int, ts: int, vals=None) -> None:
        """``event_hist_trigger`` (*vals*: the event's field values)."""
        if self.paused:
            return
        hd = self.hist_data
        try:
            payload = bytes(vals) if isinstance(vals, (bytes, bytearray)) else \
                record_bytes(tr, self.key, rec if vals is None else vals, pid)  # (a replay's record)
            plan = hist_batch.plan_of(hd)
            if plan is not None:  # the common cases: keys and sums read by a plan
                comm = rec.get("COMM") if isinstance(rec, dict) else None
                hist_batch.hit_one(hd, plan, payload, cpu, pid, comm)
                return
            ctx = Ctx(payload, ts, cpu, pid, tr.clock in CLOCKS_IN_NS, tr, rec)
            hd.hit(ctx)
        except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError) as err:
            # an event the fake cannot aggregate is dropped, never the server
            hd.map.drops += 1
            log.debug("hist trigger on %s: %r", self.key, err)


def record_bytes(tr, key: str, rec: dict, pid: int) -> bytes:
    """The event's record as the ring buffer holds it (what the kernel's
    hist fields read)."""
    ev = tr.events[key]
    if key == "ftrace:print":
        buf = rec.get("buf") or b""
        head = ev.pack(pid, {"ip": rec.get("ip", 0)}, 0, tr.marker_preempt_count())
        return head + bytes(buf) + b"\0"
    return ev.pack(pid, rec)


# --- parse: event_hist_trigger_parse ----------------------------------------------------

def split_filter(param: str) -> tuple:
    """The trigger and its ``if`` filter: ``(param, filter)`` (EINVAL as
    the kernel's loop answers it)."""
    p = 0
    while True:
        p = param.find("if", p)
        if p < 0:
            return param, None
        if p == 0:
            raise HistError()
        if param[p - 1] not in " \t":
            p += 1
            continue
        if p >= len(param) - 2 - 1:
            raise HistError()
        if param[p + 2] not in " \t":
            p += 1
            continue
        return param[:p - 1].strip(TEXT_SPACES), param[p:].strip(TEXT_SPACES)


def parse_attrs(tr, cmd: HistCmd, text: str) -> HistAttrs:
    """``parse_hist_trigger_attrs``."""
    attrs = HistAttrs()
    for part in text.split(":"):
        eq = part.find("=")
        if eq >= 0:
            if not part[eq + 1:]:
                hist_err(tr, cmd, "EMPTY_ASSIGNMENT", cmd.pos(part))
                raise HistError()
            _assignment(tr, cmd, part, attrs)
        elif part in ("nohitcount", "NOHC"):
            attrs.no_hitcount = True
        elif part == "pause":
            attrs.pause = True
        elif part in ("cont", "continue"):
            attrs.cont = True
        elif part == "clear":
            attrs.clear = True
        elif len(attrs.actions) < HIST_ACTIONS_MAX and \
                part.startswith(("onmatch(", "onmax(", "onchange(")):
            attrs.actions.append(part)
        else:
            raise HistError()
    if attrs.keys_str is None:
        raise HistError()
    if attrs.clock is None:
        attrs.clock = "global"
    return attrs


def _assignment(tr, cmd: HistCmd, part: str, attrs: HistAttrs) -> None:
    """``parse_assignment``."""
    for prefix, attr in (("key=", "keys_str"), ("keys=", "keys_str"), ("val=", "vals_str"),
                         ("vals=", "vals_str"), ("values=", "vals_str"),
                         ("sort=", "sort_key_str")):
        if part.startswith(prefix):
            setattr(attrs, attr, part[len(prefix):])
            return
    if part.startswith("name="):
        attrs.name = part
    elif part.startswith("clock="):
        attrs.clock = part[6:].strip(TEXT_SPACES)
    elif part.startswith("size="):
        try:
            size = kstrtoull(part[5:].encode(errors="surrogateescape"), 0)
        except OSError as err:
            raise HistError(err.errno) from None
        bits = (size - 1).bit_length() if size > 1 else 0  # ilog2(roundup_pow_of_two)
        if not TRACING_MAP_BITS_MIN <= bits <= TRACING_MAP_BITS_MAX:
            raise HistError()
        attrs.map_bits = bits
    else:
        if len(attrs.assignments) == TRACING_MAP_VARS_MAX:
            hist_err(tr, cmd, "TOO_MANY_VARS", cmd.pos(part))
            raise HistError()
        attrs.assignments.append(part)


def hist_trigger_parse(tr, key: str, glob: str, param: Optional[str],
                       cmd: Optional[HistCmd] = None) -> None:
    """``event_hist_trigger_parse``: OSError with the errno when refused."""
    if glob or cmd is None:
        cmd = HistCmd(key, param if param is not None else "")
    try:
        _parse(tr, key, glob, param, cmd)
    except HistError as err:
        raise OSError(err.errno, errno.errorcode.get(err.errno, "")) from None


def _parse(tr, key: str, glob: str, param: Optional[str], cmd: HistCmd) -> None:
    remove = glob.startswith("!")
    if param is None:
        raise HistError()
    param, filt = split_filter(param)
    param = param.replace(".sym-offset", ".symXoffset")
    attrs = parse_attrs(tr, cmd, param)
    hd = HistData(tr, key, attrs, cmd, remove, hist_trigger_parse)
    data = HistTrigger(tr, key, hd)
    try:
        if filt is not None:  # set_trigger_filter: "if" then the filter
            cut = min((i for i, c in enumerate(filt) if c in " \t"), default=-1)
            if cut < 0 or filt[:cut] != "if":
                raise HistError()
            rest = filt[cut + 1:]
            data.filter_str = rest
            data.pred = tr.compile_trigger_filter(key, rest)
        if remove:
            match = _find_match(tr, key, data)
            if match is None:
                return
            if match.hist_data.check_var_refs():
                raise HistError(errno.EBUSY)
            unregister(tr, key, match)
            return
        if _update_existing(tr, key, data):
            return
        hd.create_actions()
        if hd.has_hist_vars() or hd.var_refs:
            vars_list = hist_vars(tr)
            if hd not in vars_list:  # save_hist_vars: holds the trace array (rmdir: EBUSY)
                vars_list.insert(0, hd)
                tr.busy += 1
        register(tr, key, data)
    except BaseException:
        if data.hist_data is hd:
            hd.destroy()
        raise


def _named(tr) -> list:
    """``named_triggers``: every trigger of a named histogram (all trace arrays)."""
    return tr.top.__dict__.setdefault("hist_named", [])


def find_named_trigger(tr, name: str) -> Optional[HistTrigger]:
    return next((t for t in _named(tr) if t.name == name), None)


def hist_trigger_match(data: HistTrigger, test: HistTrigger, named, ignore_filter: bool) -> bool:
    """``hist_trigger_match``."""
    if named is not None and named is not test and named is not test.named_data:
        return False
    if named is None and test.name is not None:
        return False
    a, b = data.hist_data, test.hist_data
    if (a.n_vals, len(a.fields), len(a.sort_keys)) != (b.n_vals, len(b.fields), len(b.sort_keys)):
        return False
    if not ignore_filter and (data.filter_str is None) != (test.filter_str is None):
        return False
    for x, y in zip(a.fields, b.fields):
        if (x.flags, x.offset, x.size, bool(x.is_signed), x.var_name) != \
                (y.flags, y.offset, y.size, bool(y.is_signed), y.var_name):
            return False
        if (x.field is None) != (y.field is None) or (x.field is not None and (
                x.field.name, x.field.type, x.field.size, x.field.is_signed) != (
                y.field.name, y.field.type, y.field.size, y.field.is_signed)):
            return False
    if [tuple(k) for k in a.sort_keys] != [tuple(k) for k in b.sort_keys]:
        return False
    if not ignore_filter and data.filter_str is not None and data.filter_str != test.filter_str:
        return False
    return a.actions_match(b)


def _find_match(tr, key: str, data: HistTrigger) -> Optional[HistTrigger]:
    name = data.hist_data.attrs.name
    named = find_named_trigger(tr, name) if name else None
    return next((t for t in hist_triggers(tr, key)
                 if hist_trigger_match(data, t, named, False)), None)


def _update_existing(tr, key: str, data: HistTrigger) -> bool:
    """``existing_hist_update_only``: ``:pause``, ``:cont``, ``:clear``."""
    attrs = data.hist_data.attrs
    if not (attrs.pause or attrs.cont or attrs.clear):
        return False
    named = None
    if attrs.name:
        named = find_named_trigger(tr, attrs.name)
        if named is None or not hist_trigger_match(data, named, named, True):
            return False
    for t in hist_triggers(tr, key):
        if not hist_trigger_match(data, t, named, False):
            continue
        if attrs.pause:
            t.paused = True
        elif attrs.cont:
            t.paused = False
        else:
            t.hist_data.map.clear()
        return True
    return False


def register(tr, key: str, data: HistTrigger) -> None:
    """``hist_register_trigger`` + ``hist_trigger_enable``."""
    hd = data.hist_data
    named = None
    if hd.attrs.name:
        named = find_named_trigger(tr, hd.attrs.name)
        if named is not None and not hist_trigger_match(data, named, named, True):
            hd.err("NAMED_MISMATCH", hd.errpos(hd.attrs.name))
    if not (hd.attrs.name and named is None):
        if any(hist_trigger_match(data, t, named, False) for t in hist_triggers(tr, key)):
            hd.err("TRIGGER_EEXIST", 0, errno.EEXIST)
    if hd.attrs.cont or hd.attrs.clear:
        hd.err("TRIGGER_ENOENT_CLEAR", 0, errno.ENOENT)
    if hd.attrs.pause:
        data.paused = True
    if hd.enable_timestamps:
        try:
            tr.set_clock(hd.attrs.clock)
        except OSError:
            hd.err("SET_CLOCK_FAIL", hd.errpos(hd.attrs.clock))
    data.name = hd.attrs.name
    if named is not None:
        hd.destroy()
        data.hist_data, data.named_data = named.hist_data, named
    if data.name:
        _named(tr).insert(0, data)
    tr.trigger_state(key).list.append(data)
    tr._trigger_mode(key, True)
    se = _synth_of(tr, key)
    if se is not None:
        se.ref += 1


def _synth_of(tr, key: str):
    system, name = key.split(":", 1)
    return find_synth_event(tr, name) if system == SYNTH_SYSTEM else None


def unregister(tr, key: str, t: HistTrigger) -> None:
    """``hist_unregister_trigger`` and the trigger's free."""
    trig = tr.trigger_state(key)
    if t in trig.list:
        trig.list.remove(t)
        tr._trigger_mode(key, False)
    se = _synth_of(tr, key)
    if se is not None:
        se.ref -= 1
    named = _named(tr)
    if t in named:
        named.remove(t)
    if not any(other.hist_data is t.hist_data for other in named) \
            and not any(t.hist_data is o.hist_data for o in hist_triggers(tr, key)):
        t.hist_data.destroy()


def hist_unreg_all(tr, key: str) -> None:
    """``hist_unreg_all``: every hist trigger of the event, unless one's
    variables are in use (then none)."""
    triggers = hist_triggers(tr, key)
    if any(t.hist_data.check_var_refs() for t in triggers):
        return
    for t in triggers:
        unregister(tr, key, t)


def unreg_all(tr, key: str) -> None:
    """``event_trigger_regex_open`` with O_TRUNC: each command's
    ``unreg_all`` (hist, then enable_hist/disable_hist)."""
    hist_unreg_all(tr, key)
    trig = tr.triggers.get(key)
    if trig is None:
        return
    for t in [t for t in trig.list if getattr(t, "hist_enable", False)]:
        trig.list.remove(t)
        tr._trigger_mode(key, False)
        tr.enable_disable(t.target, False, soft=True)


# --- the hist file -------------------------------------------------------------------

def hist_show(tr, key: str) -> str:
    """``hist_show``."""
    return "".join(_show_one(t, n) for n, t in enumerate(hist_triggers(tr, key)))


def _show_one(t: HistTrigger, n: int) -> str:
    """``hist_trigger_show``."""
    hd = t.hist_data
    out = ["\n\n" if n else "", "# event histogram\n#\n# trigger info: ", t.line(), "#\n\n"]
    keys = [[k, d] for k, d in hd.sort_keys]
    entries = hd.map.sort_entries(keys)
    stats = {}
    for j in range(hd.n_vals):
        if hd.fields[j].flags & (FL_PERCENT | FL_GRAPH):
            sums = [e.sums[j] for e in entries]
            stats[j] = (max(sums, default=0), sum(sums) & U64)
    for e in entries:
        out.append(_entry(hd, e, stats))
    out.append(hd.snapshot_print())
    out.append(f"\nTotals:\n    Hits: {hd.map.hits}\n    Entries: {len(entries)}\n"
               f"    Dropped: {hd.map.drops}\n")
    return "".join(out)


def _entry(hd: HistData, elt, stats: dict) -> str:
    """``hist_trigger_entry_print``."""
    out = print_key(hd, elt.key, elt)
    if not hd.attrs.no_hitcount:
        out += _val(elt, 0, "hitcount", 0, stats)
    for i in range(1, hd.n_vals):
        hf = hd.fields[i]
        if hf.flags & (FL_VAR | FL_EXPR):
            continue
        out += " " + _val(elt, i, hist_field_name(hf, 0), hf.flags, stats)
    return out + hd.print_actions(elt) + "\n"


def _percentage(val: int, total: int) -> int:
    """``__get_percentage``: 100 times the percentage (UINT_MAX: error)."""
    if not total:
        return UINT_MAX if val else 0
    if val < U64 // 10000:
        return (val * 10000 // total) & UINT_MAX
    total //= 10000
    if not total:
        return UINT_MAX if val else 0
    return (val // total) & UINT_MAX


def _val(elt, idx: int, name: str, flags: int, stats: dict) -> str:
    """``hist_trigger_print_val``."""
    val = elt.sums[idx]
    if flags & FL_PERCENT:
        pc = _percentage(val, stats[idx][1])
        if pc == UINT_MAX:
            return f" {name} (%):[ERROR]"
        return f" {name} (%): {pc // 100:3d}.{pc % 100:02d}"
    if flags & FL_GRAPH:
        pc = _percentage(val, stats[idx][0])
        if pc == UINT_MAX:
            bar = "[ERROR]"
        else:
            n = pc * 20 // 10000
            bar = "#" * min(n, 20) + " " * (20 - min(n, 20))
        return f" {name}: {bar:>20s}"
    if flags & FL_HEX:
        return f" {name}: {val:10x}"
    return f" {name}: {val:10d}"


def print_key(hd: HistData, key: bytes, elt) -> str:
    """``hist_trigger_print_key``."""
    out, multiline = "{ ", False
    out_ctx = hd.tr.out
    for n, hf in enumerate(hd.fields[hd.n_vals:]):
        if n:
            out += ", "
        name = hist_field_name(hf, 0)
        raw = key[hf.offset:hf.offset + hf.size]
        uval = int.from_bytes(raw[:8], "little")
        if hf.flags & FL_HEX:
            out += f"{name}: {uval:x}"
        elif hf.flags & FL_SYM:
            out += f"{name}: [{uval:x}] {out_ctx.sym(uval):<45s}"
        elif hf.flags & FL_SYM_OFFSET:
            out += f"{name}: [{uval:x}] {out_ctx.sym_offset(uval):<55s}"
        elif hf.flags & FL_EXECNAME:
            comm = (elt.private.comm or "") if elt.private is not None else ""
            out += f"{name}: {comm:<16s}[{uval:10d}]"
        elif hf.flags & FL_SYSCALL:
            out += f"{name}: {syscall_name(hd.tr, uval):<30s}[{uval:3d}]"
        elif hf.flags & FL_STACKTRACE:
            out += f"{hf.field.name}.stacktrace" if hf.field else "common_stacktrace:\n"
            for i in range(0, len(raw), 8):
                addr = int.from_bytes(raw[i:i + 8], "little")
                if not addr:
                    break
                out += " " * 9 + out_ctx.sym_offset(addr) + "\n"
            multiline = True
        elif hf.flags & FL_LOG2:
            out += f"{name}: ~ 2^{uval:<2d}"
        elif hf.flags & FL_BUCKET:
            out += f"{name}: ~ {uval}-{(uval + hf.buckets - 1) & U64}"
        elif hf.flags & FL_STRING:
            text = raw.split(b"\0", 1)[0].decode(errors="replace")
            out += f"{name}: {text:<50s}"
        else:
            out += f"{name}: {uval:10d}"
    return out + ("" if multiline else " ") + "}"


def syscall_name(tr, nr: int) -> str:
    """``get_syscall_name``: the name the profile's kernel gives syscall
    number *nr* (its ``syscalls`` file, the kernel's ``syscall_nr_to_meta``
    captured in the oracle), else ``unknown_syscall``."""
    prof = tr.top.profile
    return (prof.syscall_names() if prof else {}).get(nr, "unknown_syscall")


__all__ = ["HistTrigger", "hist_show", "hist_trigger_parse", "hist_unreg_all", "parse_attrs",
           "unreg_all", "split_filter"]
