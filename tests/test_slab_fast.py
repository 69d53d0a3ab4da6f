"""The kmem workload's compiled generation makes the Python path's events.

``sources/workloads/slab_fast.pyx`` runs the sequential parts of a block (SLUB's
per-CPU freelists and the buddy lists as stacks, fresh slab pages and
pfns, which task each CPU runs) in plain loops where ``slab_batch.py``
(the reference) matches pushes and pops for a whole block with numpy.
With the same seed both must give the same blocks, column by column, the
same allocator state between blocks (objects alive, freelists carried
over, next fresh address and pfn), the same ``EventBatch`` for each run
and the same bytes in every tracer's buffers, whatever the CPUs and
however ``run`` is sliced.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from fakedebugfs.engine.core.batch import Strings
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.sources.workloads import slab_batch
from support.kernel import state

pytestmark = pytest.mark.skipif(slab_batch.slab_fast is None,
                                reason="slab_fast not built (or FAKEDEBUGFS_PURE=1)")


def twins(monkeypatch, cpus: int, seed: int, clock: str = "virtual", **kernel):
    """The same workload twice, compiled then the Python path, and their
    kernels."""
    out, kernels = [], []
    for compiled in (True, False):
        k = Kernel(cpus=cpus, clock=clock, seed=seed, **kernel)
        with monkeypatch.context() as mp:
            if not compiled:
                mp.setattr(slab_batch, "slab_fast", None)
            wl = slab_batch.SlabWorkload(k, seed=seed)
        assert (wl.gen is not None) == compiled
        out.append(wl)
        kernels.append(k)
    return out, kernels


def same_array(a, b, what):
    assert type(a) is type(b), what
    if isinstance(a, Strings):
        assert a.table == b.table, what
        a, b = a.codes, b.codes
    assert a.dtype == b.dtype and a.shape == b.shape, what
    assert np.array_equal(a, b), what


def same_block(fast: dict, py: dict, where: str) -> None:
    assert fast["n"] == py["n"] and fast["n"] > slab_batch.BLOCK_ALLOCS, where
    for key in ("kind", "cpu", "pid", "adv", "cum"):
        same_array(fast[key], py[key], f"{where} {key}")
    assert fast["spawns"] == py["spawns"] and fast["spawn_at"] == py["spawn_at"], where
    for k in range(len(slab_batch.KINDS)):
        same_array(fast["where"][k], py["where"][k], f"{where} where[{k}]")
        assert len(fast["cols"][k]) == len(py["cols"][k]) == len(slab_batch.ARGS[k])
        for arg, a, b in zip(slab_batch.ARGS[k], fast["cols"][k], py["cols"][k]):
            same_array(a, b, f"{where} {slab_batch.KINDS[k]}.{arg}")


def same_allocator(fast, py, where: str) -> None:
    """The objects not freed yet, the freelists, fresh memory, tasks."""
    pend = fast.gen.pending()
    for key in ("site", "cpu", "fcpu", "gfp", "tfree", "value"):
        same_array(pend[key], py.pending[key], f"{where} pending {key}")
    stacks = fast.gen.stacks()
    assert stacks.keys() == {s for s, v in py.stacks.items() if len(v)}, where
    for s, values in stacks.items():
        same_array(values, py.stacks[s].astype(np.uint64), f"{where} freelist {s}")
    assert fast.gen.next_pfn == py.next_pfn, where
    assert (fast.tick, fast.current) == (py.tick, py.current), where


@pytest.mark.parametrize("cpus, seed, blocks", [(1, 0, 12), (2, 1, 12), (4, 2, 12),
                                                 (4, 77, 40), (2, 123456789, 30)])
def test_blocks_and_allocator_state(monkeypatch, cpus, seed, blocks):
    """Block after block (freelists and live objects carried over), every
    column of every block and the allocators' state are the same."""
    (fast, py), _ = twins(monkeypatch, cpus, seed)
    deep = 0
    for b in range(blocks):
        steps = [sum(1 for _ in wl.block_steps()) for wl in (fast, py)]
        assert min(steps) >= 2, "block_steps yields between steps"
        same_block(fast.next_block, py.next_block, f"block {b}")
        same_allocator(fast, py, f"after block {b}")
        deep = max([deep] + [len(v) for v in py.stacks.values()])
        fast.next_block = py.next_block = None
    assert deep > 1, "some freelist was carried over between blocks"


@pytest.mark.parametrize("cpus", (1, 2, 4))
def test_batches_and_rows(monkeypatch, cpus):
    """``run`` in slices of every size (one by one, small batches across a
    block's end, whole blocks): the same EventBatches handed to the engine
    and the same per-event tuples."""
    (fast, py), _ = twins(monkeypatch, cpus, 40 + cpus)
    got = {}
    for name, wl in (("fast", fast), ("py", py)):
        batches, events = [], []
        emit_batch, emit = wl.engine.emit_batch, wl.engine.emit

        def keep_batch(batch, emit_batch=emit_batch, batches=batches):
            batches.append(batch)
            return emit_batch(batch)

        def keep_event(tp, cpu, pid, values, emit=emit, events=events):
            events.append((tp.name, cpu, pid, values))
            return emit(tp, cpu, pid, values)

        monkeypatch.setattr(wl.engine, "emit_batch", keep_batch)
        monkeypatch.setattr(wl.engine, "emit", keep_event)
        for budget in (1, 7, 255, 256, 300, 5000, 16384, 40000, 2, 1000, 17000, 3):
            assert wl.run(budget) == budget
        got[name] = batches, events
    (fb, fe), (pb, pe) = got["fast"], got["py"]
    assert fe == pe and len(fe) > 1
    assert len(fb) == len(pb) > 5
    for i, (a, b) in enumerate(zip(fb, pb)):
        for key in ("kind", "cpu", "pid", "ts"):
            same_array(getattr(a, key), getattr(b, key), f"batch {i} {key}")
        for k in range(len(slab_batch.KINDS)):
            same_array(a.where(k), b.where(k), f"batch {i} where[{k}]")
            for arg, x, y in zip(slab_batch.ARGS[k], a.cols[k], b.cols[k]):
                same_array(x, y, f"batch {i} {slab_batch.KINDS[k]}.{arg}")


