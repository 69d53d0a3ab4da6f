"""Event triggers (kernel/trace/trace_events_trigger.c, 6.18).

``events/<sys>/<ev>/trigger`` takes ``[!]cmd[:params] [if FILTER]`` for the
commands this kernel offers without snapshot and hist support:
``traceon``, ``traceoff``, ``stacktrace``, ``enable_event:sys:ev``,
``disable_event:sys:ev``, each with an optional ``:N`` count.  Parsing
follows ``trigger_process_regex``/``event_trigger_parse``/
``event_enable_trigger_parse``: the command ends at ``:``, space or tab;
a parameter starting with a digit is the count (``kstrtoul`` base 0; a
trailing ``:...`` ignored), anything else must be ``if FILTER``.
``traceon``/``traceoff`` share a trigger type, as do ``enable_event``/
``disable_event`` on one target event: a second one is EEXIST, and ``!``
removes whichever of the type is there (absent: still success).  The file
lists the newest trigger first (``list_add_rcu``).

Firing (``event_triggers_call``, :func:`trigger_probe`): triggers without
a filter of an event whose triggers need no record run before the event is
recorded; with a filter or a post trigger (traceoff, stacktrace) every
trigger runs against the record, and post triggers after it is committed.
:class:`TraceTriggers` is a trace array's side: its ``trigger`` files.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Callable, Optional

from fakedebugfs.engine.core.errors import kernel_error
from fakedebugfs.engine.ftrace.events import EventType
from fakedebugfs.engine.ftrace.ctype import TEXT_SPACES
from fakedebugfs.engine.ftrace.kstrto import kstrtoull

AVAILABLE = "# Available triggers:\n# traceon traceoff stacktrace enable_event disable_event\n"
COMMANDS = ("traceon", "traceoff", "stacktrace", "enable_event", "disable_event")
TRIGGER_TYPE = {"traceon": "onoff", "traceoff": "onoff", "stacktrace": "stack",
                "enable_event": "enable", "disable_event": "enable"}
POST = ("traceoff", "stacktrace")  # EVENT_CMD_FL_POST_TRIGGER
ULONG = 1 << 64


def _show_stack(r, out) -> str:
    """``trace_stack_print``: ``<stack trace>`` then `` => caller`` lines."""
    callers = [int.from_bytes(r["caller"][i:i + 8], "little") for i in range(0, 64, 8)]
    return "<stack trace>" + "".join(f"\n => {out.sym(c)}" for c in callers if c)


# ftrace/kernel_stack as 6.18 x86_64 shows its format (FTRACE_STACK_ENTRIES 8)
KERNEL_STACK = EventType("ftrace", "kernel_stack", 4, (
    ("int", "size", 8, 4, 1), ("unsigned long", "caller[8]", 16, 64, 0)),
    '"\\t=> %ps\\n\\t=> %ps\\n\\t=> %ps\\n" "\\t=> %ps\\n\\t=> %ps\\n\\t=> %ps\\n" '
    '"\\t=> %ps\\n\\t=> %ps\\n", (void *)REC->caller[0], (void *)REC->caller[1], '
    '(void *)REC->caller[2], (void *)REC->caller[3], (void *)REC->caller[4], '
    '(void *)REC->caller[5], (void *)REC->caller[6], (void *)REC->caller[7]', _show_stack)


_err = kernel_error


@dataclass
class Trigger:
    """``struct event_trigger_data``."""
    cmd: str
    count: int = -1  # -1: unlimited (stored as the kernel's long)
    filter_str: Optional[str] = None
    pred: Optional[Callable] = None
    target: Optional[str] = None  # enable/disable_event: "sys:ev"

    @property
    def post(self) -> bool:
        return self.cmd in POST

    def line(self) -> str:
        """``event_trigger_print``/``event_enable_trigger_print``."""
        head = self.cmd if self.target is None else f"{self.cmd}:{self.target}"
        count = ":unlimited" if self.count == -1 else f":count={self.count}"
        tail = f" if {self.filter_str}\n" if self.filter_str is not None else "\n"
        return head + count + tail

    def same(self, other: "Trigger") -> bool:
        return TRIGGER_TYPE[self.cmd] == TRIGGER_TYPE[other.cmd] and self.target == other.target


def kstrtoul0(text: str) -> int:
    """``kstrtoul(s, 0, &v)`` of a count."""
    return kstrtoull(text.encode(errors="surrogateescape"), 0)


def _as_long(value: int) -> int:
    return value - ULONG if value >= 1 << 63 else value


def parse(text: str, tr, key: str) -> tuple[bool, Trigger]:
    """One write to a ``trigger`` file (already ``strim``-ed): ``(remove,
    trigger)``; OSError(EINVAL/ERANGE) when refused.  *tr* resolves the
    target event and compiles filters (``tr.compile_trigger_filter``)."""
    remove = text.startswith("!")
    body = text[1:] if remove else text
    cut = min((i for i, c in enumerate(body) if c in ": \t"), default=len(body))
    cmd, rest = body[:cut], (body[cut + 1:] if cut < len(body) else None)
    if rest is not None:
        rest = rest.lstrip(TEXT_SPACES)  # skip_spaces (lib/ctype)
        rest = rest or None
    if cmd not in COMMANDS:
        raise _err(errno.EINVAL)
    enable = TRIGGER_TYPE[cmd] == "enable"
    param, filt = _separate_filter(rest, enable)
    trig = Trigger(cmd)
    if enable:  # system = strsep(&param, ":"); event = strsep(&param, ":")
        system, sep, param = param.partition(":")
        if not sep:
            raise _err(errno.EINVAL)
        event, sep, param = param.partition(":")
        target = f"{system}:{event}"
        if target not in tr.event_keys():
            raise _err(errno.EINVAL)
        trig.target = target
        param = param if sep else None
    if remove:
        return True, trig
    if param is not None:  # event_trigger_parse_num
        number = param.split(":", 1)[0]
        if not number:
            raise _err(errno.EINVAL)
        trig.count = _as_long(kstrtoul0(number))
    if filt is not None:  # set_trigger_filter: "if" then the filter
        cut = min((i for i, c in enumerate(filt) if c in " \t"), default=None)
        if cut is None or filt[:cut] != "if":
            raise _err(errno.EINVAL)
        trig.filter_str = filt[cut + 1:]
        trig.pred = tr.compile_trigger_filter(key, trig.filter_str)
    return False, trig


def _separate_filter(rest: Optional[str], param_required: bool):
    """``event_trigger_separate_filter``: (param, filter)."""
    if rest is None:
        if param_required:
            raise _err(errno.EINVAL)
        return None, None
    if not param_required and not rest[0].isdigit():
        return None, rest
    cut = min((i for i, c in enumerate(rest) if c in " \t"), default=None)
    if cut is None:
        return rest, None
    filt = rest[cut + 1:].lstrip(TEXT_SPACES)
    return rest[:cut], (filt or None)


class EventTriggers:
    """The trigger list of one event file of one trace array."""

    def __init__(self):
        self.list: list[Trigger] = []

    @property
    def cond(self) -> bool:
        """``EVENT_FILE_FL_TRIGGER_COND``: a filter, a post trigger or one
        that needs the record (``EVENT_CMD_FL_NEEDS_REC``: hist)."""
        return any(t.pred is not None or t.post or getattr(t, "needs_rec", False)
                   for t in self.list)

    def show(self) -> str:
        return "".join(t.line() for t in self.list) if self.list else AVAILABLE


def event_triggers_call(tr, trig: EventTriggers, rec: dict, cpu: int, pid: int,
                        ts: int, vals: Optional[dict] = None) -> list:
    """``event_triggers_call`` with the record: each trigger whose filter
    matches runs now, except post triggers, which are returned to run
    after the commit (``event_triggers_post_call``)."""
    post = []
    for t in list(trig.list):
        if t.pred is not None and not t.pred(rec):
            continue
        if t.post:
            post.append(t)
        elif getattr(t, "fire", None) is not None:  # commands of their own modules
            t.fire(tr, rec, cpu, pid, ts, vals)
        else:
            run_trigger(tr, t, cpu, pid, ts)
    return post


def trigger_probe(tr, ev: EventType, trig: EventTriggers, cpu: int, pid: int, ts: int,
                  values) -> None:
    """An event with triggers fired into *tr* (``trace_trigger_soft_disabled``
    + ``event_trigger_unlock_commit``): without TRIGGER_COND every trigger
    runs first, unconditionally; with it they run against the record (own
    filters), post triggers after the commit.  The event is recorded unless
    soft-disabled, filtered out or its task left out by the pid lists."""
    key = ev.key
    if not trig.cond:
        for t in list(trig.list):
            run_trigger(tr, t, cpu, pid, ts)
        if key in tr.soft_disabled or tr.pid_filtered(key, pid, values):
            return
        match = tr.filter_preds.get(key)
        vals, rec = tr.event_record(ev, cpu, pid, values)
        if match is None or match(rec):
            tr.commit(cpu, ts, ev.pack(pid, vals))
        return
    if tr.pid_filtered(key, pid, values):
        return
    vals, rec = tr.event_record(ev, cpu, pid, values)
    post = event_triggers_call(tr, trig, rec, cpu, pid, ts, vals)
    match = tr.filter_preds.get(key)
    if key not in tr.soft_disabled and (match is None or match(rec)):
        tr.commit(cpu, ts, ev.pack(pid, vals))
    for t in post:
        run_trigger(tr, t, cpu, pid, ts)


def marker_triggers(tr, cpu: int, pid: int, ts: int, text: bytes) -> list:
    """``tracing_mark_write``'s ``event_triggers_call`` on the
    ``ftrace/print`` triggers: those whose filter matches the entry run
    now, post triggers (traceoff, stacktrace) are returned to run after
    the commit."""
    trig = tr.triggers.get("ftrace:print")
    if trig is None or not trig.list:
        return []
    comm = tr.engine.comms.get(pid, "")
    rec = dict(ip=0, buf=text, common_pid=pid, common_preempt_count=tr.marker_preempt_count(),
               CPU=cpu, cpu=cpu, COMM=comm, comm=comm)
    return event_triggers_call(tr, trig, rec, cpu, pid, ts)


class TraceTriggers:
    """The trigger files of a trace array's events
    (``trace_events_trigger.c``: ``event_trigger_regex_write``,
    ``trace_event_trigger_enable_disable``, ``clear_event_triggers``), mixed
    into :class:`~.trace.TraceArray`.  A trigger's ``enable_event`` and the
    triggering event itself hold their events in soft mode
    (:meth:`~.trace_events.TraceEvents.enable_disable`)."""

    triggers: dict  # key -> EventTriggers
    tm_ref: dict  # key -> triggers on it (``tm_ref``)

    def _init_triggers(self) -> None:
        self.triggers = {}
        self.tm_ref = {}

    def trigger_state(self, key: str) -> EventTriggers:
        """The :class:`EventTriggers` of *key* (made on demand)."""
        trig = self.triggers.get(key)
        if trig is None:
            trig = self.triggers[key] = EventTriggers()
        return trig

    def compile_trigger_filter(self, key: str, text: str):
        """A trigger's ``if`` filter, for the triggering event."""
        return self.compile_event_filter(key, text)

    def write_trigger(self, key: str, data: bytes) -> None:
        """``event_trigger_regex_write`` (after the size checks): one
        command, added or removed."""
        text = data.decode(errors="surrogateescape").strip(TEXT_SPACES)  # strim
        remove, new = parse(text, self, key)
        trig = self.trigger_state(key)
        old = next((t for t in trig.list if t.same(new)), None)
        if remove:
            if old is not None:
                trig.list.remove(old)
                self._trigger_mode(key, False)
                if old.target is not None:
                    self.enable_disable(old.target, False, soft=True)
            return
        if new.target is not None:
            self.enable_disable(new.target, True, soft=True)
        if old is not None:
            if new.target is not None:
                self.enable_disable(new.target, False, soft=True)
            raise OSError(errno.EEXIST, "trigger exists")
        trig.list.insert(0, new)
        self._trigger_mode(key, True)

    def _trigger_mode(self, key: str, on: bool) -> None:
        """``trace_event_trigger_enable_disable``: the triggering event is
        soft-enabled while it has triggers."""
        refs = self.tm_ref.get(key, 0) + (1 if on else -1)
        self.tm_ref[key] = refs
        if key not in self.engine.tracepoints:  # ftrace:print (trace_marker_file)
            return
        if (on and refs == 1) or (not on and refs == 0):
            self.enable_disable(key, on, soft=True)

    def clear_triggers(self) -> None:
        """``clear_event_triggers`` (instance removal)."""
        for key, trig in list(self.triggers.items()):
            for t in list(trig.list):
                if t not in trig.list:  # a hist trigger's free took it already
                    continue
                trig.list.remove(t)
                self._trigger_mode(key, False)
                if t.target is not None:
                    self.enable_disable(t.target, False, soft=True)
                free = getattr(t, "free", None)
                if free is not None:  # the command's ops->free (hist: its data)
                    free(self, key)


