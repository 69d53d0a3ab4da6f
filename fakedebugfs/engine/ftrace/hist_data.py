"""``struct hist_trigger_data`` (kernel/trace/trace_events_hist.c, 6.12):
what a hist trigger's text becomes, made as ``create_hist_data`` makes it
(the actions parsed, then the values, the variables, the keys, the sort
keys, the map and its fields), and what it does when its event fires
(``event_hist_trigger``: the key's bytes, the map's element, the sums,
the variables, the actions).  Every refusal is a :class:`HistError` with
the kernel's errno, after the ``error_log`` entry the kernel makes
(:func:`hist_err`: the kernel's words, its caret from ``errpos()``).

The trigger itself, its parse and the ``hist`` file are
:mod:`.trace_events_hist`.
"""

from __future__ import annotations

import errno
from typing import Optional

from fakedebugfs.engine.ftrace.hist_actions import HistActions
from fakedebugfs.engine.ftrace.hist_var_refs import HistVarRefs
from fakedebugfs.engine.ftrace.hist_fields import (
    FL_ALIAS, FL_BUCKET, FL_CPU, FL_EXECNAME, FL_EXPR, FL_GRAPH, FL_HEX, FL_HITCOUNT, FL_KEY,
    FL_LOG2, FL_PERCENT, FL_STACKTRACE, FL_STRING, FL_SYM, FL_SYM_OFFSET, FL_SYSCALL, FL_VAR,
    FL_VAR_REF, HIST_STACKTRACE_SIZE, FieldParser, HistError, find_var_field, hist_field_name,
    hist_field_print, hist_fn_call)
from fakedebugfs.engine.ftrace.kstrto import kstrtoull
from fakedebugfs.engine.ftrace.tracing_map import (
    TRACING_MAP_BITS_DEFAULT, TRACING_MAP_BITS_MAX, TRACING_MAP_BITS_MIN, TRACING_MAP_KEYS_MAX,
    TRACING_MAP_SORT_KEYS_MAX, TRACING_MAP_VALS_MAX, TRACING_MAP_VARS_MAX, TracingMap, cmp_num,
    cmp_string)

HIST_PREFIX = "hist:"
HIST_KEY_SIZE_MAX = 256 + HIST_STACKTRACE_SIZE
HIST_ACTIONS_MAX = 8
U64 = (1 << 64) - 1
UINT_MAX = 0xFFFFFFFF
# trace_clock_in_ns: the clocks counting nanoseconds
CLOCKS_IN_NS = ("local", "global", "perf", "mono", "mono_raw", "boot", "tai")

