"""The ftrace tracer behind ``tracing/``: the top-level trace array
(``global_trace``), its event registry and its ``instances/``
(kernel/trace/trace.c, trace_events.c).

:class:`Ftrace` is a :class:`~.trace.TraceArray` (buffers, options,
events, triggers, text: see :mod:`.trace`) that also holds what the kernel
keeps once: the registry of every event type (``ftrace_events``, built from
the kernel profile of :class:`FtraceConfig`), ``saved_cmdlines``,
``printk_formats``, ``tracing_thresh``, and the instances, each another
trace array sharing the registry.  :meth:`Ftrace.add_event` is
``trace_add_event_call``: a new event type for every trace array;
:meth:`Ftrace.remove_event` is ``trace_remove_event_call``.  The
current tracer is ``nop`` or the 2009 kmemtrace ftrace plugin's
``kmemtrace`` (:mod:`.kmemtrace_plugin`).

Errors are raised as ``OSError`` with the errno the kernel returns; the
tree passes them on.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Callable, Union

from fakedebugfs.engine.core.errors import einval
from fakedebugfs.engine.ftrace.cmdlines import SavedCmdlines, SavedTgids
from fakedebugfs.engine.ftrace.control import DEFAULT_SAVED_CMDLINES
from fakedebugfs.engine.ftrace.events import FTRACE_EVENTS, KMEM_EVENTS, EventType, field_key
from fakedebugfs.engine.ftrace.events_sched import SCHED_EVENTS
from fakedebugfs.engine.ftrace.eventfs_calls import event_added
from fakedebugfs.engine.ftrace.instance_calls import instance_created
from fakedebugfs.engine.ftrace.kmemtrace_plugin import KmemTracer
from fakedebugfs.engine.ftrace.profile import Profile
from fakedebugfs.engine.core.kallsyms_profile import use_profile_kallsyms
from fakedebugfs.engine.ftrace.registry import install_registry, resolve_profile
from fakedebugfs.engine.ftrace.trace import (DEFAULT_BUFFER_KB, TRACE_CLOCKS, TRACE_OPTIONS,
    TraceArray)
from fakedebugfs.engine.ftrace.trigger import KERNEL_STACK

BUILTIN_EVENTS = KMEM_EVENTS + SCHED_EVENTS + FTRACE_EVENTS  # the fake's own codecs


@dataclass(frozen=True)
class FtraceConfig:
    """How ``tracing/`` boots: *profile* is the kernel whose events it
    serves (a profile directory or a :class:`~.profile.Profile`; None: the
    shipped 6.18 one; False: only the fake's own events); *buffer_kb* the
    top level's ``buffer_size_kb``; *kmemtrace_tracer* registers the 2009
    kmemtrace plugin (:mod:`.kmemtrace_plugin`), first in
    ``available_tracers``, as 2.6.29-2.6.34 kernels did: no captured
    profile lists it, so it is off unless asked for."""

    profile: Union[None, bool, str, os.PathLike, Profile] = None
    buffer_kb: int = DEFAULT_BUFFER_KB
    kmemtrace_tracer: bool = False


class Ftrace(TraceArray):
    """The top-level ``tracing/`` trace array (``global_trace``), holder of
    the event registry and of the ``instances/`` trace arrays
    (``trace_array_create``/``__remove_instance``)."""

    def __init__(self, engine, config: FtraceConfig = FtraceConfig()):
        self.config = config
        # every event of the kernel profile, built on first use (.registry)
        self.profile = resolve_profile(config.profile)
        use_profile_kallsyms(engine, self.profile)  # a profile's own symbols, read when used
        events, by_id = install_registry(engine, self.profile, BUILTIN_EVENTS)
        super().__init__(engine, events, by_id, buffer_kb=config.buffer_kb)
        if config.kmemtrace_tracer:  # register_tracer(&kmem_tracer), before the others
            self.tracers = {"kmemtrace": KmemTracer(), **self.tracers}
        self.instances: dict[str, TraceArray] = {}
        self.instances_removed = 0  # (how many went: a heap trim follows them)
        # saved_cmdlines (global: instances record into it too)
        self.cmdlines = SavedCmdlines(engine.comms, DEFAULT_SAVED_CMDLINES)
        self.tgids = SavedTgids()  # saved_tgids (record-tgid)
        self.printk_formats = ""  # trace_printk formats (a replayed recording's)
        self.thresh_ns = 0  # tracing_thresh
        self.dyn_events = None  # dynamic_events' list (.trace_dynevent), made when first used
        if KERNEL_STACK.id not in self.by_id:  # the stacktrace trigger's entries
            self.events[KERNEL_STACK.key] = KERNEL_STACK
            self.by_id[KERNEL_STACK.id] = KERNEL_STACK

    def arrays(self) -> list:
        return [self, *self.instances.values()]

    # --- event types (trace_events.c) --------------------------------------------------

    def add_event(self, ev: EventType) -> None:
        """``trace_add_event_call``: *ev* joins the event registry
        (``ftrace_events``) and, as ``__add_event_to_tracers`` does, every
        trace array: its probe there and its ``events/`` directory
        (``on_event_added``).  Instances made later share the registry and
        see it too.  The engine gets a tracepoint for it when it has none
        (arguments: the event's field names).  EEXIST when its name or id
        is taken; EINVAL for an ``ftrace`` entry (the tracer's own)."""
        if ev.system == "ftrace":
            raise einval(f"{ev.key}: system 'ftrace' holds the tracer's own entries")
        if ev.key in self.events or ev.id in self.by_id:
            raise OSError(errno.EEXIST, f"event {ev.key} (id {ev.id}) exists")
        if ev.key not in self.engine.tracepoints:
            self.engine.define(ev.system, ev.name, tuple(field_key(f[1]) for f in ev.fields))
        self.events[ev.key] = ev
        self.by_id[ev.id] = ev
        for tr in self.arrays():
            tr.probes[ev.key] = tr.make_probe(ev)
            for callback in tr.on_event_added:
                callback(ev)
        event_added(self, ev)  # its directories' eventfs_create_dir calls

    def remove_event(self, key: str) -> None:
        """``trace_remove_event_call``: the event *key* leaves every trace
        array (its probe, filter, triggers, soft-mode counts; its
        ``events/`` directory through ``on_event_removed``), the registry
        and the engine.  ENOENT for no such event; EBUSY while a trace
        array has it enabled (``probe_remove_event_call``), nothing
        changed."""
        ev = self.events.get(key)
        if ev is None:
            raise OSError(errno.ENOENT, key)
        if any(key in tr.enabled or tr.soft_mode.get(key) for tr in self.arrays()):
            raise OSError(errno.EBUSY, f"event {key} is in use")
        for tr in self.arrays():
            for table in (tr.probes, tr.filters, tr.filter_preds, tr.triggers, tr.soft_mode,
                          tr.tm_ref):
                table.pop(key, None)
            tr.soft_disabled.discard(key)
        if ev.id in self.by_id:
            del self.by_id[ev.id]
        del self.events[key]
        self.engine.remove(key)
        for tr in self.arrays():
            for callback in tr.on_event_removed:
                callback(key)

    def define_event(self, system: str, name: str, fields, print_fmt=None) -> EventType:
        """A new event from C field declarations (:func:`.define.define_event`)."""
        from fakedebugfs.engine.ftrace.define import define_event

        return define_event(self, system, name, fields, print_fmt)

    def retype_event(self, ev: EventType, change: Callable[[], None]) -> None:
        """*ev* changed in place by *change()* (a replay's recording gives
        it another layout): every trace array drops its filter and probe of
        it, made anew; where it was enabled it is disabled around the change
        and enabled again."""
        on = [tr for tr in self.arrays() if ev.key in tr.enabled]
        for tr in on:
            tr.set_event(ev.key, False)
        change()
        for tr in self.arrays():
            tr.filters.pop(ev.key, None)
            tr.filter_preds.pop(ev.key, None)
            tr.probes[ev.key] = tr.make_probe(ev)
        for tr in on:
            tr.set_event(ev.key, True)

    # --- instances ----------------------------------------------------------------------

    def new_instance(self, name: str) -> TraceArray:
        """``trace_array_create``: EEXIST for a name taken.  Its directories'
        tracefs and eventfs calls run (:mod:`.instance_calls`)."""
        if name in self.instances:
            raise OSError(errno.EEXIST, name)
        tr = TraceArray(self.engine, self.events, self.by_id, top=self, name=name)
        self.instances[name] = tr
        instance_created(self, tr)
        return tr

    def remove_instance(self, name: str) -> None:
        """``__remove_instance``: EBUSY while one of its files is open
        (``tr->ref``); its events are disabled and its buffers freed."""
        tr = self.instances.get(name)
        if tr is None:
            raise OSError(errno.ENOENT, name)
        if tr.busy:
            raise OSError(errno.EBUSY, name)
        tr.clear_triggers()
        if tr.options.get("event-fork"):
            tr.follow_fork(False)
        for key in list(tr.enabled):
            tr.set_event(key, False)
        for key in list(tr.probes):
            tp = self.engine.tracepoints.get(key)
            if tp is not None:
                tp.unregister(tr.probes[key])
        del self.instances[name]
        self.instances_removed += 1


__all__ = ["Ftrace", "FtraceConfig", "TraceArray", "DEFAULT_BUFFER_KB", "TRACE_CLOCKS",
           "TRACE_OPTIONS"]
