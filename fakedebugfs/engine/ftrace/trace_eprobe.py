"""Event probes (kernel/trace/trace_eprobe.c, 6.12).

``e[:[GRP/][EVENT]] SYSTEM.EVENT [NAME=$FIELD[:TYPE] ...] [if FILTER]`` on
``dynamic_events`` (``__trace_eprobe_create``): a new event (group
``eprobes``, named after the attached event by default) recorded each time
the attached event is, with the attached event's fields (``$field``) and
``$comm`` as its arguments.  Any event of the kernel or defined at run
time may be attached (synthetic events too), except probe events
(kprobe, uprobe, eprobe, fprobe: ``find_and_get_event`` skips them) and
ftrace's own entries: "Attached event does not exist", ENODEV.  The
filter is checked as the attached event's filter.

Hits: when an attached event fires while the event probe is enabled
(:class:`EprobeHits`), the probe records one entry with the values of the
attached fields it names (``eprobe_trigger_func``); :func:`hit_values`
computes them.
"""

from __future__ import annotations

import errno

from fakedebugfs.engine.ftrace.trace_probe import (FL_KERNEL, FL_TEVENT, MAX_EVENT_NAME_LEN,
    MAX_TRACE_ARGS, ProbeError, ProbeHits, parse_event_name)
from fakedebugfs.engine.ftrace.trace_probe_parse import parse_probe_arg
from fakedebugfs.engine.ftrace.trace_probe_tmpl import make_probe_event

EPROBE_EVENT_SYSTEM = "eprobes"


class TraceEprobe:
    """``struct trace_eprobe``."""

    kind = "eprobe"

    def __init__(self, group, event, system, name, filter_str, args):
        self.group, self.event = group, event
        self.event_system, self.event_name = system, name
        self.filter_str, self.args = filter_str, args
        self.nhits = 0

    @property
    def key(self) -> str:
        return f"{self.group}:{self.event}"

    @property
    def attached(self) -> str:
        return f"{self.event_system}:{self.event_name}"

    def show(self) -> str:
        """``eprobe_dyn_event_show``."""
        return (f"e:{self.group}/{self.event} {self.event_system}.{self.event_name}"
                + "".join(f" {a.name}={a.comm}" for a in self.args) + "\n")

    def profile(self) -> str:
        return ""

    def match(self, system, event: str, argv: list) -> bool:
        """``eprobe_dyn_event_match``."""
        if system and system != self.group:
            return False
        if event and event != self.event:
            return False
        if not argv:
            return True
        head = argv[0]
        cut = head.find("/")
        if cut < 0:
            cut = head.find(".")
        if cut < 0 or head[:cut] != self.event_system or head[cut + 1:] != self.event_name:
            return False
        words = [f"{a.name}={a.comm}" for a in self.args]
        rest = argv[1:]
        return len(rest) <= len(words) and words[:len(rest)] == rest

    def make_event(self, event_id: int):
        label = lambda r: f"({self.event_system}.{self.event_name})"
        return make_probe_event(self.group, self.event, event_id, [], self.args, "event", label)


def _field_names(ev) -> list:
    return [f[1].split("[", 1)[0] for f in ev.fields]


def find_and_get_event(dyn, system: str, name: str):
    """``find_and_get_event``: the attachable event, or None."""
    key = f"{system}:{name}"
    if system == "ftrace" or any(p.kind != "synth" for p in dyn.probes_of(key)):
        return None
    try:
        return dyn.ft.events[key] if key in dyn.ft.events else None
    except (KeyError, ValueError):
        return None


def create(argv: list, dyn) -> TraceEprobe:
    """``__trace_eprobe_create``; ProbeError ``ECANCELED`` for other commands."""
    if len(argv) < 2 or argv[0][:1] != "e":
        raise ProbeError(errno.ECANCELED)
    facts = dyn.facts
    log = facts.log("event_probe", argv)
    group, event = EPROBE_EVENT_SYSTEM, None
    colon = argv[0].find(":", 1)
    if colon >= 0:
        g, event = parse_event_name(argv[0][colon + 1:], log, colon + 1, facts)
        group = g or group
    log.index = 1
    before = []
    try:
        sys_name, sys_event = parse_event_name(argv[1], log, 0, facts)
    except ProbeError as err:  # logged, then "requires both" too
        before.append(err.log)
        sys_name = sys_event = None
    if not sys_event or not sys_name:
        err = log.err(0, "NO_EVENT_INFO")
        err.before = before
        raise err
    if not event:
        event = sys_event[:MAX_EVENT_NAME_LEN - 1]
    words, filter_words = argv[2:], None
    if "if" in words:
        at = words.index("if")
        words, filter_words = words[:at], words[at + 1:]
    if len(words) > MAX_TRACE_ARGS:
        raise ProbeError(errno.E2BIG)
    attached = find_and_get_event(dyn, sys_name, sys_event)
    if attached is None:
        raise log.err(0, "BAD_ATTACH_EVENT", errno.ENODEV)
    filter_str = None
    if filter_words is not None:
        log.index = 2 + len(words) + 1
        if not filter_words:
            raise log.err(0, "NO_EP_FILTER")
        filter_str = " ".join(filter_words)
        from fakedebugfs.engine.ftrace.filter import FilterError, compile_filter

        try:
            compile_filter(attached, filter_str, dyn.ft.engine.kallsyms)
        except FilterError:
            raise ProbeError(errno.EINVAL) from None
    fields = _field_names(attached)
    args, size = [], 0
    for i, word in enumerate(words):
        log.index = i + 2
        parg = parse_probe_arg(args, i, word, FL_KERNEL | FL_TEVENT, log, size,
                               event_fields=fields, facts=facts)
        args.append(parg)
        size += parg.size
    return TraceEprobe(group, event, sys_name, sys_event, filter_str, args)


