"""The tracefs calls an instance's ``mkdir`` makes (trace.c's
``trace_array_create_dir``), run as calls of the profile's kernel so that
what hooks functions sees them, as :mod:`.eventfs_calls` does for an event
definition.

In the Debian 6.12 guest a ``mkdir instances/X`` calls, in this order:

* ``tracefs_create_dir("X", ...)`` (from ``trace_array_create_dir``): the
  instance's name is an argument of this function only;
* ``eventfs_create_events_dir("events", parent, entries, 3, tr)`` (from
  ``create_event_toplevel_files``; 3: ``enable``, ``header_page``,
  ``header_event``, the files of ``events/`` in the profile's ``modes``);
* ``__trace_add_event_dirs``: for each event of the kernel's event list
  (``ftrace_events``), ``eventfs_create_dir(system)`` when the instance
  has no directory of its system yet, then ``eventfs_create_dir(event)``,
  with the sizes :mod:`.eventfs_calls` gives (0 for the ``ftrace``
  system, which has no files);
* ``tracefs_create_dir("options")`` (``trace_options_init_dentry``), then
  ``"per_cpu"`` and one ``"cpuN"`` per CPU (``init_tracer_tracefs``).

The list's order is no file's: the profile's ``ftrace_events`` (recorded
in the guest, :mod:`fakedebugfs.oracle.ftrace_events`) gives the boot's
events, the events defined since (the fake's ``add_event``) come first,
the newest first, as the kernel adds each at the list's head.  Without
that file the boot's events are taken in the registry's order reversed
(``available_events`` lists the boot's events in the opposite order of the
kernel's list).  1,639 ``eventfs_create_dir`` calls for Debian 6.12 with
one kprobe defined, as in the guest.

Nothing is run unless a function hook is registered; each call is a
depth-0 call of one tree (its caller as the function tracer shows it in
the guest, ``sym-offset``), 4 us long (:data:`.eventfs_calls.DURATION`),
one every 6 us (the guest's median start to start).
"""

from __future__ import annotations

from fakedebugfs.engine.ftrace.event_list import kernel_event_order, mark_created
from fakedebugfs.engine.ftrace.eventfs_calls import (CALLER_EVENT, CALLER_SYSTEM, DURATION,
    FUNC, OwnTree, eventfs_sizes, kernel_string_address)

CREATE_DIR = "tracefs_create_dir"
EVENTS_DIR = "eventfs_create_events_dir"
STEP = 6000  # ns from one call's start to the next's
# the callers the function tracer shows in the guest (sym-offset)
CALLER_INSTANCE = "trace_array_create_dir+0x17"
CALLER_EVENTS_DIR = "create_event_toplevel_files+0x4f"
CALLER_OPTIONS = "trace_options_init_dentry.part.0+0x2f"
CALLER_PER_CPU = "init_tracer_tracefs+0x6ac"
CALLER_CPU = "init_tracer_tracefs+0x4ab"
NO_FILES = "ftrace"  # event_subsystem_dir: "ftrace only has directories no files"


def _node(calls: list, known: list, func: str, caller: str, name: str, size=None) -> None:
    addr = kernel_string_address(name)
    params, names = {0: addr}, {"name": addr}
    if size is not None:
        params[3] = names["size"] = size
    calls.append((0, len(calls) * STEP, DURATION, func, caller))
    known.append((params, names, {addr: name}))


def instance_created(top, tr) -> None:
    """The calls of ``mkdir instances/<tr.name>`` (see the module's text),
    while some function hook is registered (nothing is run otherwise)."""
    mark_created(tr)  # (its event list: .event_list)
    fn = top.__dict__.get("function_trace")
    if fn is None or not fn.calls.users:
        return
    ev_n, sys_n, top_n = eventfs_sizes(top)
    calls: list = []
    known: list = []
    _node(calls, known, CREATE_DIR, CALLER_INSTANCE, tr.name)
    _node(calls, known, EVENTS_DIR, CALLER_EVENTS_DIR, "events", top_n)
    systems: set = set()
    for key in kernel_event_order(top):
        system, _, name = key.partition(":")
        if system not in systems:
            systems.add(system)
            _node(calls, known, FUNC, CALLER_SYSTEM, system, 0 if system == NO_FILES else sys_n)
        _node(calls, known, FUNC, CALLER_EVENT, name, ev_n)
    _node(calls, known, CREATE_DIR, CALLER_OPTIONS, "options")
    _node(calls, known, CREATE_DIR, CALLER_PER_CPU, "per_cpu")
    for cpu in range(top.engine.nr_cpus):
        _node(calls, known, CREATE_DIR, CALLER_CPU, f"cpu{cpu}")
    pid, cpu = getattr(top.engine, "current_task", None) or (0, 0)
    fn.calls.run(OwnTree(calls, known), cpu, pid, top.engine.clock.now())


__all__ = ["instance_created"]
