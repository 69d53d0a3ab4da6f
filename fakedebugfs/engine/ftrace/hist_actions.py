"""A hist trigger's actions and the variables between triggers
(kernel/trace/trace_events_hist.c, 6.12): ``onmatch(sys.event).trace(synth,
params)`` / ``.synth(params)``, ``onmax($var)`` and ``onchange($var)``
with ``.save(fields)``, ``.snapshot()`` or ``.trace(...)``; variable
references (``$var``, ``sys.event.$var``), field variables made on the
trigger (``create_field_var``) or, for a field of the matched event, on a
histogram the kernel adds to that event (``create_field_var_hist``: a
trigger ``keys=<the same keys>:synthetic_<field>=<field>``).

Parsing and refusals follow ``onmatch_parse``, ``track_data_parse``,
``action_parse``, ``parse_action_params``, ``trace_action_create``,
``track_data_create`` and ``action_create``, each error logged where the
kernel logs it (a failure that the kernel survives by trying another way
leaves its log entries behind, as in the kernel).

:class:`HistActions` is one of :class:`~.hist_data.HistData`'s bases; the
variables and references it uses are :mod:`~.hist_var_refs`'s.
"""

from __future__ import annotations

import errno
from typing import Optional

from fakedebugfs.engine.ftrace.hist_fields import (
    FL_STRING, HistError, HistField, find_var_field, hist_fn_call)
from fakedebugfs.engine.ftrace.trace_events_synth import SYNTH_FIELDS_MAX, find_synth_event

U64 = (1 << 64) - 1


class ActionData:
    """``struct action_data``."""

    def __init__(self, handler: str):
        self.handler = handler  # onmatch, onmax, onchange
        self.action = None  # save, trace, snapshot
        self.action_name = None
        self.params: list[str] = []
        self.use_trace_keyword = False
        self.synth_event_name = None
        self.synth_event = None
        self.match_system = self.match_event = None
        self.var_str = None
        self.var_ref: Optional[HistField] = None
        self.track_var: Optional[HistField] = None
        self.var_ref_idx: list[int] = []

    def changed(self, track: int, value: int) -> bool:
        """``check_track_val_max`` / ``check_track_val_changed``."""
        if self.handler == "onmax":
            return value > track
        return value != track


class FieldVar:
    """``struct field_var``: a variable and the field it takes."""

    def __init__(self, var: HistField, val: HistField):
        self.var, self.val = var, val


