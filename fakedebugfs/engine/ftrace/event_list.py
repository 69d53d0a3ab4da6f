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
it last, as in the Debian 6.12 guest).  The boot's events keep the
registry's order here (an instance's are in fact in the kernel list's
reverse: the profile's ``ftrace_events``; not applied).
"""

from __future__ import annotations

from fakedebugfs.engine.ftrace.eventfs_calls import added_order


def mark_created(tr) -> None:
    """*tr* (a new instance) lists at its head only what is defined after now."""
    tr.events_mark = added_order(tr.top)[1]


def listed(tr, keys) -> list:
    """*keys* (the registry's order) in *tr*'s list order."""
    seqs, _last = added_order(tr.top)
    mark = getattr(tr, "events_mark", 0) if tr is not tr.top else 0
    head = sorted((k for k in keys if seqs.get(k, 0) > mark), key=seqs.__getitem__,
                  reverse=True)
    if not head:
        return list(keys)
    first = set(head)
    return head + [k for k in keys if k not in first]


__all__ = ["listed", "mark_created"]
