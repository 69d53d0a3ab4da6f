"""Function probes: the commands of ``set_ftrace_filter``
(``register_ftrace_function_probe``, kernel/trace/ftrace.c; the commands of
trace_functions.c, trace.c's ``snapshot`` and trace_events.c's
``enable_event``/``disable_event``, 6.12).

``<glob>:<command>[:<param>]`` hooks every function the glob names with a
probe run each time one is called; ``!<glob>:<command>[:<param>]``
removes it.  A probe is identified by its ``ftrace_probe_ops``: the
counted and the unlimited variants of a command are two (``traceoff``
and ``traceoff:3`` can both be set on one function; ``!f:traceoff``
removes only the unlimited one).  Registering a function already hooked
by the same ops adds nothing, which is EINVAL, as is a glob matching
nothing; removing with an ops never registered is ENODEV.

Each function of a probe has a count (``ftrace_func_mapper``) when the
ops keeps one: ``count=N`` in the listing, ``unlimited`` otherwise.
"""

from __future__ import annotations

import errno
from typing import Optional

from fakedebugfs.engine.core.errors import einval, kernel_error
from fakedebugfs.engine.ftrace.ftrace import filter_parse_regex, ftrace_match, hash_order
from fakedebugfs.engine.ftrace.kstrto import kstrtoull

UNLIMITED = -1


class EventData:
    """``struct event_probe_data``: one ``enable_event`` write's event and
    the functions it was set on (``ref``: at 0 the soft mode is dropped)."""

    __slots__ = ("enable", "key", "ref")

    def __init__(self, enable: bool, key: str):
        self.enable, self.key, self.ref = enable, key, 0

    def put(self, tr) -> None:
        """``free_probe_data``."""
        self.ref -= 1
        if not self.ref:
            tr.enable_disable(self.key, False, soft=True)


class FuncProbe:
    """``struct ftrace_func_probe``: one probe ops of a trace array, the
    functions it hooks (record index -> data) in the order added."""

    def __init__(self, ops: str, command: str, counted: bool):
        self.ops = ops  # identity (the probe_ops it stands for)
        self.command = command
        self.counted = counted  # has a mapper: prints count=N
        # record -> [count, (enable, event key) of enable_event/disable_event or None]
        self.funcs: dict[int, list] = {}
        self.order: list = []  # the records' addresses as the hash lists them

    def reorder(self, records, added: list) -> None:
        """The hash's listing order after *added* records came or some went
        (:func:`~.ftrace.hash_order` over the records' addresses)."""
        by_ip = {records.addrs[i]: i for i in self.funcs}
        kept = [ip for ip in self.order if ip in by_ip]
        new = [records.addrs[i] for i in added]
        self.order = [ip for ip in hash_order(kept, new) if ip in by_ip]

    def show(self, records) -> list:
        """``probe_ops->print`` of each function, in its hash's order."""
        out = []
        by_ip = {records.addrs[i]: i for i in self.funcs}
        for ip in self.order:
            i = by_ip[ip]
            data = self.funcs[i]
            name = records.names[i]
            if data[1] is not None:
                enable, key = data[1].enable, data[1].key
                text = f"{name}:{'enable' if enable else 'disable'}_event:{key}"
                count = data[0]
                out.append(text + (":unlimited\n" if count == UNLIMITED
                                   else f":count={count}\n"))
                continue
            text = f"{name}:{self.command}"
            out.append(text + (f":count={data[0]}\n" if self.counted else ":unlimited\n"))
        return out

    def hit(self, tr, i: int, cpu: int, pid: int, ts: int) -> None:
        """The probe's ``func`` when function *i* is called."""
        data = self.funcs.get(i)
        if data is None:
            return
        cmd = self.command
        if data[1] is not None:
            _event_probe(tr, self, data)
        elif cmd in ("traceon", "traceoff"):
            on = cmd == "traceon"
            if self.counted:  # update_traceon_count: one per change of state
                if data[0] <= 0 or on == tr.tracing_on:
                    return
                tr.tracing_on = on
                data[0] -= 1
            else:
                tr.tracing_on = on
        elif cmd == "stacktrace":
            if not tr.tracing_on:
                return
            if self.counted:
                if not data[0]:
                    return
                data[0] -= 1
            tr.stack_entry(cpu, pid, ts)
        elif cmd == "snapshot":
            if self.counted:
                if data[0] <= 0:
                    return
                data[0] -= 1
            from fakedebugfs.engine.ftrace.trace_snapshot import snapshot_of

            snapshot_of(tr).take()  # tracing_snapshot_instance
        elif cmd in ("dump", "cpudump"):
            if self.counted:  # update_count
                if data[0] <= 0:
                    return
                data[0] -= 1
            # ftrace_dump() prints the buffers on the console: nothing a
            # tracefs reader sees


def _event_probe(tr, probe: FuncProbe, data: list) -> None:
    """``event_enable_probe``/``event_enable_count_probe``: clear or set
    the event's soft-disable."""
    enable, key = data[1].enable, data[1].key
    if probe.counted:
        if not data[0]:
            return
        if enable == (key not in tr.soft_disabled):
            return
        if data[0] != UNLIMITED:
            data[0] -= 1
    if enable:
        tr.soft_disabled.discard(key)
    else:
        tr.soft_disabled.add(key)


def _find(ops, ident: str) -> Optional[FuncProbe]:
    for p in ops.probes:
        if p.ops == ident:
            return p
    return None


