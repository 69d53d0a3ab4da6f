"""``register_tracer`` of the tracers a profile's kernel has beyond ``nop``
and the function tracers (kernel/trace/trace.c): ``blk``
(:mod:`.trace_blk`) and ``mmiotrace`` (:mod:`.trace_mmiotrace`), each
present when the profile's ``available_tracers`` names it, in its order.
The function tracers join later with their files
(:func:`.trace_functions.add_tracers`); the fake's own ``kmemtrace``
stays first.  Neither tracer allows instances, so only the top level gets
them.
"""

from __future__ import annotations

from fakedebugfs.engine.ftrace.trace_blk import BlkTracer, blk_flag_names
from fakedebugfs.engine.ftrace.trace_mmiotrace import MmioTracer, pci_devices


def add_profile_tracers(tr, profile) -> None:
    """The top-level trace array *tr* gets the tracers of this module that
    *profile*'s ``available_tracers`` lists, placed in its order among the
    tracers *tr* has."""
    if profile is None:
        return
    names = (profile.files.get("available_tracers") or "").split()
    made = {"blk": lambda: BlkTracer(tr, blk_flag_names(profile)),
            "mmiotrace": lambda: MmioTracer(pci_devices(profile))}
    place_tracers(tr, names, made)


def place_tracers(tr, names, made) -> None:
    """``register_tracer`` of each tracer of *names* (a profile's
    ``available_tracers``, in its order) that *made* can make (name ->
    maker) and *tr* lacks: made and put into *tr*'s table in the
    profile's order among the tracers it has."""
    new = {n: made[n]() for n in names if n in made and n not in tr.tracers}
    if not new:
        return
    order = [n for n in names if n in new or n in tr.tracers]
    rest = [n for n in tr.tracers if n not in order]
    table = {**tr.tracers, **new}
    tr.tracers = {n: table[n] for n in rest + order}


__all__ = ["add_profile_tracers", "place_tracers"]
