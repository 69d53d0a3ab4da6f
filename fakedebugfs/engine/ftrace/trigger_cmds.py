"""The trigger commands a kernel registered (``register_trigger_cmds`` of
kernel/trace/trace_events_trigger.c), as the profile's kernel shows them.

Every kernel has ``traceon traceoff stacktrace enable_event
disable_event`` (:mod:`.trigger`); a kernel built with the snapshot
tracer adds ``snapshot`` after ``traceoff``, one with hist triggers adds
``enable_hist disable_hist hist`` at the end (6.12's list:
``traceon traceoff snapshot stacktrace enable_event disable_event
enable_hist disable_hist hist``).  A command is present when the profile's
captured tree has its files: a ``hist`` file in an event directory for
the hist commands, a top-level ``snapshot`` for ``snapshot``; the default
6.18 profile has neither and keeps its five.

:func:`write` is ``trigger_process_regex`` for those commands (the rest
go to :meth:`~.trigger.TraceTriggers.write_trigger`), :func:`available`
the ``# Available triggers:`` text, :func:`truncate` what opening a
trigger file with O_TRUNC removes (the commands with ``unreg_all``).
"""

from __future__ import annotations

import errno

from fakedebugfs.engine.ftrace import trace_events_hist, trace_snapshot
from fakedebugfs.engine.ftrace.ctype import TEXT_SPACES
from fakedebugfs.engine.ftrace.trigger import AVAILABLE, TRIGGER_TYPE, Trigger, parse

HIST_COMMANDS = ("enable_hist", "disable_hist", "hist")


def _modes(tr) -> dict:
    prof = tr.top.profile
    return prof.modes() if prof is not None else {}


def has_hist(tr) -> bool:
    """The profile's kernel has hist triggers: an event's ``hist`` file."""
    prof = tr.top.profile
    if prof is None:
        return False
    cached = prof.__dict__.get("_has_hist")
    if cached is None:
        cached = prof._has_hist = any(p.startswith("events/") and p.endswith("/hist")
                                      for p in _modes(tr))
    return cached


def has_snapshot(tr) -> bool:
    """The profile's kernel has the snapshot buffer: a ``snapshot`` file."""
    return "snapshot" in _modes(tr)


def has_synthetic(tr) -> bool:
    return "synthetic_events" in _modes(tr)


def commands(tr) -> list:
    """``trigger_commands`` in registration order."""
    names = ["traceon", "traceoff"]
    if has_snapshot(tr):
        names.append("snapshot")
    names += ["stacktrace", "enable_event", "disable_event"]
    if has_hist(tr):
        names += list(HIST_COMMANDS)
    return names


def available(tr) -> str:
    """``trigger_show``'s ``# Available triggers:`` text."""
    names = commands(tr)
    if len(names) == 5:
        return AVAILABLE
    return "# Available triggers:\n#" + "".join(" " + n for n in names) + "\n"


def show(tr, key: str) -> str:
    trig = tr.trigger_state(key)
    return "".join(t.line() for t in trig.list) if trig.list else available(tr)


class HistEnableTrigger(Trigger):
    """``enable_hist``/``disable_hist`` (``ETT_HIST_ENABLE``): pause or
    continue every hist trigger of the target event; otherwise an
    ``enable_event`` trigger (soft mode of the target, counts, filters)."""

    hist_enable = True

    def same(self, other) -> bool:
        return getattr(other, "hist_enable", False) and other.target == self.target

    def fire(self, tr, rec, cpu: int, pid: int, ts: int, vals=None) -> None:
        """``hist_enable_trigger`` with ``event_trigger_count``."""
        if not self.count:
            return
        if self.count != -1:
            self.count -= 1
        for t in trace_events_hist.hist_triggers(tr, self.target):
            t.paused = self.cmd == "disable_hist"


def write(tr, key: str, data: bytes) -> None:
    """One write to ``events/<sys>/<ev>/trigger`` (``event_trigger_regex_write``
    after the size checks)."""
    text = data.decode(errors="surrogateescape").strip(TEXT_SPACES)  # strim
    body = text.lstrip(TEXT_SPACES)
    cut = min((i for i, c in enumerate(body) if c in ": \t"), default=len(body))
    glob = body[:cut]
    command = glob[1:] if glob.startswith("!") else glob
    if command not in commands(tr) or command not in HIST_COMMANDS + ("snapshot",):
        tr.write_trigger(key, data)
        return
    rest = body[cut + 1:].lstrip(TEXT_SPACES) if cut < len(body) else None
    rest = rest or None
    if has_snapshot(tr):  # the snapshot() action's hooks on the trace array
        trace_snapshot.snapshot_of(tr)
    if command == "hist":
        trace_events_hist.hist_trigger_parse(tr, key, glob, rest)
    elif command == "snapshot":
        trace_snapshot.trigger_write(tr, key, text)
    else:
        _hist_enable(tr, key, text, command)


def _hist_enable(tr, key: str, text: str, command: str) -> None:
    """``event_enable_trigger_parse`` for ``enable_hist``/``disable_hist``."""
    shadow = ("!" if text.startswith("!") else "") + "enable_event" + \
        text[text.index(command) + len(command):]
    remove, parsed = parse(shadow, tr, key)
    new = HistEnableTrigger(command, parsed.count, parsed.filter_str, parsed.pred, parsed.target)
    trig = tr.trigger_state(key)
    old = next((t for t in trig.list if getattr(t, "hist_enable", False) and t.same(new)), None)
    if remove:
        if old is not None:
            trig.list.remove(old)
            tr._trigger_mode(key, False)
            tr.enable_disable(old.target, False, soft=True)
        return
    tr.enable_disable(new.target, True, soft=True)
    if old is not None:
        tr.enable_disable(new.target, False, soft=True)
        raise OSError(errno.EEXIST, "trigger exists")
    trig.list.insert(0, new)
    tr._trigger_mode(key, True)


def truncate(tr, key: str) -> None:
    """O_TRUNC of an event's ``trigger`` file."""
    if has_hist(tr):
        trace_events_hist.unreg_all(tr, key)


TRIGGER_TYPE.setdefault("enable_hist", "hist_enable")
TRIGGER_TYPE.setdefault("disable_hist", "hist_enable")

__all__ = ["HistEnableTrigger", "available", "commands", "has_hist", "has_snapshot",
           "has_synthetic", "show", "truncate", "write"]