@pytest.mark.parametrize("cpus, budgets", [(1, (5000,)), (2, (1, 9, 300)), (4, (20000, 77))])
def test_same_bytes_in_every_tracer(monkeypatch, cpus, budgets):
    """Every tracer on: the buffers of tracing/, ktrace and kmemtrace hold
    the same bytes after the same events from either path."""
    (fast, py), kernels = twins(monkeypatch, cpus, 9, buffer_size=1 << 16, enable_all=True)
    for wl in (fast, py):
        i = 0
        while wl.emitted < 60000:
            wl.run(budgets[i % len(budgets)])
            i += 1
    assert fast.emitted == py.emitted == kernels[0].engine.emitted
    assert state(kernels[0]) == state(kernels[1])


@pytest.mark.parametrize("compiled", (True, False), ids=("compiled", "python"))
def test_tracers_leave_the_block_alone(monkeypatch, compiled):
    """A batch's columns are slices of the block's: firing the block with
    every tracer on (in slices of several sizes) changes none of them."""
    (fast, py), _ = twins(monkeypatch, 2, 5, buffer_size=1 << 16, enable_all=True)
    wl = fast if compiled else py
    wl.run(1)
    blk = wl.block
    arrays = [blk[key] for key in ("kind", "cpu", "pid", "adv", "cum")] + list(blk["where"]) + \
        [col for cols in blk["cols"] for col in cols]
    before = [a.copy() for a in arrays]
    budgets = (300, 5000, 1, 2000)
    i = 0
    while wl.block is blk and not wl.exhausted():
        wl.run(min(budgets[i % len(budgets)], blk["n"] - wl.at))
        i += 1
    assert wl.at == blk["n"]
    for a, b in zip(arrays, before):
        same_array(a, b, "block array")


@pytest.mark.parametrize("last, now, m", [(0, 0, 1), (5, 5, 300), (10**9, 10**9 + 7, 256),
                                           (0, 3, 10), (7, 12, 3), (1, 1 + 3 * 10**9, 16384),
                                           (2**40, 2**40 + 12345, 999), (3, 2**33 + 1, 4097)])
def test_real_clock_spreads_like_the_python_path(monkeypatch, last, now, m):
    """With a real clock a batch's stamps are spread from the CPUs' last
    stamp to now: the compiled spread is the Python path's formula."""
    (fast, _), _ = twins(monkeypatch, 2, 0)
    want = last + (now - last) * np.arange(1, m + 1, dtype=np.int64) // m
    same_array(fast.gen.spread(last, now, m), want, "spread")


def kept_batches(monkeypatch, k) -> list:
    """The batches *k*'s engine is handed from now on, in order."""
    batches = []
    emit_batch = k.engine.emit_batch

    def keep(batch):
        batches.append(batch)
        return emit_batch(batch)
    monkeypatch.setattr(k.engine, "emit_batch", keep)
    return batches


def test_real_clock_batches(monkeypatch):
    """The kmem workload on a real clock: both paths stamp each batch's
    events from the CPUs' last stamp to now, never going back per CPU."""
    out = []
    for wl, k in zip(*twins(monkeypatch, 2, 4, clock="monotonic")):
        batches = kept_batches(monkeypatch, k)
        for budget in (3000, 20000, 500):
            wl.run(budget)
        out.append(batches)
    for fb, pb in zip(*out):
        for key in ("kind", "cpu", "pid"):
            same_array(getattr(fb, key), getattr(pb, key), key)
        for batch in (fb, pb):
            assert batch.ts.dtype == np.int64 and (np.diff(batch.ts) >= 0).all()


def test_pure_environment_takes_the_python_path():
    """``FAKEDEBUGFS_PURE=1``: the compiled module is not loaded and the
    workload runs the Python path."""
    code = ("from fakedebugfs.engine.kernel import Kernel\n"
            "from fakedebugfs.sources.workloads import slab_batch\n"
            "wl = slab_batch.SlabWorkload(Kernel(cpus=2, clock='virtual'), seed=3)\n"
            "print(slab_batch.slab_fast, wl.gen, wl.run(20000))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "FAKEDEBUGFS_PURE": "1"}).stdout
    assert out.split() == ["None", "None", "20000"]


@pytest.mark.parametrize("compiled", [True, False])
def test_real_clock_first_batch_is_stamped_near_now(monkeypatch, compiled):
    """The first batch on a real clock has no earlier stamp to spread from:
    its events are stamped just before now (at most the virtual clock's
    slowest step apart), not from boot (trace-cmd then saw a first event
    at 0 s and a recording hours long)."""
    wls, kernels = twins(monkeypatch, 2, 4, clock="monotonic")
    wl, k = (wls[0], kernels[0]) if compiled else (wls[1], kernels[1])
    batches = kept_batches(monkeypatch, k)
    before = k.engine.clock.now()
    wl.run(5000)
    first = batches[0]
    assert int(first.ts[0]) >= before - len(first) * slab_batch.ADV_HI
    assert int(first.ts[-1]) <= k.engine.clock.now()