# the ERRORS table of trace_events_hist.c: name -> text
ERRORS = {
    "DUPLICATE_VAR": "Variable already defined",
    "VAR_NOT_UNIQUE": "Variable name not unique, need to use fully qualified name "
                      "(subsys.event.var) for variable",
    "TOO_MANY_VARS": "Too many variables defined",
    "MALFORMED_ASSIGNMENT": "Malformed assignment",
    "NAMED_MISMATCH": "Named hist trigger doesn't match existing named trigger "
                      "(includes variables)",
    "TRIGGER_EEXIST": "Hist trigger already exists",
    "TRIGGER_ENOENT_CLEAR": "Can't clear or continue a nonexistent hist trigger",
    "SET_CLOCK_FAIL": "Couldn't set trace_clock",
    "BAD_FIELD_MODIFIER": "Invalid field modifier",
    "TOO_MANY_SUBEXPR": "Too many subexpressions (3 max)",
    "TIMESTAMP_MISMATCH": "Timestamp units in expression don't match",
    "TOO_MANY_FIELD_VARS": "Too many field variables defined",
    "EVENT_FILE_NOT_FOUND": "Event file not found",
    "HIST_NOT_FOUND": "Matching event histogram not found",
    "HIST_CREATE_FAIL": "Couldn't create histogram for field",
    "SYNTH_VAR_NOT_FOUND": "Couldn't find synthetic variable",
    "SYNTH_EVENT_NOT_FOUND": "Couldn't find synthetic event",
    "SYNTH_TYPE_MISMATCH": "Param type doesn't match synthetic event field type",
    "SYNTH_COUNT_MISMATCH": "Param count doesn't match synthetic event field count",
    "FIELD_VAR_PARSE_FAIL": "Couldn't parse field variable",
    "VAR_CREATE_FIND_FAIL": "Couldn't create or find variable",
    "ONX_NOT_VAR": "For onmax(x) or onchange(x), x must be a variable",
    "ONX_VAR_NOT_FOUND": "Couldn't find onmax or onchange variable",
    "ONX_VAR_CREATE_FAIL": "Couldn't create onmax or onchange variable",
    "FIELD_VAR_CREATE_FAIL": "Couldn't create field variable",
    "TOO_MANY_PARAMS": "Too many action params",
    "PARAM_NOT_FOUND": "Couldn't find param",
    "INVALID_PARAM": "Invalid action param",
    "ACTION_NOT_FOUND": "No action found",
    "NO_SAVE_PARAMS": "No params found for save()",
    "TOO_MANY_SAVE_ACTIONS": "Can't have more than one save() action per hist",
    "ACTION_MISMATCH": "Handler doesn't support action",
    "NO_CLOSING_PAREN": "No closing paren found",
    "SUBSYS_NOT_FOUND": "Missing subsystem",
    "INVALID_SUBSYS_EVENT": "Invalid subsystem or event name",
    "INVALID_REF_KEY": "Using variable references in keys not supported",
    "VAR_NOT_FOUND": "Couldn't find variable",
    "FIELD_NOT_FOUND": "Couldn't find field",
    "EMPTY_ASSIGNMENT": "Empty assignment",
    "INVALID_SORT_MODIFIER": "Invalid sort modifier",
    "EMPTY_SORT_FIELD": "Empty sort field",
    "TOO_MANY_SORT_FIELDS": "Too many sort fields (Max = 2)",
    "INVALID_SORT_FIELD": "Sort field must be a key or a val",
    "INVALID_STR_OPERAND": "String type can not be an operand in expression",
    "EXPECT_NUMBER": "Expecting numeric literal",
    "UNARY_MINUS_SUBEXPR": "Unary minus not supported in sub-expressions",
    "DIVISION_BY_ZERO": "Division by zero",
    "NEED_NOHC_VAL": "Non-hitcount value is required for 'nohitcount'",
}


class HistCmd:
    """``last_cmd``/``last_cmd_loc``: the command errors are logged against."""

    def __init__(self, key: str, param: str):
        self.cmd = HIST_PREFIX + param
        self.loc = HIST_PREFIX + key

    def pos(self, text: Optional[str]) -> int:
        """``errpos``/``err_pos``: where *text* first occurs, else 0."""
        if text is None or not self.cmd:
            return 0
        found = self.cmd.find(text)
        return found if found >= 0 else 0


class HistAttrs:
    """``struct hist_trigger_attrs``."""

    def __init__(self):
        self.keys_str = self.vals_str = self.sort_key_str = self.name = None
        self.clock = None
        self.pause = self.cont = self.clear = self.ts_in_usecs = self.no_hitcount = False
        self.map_bits = 0
        self.assignments: list[str] = []
        self.actions: list[str] = []
        self.var_defs: list[tuple[str, str]] = []


class HistEltData:
    """``struct hist_elt_data``: the comm of the task that made the entry."""

    __slots__ = ("comm", "field_var_str")

    def __init__(self):
        self.comm = None
        self.field_var_str = None


