"""What a hist trigger does when its event fires (kernel/trace/
trace_events_hist.c, 6.12: ``event_hist_trigger``): the key's bytes
(``add_to_key``, a stack trace's addresses), the map's element
(``tracing_map_insert``, with ``hist_trigger_elt_data_init`` saving the
comm of ``current``), the sums and variables (``hist_trigger_elt_update``),
the field variables, then the actions once ``resolve_var_refs`` found
every referenced variable.  Mixed into :class:`~.hist_data.HistData`.
"""

from __future__ import annotations

from fakedebugfs.engine.ftrace.hist_fields import (FL_EXECNAME, FL_STACKTRACE, FL_VAR,
                                                  HIST_STACKTRACE_SIZE, hist_fn_call)

U64 = (1 << 64) - 1


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


class EventHistTrigger:
    """``event_hist_trigger`` and the map's element data, on a
    :class:`~.hist_data.HistData` (its ``fields``, ``map``, ``var_refs``
    and actions)."""

    _current_pid = 0  # the task of the firing being aggregated (save_comm's current)
    _current_comm = None

    def elt_init(self, elt) -> None:
        """``hist_trigger_elt_data_alloc`` + ``_init``: the comm of ``current``."""
        data = elt.private = HistEltData()
        if any(hf.flags & FL_EXECNAME for hf in self.fields):
            pid, comm = self._current_pid, self._current_comm  # save_comm(current)
            if comm is None:
                comm = self.tr.engine.comms.get(pid, "")
            data.comm = "<idle>" if pid == 0 else comm[:15]
        data.field_var_str = {}

    def key_of(self, ctx: Ctx) -> bytes:
        """The key's bytes (``add_to_key``): one key's value alone, or each
        key's at its offset, padded to ``key_size``."""
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
        """A ``stacktrace`` key: the event's stack (:mod:`.stacks`) as addresses."""
        from fakedebugfs.engine.ftrace.stacks import stack_for

        out = b""
        for i, name in enumerate(stack_for(self.key)):
            try:
                out += self.tr.engine.kallsyms.address(name, 0x1B + 0x2C * (i % 5)).to_bytes(8, "little")
            except ValueError:
                continue
        return out[:HIST_STACKTRACE_SIZE].ljust(HIST_STACKTRACE_SIZE, b"\0")

    def hit(self, ctx: Ctx) -> None:
        """``event_hist_trigger``: one firing into the map."""
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


__all__ = ["Ctx", "EventHistTrigger", "HistEltData", "U64"]
