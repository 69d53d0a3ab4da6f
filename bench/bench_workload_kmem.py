"""What the kmem workload itself costs, compiled (``sources/workloads/slab_fast``)
and Python (``FAKEDEBUGFS_PURE=1``, run in a child process).

The workload (seed 1, 2 CPUs, no tracer on) runs in process; times are CPU
time of the thread (the VM is shared: wall time counts other processes'
turns).

Rows (JSON lines):

* ``kmem_workload_us_per_event[make blocks, PATH]``: making blocks
  (``block_steps``: the draws, the freelists, the columns), per event.
* ``kmem_workload_us_per_run[run N, PATH]``: one ``run(N)`` as the server
  calls it between FUSE requests (blocks made ahead by ``block_steps``, not
  counted), the engine's ``emit_batch``/``emit`` not counted: finding the
  slice, naming new tasks, building the ``EventBatch``.  The mean, the
  median in the detail.

    python -m bench.bench_workload_kmem
"""

from __future__ import annotations

import statistics
import time

from . import compiled_and_python, print_rows

BLOCKS = 60
RUNS = (500, 2000, 16384)
CALLS = 1500


def _workload():
    from fakedebugfs.engine.kernel import Kernel
    from fakedebugfs.sources.workloads import make_workload

    k = Kernel(cpus=2, buffer_size=1 << 20)
    wl = make_workload("kmem", k, seed=1)
    wl.run(1)
    return k, wl.made  # the workload itself (make_workload defers making it)


def make_blocks(blocks: int = BLOCKS) -> float:
    """CPU seconds of ``block_steps`` per event."""
    _, wl = _workload()
    spent, events = 0.0, 0
    for _ in range(blocks):
        t0 = time.thread_time()
        for _ in wl.block_steps():
            pass
        spent += time.thread_time() - t0
        events += wl.next_block["n"]
        wl.next_block = None
    return spent / events


def runs(n: int, calls: int = CALLS) -> list[float]:
    """CPU seconds of each ``run(n)`` without the engine's part."""
    k, wl = _workload()
    wl.start_prefetch()
    engine = [0.0]

    def timed(fire):
        def call(*args):
            t0 = time.thread_time()
            out = fire(*args)
            engine[0] += time.thread_time() - t0
            return out
        return call
    k.engine.emit_batch, k.engine.emit = timed(k.engine.emit_batch), timed(k.engine.emit)
    out = []
    for _ in range(calls):
        if wl.wants_block():  # as the server's slicer turns do, not counted
            for _ in wl.block_steps():
                pass
        engine[0] = 0.0
        t0 = time.thread_time()
        wl.run(n)
        out.append(time.thread_time() - t0 - engine[0])
    return out


def rows(path: str) -> list[dict]:
    out = [{"name": f"kmem_workload_us_per_event[make blocks, {path}]",
            "fake": round(make_blocks() * 1e6, 4), "real": None, "unit": "us"}]
    for n in RUNS:
        t = runs(n)
        out.append({"name": f"kmem_workload_us_per_run[run {n}, {path}]",
                    "fake": round(statistics.fmean(t) * 1e6, 1), "real": None, "unit": "us",
                    "detail": {"median_us": round(statistics.median(t) * 1e6, 1)}})
    return out


def run() -> list[dict]:
    return compiled_and_python("bench.bench_workload_kmem", rows)


if __name__ == "__main__":
    print_rows(run())
