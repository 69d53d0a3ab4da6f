"""Hist triggers on the engine's batch path aggregate what one by one does.

The same kmem events go to two Debian 6.12 kernels with the same hist
triggers: one fires them one by one (``Tracepoint.fire``: the per-event
``event_hist_trigger``), the other hands them over at once
(``Engine.emit_batch``; ``engine/ftrace/hist_batch.py``, its grouping
compiled, ``hist_fast.pyx``, and with numpy).  The ``hist``
files (entries in the map's order, sums, ``Hits``, ``Entries``,
``Dropped``) and the ring buffers must be equal, with keys of every
modifier the batch path takes, a full pool (drops), u64 sums that wrap,
a paused trigger, ``nohitcount``, soft-disabled events (the trigger its
only user) and ``tracing_on`` 0; and triggers the batch path leaves to
the per-event path (a filter, a variable, ``name=``) keep the event there.
"""

from __future__ import annotations

import random

import pytest

from fakedebugfs.engine.core.batch import from_pending
from fakedebugfs.engine.core.engine import Pending
from fakedebugfs.engine.ftrace import hist_batch, trigger_cmds
from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES
from fakedebugfs.engine.ftrace.trace_events_hist import hist_show
from fakedebugfs.engine.kernel import Kernel
from support.kernel import ring_state

PROFILE = SHIPPED_PROFILES / "debian-6.12"
KMALLOC, KFREE = "kmem:kmalloc", "kmem:kfree"

BATCHED = {  # event -> triggers the batch path runs
    KMALLOC: ("hist:keys=call_site.sym:vals=bytes_req,bytes_alloc",
              "hist:keys=common_pid.execname,bytes_req.log2:vals=hitcount:"
              "sort=hitcount.descending",
              "hist:keys=ptr,bytes_req:vals=gfp_flags:size=128",
              "hist:keys=common_cpu,bytes_alloc.buckets=1024:vals=bytes_req.hex",
              "hist:keys=node,gfp_flags.hex:vals=bytes_req:nohitcount",
              "hist:keys=call_site.sym-offset,node:vals=bytes_alloc.percent,bytes_req.graph"),
    KFREE: ("hist:keys=ptr.hex:vals=call_site", "hist:keys=common_pid:vals=call_site:pause"),
}


def kmem_events(kernel, rng: random.Random, n: int) -> list:
    """*n* kmalloc and kfree events, 2 CPUs, a few tasks (pid 0 and a
    negative one among them), values at the edges of their fields."""
    tps = kernel.engine.tracepoints
    last = [1000, 1000]
    out = []
    for _ in range(n):
        cpu = rng.randrange(2)
        last[cpu] += rng.randint(200, 4000)
        pid = rng.choice((0, 1, 2001, 2002, 31999, -5))
        site = rng.choice((0xFFFFFFFF81000000, 0xFFFFFFFF81460C16, 0))
        ptr = rng.choice((0xFFFF888100000040, 0, 1, 0xFFFF888100000000 + 64 * rng.randrange(400)))
        if rng.random() < 0.6:
            values = (site, ptr, rng.choice((0, 1, 7, 8, 100, 4096, rng.randrange(1 << 20))),
                      rng.choice((8, 1 << 40, 4096)), rng.choice((0xCC0, 0x400CC0, 0xFFFFFFFF)),
                      rng.choice((-1, 0, 1)))
            out.append(Pending(tps[KMALLOC], cpu, pid, last[cpu], values))
        else:
            out.append(Pending(tps[KFREE], cpu, pid, last[cpu], (site, ptr)))
    return out


def make_kernel(enabled: bool, tracing_on: bool) -> Kernel:
    k = Kernel(cpus=2, buffer_size=64 << 10, clock="virtual", seed=1, profile=PROFILE)
    for pid, comm in ((1, "init"), (2001, "bash"), (2002, "cc1"), (31999, "make")):
        k.engine.set_comm(pid, comm)
    if enabled:
        k.ftrace.set_event(KMALLOC, True)
        k.ftrace.set_event(KFREE, True)
    for key in (KMALLOC, KFREE):
        for trig in BATCHED[key]:
            trigger_cmds.write(k.ftrace, key, trig.encode())
    k.ftrace.tracing_on = tracing_on
    return k


