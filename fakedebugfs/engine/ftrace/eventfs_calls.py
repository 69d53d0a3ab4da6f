"""The eventfs calls the fake's own tracefs makes when an event type is
added (trace_events.c's ``__trace_add_new_event``: ``event_subsystem_dir``
for a system no event of the trace array had, then ``event_create_dir``;
each calls fs/tracefs/event_inode.c's ``eventfs_create_dir``), run as
calls of the profile's kernel so that what hooks functions sees them: a
kprobe or fprobe on ``eventfs_create_dir`` fires, the function tracers
record the call.

``eventfs_create_dir(const char *name, struct eventfs_inode *parent,
const struct eventfs_entry *entries, int size, void *data)``: what the
fake knows of a call is *name*, a string it places in kernel memory (the
``kstrdup``'d event or system name the kernel passes), and *size*, the
number of files the directory has on the profile's kernel (its
``events/<system>/<event>/`` and ``events/<system>/`` files in the
profile's ``modes``: 6 and 2 on Debian 6.12, as ``%cx`` shows in its
guest).  ``parent``, ``entries`` and ``data`` are the kernel's pointers,
unknown here (0).  So ``p eventfs_create_dir +0(%di):string`` shows
``"newgrp"`` then ``"ev1"`` for ``p:newgrp/ev1 ...``, as the guest does.

An instance's ``mkdir`` calls it again for every event's directory
(:mod:`.instance_calls`).
"""

from __future__ import annotations

import zlib

from fakedebugfs.engine.ftrace.calltree import Tree

FUNC = "eventfs_create_dir"
KERNEL_STRINGS = 0xFF11000005000000  # where the fake places kernel strings (direct map)
# its duration, as function_graph shows a warm one in the Debian 6.12
# guest (4.006 us; 27 us, 366 us for a first); its callers (the function
# tracer's parent, with sym-offset): event_subsystem_dir is inlined in
# event_create_dir, which calls it for a system at +0x1c4, an event at +0xc4
DURATION = 4006
CALLER_SYSTEM, CALLER_EVENT = "event_create_dir+0x1c4", "event_create_dir+0xc4"


class OwnTree(Tree):
    """A tree of calls the fake's own code makes, with what each call's
    parameters hold: ``known`` per node, as :func:`.probe_fetch.call_params`
    gives it for a recorded tree."""

    __slots__ = ("known",)

    def __init__(self, nodes, known: list):
        super().__init__(nodes)
        self.known = known


def kernel_string_address(text: str) -> int:
    """Where the fake says a kernel string it knows lies (deterministic,
    8-byte aligned as ``kmalloc``'s objects are)."""
    return KERNEL_STRINGS + (zlib.crc32(text.encode(errors="surrogateescape")) & 0xFFFFF8)


def eventfs_sizes(top) -> tuple:
    """``(event dir size, system dir size, events/ size)``: the files of an
    event's, of a system's and of ``events/``'s own directory in the
    profile's ``modes``, None where it lists none."""
    prof = getattr(top, "profile", None)
    cached = top.__dict__.get("_eventfs_sizes")
    if cached is not None:
        return cached
    ev_n = sys_n = top_n = None
    if prof is not None:
        modes = prof.modes()
        dirs: dict = {}
        for path, (_mode, kind) in modes.items():
            parts = path.split("/")
            if parts[0] == "events" and kind == "f" and len(parts) in (2, 3, 4):
                dirs.setdefault("/".join(parts[:-1]), 0)
                dirs["/".join(parts[:-1])] += 1
        events = [n for d, n in dirs.items() if d.count("/") == 2]
        systems = [n for d, n in dirs.items() if d.count("/") == 1]
        ev_n = max(events) if events else None
        sys_n = max(systems) if systems else None
        top_n = dirs.get("events")
    top._eventfs_sizes = (ev_n, sys_n, top_n)
    return top._eventfs_sizes


def added_events(top) -> list:
    """The keys of the events added since boot (``add_event``), oldest
    first (a key added again counts from its last addition); some may be
    gone since."""
    return list(top.__dict__.get("_eventfs_added", ()))


def added_order(top) -> tuple:
    """``({key: its addition's number}, the last number)`` of the events
    added since boot (numbers from 1; some keys may be gone since)."""
    return top.__dict__.get("_eventfs_added", {}), top.__dict__.get("_eventfs_seq", 0)


def _call(fn, top, name: str, size, caller: str) -> None:
    addr = kernel_string_address(name)
    params, names = {0: addr}, {"name": addr}
    if size is not None:
        params[3] = names["size"] = size
    tree = OwnTree([(0, 0, DURATION, FUNC, caller)], [(params, names, {addr: name})])
    pid, cpu = getattr(top.engine, "current_task", None) or (0, 0)
    fn.calls.run(tree, cpu, pid, top.engine.clock.now())


def event_added(top, ev) -> None:
    """``eventfs_create_dir`` for *ev*'s directory in each trace array
    (and its system's first, when no other event has it), while some function
    hook is registered (nothing is run otherwise)."""
    added = top.__dict__.setdefault("_eventfs_added", {})
    added.pop(ev.key, None)
    top._eventfs_seq = top.__dict__.get("_eventfs_seq", 0) + 1
    added[ev.key] = top._eventfs_seq
    fn = top.__dict__.get("function_trace")
    if fn is None or not fn.calls.users:
        return
    ev_n, sys_n, _top_n = eventfs_sizes(top)
    new_system = not any(e.system == ev.system for k, e in top.events.items() if k != ev.key)
    for _tr in top.arrays():
        if new_system:
            _call(fn, top, ev.system, sys_n, CALLER_SYSTEM)
        _call(fn, top, ev.name, ev_n, CALLER_EVENT)


__all__ = ["OwnTree", "added_events", "added_order", "event_added", "eventfs_sizes", "kernel_string_address"]