def register_probe(ops, glob: str, probe: FuncProbe, count: int, event=None) -> int:
    """``register_ftrace_function_probe``: the functions *glob* names,
    those not yet hooked by this ops added with *count*; EINVAL if none
    matched or none was new."""
    have = _find(ops, probe.ops)
    idx, _ = ops.records.match(glob, None)
    if not idx:
        raise einval(f"no function matches {glob!r}")
    target = have or probe
    new = [i for i in idx if i not in target.funcs]
    if not new:
        raise einval("every function has this probe already")
    for i in new:
        target.funcs[i] = [count, event]
        if event is not None:
            event.ref += 1
    target.reorder(ops.records, new)
    if have is None:
        ops.probes.insert(0, probe)  # list_add: the newest first
    ops.changed()
    return len(new)


def unregister_probe(ops, glob: str, ident: str) -> list:
    """``unregister_ftrace_function_probe_func``: the functions of the
    probe *ident* that *glob* names (all for ``*`` or nothing) removed;
    ENODEV without that probe, EINVAL when none matched.  Returns the
    data of those removed."""
    probe = _find(ops, ident)
    if probe is None:
        raise kernel_error(errno.ENODEV)
    if not probe.funcs:
        raise einval("probe has no function")
    if not glob or glob == "*":
        gone = list(probe.funcs)
    else:
        kind, search, _ = filter_parse_regex(glob)
        names = ops.records.names
        gone = [i for i in probe.funcs if ftrace_match(names[i], kind, search)]
    if not gone:
        raise einval(f"no function of the probe matches {glob!r}")
    removed = [probe.funcs.pop(i) for i in gone]
    probe.reorder(ops.records, [])
    if not probe.funcs:
        ops.probes.remove(probe)
    ops.changed()
    return removed


def _count(param: Optional[str]) -> tuple[bool, int]:
    """``(counted, count)`` of a command's parameter: none is unlimited;
    an empty one counted with -1 (the kernel's ``(void *)-1``)."""
    if param is None:
        return False, UNLIMITED
    number = param.split(":", 1)[0]
    if not number:
        return True, UNLIMITED
    return True, kstrtoull(number.encode(), 0)


def probe_command(ops, glob: str, cmd: str, param: Optional[str], enable: bool) -> None:
    """``ftrace_trace_probe_callback`` of ``traceon``, ``traceoff``,
    ``stacktrace``, ``snapshot``, ``dump`` and ``cpudump``."""
    if not enable:
        raise einval("commands work only in set_ftrace_filter")
    if cmd == "dump":
        param = "1"  # only dump once
    counted = param is not None and cmd != "cpudump"  # cpudump's ops keeps no count
    ident = cmd + (":count" if counted else "")
    if glob.startswith("!"):
        unregister_probe(ops, glob[1:], ident)
        return
    _, count = _count(param) if cmd != "cpudump" else (False, UNLIMITED)
    if cmd == "snapshot":  # tracing_arm_snapshot: the buffer allocated now
        from fakedebugfs.engine.ftrace.trigger_cmds import has_snapshot
        from fakedebugfs.engine.ftrace.trace_snapshot import snapshot_of

        if not has_snapshot(ops.tr):
            raise einval("no snapshot in this kernel")
        snapshot_of(ops.tr).alloc()
    register_probe(ops, glob, FuncProbe(ident, cmd, counted), count)


def event_command(ops, glob: str, cmd: str, param: Optional[str], enable: bool) -> None:
    """``event_enable_func``: ``<glob>:enable_event:<system>:<event>[:count]``;
    the event is held in soft mode while the probe exists."""
    tr = ops.tr
    if not enable or param is None:
        raise einval("enable_event needs system:event")
    system, sep, rest = param.partition(":")
    if not sep:
        raise einval("enable_event needs system:event")
    event, sep, number = rest.partition(":")
    number = number if sep else None
    key = f"{system}:{event}"
    if key not in tr.events or key.startswith("ftrace:"):
        raise einval(f"no event {key}")
    on = cmd == "enable_event"
    counted = number is not None
    ident = f"{cmd}{':count' if counted else ''}"
    if glob.startswith("!"):
        for data in unregister_probe(ops, glob[1:], ident):
            data[1].put(tr)
        return
    count = UNLIMITED
    if counted:
        if not number:
            raise einval("empty count")
        count = kstrtoull(number.encode(), 0)
    tr.enable_disable(key, True, soft=True)
    probe = _find(ops, ident) or FuncProbe(ident, cmd, counted)
    try:
        register_probe(ops, glob, probe, count, EventData(on, key))
    except OSError:
        tr.enable_disable(key, False, soft=True)
        raise


def clear_probes(ops) -> None:
    """``clear_ftrace_function_probes``: every probe of the trace array
    removed (its instance goes)."""
    for probe in list(ops.probes):
        for data in probe.funcs.values():
            if data[1] is not None:
                data[1].put(ops.tr)
        ops.probes.remove(probe)
    ops.changed()


COMMANDS = {
    "traceon": probe_command, "traceoff": probe_command, "stacktrace": probe_command,
    "snapshot": probe_command, "dump": probe_command, "cpudump": probe_command,
    "enable_event": event_command, "disable_event": event_command,
}

__all__ = ["FuncProbe", "COMMANDS", "register_probe", "unregister_probe", "clear_probes"]