def register(ep: TraceEprobe, dyn) -> None:
    """``trace_probe_register_event_call`` + ``dyn_event_add``."""
    log = dyn.facts.log("event_probe", dyn.argv)
    if dyn.exists(ep.key):
        raise log.err(0, "EVENT_EXIST", errno.EEXIST)
    dyn.add(ep, ep.make_event, lambda: log.err(0, "EVENT_EXIST", errno.EEXIST))


# 6.12 records a $field of a char array or string, and $comm, without a
# :string type as the address of the bytes (the entry being built in the
# CPU's buffer, the task's comm): the fake has no memory, these are fixed
# places in the direct map (the guest's were alike: 0xff11000006c5f008 for
# the entry on CPU 0, 0x3000 lower per CPU)
ENTRY_BUFFER, BUFFER_STRIDE = 0xFF11000006C5F008, 0x3000
TASK_COMM = 0xFF11000005000DA0


def hit_values(ep: TraceEprobe, attached, vals: dict, cpu: int, pid: int, comm: str) -> dict:
    """The entry one hit of the attached event records
    (``eprobe_trigger_func``, ``process_fetch_insn``): each ``$field`` the
    field's value (*vals*, by field), a string type the text of a char
    array or string field (a pointer field's text is not known: a faulted
    fetch), ``$comm`` the task's name as a string, else its address;
    memory (``+0($filename):ustring``) is not known: 0, or a faulted string."""
    fields = {f[1].split("[", 1)[0]: f for f in attached.fields}
    out = {}
    for arg in ep.args:
        fetch = arg.comm.split(":", 1)[0]
        if fetch in ("$comm", "$COMM"):
            out[arg.name] = comm if arg.type.is_string else TASK_COMM + (pid & 0xFFFF) * 0x2A40
            continue
        if not fetch.startswith("$"):  # memory (+OFFS($field)...) the fake cannot read
            out[arg.name] = "" if arg.type.is_string else ([0] * arg.count if arg.count else 0)
            continue
        f = fields.get(fetch[1:])
        v = vals.get(fetch[1:], 0)
        textual = f is not None and ("[" in f[1] or f[0].startswith("__data_loc"))
        if arg.type.is_string:
            out[arg.name] = (v.decode(errors="replace") if isinstance(v, bytes) else v) \
                if textual and isinstance(v, (str, bytes)) else ""
        elif textual:
            out[arg.name] = ENTRY_BUFFER - BUFFER_STRIDE * cpu + f[2]
        else:
            out[arg.name] = v if isinstance(v, int) else 0
    return out


class EprobeHits(ProbeHits):
    """Each enabled event probe's hits: a probe on its attached event's
    tracepoint that records the eprobe's entry when the attached event
    fires and the eprobe's filter lets it through.  As ``enable_eprobe``
    adds its trigger to the attached event's file of the same trace
    array (``trace_event_trigger_enable_disable``), the attached event is
    in trigger mode there while the eprobe is enabled: its ``enable``
    reads ``0*`` (``1*`` when enabled too), and it stays registered;
    ``disable_eprobe`` lets go of it.  That registration tells the sources
    that feed only what is recorded (``--mirror``, ``run``'s watcher)."""

    def __init__(self, dyn):
        super().__init__(dyn)
        self.ft.on_enabled.append(self.trigger_mode)

    def probe_for(self, key: str):
        return next((p for p in self.dyn.probes_of(key) if p.kind == "eprobe"), None)

    def trigger_mode(self, tr, key: str, on: bool) -> None:
        """``enable_eprobe`` / ``disable_eprobe`` in *tr*: the attached
        event's ``tm_ref`` there."""
        ep = self.probe_for(key)
        if ep is None:
            return
        try:
            tr._trigger_mode(ep.attached, on)
        except (OSError, KeyError):  # a source that cannot feed it (--mirror's format check)
            pass

    def _tell(self, key: str, on: bool) -> None:
        """Nothing: the attached event's trigger mode registers it in the
        trace array, which tells the sources (:meth:`trigger_mode`); telling
        them again on the detach would stop a mirrored event that a hist
        trigger of the same array still holds."""

    def _attach(self, ep: TraceEprobe) -> None:
        ft = self.ft
        tps = ft.engine.tracepoints
        tp, mine = tps.get(ep.attached), tps.get(ep.key)
        ev = ft.events.get(ep.attached) if ep.attached in ft.events else None
        if tp is None or mine is None or ev is None:
            return
        match = None
        if ep.filter_str:
            from fakedebugfs.engine.ftrace.filter import FilterError, compile_filter

            try:
                match = compile_filter(ev, ep.filter_str, ft.engine.kallsyms)
            except FilterError:
                match = None

        def probe(cpu, pid, ts, values):
            vals = ev.encode_values(values) if ev.encode_values else dict(zip(tp.args, values))
            comm = ft.engine.comms.get(pid, "")
            if match is not None:
                rec = {"common_pid": pid, "CPU": cpu, "cpu": cpu, "COMM": comm, "comm": comm}
                rec.update(vals)
                if not match(rec):
                    return
            out = hit_values(ep, ev, vals, cpu, pid, comm)
            mine.fire(cpu, pid, ts, tuple(out.get(a, 0) for a in mine.args))
        tp.register(probe)
        self.attached[ep.key] = (tp, probe)
        self._tell(ep.attached, True)


__all__ = ["EPROBE_EVENT_SYSTEM", "TraceEprobe", "create", "register", "hit_values",
           "find_and_get_event", "EprobeHits"]
