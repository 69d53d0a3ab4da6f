"""The order a trace array lists its events in: its ``tr->events`` list,
which ``available_events`` (the top level) and ``set_event`` walk
(trace_events.c).

At boot the top level's list is the profile's ``available_events`` order;
``trace_create_new_event`` then adds each event defined since (a kprobe, a
synthetic event, a module's) at the list's head, in every trace array that
exists, so the newest definition is listed first.  An instance made later
builds its list from the kernel's event list, the events defined before
it coming last, the oldest first (``kprobes:k2`` defined after ``mkdir
instances/ae`` is first in its ``set_event``, ``kprobes:k1`` defined before
it last, as in the Debian 6.12 guest).  An instance's boot events are in
the kernel list's reverse order (it adds each at its head while walking
that list: ``__trace_add_event_dirs``), where the profile records the
list (``ftrace_events``: Debian 6.12's ``sched_switch`` before the
modules' ``9p`` events, which the top level lists first); else the
registry's order.
"""

from __future__ import annotations

from fakedebugfs.engine.ftrace.eventfs_calls import added_events, added_order


def kernel_event_order(top) -> list:
    """The keys of ``ftrace_events``, the list's head first: the events
    added since boot (newest first), then the profile's recorded order."""
    events = top.events
    added = [k for k in reversed(added_events(top)) if k in events]
    later = set(added)
    boot = top.__dict__.get("_ftrace_events")
    if boot is None:
        prof = getattr(top, "profile", None)
        boot = top._ftrace_events = prof.ftrace_events() if prof is not None else []
    if not boot:
        boot = list(reversed(list(events)))
    return added + [k for k in boot if k in events and k not in later]


def mark_created(tr) -> None:
    """*tr* (a new instance) lists at its head only what is defined after
    now, the rest in the kernel list's reverse order."""
    top = tr.top
    tr.events_mark = seq = added_order(top)[1]
    if top.__dict__.get("_ftrace_events") or _recorded(top):
        kept = top.__dict__.get("_events_base")  # (shared by the instances of one state)
        if kept is None or kept[0] != (seq, len(top.events)):
            base = {k: i for i, k in enumerate(reversed(kernel_event_order(top)))}
            kept = top._events_base = ((seq, len(top.events)), base)
        tr.events_base = kept[1]


def _recorded(top) -> bool:
    prof = getattr(top, "profile", None)
    return bool(prof is not None and prof.ftrace_events())


def listed(tr, keys) -> list:
    """*keys* (the registry's order) in *tr*'s list order."""
    seqs, _last = added_order(tr.top)
    mark = getattr(tr, "events_mark", 0) if tr is not tr.top else 0
    head = sorted((k for k in keys if seqs.get(k, 0) > mark), key=seqs.__getitem__,
                  reverse=True)
    first = set(head)
    rest = [k for k in keys if k not in first]
    base = getattr(tr, "events_base", None) if tr is not tr.top else None
    if base is not None:
        last = len(base)
        rest.sort(key=lambda k: base.get(k, last))  # (stable: the others as they were)
    return head + rest


__all__ = ["kernel_event_order", "listed", "mark_created"]
