"""The compiled ring-buffer writer (engine/core/rb_fast.pyx) against the
Python paths: the same page bytes and the same counters as
``CpuBuffer.write`` of each event in turn and as the numpy batch path
(``split_per_cpu_py``), on batches that cross pages, need time extends,
fill the buffer with and without overwrite, carry oversized and large
(``type_len`` 0) payloads, in 4 KiB and larger sub-buffers, with reader
pages, several CPUs and a CPU mask; and a whole kmem run of the engine
giving the same trace_pipe_raw pages with and without compiled code."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.batch import EventBatch, split_per_cpu_py
from fakedebugfs.engine.core.ringbuffer import CpuBuffer

rb_fast = fast.load("fakedebugfs.engine.core.rb_fast")
needs_fast = pytest.mark.skipif(rb_fast is None, reason="rb_fast not built (or FAKEDEBUGFS_PURE)")

STATE = ("produced", "consumed", "tail", "tail_entries", "last_ts", "read", "read_entries",
         "read_ts", "entries", "overrun", "dropped", "consumed_events", "missed", "gaps",
         "page_entries", "page_real_end")


def make_groups(rng, n: int, dsize: int, oversized: bool):
    """Payload groups over positions 0..n-1: each group one payload length
    (0, small, past RB_MAX_SMALL_DATA, maybe too big for a sub-buffer),
    rows of random bytes zero past the length, some through a row selection."""
    lengths = [0, 3, 24, 40, 57, 112, 113, 200, 1000]
    if oversized:
        lengths.append(dsize)
    which = rng.integers(len(lengths), size=n)
    groups = []
    for g, length in enumerate(lengths):
        idx = np.flatnonzero(which == g)
        if not len(idx):
            continue
        nw = max(1, (length + 3) >> 2) + int(rng.integers(3))  # rows may be wider
        rows = rng.integers(0, 256, size=(len(idx) + 5, nw * 4), dtype=np.uint8)
        rows[:, length:] = 0
        words = rows.view(np.uint32)
        if rng.random() < 0.5:
            rowsel = rng.permutation(len(rows))[:len(idx)].astype(np.int64)
        else:
            rowsel = None
            words = words[:len(idx)]
        groups.append((idx.astype(np.int64), np.ascontiguousarray(words), length, rowsel))
    if n > 2 and rng.random() < 0.5:  # a group with a length per row (the compiled packer's)
        idx = np.sort(rng.choice(n, n // 3, replace=False)).astype(np.int64)
        per_row = rng.choice(np.array([8, 12, 40, 116, 200], np.int64), size=len(idx))
        rows = rng.integers(0, 256, size=(len(idx), 200), dtype=np.uint8)
        rows[np.arange(200) >= per_row[:, None]] = 0
        inside = np.isin(np.arange(n), idx)
        kept = [~inside[g[0]] for g in groups]
        groups = [(g[0][k], g[1], g[2], np.flatnonzero(k) if g[3] is None else g[3][k])
                  for g, k in zip(groups, kept)]
        groups.append((idx, rows.view(np.uint32), per_row, None))
    return groups


def make_ts(rng, n: int, nr: int, cpu, start):
    """Per-CPU non-decreasing timestamps: small steps, zero steps and
    steps past 2**27 ns (TIME_EXTEND)."""
    ts = np.empty(n, np.int64)
    last = list(start)
    for i in range(n):
        c = int(cpu[i])
        r = rng.random()
        step = 0 if r < 0.1 else int(rng.integers(1 << 28, 1 << 33)) if r < 0.15 \
            else int(rng.integers(1, 5000))
        last[c] += step
        ts[i] = last[c]
    return ts


def payload(groups, i: int) -> bytes:
    for idx, words, length, rowsel in groups:
        j = np.flatnonzero(idx == i)
        if len(j):
            r = int(j[0]) if rowsel is None else int(rowsel[j[0]])
            return words[r].tobytes()[:length if np.ndim(length) == 0 else int(length[r])]
    return None


def state(buf) -> dict:
    return {k: getattr(buf, k) for k in STATE}


def run_case(seed: int, nr: int, page_size: int, pages: int, overwrite: bool,
             reader_pages: bool, mask: int, batches: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    sets = [[CpuBuffer(c, pages * page_size, overwrite=overwrite, page_size=page_size,
                       count_oversized=bool(seed & 1), reader_pages=reader_pages)
             for c in range(nr)] for _ in range(3)]
    done = [[[] for _ in range(nr)] for _ in range(3)]
    for s, bufs in enumerate(sets):
        for c, buf in enumerate(bufs):
            buf.on_page_done = done[s][c].append
    last = [1_000_000] * nr
    for b in range(batches):
        cpu = rng.integers(nr, size=n).astype(np.int64)
        ts = make_ts(rng, n, nr, cpu, last)
        for c in range(nr):
            on = ts[cpu == c]
            if len(on):
                last[c] = int(on[-1])
        groups = make_groups(rng, n, sets[0][0].data_size, oversized=bool(b % 2))
        in_mask = np.array([(mask >> c) & 1 for c in range(nr)], bool)[cpu]
        sel = None if mask == (1 << nr) - 1 else np.flatnonzero(in_mask)
        batch = EventBatch([None], np.zeros(n, np.int64), cpu, np.zeros(n, np.int64), ts, [()])
        assert rb_fast.write_groups(sets[0], ts, cpu, groups, sel)
        split_per_cpu_py(sets[1], batch, groups, sel)
        for i in range(n):
            if in_mask[i]:
                sets[2][cpu[i]].write(int(ts[i]), payload(groups, i))
        if b % 3 == 2:  # a reader takes a few events in between (read, read_entries)
            for bufs in sets:
                for buf in bufs:
                    for _ in range(3):
                        buf.consume()
        for c in range(nr):
            ref = sets[2][c]
            for s in (0, 1):
                assert bytes(sets[s][c].mem) == bytes(ref.mem), (b, c, s)
                assert state(sets[s][c]) == state(ref), (b, c, s)
            assert set(done[0][c]) == set(done[2][c])
    for c in range(nr):  # what a reader gets is the same too
        pages_fast = [sets[0][c].read_page() for _ in range(pages + 1)]
        pages_ref = [sets[2][c].read_page() for _ in range(pages + 1)]
        assert pages_fast == pages_ref


CASES = [
    # seed, cpus, page size, pages, overwrite, reader_pages, cpumask, batches, events
    (1, 1, 4096, 4, True, False, 1, 6, 300),
    (2, 2, 4096, 3, True, True, 3, 6, 400),
    (3, 2, 4096, 3, False, False, 3, 5, 400),
    (4, 3, 4096, 8, False, True, 5, 5, 500),
    (5, 2, 8192, 3, True, True, 3, 5, 600),
    (6, 4, 16384, 2, True, False, 11, 4, 800),
    (7, 2, 65536, 2, False, True, 2, 3, 1500),
    (8, 1, 4096, 2, True, True, 1, 8, 50),
]


@needs_fast
@pytest.mark.parametrize("case", CASES, ids=[f"seed{c[0]}" for c in CASES])
def test_compiled_writer_matches_python(case):
    run_case(*case)


@needs_fast
def test_faults_pending_are_left_to_python():
    """A buffer with losses pending or a pinned reader is not written by
    the compiled writer (the Python path applies the faults)."""
    bufs = [CpuBuffer(0, 4 * 4096), CpuBuffer(1, 4 * 4096)]
    bufs[1].lose_events(2)
    ts = np.arange(10, dtype=np.int64)
    cpu = np.zeros(10, np.int64)
    groups = [(np.arange(10, dtype=np.int64), np.zeros((10, 2), np.uint32), 8, None)]
    assert not rb_fast.write_groups(bufs, ts, cpu, groups)
    assert bufs[0].entries == 0
    bufs[1].lose_next = 0
    bufs[0].pin(60)
    assert not rb_fast.write_groups(bufs, ts, cpu, groups)
    bufs[0].unpin()
    bufs[1].last_ts = 1 << 70  # not a state the compiled writer holds
    assert not rb_fast.write_groups(bufs, ts, cpu, groups)
    bufs[1].last_ts = 0
    assert rb_fast.write_groups(bufs, ts, cpu, groups)
    assert bufs[0].entries == 10


SCRIPT = """
import hashlib, sys
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.sources.workloads import make_workload
k = Kernel(cpus=3, buffer_size=64 << 10, clock="virtual", seed=5)
for key in k.ftrace.event_keys():
    k.ftrace.set_event(key, True)
k.ftrace.cpumask = 0b101
wl = make_workload("kmem", k, seed=3)
h = hashlib.sha256()
for size in (700, 5000, 100, 20000, 3000):
    wl.run(size)
    for buf in k.ftrace.buffers:
        h.update(repr([getattr(buf, a) for a in (%r)]).encode())
        h.update(bytes(buf.mem))
    for buf in k.ftrace.buffers:  # a reader takes a page now and then
        buf.read_page()
print(h.hexdigest())
""" % (STATE,)


@needs_fast
def test_engine_kmem_run_same_with_and_without_compiled_code():
    """The kmem workload through Engine.emit_batch into tracefs buffers
    (three CPUs, one masked out, wrapping): the same memory and counters
    in a process with FAKEDEBUGFS_PURE=1 as with the compiled writer."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = {}
    for pure in ("0", "1"):
        env = dict(os.environ, FAKEDEBUGFS_PURE=pure, PYTHONPATH=root)
        out[pure] = subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True,
                                   capture_output=True, text=True).stdout
    assert out["0"] == out["1"] and len(out["0"].strip()) == 64
