"""How ``create_hist_data`` (kernel/trace/trace_events_hist.c, 6.12)
makes a hist trigger's fields from its text: ``create_hist_fields``
(``parse_var_defs``, then the values, the variables and the keys),
``create_sort_keys`` and ``create_tracing_map_fields`` (the map's sums,
key fields with their compare functions, and variables).  Mixed into
:class:`~.hist_data.HistData`, whose ``err`` logs a refusal in the
kernel's words and raises its errno.
"""

from __future__ import annotations

import errno
from typing import Optional

from fakedebugfs.engine.ftrace.hist_fields import (
    FL_ALIAS, FL_BUCKET, FL_CPU, FL_EXECNAME, FL_GRAPH, FL_HITCOUNT, FL_KEY, FL_LOG2,
    FL_PERCENT, FL_STACKTRACE, FL_STRING, FL_SYM, FL_SYM_OFFSET, FL_SYSCALL, FL_VAR, FL_VAR_REF,
    HIST_STACKTRACE_SIZE, HistError, hist_field_name)
from fakedebugfs.engine.ftrace.tracing_map import (
    TRACING_MAP_KEYS_MAX, TRACING_MAP_SORT_KEYS_MAX, TRACING_MAP_VALS_MAX, TRACING_MAP_VARS_MAX,
    cmp_num, cmp_string)

HIST_KEY_SIZE_MAX = 256 + HIST_STACKTRACE_SIZE


def field_has_hist_vars(hf, level: int) -> bool:
    """``field_has_hist_vars``: a variable or a reference, up to 3 levels down."""
    if level > 3 or hf is None:
        return False
    if hf.flags & (FL_VAR | FL_VAR_REF):
        return True
    return any(field_has_hist_vars(op, level + 1) for op in hf.operands)


class CreateHistData:
    """The field-making steps of ``create_hist_data``, on a
    :class:`~.hist_data.HistData` (its ``attrs``, ``fields``, counts,
    ``map`` and ``err``)."""

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
            if field_has_hist_vars(hf, 0):
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


__all__ = ["CreateHistData", "HIST_KEY_SIZE_MAX", "field_has_hist_vars"]
