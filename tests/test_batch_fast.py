"""The compiled per-batch bookkeeping (engine/core/batch_fast.pyx) against
the numpy expressions it replaces: the events a trace array records (kinds
and tracing_cpumask), the tasks ``saved_cmdlines`` records (the same slots
whether given every entry's pid or one per run of a task), and each CPU's
last timestamp."""

from __future__ import annotations

import numpy as np
import pytest

from fakedebugfs.engine.core import fast
from fakedebugfs.engine.ftrace.cmdlines import SavedCmdlines

batch_fast = fast.load("fakedebugfs.engine.core.batch_fast")
pytestmark = pytest.mark.skipif(batch_fast is None, reason="batch_fast not built (or FAKEDEBUGFS_PURE)")


@pytest.mark.parametrize("seed", range(6))
def test_select_pid_runs_last_ts(seed):
    rng = np.random.default_rng(seed)
    n, kinds, nr = int(rng.integers(0, 2000)), int(rng.integers(1, 7)), int(rng.integers(1, 5))
    kind = rng.integers(kinds, size=n).astype(np.int64)
    cpu = rng.integers(nr, size=n).astype(np.int64)
    pid = rng.choice(np.array([0, -3, 7, 8, 9, 1 << 33, 100], np.int64), size=n)
    pid[rng.random(n) < 0.7] = 7  # long runs of one task
    ts = np.sort(rng.integers(0, 1 << 40, size=n)).astype(np.int64)
    mine = bytearray(int(rng.random() < 0.8) for _ in range(kinds))
    cpus = bytes(int(rng.random() < 0.7) for _ in range(nr))

    done = batch_fast.select(kind, cpu, mine, cpus)
    want = np.flatnonzero(np.frombuffer(bytes(mine), bool)[kind] & np.frombuffer(cpus, bool)[cpu])
    assert done.dtype == np.int64 and done.tolist() == want.tolist()

    pids = pid[done].astype(np.int32)
    runs = batch_fast.pid_runs(pid, done)
    assert runs.tolist() == [p for i, p in enumerate(pids.tolist()) if i == 0 or pids[i - 1] != p]
    comms = {int(p): f"task{p}" for p in pid.tolist() if p > 0}
    assert batch_fast.first_seen(runs) == list(dict.fromkeys(pids.tolist()))
    for size in (2, 3, 128):  # few slots: victims among the batch's own tasks
        every, once = SavedCmdlines(comms, size), SavedCmdlines(comms, size)
        for _ in range(2):  # the second time all may be saved already
            every.record_many(pids)
            order = batch_fast.first_seen(runs)
            once.record_many(runs, order)  # (the tracer's call)
            assert (every.slots, every.map, every.idx) == (once.slots, once.map, once.idx)
        comms[7] = "renamed"  # a task's comm changes: saved again

    last = [-1] * nr
    batch_fast.note_last_ts(cpu, ts, last)
    assert last == [int(ts[cpu == c][-1]) if (cpu == c).any() else -1 for c in range(nr)]


def test_bad_positions_are_refused():
    with pytest.raises(IndexError):
        batch_fast.select(np.array([5], np.int64), np.array([0], np.int64), b"\1", b"\1")
    with pytest.raises(IndexError):
        batch_fast.pid_runs(np.array([1], np.int64), np.array([3], np.int64))
    with pytest.raises(IndexError):
        batch_fast.note_last_ts(np.array([4], np.int64), np.array([1], np.int64), [0, 0])