def seen(k: Kernel) -> tuple:
    ft = k.ftrace
    return (hist_show(ft, KMALLOC), hist_show(ft, KFREE), ft.written,
            [ring_state(b) for b in ft.buffers], ft.cmdlines.show())


@pytest.fixture(params=["compiled", "numpy"])
def grouping(request, monkeypatch):
    """The batch path's grouping by key: ``hist_fast.pyx`` where it is
    built (else skipped), and the numpy reference."""
    if request.param == "compiled":
        if hist_batch._fast() is None:
            pytest.skip("hist_fast not built (or FAKEDEBUGFS_PURE)")
    else:
        monkeypatch.setattr(hist_batch, "_fast", lambda: None)
    return request.param


@pytest.mark.parametrize("enabled,tracing_on", [(True, True), (False, True), (True, False)])
def test_batch_aggregates_what_one_by_one_does(enabled, tracing_on, grouping):
    rng = random.Random(33)
    one, many = make_kernel(enabled, tracing_on), make_kernel(enabled, tracing_on)
    for _ in range(4):  # several batches into the same maps
        events = kmem_events(one, rng, 700)
        one.engine._fire_each(events)
        batch = from_pending([Pending(many.engine.tracepoints[f"{e.tp.system}:{e.tp.name}"],
                                      *e[1:]) for e in events])
        assert many.engine._batch_owners(batch) is not None  # the batch path, really
        many.engine.emit_batch(batch)
    if grouping == "compiled":  # every trigger's programs are the compiled grouping's
        plans = [hist_batch.plan_of(t.hist_data) for key in (KMALLOC, KFREE)
                 for t in many.ftrace.triggers[key].list]
        assert len(plans) == 8 and all(p.flat is not None for p in plans)
    got, want = seen(many), seen(one)
    assert got[0] == want[0]
    assert got[1] == want[1]
    assert got[2:] == want[2:]
    text = want[0]
    small = text.split("size=128")[1].split("# event histogram")[0]  # the size=128 trigger's
    assert "Entries: 128" in small and "Dropped: 0" not in small  # its pool filled: drops
    assert "<idle>" in text and "bash" in text  # execname keys: the comm of the first task


@pytest.mark.parametrize("trigger", ["hist:keys=call_site:vals=bytes_req if bytes_req > 100",
                                     "hist:keys=common_pid:b=bytes_req",
                                     "hist:name=foo:keys=call_site",
                                     "traceoff"])
def test_other_triggers_keep_the_per_event_path(trigger):
    k = make_kernel(True, True)
    trigger_cmds.write(k.ftrace, KMALLOC, trigger.encode())
    events = kmem_events(k, random.Random(1), 200)
    assert k.engine._batch_owners(from_pending(events)) is None


def test_per_event_plan_aggregates_what_the_generic_path_does(monkeypatch):
    """One by one, a trigger with a plan takes ``hist_batch.hit_one``
    (filtered and named ones too); the generic ``event_hist_trigger``
    (every trigger without a plan) gives the same hist files."""
    extra = {KMALLOC: ("hist:keys=call_site:vals=bytes_req if bytes_req > 100",
                       "hist:name=foo:keys=call_site.sym"),
             KFREE: ("hist:name=foo:keys=call_site.sym",)}
    rng = random.Random(7)
    planned = make_kernel(True, True)
    generic = make_kernel(True, True)
    for k in (planned, generic):
        for key, triggers in extra.items():
            for trig in triggers:
                trigger_cmds.write(k.ftrace, key, trig.encode())
    events = kmem_events(planned, rng, 2500)
    planned.engine._fire_each(events)
    assert all(hist_batch.plan_of(t.hist_data) is not None
               for key in (KMALLOC, KFREE) for t in planned.ftrace.triggers[key].list)
    monkeypatch.setattr(hist_batch, "plan_of", lambda hd: None)
    generic.engine._fire_each([Pending(generic.engine.tracepoints[f"{e.tp.system}:{e.tp.name}"],
                                       *e[1:]) for e in events])
    assert seen(planned) == seen(generic)
