"""A batch of events paused between the tracers it is written to
(``Engine.pause_check``, the server's way to answer a waiting FUSE request
in the middle of a workload batch): the tracers not reached yet take it
before any other event is fired, each whole."""

from __future__ import annotations

from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.sources.workloads import make_workload


def counts(k: Kernel) -> tuple[int, int, int]:
    """Events each tracer holds: tracing/, ktrace, kmemtrace."""
    return (sum(k.ftrace.entries(c) for c in range(len(k.ftrace.buffers))),
            sum(b.entries for b in k.ktrace.buffers),
            k.kmemtrace.status()["records"])


def every_tracer_on() -> tuple[Kernel, object]:
    k = Kernel(cpus=2, buffer_size=4 << 20)
    for entry in list(k.ktrace.order):
        k.ktrace.set_event_enabled(entry.name, True)
    k.ktrace.set_enabled(True)
    for key in ("kmem:kmalloc", "kmem:kfree", "kmem:kmem_cache_alloc", "kmem:kmem_cache_free"):
        k.ftrace.set_event(key, True)
    k.ftrace.tracing_on = True
    k.kmemtrace.set_enabled(True)
    wl = make_workload("kmem", k, seed=1)
    wl.run(1000)
    return k, wl


def test_a_paused_batch_reaches_every_tracer_before_the_next_event():
    k, wl = every_tracer_on()
    ref, ref_wl = every_tracer_on()  # the same events, never paused
    before = counts(k)
    k.engine.pause_check = lambda: True  # a request waits all along
    fired = wl.run(500)
    assert fired == 500 and k.engine.paused()
    assert counts(k) == before  # paused before the first tracer: nobody has them yet
    k.engine.pause_check = None
    wl.run(300)  # the next batch: the paused one is written whole first
    assert not k.engine.paused()
    ref_wl.run(500)
    ref_wl.run(300)
    assert counts(k) == counts(ref) != before


def test_finishing_a_paused_batch_moves_on_by_a_tracer_at_least():
    k, wl = every_tracer_on()
    k.engine.pause_check = lambda: True
    wl.run(500)
    steps = 0
    while k.engine.paused():
        k.engine.finish(pausable=True)
        steps += 1
        assert steps <= 3  # three tracers: one each call at least
    k.engine.pause_check = None
    assert steps >= 1
    one = counts(k)
    k.engine.finish()  # nothing left: a no-op
    assert counts(k) == one


def test_a_batch_without_pause_check_is_written_whole():
    k, wl = every_tracer_on()
    ref, ref_wl = every_tracer_on()
    ref.engine.pause_check = lambda: True
    ref_wl.run(500)
    ref.engine.finish()
    wl.run(500)
    assert not k.engine.paused()
    assert counts(k) == counts(ref)