class Ctx:
    """One firing: the record's bytes and what ``hist_fn_call`` reads beside it."""

    __slots__ = ("payload", "ts", "cpu", "pid", "clock_in_ns", "elt", "var_ref_vals", "tr", "rec")

    def __init__(self, payload, ts, cpu, pid, clock_in_ns, tr, rec):
        self.payload, self.ts, self.cpu, self.pid = payload, ts, cpu, pid
        self.clock_in_ns, self.tr, self.rec = clock_in_ns, tr, rec
        self.elt, self.var_ref_vals = None, []


class HistData(FieldParser, HistActions, HistVarRefs):
    """``struct hist_trigger_data``: made by ``create_hist_data``."""

    def __init__(self, tr, key: str, attrs: HistAttrs, cmd: HistCmd, remove: bool,
                 parse_fn=None):
        self.tr, self.key, self.ev = tr, key, tr.events[key]
        self.attrs, self.cmd, self.remove = attrs, cmd, remove
        self.parse_fn = parse_fn  # event_hist_trigger_parse, for field variable histograms
        self.fields: list = []
        self.n_vals = self.n_keys = self.n_vars = self.n_var_str = self.key_size = 0
        self.sort_keys: list[list] = [[0, False]]
        self.enable_timestamps = False
        self.var_refs: list = []
        self.init_actions()
        self.parse_actions()
        self.create_hist_fields()
        self.create_sort_keys()
        self.map = TracingMap(attrs.map_bits or TRACING_MAP_BITS_DEFAULT, self.key_size,
                              self.elt_init)
        self.create_tracing_map_fields()

    # --- errors -------------------------------------------------------------------

    def err(self, name: str, pos: int = 0, code: int = errno.EINVAL):
        """``hist_err`` then the errno."""
        hist_err(self.tr, self.cmd, name, pos)
        raise HistError(code)

    def errpos(self, text: Optional[str]) -> int:
        return self.cmd.pos(text)

    @staticmethod
    def error_text(name: str) -> str:
        return ERRORS[name]

    def hist_triggers(self, key: str) -> list:
        return hist_triggers(self.tr, key)

    def find_file_var(self, key: str, var_name: str):
        return find_file_var(self.tr, key, var_name)

    # --- life -------------------------------------------------------------------------

    def has_hist_vars(self) -> bool:
        """``has_hist_vars``."""
        return any(_has_vars(hf, 0) for hf in self.fields)

    def check_var_refs(self) -> bool:
        """``check_var_refs``: another trigger refers to one of our variables."""
        for hf in self.fields:
            if hf is None or not hf.flags & FL_VAR:
                continue
            for other in self.tr.__dict__.get("hist_vars", ()):
                if other is self:
                    continue
                if any(r.var_idx == hf.var_idx and r.var_hist is self for r in other.var_refs):
                    return True
        return False

    def destroy(self) -> None:
        """``destroy_hist_data`` with ``remove_hist_vars`` and
        ``unregister_field_var_hists``: the synthetic events it used are
        free again, the histograms it added to other events go."""
        if getattr(self, "_destroyed", False):
            return
        self._destroyed = True
        hv = self.tr.__dict__.get("hist_vars", [])
        if self in hv and not self.check_var_refs():  # remove_hist_vars
            hv.remove(self)
            self.tr.busy -= 1
        for data in self.actions:
            if data.synth_event is not None:
                data.synth_event.ref -= 1
                data.synth_event = None
        for key, cmd in self.field_var_hists:
            try:
                self.parse_fn(self.tr, key, "!hist", cmd, self.cmd)
            except OSError:
                pass
        self.field_var_hists = []
        disable = getattr(self.tr, "snapshot_cond_disable", None)
        if disable is not None:  # track_data_destroy: tracing_snapshot_cond_disable
            disable(self)

    def snapshot_print(self) -> str:
        """``track_data_snapshot_print`` (the snapshot module's, if any)."""
        show = getattr(self.tr, "snapshot_cond_show", None)
        return show(self) if show is not None else ""

    # --- fields (create_hist_fields) ----------------------------------------------

    def add(self, hf) -> None:
        self.fields.append(hf)

    def create_hist_fields(self) -> None:
        self.parse_var_defs()
        self.create_val_fields()
        try:
            for name, expr in self.attrs.var_defs:  # create_var_fields
                self.create_var_field(name, expr)
            self.create_key_fields()
        finally:
            self.attrs.var_defs = []  # free_var_defs

    def parse_var_defs(self) -> None:
        """``parse_var_defs``: ``name=expr[,name=expr]`` assignments."""
        for text in self.attrs.assignments:
            for n, part in enumerate(text.split(",")):
                if n >= TRACING_MAP_VARS_MAX:
                    break
                name, eq, expr = part.partition("=")
                if not eq:
                    self.err("MALFORMED_ASSIGNMENT", self.errpos(name))
                if len(self.attrs.var_defs) == TRACING_MAP_VARS_MAX:
                    self.err("TOO_MANY_VARS", self.errpos(name))
                self.attrs.var_defs.append((name, expr))

    def create_val_fields(self) -> None:
        """``create_val_fields``: hitcount first, then at most 2 more."""
        self.add(self.create_hist_field(None, FL_HITCOUNT))
        self.n_vals += 1
        j, n_hitcount = 1, 0
        rest = self.attrs.vals_str
        if rest is not None:
            parts = rest.split(",")
            i = 0
            while i < TRACING_MAP_VALS_MAX and j < TRACING_MAP_VALS_MAX and parts:
                field_str = parts.pop(0)
                i += 1
                if field_str == "hitcount":
                    n_hitcount += 1
                    if n_hitcount == 1:
                        continue
                self.create_val_field(field_str, None, 0)
                j += 1
            if parts and ",".join(parts) != "hitcount":
                self._nohc_check(j)
                raise HistError()
        self._nohc_check(j)

    def _nohc_check(self, j: int) -> None:
        if j == 1 and self.attrs.no_hitcount:
            self.err("NEED_NOHC_VAL", 0, errno.ENOENT)

    def create_val_field(self, field_str: str, var_name: Optional[str], flags: int):
        """``__create_val_field``: a value (or variable) and its modifiers."""
        hf = self.parse_expr(field_str, flags, var_name, [0])
        bad = (FL_GRAPH | FL_PERCENT | FL_BUCKET | FL_LOG2) if hf.flags & FL_VAR else \
            (FL_BUCKET | FL_LOG2 | FL_SYM | FL_SYM_OFFSET | FL_SYSCALL | FL_STACKTRACE)
        if hf.flags & bad:
            self.err("BAD_FIELD_MODIFIER", self.errpos(field_str))
        self.add(hf)
        self.n_vals += 1
        return hf

    def create_var_field(self, var_name: str, expr: str) -> None:
        """``create_var_field``."""
        if self.find_var(var_name) is not None and not self.remove:
            self.err("DUPLICATE_VAR", self.errpos(var_name))
        self.n_vars += 1
        hf = self.create_val_field(expr, var_name, FL_VAR)
        if hf.flags & FL_EXECNAME:  # update_var_execname
            hf.flags = FL_STRING | FL_VAR | FL_EXECNAME
            hf.size, hf.is_signed, hf.type, hf.fn = 256, False, "char[]", "execname"
        if not hf.flags & FL_ALIAS and hf.flags & (FL_STRING | FL_STACKTRACE):
            hf.var_str_idx = self.n_var_str
            self.n_var_str += 1

    def create_key_fields(self) -> None:
        """``create_key_fields``: at most 3, each aligned to 8 bytes."""
        if self.attrs.keys_str is None:
            raise HistError()
        parts = self.attrs.keys_str.split(",")
        offset = 0
        for _ in range(TRACING_MAP_KEYS_MAX):
            if not parts:
                break
            offset += self.create_key_field(parts.pop(0), offset)
        if parts:
            raise HistError()

    def create_key_field(self, field_str: str, offset: int) -> int:
        if field_str == "stacktrace":
            hf = self.create_hist_field(None, FL_KEY | FL_STACKTRACE)
            size = HIST_STACKTRACE_SIZE
        else:
            hf = self.parse_expr(field_str, FL_KEY, None, [0])
            if _has_vars(hf, 0):
                self.err("INVALID_REF_KEY", self.errpos(field_str))
            size = hf.size
        self.add(hf)
        size = (size + 7) & ~7
        hf.size, hf.offset = size, offset
        self.key_size += size
        if self.key_size > HIST_KEY_SIZE_MAX:
            raise HistError()
        self.n_keys += 1
        return size

    def create_sort_keys(self) -> None:
        """``create_sort_keys``: ``sort=a[.descending|.ascending][,b...]``."""
        text = self.attrs.sort_key_str
        if text is None:
            return
        parts, keys = text.split(","), []
        for i in range(TRACING_MAP_SORT_KEYS_MAX):
            if not parts:
                break
            field_str = parts.pop(0)
            if not field_str:
                self.sort_keys = keys or [[0, False]]
                self.err("EMPTY_SORT_FIELD", self.errpos("sort="))
            if i == TRACING_MAP_SORT_KEYS_MAX - 1 and parts:
                self.err("TOO_MANY_SORT_FIELDS", self.errpos("sort="))
            name, dot, mod = field_str.partition(".")
            if not name:
                self.err("EMPTY_SORT_FIELD", self.errpos("sort="))
            idx = 0 if name == "hitcount" else self._sort_field_idx(name)
            keys.append([idx, self._descending(mod if dot else None)])
        self.sort_keys = keys

    def _sort_field_idx(self, name: str) -> int:
        k = 1
        for hf in self.fields[1:]:
            if hf.flags & FL_VAR:
                continue
            if hist_field_name(hf, 0) == name:
                return k
            k += 1
        self.err("INVALID_SORT_FIELD", self.errpos(name))

    def _descending(self, mod: Optional[str]) -> bool:
        if mod is None or mod == "ascending":
            return False
        if mod == "descending":
            return True
        self.err("INVALID_SORT_MODIFIER", self.errpos(mod))

    def create_tracing_map_fields(self) -> None:
        """``create_tracing_map_fields``: sums for values, key fields with
        their compare functions, map variables for variables."""
        m = self.map
        for hf in self.fields:
            if hf.flags & FL_KEY:
                field = hf.field
                if hf.flags & FL_STACKTRACE:
                    cmp = lambda x, y: 0  # noqa: E731 (tracing_map_cmp_none)
                elif field is None or hf.flags & FL_CPU:
                    cmp = cmp_num(hf.size, hf.is_signed)
                elif field.is_string:
                    cmp = cmp_string
                else:
                    cmp = cmp_num(field.size, field.is_signed)
                m.add_key_field(hf.offset, cmp, hf.size)
            elif not hf.flags & FL_VAR:
                m.add_sum_field()
            if hf.flags & FL_VAR:
                hf.var_idx, hf.var_hist = m.add_var(), self

    def elt_init(self, elt) -> None:
        """``hist_trigger_elt_data_alloc`` + ``_init``: the comm of ``current``."""
        data = elt.private = HistEltData()
        if any(hf.flags & FL_EXECNAME for hf in self.fields):
            pid, comm = self._current_pid, self._current_comm  # save_comm(current)
            if comm is None:
                comm = self.tr.engine.comms.get(pid, "")
            data.comm = "<idle>" if pid == 0 else comm[:15]
        data.field_var_str = {}

    # --- variables --------------------------------------------------------------------

    def find_var(self, var_name: str):
        """``find_var``: this trigger's, then the event's hist triggers'."""
        hf = find_var_field(self, var_name)
        if hf is not None:
            return hf
        return find_file_var(self.tr, self.key, var_name)

    # --- firing (event_hist_trigger) -----------------------------------------------------

    def key_of(self, ctx: Ctx) -> bytes:
        keys = self.fields[self.n_vals:]
        compound = len(keys) > 1
        parts = []
        for hf in keys:
            if hf.flags & FL_STACKTRACE:
                value = self.tr_stack(ctx)
            else:
                value = hist_fn_call(hf, ctx)
            if isinstance(value, bytes):
                compound = True
                value = value[:hf.size - 1].ljust(hf.size, b"\0")
            else:
                value = (value & U64).to_bytes(8, "little").ljust(hf.size, b"\0")
            parts.append(value)
        if compound:
            return b"".join(parts).ljust(self.key_size, b"\0")
        return parts[0]

    def tr_stack(self, ctx: Ctx) -> bytes:
        from fakedebugfs.engine.ftrace.stacks import stack_for

        out = b""
        for i, name in enumerate(stack_for(self.key)):
            try:
                out += self.tr.engine.kallsyms.address(name, 0x1B + 0x2C * (i % 5)).to_bytes(8, "little")
            except ValueError:
                continue
        return out[:HIST_STACKTRACE_SIZE].ljust(HIST_STACKTRACE_SIZE, b"\0")

    def hit(self, ctx: Ctx) -> None:
        key = self.key_of(ctx)
        vals = [0] * len(self.var_refs)
        ctx.var_ref_vals = vals
        if self.var_refs and not self.resolve_var_refs(key, vals, False):
            return
        self._current_pid = ctx.pid
        self._current_comm = ctx.rec.get("COMM") if isinstance(ctx.rec, dict) else None
        elt = self.map.insert(key)
        if elt is None:
            return
        ctx.elt = elt
        for i in range(self.n_vals):  # hist_trigger_elt_update
            hf = self.fields[i]
            value = hist_fn_call(hf, ctx)
            if hf.flags & FL_VAR:
                elt.set_var(hf.var_idx, value)
            elif not isinstance(value, bytes):
                elt.update_sum(i, value)
        self.update_field_vars(elt, ctx)
        if self.resolve_var_refs(key, vals, True):
            self.run_actions(elt, ctx, key)

    def resolve_var_refs(self, key: bytes, vals: list, own: bool) -> bool:
        """``resolve_var_refs``: the referenced variables' values for *key*."""
        for i, ref in enumerate(self.var_refs):
            var_data = ref.var_hist
            if var_data is None:
                return False
            if (own and var_data is not self) or (not own and var_data is self):
                continue
            size = var_data.map.key_size  # the other map reads its own key size's bytes
            elt = var_data.map.lookup(key[:size].ljust(size, b"\0"))
            if elt is None or not elt.var_set[ref.var_idx]:
                return False
            vals[i] = elt.vars[ref.var_idx] if own or not ref.read_once \
                else elt.read_var_once(ref.var_idx)
        return True

    _current_pid = 0
    _current_comm = None


def _has_vars(hf, level: int) -> bool:
    """``field_has_hist_vars``."""
    if level > 3 or hf is None:
        return False
    if hf.flags & (FL_VAR | FL_VAR_REF):
        return True
    return any(_has_vars(op, level + 1) for op in hf.operands)


def hist_err(tr, cmd: HistCmd, name: str, pos: int) -> None:
    tr.log_err(cmd.loc, cmd.cmd.encode(errors="surrogateescape"), ERRORS[name], pos)


def hist_triggers(tr, key: str) -> list:
    trig = tr.triggers.get(key)
    return [t for t in trig.list if getattr(t, "hist_data", None) is not None] \
        if trig is not None else []


def find_file_var(tr, key: str, var_name: str):
    """``find_file_var``: a variable of one of the event's hist triggers."""
    for t in hist_triggers(tr, key):
        hf = find_var_field(t.hist_data, var_name)
        if hf is not None:
            return hf
    return None


__all__ = ["ERRORS", "CLOCKS_IN_NS", "Ctx", "HistAttrs", "HistCmd", "HistData", "HistEltData",
           "hist_err", "hist_triggers", "find_file_var"]
