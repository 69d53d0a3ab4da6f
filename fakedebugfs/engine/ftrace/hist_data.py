"""``struct hist_trigger_data`` (kernel/trace/trace_events_hist.c, 6.12):
what a hist trigger's text becomes, made as ``create_hist_data`` makes it
(the actions parsed, then the values, the variables, the keys, the sort
keys, the map and its fields), its life (``destroy_hist_data``,
``remove_hist_vars``) and its errors.  Every refusal is a
:class:`HistError` with the kernel's errno, after the ``error_log`` entry
the kernel makes (:func:`hist_err`: the kernel's words, its caret from
``errpos()``).  Its bases, one concern each: the fields it makes
(:class:`~.hist_create.CreateHistData`), what it does when its event
fires (:class:`~.hist_event_trigger.EventHistTrigger`), the expressions
(:class:`~.hist_fields.FieldParser`), the actions
(:class:`~.hist_actions.HistActions`) and the variables across triggers
(:class:`~.hist_var_refs.HistVarRefs`).

The trigger itself, its parse and the ``hist`` file are
:mod:`.trace_events_hist`.
"""

from __future__ import annotations

import errno
from typing import Optional

from fakedebugfs.engine.ftrace.hist_actions import HistActions
from fakedebugfs.engine.ftrace.hist_create import (HIST_KEY_SIZE_MAX, CreateHistData,
                                                   field_has_hist_vars)
from fakedebugfs.engine.ftrace.hist_event_trigger import Ctx, EventHistTrigger, HistEltData
from fakedebugfs.engine.ftrace.hist_fields import FL_VAR, FieldParser, HistError, find_var_field
from fakedebugfs.engine.ftrace.hist_var_refs import HistVarRefs
from fakedebugfs.engine.ftrace.tracing_map import TRACING_MAP_BITS_DEFAULT, TracingMap

HIST_PREFIX = "hist:"
HIST_ACTIONS_MAX = 8
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


class HistData(CreateHistData, EventHistTrigger, FieldParser, HistActions, HistVarRefs):
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
        return any(field_has_hist_vars(hf, 0) for hf in self.fields)

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

    # --- variables --------------------------------------------------------------------

    def find_var(self, var_name: str):
        """``find_var``: this trigger's, then the event's hist triggers'."""
        hf = find_var_field(self, var_name)
        if hf is not None:
            return hf
        return find_file_var(self.tr, self.key, var_name)


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


__all__ = ["ERRORS", "CLOCKS_IN_NS", "Ctx", "HIST_KEY_SIZE_MAX", "HistAttrs", "HistCmd", "HistData",
           "HistEltData", "hist_err", "hist_triggers", "find_file_var"]
