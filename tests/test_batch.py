"""The engine's batch path writes what the per-event path writes.

The same events go to two kernels: one fires them one by one
(``Tracepoint.fire``, the path every probe had before batches), the other
hands them over at once (``Engine.emit_batch`` with an ``EventBatch``).
Every buffer byte and counter of the three tracers must be equal: the
tracefs ring buffers (pages, headers, time deltas and ``TIME_EXTEND``,
overwrite, ``entries``/``overrun``/``dropped``, ``saved_cmdlines``), the
ktrace ring buffers and the kmemtrace relay channel (records, sequence
numbers, padding, ``total_overruns``), with several buffer sizes, CPUs,
large time gaps and faults injected in the middle.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from fakedebugfs.engine.core.batch import from_pending
from fakedebugfs.engine.core.engine import Pending
from fakedebugfs.engine.core.ringbuffer import CpuBuffer
from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.sources.workloads import make_workload
from support.kernel import faults_of, ring_state, state
from support.kmem import random_kmem

# linux-6.18: its kmem events are the fake's own, with column encoders (a
# profile whose formats differ serves them as generic events: one by one)
PROFILE = str(SHIPPED_PROFILES / "linux-6.18")


def kmem_events(kernel, rng, n, ts, gaps=False):
    """*n* random kmem events (every kmem tracepoint, 4 CPUs, a few tasks,
    values at the edges of their fields)."""
    tps = {k.split(":")[1]: kernel.engine.tracepoints[k] for k in
           ("kmem:kmalloc", "kmem:kfree", "kmem:kmem_cache_alloc", "kmem:kmem_cache_free",
            "kmem:mm_page_alloc", "kmem:mm_page_free")}
    nr = kernel.engine.nr_cpus
    last = [ts] * nr
    out = []
    for _ in range(n):
        cpu = rng.randrange(nr)
        step = rng.choice((200, 4000, 1 << 27, (1 << 27) + 9, 1 << 33)) if gaps \
            else rng.randint(200, 4000)
        last[cpu] += step
        pid, name, values = random_kmem(rng, tuple(tps))
        out.append(Pending(tps[name], cpu, pid, last[cpu], values))
    return out


def make_kernel(cpus, ring, subbuf_events, abi="2008-08", page_size=4096):
    k = Kernel(cpus=cpus, buffer_size=ring, clock="virtual", seed=1, enable_all=True,
               profile=PROFILE,
               kmemtrace_abi=abi, kmemtrace_subbufs=3, kmemtrace_subbuf_events=subbuf_events)
    for buf in k.ftrace.buffers:  # tracefs sub-buffers of page_size (buffer_subbuf_size_kb)
        buf.resize(ring, page_size)
    for pid, comm in ((1, "init"), (2001, "bash"), (2002, "cc1"), (31999, "make")):
        k.engine.set_comm(pid, comm)
    return k


def fire_each(k: Kernel, events) -> None:
    for ev in events:
        k.engine.last_ts[ev.cpu] = ev.ts
        k.engine.emitted += 1
        ev.tp.fire(ev.cpu, ev.pid, ev.ts, ev.values)


def fire_batch(k: Kernel, events) -> None:
    batch = from_pending(events)
    assert k.engine._batch_owners(batch) is not None, "the batch path was not taken"
    k.engine.emit_batch(batch)


def fault(k: Kernel, cpu: int, events: int) -> None:
    faults_of(k).add({"kind": "overrun", "cpu": cpu, "events": events, "tracer": "all"})


def compare(cpus, ring, subbuf_events, seed, rounds, gaps=False, faults=False, abi="2008-08",
            read=False, page_size=4096):
    one, many = (make_kernel(cpus, ring, subbuf_events, abi, page_size),
                 make_kernel(cpus, ring, subbuf_events, abi, page_size))
    rng = random.Random(seed)
    ts = 10 ** 9
    for r in range(rounds):
        events = kmem_events(one, rng, rng.choice((70, 400, 3000)), ts, gaps)
        ts = max(e.ts for e in events)
        events_many = [Pending(many.engine.tracepoints[e.tp.key], *e[1:]) for e in events]
        if faults and r % 2:
            cpu, count = rng.randrange(cpus), rng.choice((1, 5, 300))
            for k in (one, many):
                fault(k, cpu, count)
        fire_each(one, events)
        fire_batch(many, events_many)
        assert state(one) == state(many), f"round {r} differs"
        if read:  # readers take some pages between batches
            for k in (one, many):
                for buf in k.ftrace.buffers + k.ktrace.buffers:
                    buf.read_page()
                for b in k.kmemtrace.chan.bufs:
                    b.read(20000)
            assert state(one) == state(many)


@pytest.mark.parametrize("cpus,ring", [(1, 2 * 4096), (2, 3 * 4096), (4, 16 * 4096),
                                        (2, 1 << 20)])
def test_same_bytes_and_counters(cpus, ring):
    """Small buffers wrap (overwrite, overrun) and fill the relay
    (refused switches); large ones do not."""
    compare(cpus, ring, subbuf_events=64, seed=cpus * 7 + ring, rounds=6)


@pytest.mark.parametrize("seed", [1, 2])
def test_time_extend(seed):
    """Gaps over 2^27 ns become TIME_EXTEND entries, except at a page start."""
    compare(2, 8 * 4096, subbuf_events=512, seed=seed, rounds=6, gaps=True)


@pytest.mark.parametrize("seed", [3, 4])
def test_fault_in_the_middle(seed):
    """Overrun faults (``fakedebugfs fault overrun``) in the middle of a
    batch lose the same events in all three tracers."""
    compare(2, 8 * 4096, subbuf_events=128, seed=seed, rounds=8, faults=True)


def test_readers_between_batches():
    compare(2, 4 * 4096, subbuf_events=64, seed=5, rounds=8, read=True)


def test_kmemtrace_2008_07():
    """The July 2008 layout: NULL pointers are not traced, timestamps inline."""
    compare(2, 8 * 4096, subbuf_events=64, seed=6, rounds=6, abi="2008-07")


def test_ktrace_reader_pinning_pages():
    """A ktrace reader between GET_PRODUCED and PUT_CONSUMED pins the pages:
    new events that find no free page are lost (``overflow``), both ways."""
    from fakedebugfs.engine.ktrace.tracer import KTRACE_BUF_GET_PRODUCED, KTRACE_BUF_PUT_CONSUMED

    one, many = make_kernel(2, 4 * 4096, 64), make_kernel(2, 4 * 4096, 64)
    rng = random.Random(12)
    ts = 10 ** 9
    for r in range(6):
        events = kmem_events(one, rng, 1500, ts)
        ts = max(e.ts for e in events)
        for k in (one, many):
            if r == 1:
                k.ktrace.ioctl(0, KTRACE_BUF_GET_PRODUCED, None, reader="r")
            if r == 4:
                k.ktrace.ioctl(0, KTRACE_BUF_PUT_CONSUMED, k.ktrace.buffers[0].produced, reader="r")
        fire_each(one, events)
        fire_batch(many, [Pending(many.engine.tracepoints[e.tp.key], *e[1:]) for e in events])
        assert state(one) == state(many), f"round {r}"
    assert one.ktrace.overflow() > 0


def test_no_overwrite():
    """``options/overwrite`` off: a full buffer drops new events."""
    one, many = make_kernel(2, 3 * 4096, 64), make_kernel(2, 3 * 4096, 64)
    for k in (one, many):
        k.ftrace.set_option("overwrite", False)
    rng = random.Random(9)
    events = kmem_events(one, rng, 2000, 10 ** 9)
    fire_each(one, events)
    fire_batch(many, [Pending(many.engine.tracepoints[e.tp.key], *e[1:]) for e in events])
    assert state(one) == state(many)
    assert sum(b.dropped for b in many.ftrace.buffers) > 0


def test_filtered_event_takes_the_per_event_path():
    """A filter on an event sends the batch one event at a time (same result)."""
    one, many = make_kernel(2, 8 * 4096, 64), make_kernel(2, 8 * 4096, 64)
    for k in (one, many):
        k.ftrace.set_filter(["kmem:kmalloc"], b"bytes_req > 1000")
    rng = random.Random(10)
    events = kmem_events(one, rng, 500, 10 ** 9)
    fire_each(one, events)
    batch = from_pending([Pending(many.engine.tracepoints[e.tp.key], *e[1:]) for e in events])
    assert many.engine._batch_owners(batch) is None
    many.engine.emit_batch(batch)
    assert state(one) == state(many)


@pytest.mark.parametrize("mix", ["tracing", "all"])
def test_workload_batches_match_single_steps(mix):
    """The kmem workload fired in large batches and in runs of one event
    leaves the same buffers: the stream does not depend on the slicing."""
    kernels = []
    for budgets in ((1, 7, 16), (5000,)):
        kw = {"enable_all": True} if mix == "all" else {"enable": (mix,)}
        k = Kernel(cpus=2, buffer_size=1 << 16, clock="virtual", seed=3, profile=PROFILE, **kw)
        wl = make_workload("kmem", k, seed=3, count=12000)
        i = 0
        while not wl.done:
            wl.run(budgets[i % len(budgets)])
            i += 1
        kernels.append(k)
    assert state(kernels[0]) == state(kernels[1])


def test_lifo_match_is_a_stack():
    """The kmem workload's freelists, matched for a whole block at once,
    hand out what a Python list used as a stack hands out."""
    from fakedebugfs.sources.workloads.slab_batch import lifo_match

    rng = np.random.default_rng(4)
    for _ in range(50):
        n = int(rng.integers(1, 300))
        stream = rng.integers(0, 4, n)
        is_push = rng.random(n) < rng.random()
        match, fresh = lifo_match(stream, is_push)
        stacks = {}
        for i in range(n):
            s = int(stream[i])
            if is_push[i]:
                stacks.setdefault(s, []).append(i)
                assert match[i] == -1 and not fresh[i]
            elif stacks.get(s):
                assert match[i] == stacks[s].pop() and not fresh[i]
            else:
                assert match[i] == -1 and fresh[i]


def test_pending_events_of_any_event():
    """Injection hands the engine ``Pending`` events of any tracepoint (here
    sched and syscalls, whose probes take the per-event path, with kmem
    ones): 64 or more become one batch, with the same result."""
    one, many = make_kernel(2, 8 * 4096, 64), make_kernel(2, 8 * 4096, 64)
    rng = random.Random(11)
    events = kmem_events(one, rng, 300, 10 ** 9)
    sw = one.engine.tracepoints["sched:sched_switch"]
    enter = one.engine.tracepoints["raw_syscalls:sys_enter"]
    extra = []
    for e in events[::5]:
        extra.append(Pending(sw, e.cpu, e.pid, e.ts, ("bash", 2001, 120, 1, "cc1", 2002, 120)))
        extra.append(Pending(enter, e.cpu, e.pid, e.ts, (0, (1, 2, 3, 4, 5, 6))))
    events = sorted(events + extra, key=lambda e: e.ts)
    fire_each(one, events)
    many.engine.emit_batch([Pending(many.engine.tracepoints[e.tp.key], *e[1:]) for e in events])
    assert state(one) == state(many)


@pytest.mark.parametrize("page_size", [8192, 16384])
@pytest.mark.parametrize("cpus,pages", [(1, 2), (2, 3), (2, 40)])
def test_larger_subbuffers(page_size, cpus, pages):
    """tracefs sub-buffers of 8 and 16 KiB (``buffer_subbuf_size_kb``):
    the same pages, wraps and counters both ways, small buffers wrapping."""
    compare(cpus, pages * page_size, subbuf_events=64, seed=pages + page_size, rounds=6,
            page_size=page_size)


@pytest.mark.parametrize("page_size", [8192, 16384])
def test_larger_subbuffers_gaps_faults_readers(page_size):
    compare(2, 6 * page_size, subbuf_events=128, seed=page_size, rounds=6, gaps=True,
            page_size=page_size)
    compare(2, 6 * page_size, subbuf_events=128, seed=page_size + 1, rounds=8, faults=True,
            page_size=page_size)
    compare(2, 4 * page_size, subbuf_events=64, seed=page_size + 2, rounds=8, read=True,
            page_size=page_size)


@pytest.mark.parametrize("page_size", [4096, 8192, 16384])
def test_payloads_up_to_a_subbuffer(page_size):
    """Payloads of every size up to what a sub-buffer holds (more than 4 KiB
    in 8 and 16 KiB ones) and past it (dropped), written one by one and as
    a batch of byte rows: the same pages and counters."""
    from fakedebugfs.engine.core.batch import payload_group

    rng = np.random.default_rng(page_size)
    data = page_size - 16
    sizes = np.concatenate([rng.integers(1, 200, 300), rng.integers(100, data - 8, 60),
                            [data - 8, data - 9, data - 7, 4073, 4080, 5000]])
    sizes = sizes[sizes <= data + 100]
    rng.shuffle(sizes)
    ts = np.cumsum(rng.integers(100, 1 << 28, len(sizes)))
    rows = {}
    for i, n in enumerate(sizes.tolist()):
        rows.setdefault(n, []).append(i)
    payload = {i: bytes(rng.integers(0, 256, n, dtype=np.uint8)) for i, n in enumerate(sizes.tolist())}
    one, many = CpuBuffer(0, 5 * page_size, page_size=page_size), \
        CpuBuffer(0, 5 * page_size, page_size=page_size)
    for i in range(len(sizes)):
        one.write(int(ts[i]), payload[i])
    groups = [payload_group(np.array(idx), np.array([list(payload[i]) for i in idx], np.uint8))
              for n, idx in rows.items()]
    many.write_batch(ts, groups)
    assert ring_state(one) == ring_state(many)
    assert one.dropped == int((sizes > data - 8).sum())
    big = [e.payload for e in one.iter_unread() if len(e.payload) > 4080]
    assert (len(big) > 0) == (page_size > 4096)


def test_comm_fields_take_the_batch_path():
    """Events with ``char comm[16]`` fields (``sched_switch``, whose encoder
    cuts a name to 15 bytes, and a profile's ``sched_wakeup``, which keeps
    16) go through the batch path as strings, with the bytes of the
    per-event path."""
    one, many = make_kernel(2, 8 * 4096, 64), make_kernel(2, 8 * 4096, 64)
    sw = one.engine.tracepoints["sched:sched_switch"]
    wk = one.engine.tracepoints["sched:sched_wakeup"]
    names = ("bash", "a-very-long-command-name", "x", "sixteen-chars-xy")
    events = []
    for i in range(400):
        a, b = names[i % 4], names[(i // 4) % 4]
        if i % 3:
            events.append(Pending(sw, i % 2, 100 + i, 10 ** 6 + i, (a, i, 120, i % 300, b, i + 1,
                                                                      100)))
        else:
            events.append(Pending(wk, i % 2, 100 + i, 10 ** 6 + i, (a, i, 120, i % 2)))
    fire_each(one, events)
    batch = from_pending([Pending(many.engine.tracepoints[e.tp.key], *e[1:]) for e in events])
    assert many.engine._batch_owners(batch) is not None  # not one by one
    many.engine.emit_batch(batch)
    assert state(one) == state(many)


def test_instances_take_the_batch_path_once_the_tasks_are_saved():
    """With an instance, a batch whose tasks are all in ``saved_cmdlines``
    (with their comms) goes through the batch path: the records of the
    arrays would change nothing, so their order does not matter.  The
    first batch, of tasks not saved yet, goes one by one.  Both leave what
    firing every event one by one leaves, in both arrays."""
    def kernel():
        k = Kernel(cpus=2, buffer_size=8 * 4096, clock="virtual", seed=1, profile=PROFILE)
        inst = k.ftrace.new_instance("other")
        for tr in (k.ftrace, inst):
            tr.set_event("sched:sched_wakeup", True)
        for pid in range(100, 110):
            k.engine.set_comm(pid, f"task-{pid}")
        return k, inst

    def events(k, start):
        tp = k.engine.tracepoints["sched:sched_wakeup"]
        return [Pending(tp, i % 2, 100 + i % 10, start + i, (f"task-{100 + i % 10}", i, 120, 0))
                for i in range(200)]

    (one, one_inst), (many, many_inst) = kernel(), kernel()
    taken = []
    for start in (10 ** 6, 2 * 10 ** 6):
        fire_each(one, events(one, start))
        batch = from_pending(events(many, start))
        taken.append(many.engine._batch_owners(batch) is not None)
        many.engine.emit_batch(batch)
    assert taken == [False, True]
    assert state(one) == state(many)
    assert [ring_state(b) for b in one_inst.buffers] == [ring_state(b) for b in many_inst.buffers]
