"""A hist trigger's variables across triggers (kernel/trace/trace_events_hist.c,
6.12): hidden variables (``create_var``), field variables
(``create_field_var``, and ``create_field_var_hist``: the histogram the
kernel adds to a matched event for one of its fields), references
(``create_var_ref``, ``$var`` and ``sys.event.$var``) and the lookups
behind them (``find_event_var``, ``find_match_var``, ``find_var_file``,
``find_compatible_hist``), each refusal logged where the kernel logs it.

:class:`HistVarRefs` is one of :class:`~.hist_data.HistData`'s bases,
beside :class:`~.hist_actions.HistActions`, whose actions use it.
"""

from __future__ import annotations

from typing import Optional

from fakedebugfs.engine.ftrace.hist_actions import FieldVar, hist_log, hist_vars
from fakedebugfs.engine.ftrace.hist_fields import (
    FL_STACKTRACE, FL_VAR, FL_VAR_REF, HistError, HistField, expr_field_str, find_var_field)
from fakedebugfs.engine.ftrace.trace_events_synth import SYNTH_FIELDS_MAX


class HistVarRefs:
    """Variables and references of a :class:`~.hist_data.HistData`."""

    def find_target_event_var(self, system, event, var: str):
        if system is not None and (event is None or f"{system}:{event}" != self.key):
            return None
        return find_var_field(self, var)

    def create_var(self, name: str, size: int, type_: str) -> Optional[HistField]:
        """``create_var``: a hidden variable (None if the name is taken)."""
        if self.find_var(name) is not None and not self.remove:
            return None
        var = HistField(self, FL_VAR)
        var.var_idx, var.var_hist = self.map.add_var(), self
        var.size, var.var_name, var.type = size, name, type_
        return var

    def create_field_var(self, field_name: str) -> FieldVar:
        """``create_field_var``: a variable holding a field of this event."""
        if len(self.field_vars) >= SYNTH_FIELDS_MAX:
            self.err("TOO_MANY_FIELD_VARS", self.errpos(field_name))
        try:
            val = self.parse_atom(field_name, FL_VAR, None)
        except HistError:
            self.err("FIELD_VAR_PARSE_FAIL", self.errpos(field_name))
        var = self.create_var(field_name, val.size, val.type)
        if var is None:
            self.err("VAR_CREATE_FIND_FAIL", self.errpos(field_name))
        var.flags |= val.flags & FL_STACKTRACE
        return FieldVar(var, val)

    def save_field_var(self, fv: FieldVar) -> None:
        self.field_vars.append(fv)

    def create_var_ref(self, var: HistField, system, event_name) -> HistField:
        """``create_var_ref``: one reference per variable, kept in ``var_refs``."""
        for ref in self.var_refs:
            if ref.var_idx == var.var_idx and ref.var_hist is var.var_hist:
                return ref
        if len(self.var_refs) >= 16:  # TRACING_MAP_VARS_MAX
            return None
        ref = self.create_hist_field(None, FL_VAR_REF)
        self.init_var_ref(ref, var, system, event_name)
        ref.var_ref_idx = len(self.var_refs)
        self.var_refs.append(ref)
        return ref

    def local_field_var_ref(self, system, event, var_name: str):
        """``local_field_var_ref``: ``$x`` naming a plain field variable of
        this trigger is read as the field itself."""
        if system and event and f"{system}:{event}" != self.key:
            return None
        if bool(system) != bool(event) or len(var_name) < 2 or var_name[0] != "$":
            return None
        for name, expr in self.attrs.var_defs:
            if name == var_name[1:]:
                if any(c in expr for c in "+-*/") or (len(expr) >= 2 and expr[0] == "$"):
                    continue
                return expr
        return None

    def parse_var_ref(self, system, event, var_name: str):
        """``parse_var_ref``: None for text that is no ``$var``."""
        if len(var_name) < 2 or var_name[0] != "$":
            return None
        var = self.find_event_var(system, event, var_name[1:])
        ref = self.create_var_ref(var, system, event) if var is not None else None
        if ref is None:  # logged; parse_atom then tries it as a field
            hist_log(self, "VAR_NOT_FOUND", self.errpos(var_name[1:]))
        return ref

    def find_event_var(self, system, event, var: str):
        """``find_event_var``."""
        if not system or not event:
            try:
                found = self.find_match_var(var)
            except HistError:
                return None
            if found is not None:
                return found
        key = self.find_var_file(system, event, var)
        return None if key is None else self.find_file_var(key, var)

    def find_match_var(self, var: str):
        found = None
        for data in self.actions:
            if data.handler != "onmatch":
                continue
            key = self.find_var_file(data.match_system, data.match_event, var)
            if key is None:
                continue
            hf = self.find_file_var(key, var)
            if hf is not None:
                if found is not None:
                    hist_log(self, "VAR_NOT_UNIQUE", self.errpos(var))
                    raise HistError()
                found = hf
        return found

    def find_var_file(self, system, event, var: str):
        """``find_var_file``: the event holding the variable (its key)."""
        if system:
            key = f"{system}:{event}"
            return key if key in self.tr.events else None
        found = None
        for hd in hist_vars(self.tr):
            if hd.key == found:
                continue
            if find_var_field(hd, var) is not None:
                if found is not None:
                    hist_log(self, "VAR_NOT_UNIQUE", self.errpos(var))
                    return None
                found = hd.key
        return found

    def create_field_var_hist(self, system: str, event: str, field_name: str):
        """``create_field_var_hist``: a hist trigger on the other event with
        the same keys, holding the field as ``synthetic_<field>``."""
        if len(self.field_var_hists) >= SYNTH_FIELDS_MAX:
            self.err("TOO_MANY_FIELD_VARS", self.errpos(field_name))
        key = f"{system}:{event}"
        if key not in self.tr.events:
            self.err("EVENT_FILE_NOT_FOUND", self.errpos(field_name))
        other = self.find_compatible_hist(key)
        if other is None:
            self.err("HIST_NOT_FOUND", self.errpos(field_name))
        found = self.find_event_var(system, event, "synthetic_" + field_name)
        if found is not None:
            return found
        cmd = "keys=" + ",".join(expr_field_str(hf) for hf in other.fields[other.n_vals:])
        cmd += f":synthetic_{field_name}={field_name}"
        filt = self.find_trigger_filter(other, key)
        if filt is not None:
            cmd += f" if {filt}"
        try:
            self.parse_fn(self.tr, key, "", cmd, self.cmd)
        except (HistError, OSError):
            self.err("HIST_CREATE_FAIL", self.errpos(field_name))
        self.field_var_hists.append((key, cmd))
        found = self.find_event_var(system, event, "synthetic_" + field_name)
        if found is None:
            self.err("SYNTH_VAR_NOT_FOUND", self.errpos(field_name))
        return found

    def find_compatible_hist(self, key: str):
        """``find_compatible_hist``: a hist trigger of *key* whose keys have
        this one's types, sizes and signedness."""
        mine = self.fields[self.n_vals:]
        for t in self.hist_triggers(key):
            hd = t.hist_data
            theirs = hd.fields[hd.n_vals:]
            if len(theirs) == len(mine) and all(
                    a.type == b.type and a.size == b.size and a.is_signed == b.is_signed
                    for a, b in zip(theirs, mine)):
                return hd
        return None

    def find_trigger_filter(self, hd, key: str):
        for t in self.hist_triggers(key):
            if t.hist_data is hd:
                return t.filter_str
        return None


__all__ = ["HistVarRefs"]