class HistActions:
    """The actions of a :class:`~.hist_data.HistData`."""

    def init_actions(self) -> None:
        self.actions: list[ActionData] = []
        self.field_vars: list[FieldVar] = []
        self.save_vars: list[FieldVar] = []
        self.field_var_hists: list[tuple] = []  # (event key, command)

    # --- parse_actions ------------------------------------------------------------

    def parse_actions(self) -> None:
        for text in self.attrs.actions:
            if text.startswith("onmatch("):
                data = self.onmatch_parse(text[8:])
            elif text.startswith("onmax("):
                data = self.track_data_parse(text[6:], "onmax")
            elif text.startswith("onchange("):
                data = self.track_data_parse(text[9:], "onchange")
            else:
                raise HistError()
            self.actions.append(data)

    def onmatch_parse(self, s: str) -> ActionData:
        data = ActionData("onmatch")
        match, sep, rest = s.partition(")")
        if not sep:
            self.err("NO_CLOSING_PAREN", self.errpos(match))
        system, dot, event = match.partition(".")
        if not dot:
            self.err("SUBSYS_NOT_FOUND", self.errpos(system))
        if f"{system}:{event}" not in self.tr.events:
            self.err("INVALID_SUBSYS_EVENT", self.errpos(event))
        data.match_system, data.match_event = system, event
        self.action_parse(rest, data)
        return data

    def track_data_parse(self, s: str, handler: str) -> ActionData:
        data = ActionData(handler)
        var_str, sep, rest = s.partition(")")
        if not sep:
            raise HistError()
        data.var_str = var_str
        self.action_parse(rest, data)
        return data

    def action_parse(self, s: str, data: ActionData) -> None:
        """``action_parse``: ``.save(...)``, ``.snapshot()``, ``.trace(...)``
        or ``.<synthetic event>(...)``."""
        _, dot, s = s.partition(".")
        if not dot:
            self.err("ACTION_NOT_FOUND", 0)
        name, paren, s = s.partition("(")
        if not paren:
            self.err("ACTION_NOT_FOUND", 0)
        params, close, s = s.partition(")")
        if name.startswith("save"):
            self.parse_action_params(params, data)
            if data.handler == "onmatch":
                self.err("ACTION_MISMATCH", self.errpos(name))
            data.action = "save"
        elif name.startswith("snapshot"):
            if not close:
                self.err("NO_CLOSING_PAREN", self.errpos(params))
            if data.handler == "onmatch":
                self.err("ACTION_MISMATCH", self.errpos(name))
            data.action = "snapshot"
        else:
            data.use_trace_keyword = name.startswith("trace")
            self.parse_action_params(params, data)
            data.action = "trace"
        data.action_name = name

    def parse_action_params(self, params: Optional[str], data: ActionData) -> None:
        first = True
        rest = params
        while rest is not None:
            if len(data.params) >= SYNTH_FIELDS_MAX:
                self.err("TOO_MANY_PARAMS", 0)
            param, comma, tail = rest.partition(",")
            rest = tail if comma else None
            param = param.strip(" \t\n\v\f\r")
            if len(param) < 2:
                self.err("INVALID_PARAM", self.errpos(param))
            if first and data.use_trace_keyword:
                data.synth_event_name = param
            else:
                data.params.append(param)
            first = False

    # --- create_actions --------------------------------------------------------------

    def create_actions(self) -> None:
        for data in self.actions:
            if data.handler == "onmatch":
                self.action_create(data)
            else:
                self.track_data_create(data)

    def track_data_create(self, data: ActionData) -> None:
        if not data.var_str.startswith("$"):
            self.err("ONX_NOT_VAR", self.errpos(data.var_str))
        name = data.var_str[1:]
        var = find_var_field(self, name)
        if var is None:
            self.err("ONX_VAR_NOT_FOUND", self.errpos(name))
        data.var_ref = self.create_var_ref(var, None, None)
        if data.var_ref is None:
            raise HistError(errno.ENOMEM)
        track = self.create_var("__max" if data.handler == "onmax" else "__change", 8, "u64")
        if track is None:
            self.err("ONX_VAR_CREATE_FAIL", 0)
        data.track_var = track
        self.action_create(data)

    def action_create(self, data: ActionData) -> None:
        if data.action == "trace":
            self.trace_action_create(data)
        elif data.action == "snapshot":
            enable = getattr(self.tr, "snapshot_cond_enable", None)
            if enable is None:
                raise HistError()
            enable(self, data)
        elif data.action == "save":
            if self.save_vars:
                self.err("TOO_MANY_SAVE_ACTIONS", 0, errno.EEXIST)
            for param in data.params:
                try:
                    fv = self.create_field_var(param)
                except HistError:
                    self.err("FIELD_VAR_CREATE_FAIL", self.errpos(param))
                self.save_vars.append(fv)

    def trace_action_create(self, data: ActionData) -> None:
        name = data.synth_event_name if data.use_trace_keyword else data.action_name
        event = find_synth_event(self.tr, name)
        if event is None:
            self.err("SYNTH_EVENT_NOT_FOUND", self.errpos(name))
        event.ref += 1
        try:
            for pos, param in enumerate(data.params):
                system = event_name = None
                parts = param.split(".", 2)
                if len(parts) == 2:
                    raise HistError()
                if len(parts) == 3:
                    system, event_name, param = parts
                if param.startswith("$"):
                    hf = self.trace_action_find_var(data, system, event_name, param)
                else:
                    hf = self.trace_action_create_field_var(data, system, event_name, param)
                if hf is None:
                    raise HistError()
                if not event.check_field(hf, pos):
                    self.err("SYNTH_TYPE_MISMATCH", self.errpos(param))
                ref = self.create_var_ref(hf, system, event_name)
                if ref is None:
                    raise HistError(errno.ENOMEM)
                data.var_ref_idx.append(self.var_refs.index(ref))
            if len(data.params) != len(event.fields):
                self.err("SYNTH_COUNT_MISMATCH", self.errpos(event.name))
        except HistError:
            event.ref -= 1
            raise
        data.synth_event = event

    def trace_action_find_var(self, data, system, event, var: str):
        var = var[1:]
        hf = self.find_target_event_var(system, event, var)
        if hf is None:
            if system is None and data.handler == "onmatch":
                system, event = data.match_system, data.match_event
            hf = self.find_event_var(system, event, var)
        if hf is None:
            hist_log(self, "PARAM_NOT_FOUND", self.errpos(var))
        return hf

    def trace_action_create_field_var(self, data, system, event, var: str):
        if system is None or (event is not None and f"{system}:{event}" == self.key):
            try:
                fv = self.create_field_var(var)
                self.save_field_var(fv)
                return fv.var
            except HistError:
                pass
        if system is None and data.handler == "onmatch":
            system, event = data.match_system, data.match_event
        if event is None:
            return None
        try:
            return self.create_field_var_hist(system, event, var)
        except HistError:
            return None

    # --- when the event fires --------------------------------------------------------

    def update_field_vars(self, elt, ctx) -> None:
        for fv in self.field_vars:
            elt.set_var(fv.var.var_idx, hist_fn_call(fv.val, ctx))

    def run_actions(self, elt, ctx, key: bytes) -> None:
        """``hist_trigger_actions``."""
        for data in self.actions:
            if data.handler == "onmatch":
                self.action_trace(data, ctx)
                continue
            value = ctx.var_ref_vals[data.var_ref.var_ref_idx]
            track = elt.vars[data.track_var.var_idx]
            if not data.changed(track, value):
                continue
            elt.set_var(data.track_var.var_idx, value)
            if data.action == "save":
                for fv in self.save_vars:
                    elt.set_var(fv.var.var_idx, hist_fn_call(fv.val, ctx))
            elif data.action == "trace":
                self.action_trace(data, ctx)
            elif data.action == "snapshot":
                self.tr.snapshot_cond(self, data, elt, key, ctx)

    def action_trace(self, data: ActionData, ctx) -> None:
        """``trace_synth``: the synthetic event with the referenced values."""
        values = [ctx.var_ref_vals[i] for i in data.var_ref_idx]
        data.synth_event.fire(self.tr, ctx.cpu, ctx.pid, ctx.ts, values)

    # --- output ------------------------------------------------------------------------

    def print_actions(self, elt) -> str:
        """``print_actions``: ``max:``/``changed:`` and the saved values."""
        out = ""
        for data in self.actions:
            if data.action == "snapshot" or data.handler == "onmatch":
                continue
            track = elt.vars[data.track_var.var_idx]
            out += f"\n\t{'max' if data.handler == 'onmax' else 'changed'}: {track:10d}"
            for fv in self.save_vars:
                val = elt.vars[fv.var.var_idx]
                if fv.val.flags & FL_STRING:
                    text = val.decode(errors="replace") if isinstance(val, bytes) else ""
                    out += f"  {fv.var.var_name}: {text:<32s}"
                else:
                    out += f"  {fv.var.var_name}: {val if isinstance(val, int) else 0:10d}"
        return out

    def print_actions_spec(self) -> str:
        out = ""
        for data in self.actions:
            if data.handler == "onmatch":
                out += f":onmatch({data.match_system}.{data.match_event}).{data.action_name}("
            else:
                out += f":{data.handler}({data.var_str}).{data.action_name}("
            if data.action == "save":
                out += ",".join(fv.var.var_name for fv in self.save_vars)
            elif data.action == "trace":
                items = ([data.synth_event_name] if data.use_trace_keyword else []) + data.params
                out += ",".join(items)
            out += ")"
        return out

    def actions_match(self, other) -> bool:
        if len(self.actions) != len(other.actions):
            return False
        for a, b in zip(self.actions, other.actions):
            if (a.handler, a.action, a.params) != (b.handler, b.action, b.params):
                return False
            name_a = a.synth_event_name if a.use_trace_keyword else a.action_name
            name_b = b.synth_event_name if b.use_trace_keyword else b.action_name
            if name_a != name_b:
                return False
            if a.handler == "onmatch":
                if (a.match_system, a.match_event) != (b.match_system, b.match_event):
                    return False
            elif a.var_str != b.var_str:
                return False
        return True


def hist_log(hd, name: str, pos: int) -> None:
    """A ``hist_err`` that does not end the parse."""
    from_data = hd.cmd
    hd.tr.log_err(from_data.loc, from_data.cmd.encode(errors="surrogateescape"),
                  hd.error_text(name), pos)


def hist_vars(tr) -> list:
    """``tr->hist_vars``: the hist data with variables, newest first."""
    return tr.__dict__.setdefault("hist_vars", [])


__all__ = ["ActionData", "FieldVar", "HistActions", "hist_vars", "hist_log"]
