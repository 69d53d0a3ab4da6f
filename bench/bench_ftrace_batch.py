"""What tracefs (ftrace) costs on the engine's batch path, per event and
per batch, compiled (``rb_fast``, ``pack_fast``, ``batch_fast``) and
Python (``FAKEDEBUGFS_PURE=1``, run in a child process).

The kmem workload (seed 1, 2 CPUs, 1 MiB per-CPU buffers, every tracefs
event enabled) is fired in process in runs of RUN events (each run one
``EventBatch``, as the server fires them between FUSE requests); the whole
``Engine.emit_batch`` of each batch is timed (owners, packing, ring-buffer
writes, ``saved_cmdlines``, the CPUs' last stamps), in CPU time of the
thread (the VM is shared: wall time counts other processes' turns); the
time of generating the events is not counted.  Targets (the issue): a
batch of 1,000 events in <= 0.15 ms, tracefs <= 0.2 us per event over
generating the events.

Rows (JSON lines): ``ftrace_emit_batch_ms_per_batch[run RUN, PATH]``,
``ftrace_emit_batch_us_per_event[run RUN, PATH]`` and
``engine_cpu_us_per_event_over_none[tracefs, PATH]`` (``engine_rate``
with tracefs on against none, thread CPU time, best of 3).

    python -m bench.bench_ftrace_batch
"""

from __future__ import annotations

import time

from . import CpuTimed, compiled_and_python, print_rows
from .bench_dataplane import engine_rate

RUNS = (1000, 16384)
EVENTS = 300_000
WARM_EVENTS = 50_000


def _kernel():
    """2 CPUs, 1 MiB per-CPU buffers, every tracefs event on."""
    from fakedebugfs.engine.kernel import Kernel

    k = Kernel(cpus=2, buffer_size=1 << 20)
    for key in k.ftrace.event_keys():
        k.ftrace.set_event(key, True)
    return k


def measure(run: int, events: int = EVENTS) -> dict:
    """Seconds in ``Engine.emit_batch`` per event and per batch."""
    from fakedebugfs.sources.workloads import make_workload

    k = _kernel()
    timed = CpuTimed(k.engine.emit_batch, lambda args, n: n)
    wl = make_workload("kmem", k, seed=1)
    wl.run(WARM_EVENTS)  # the buffers wrapped once
    k.engine.emit_batch = timed
    fired = 0
    while fired < events:
        fired += wl.run(run)
    return timed.figures()


def rows(path: str) -> list[dict]:
    none = max(engine_rate("none", clock=time.thread_time) for _ in range(3))
    tracefs = max(engine_rate("tracefs", clock=time.thread_time) for _ in range(3))
    out = [{"name": f"engine_cpu_us_per_event_over_none[tracefs, {path}]",
            "fake": round((1 / tracefs - 1 / none) * 1e6, 4), "real": None, "unit": "us",
            "detail": {"events_per_s": round(tracefs), "none_events_per_s": round(none)}}]
    for run in RUNS:
        m = min((measure(run) for _ in range(2)), key=lambda m: m["ms_per_batch"])
        key = f"run {run}, {path}"
        out.append({"name": f"ftrace_emit_batch_ms_per_batch[{key}]",
                    "fake": round(m["ms_per_batch"], 4), "real": None, "unit": "ms",
                    "detail": {"events_per_batch": round(m["events_per_batch"])}})
        out.append({"name": f"ftrace_emit_batch_us_per_event[{key}]",
                    "fake": round(m["us_per_event"], 4), "real": None, "unit": "us"})
    return out


def run() -> list[dict]:
    return compiled_and_python("bench.bench_ftrace_batch", rows)


if __name__ == "__main__":
    print_rows(run())