def run_trigger(tr, trig: Trigger, cpu: int, pid: int, ts: int) -> None:
    """The trigger's ``ops->trigger`` with its count rule."""
    fire = getattr(trig, "fire", None)
    if fire is not None:  # commands of their own modules (.trigger_cmds)
        fire(tr, None, cpu, pid, ts, None)
    elif trig.cmd in ("traceon", "traceoff"):
        want = trig.cmd == "traceon"
        if tr.tracing_on == want or not trig.count:
            return
        if trig.count != -1:
            trig.count -= 1
        tr.tracing_on = want
    elif trig.cmd == "stacktrace":
        if not trig.count:
            return
        if trig.count != -1:
            trig.count -= 1
        tr.stack_entry(cpu, pid, ts)
    else:
        want = trig.cmd == "enable_event"
        if not trig.count or want == (trig.target not in tr.soft_disabled):
            return
        if trig.count != -1:
            trig.count -= 1
        if want:
            tr.soft_disabled.discard(trig.target)
        else:
            tr.soft_disabled.add(trig.target)


__all__ = ["KERNEL_STACK", "AVAILABLE", "EventTriggers", "TraceTriggers", "Trigger", "event_triggers_call",
           "kstrtoul0", "marker_triggers", "parse", "run_trigger", "trigger_probe"]
