"""What ktrace and kmemtrace cost on the engine's batch path, per event and
per batch, compiled (``ktrace_fast``, ``kmemtrace_fast``, ``rb_fast``) and
Python (``FAKEDEBUGFS_PURE=1``, run in a child process).

The kmem workload (seed 1, 2 CPUs, 1 MiB ktrace buffers, the default relay
channel) is fired in process with one tracer on, in runs of RUN events
(each run one ``EventBatch``, as the server fires them between FUSE
requests), and only the tracer's ``write_batch`` is timed, in CPU time of
the thread (the VM is shared: wall time counts other processes' turns):
the time of generating the events is not counted.  The relay's memory is touched once
before (a long-running server's state: the first fill of a relay channel
also pays the page faults of its anonymous memory).

Also the whole engine loop (``bench_dataplane.engine_rate`` in thread CPU
time, best of 3): ``engine_cpu_us_per_event_over_none[MIX, PATH]``, what
MIX (``ktrace``, ``kmemtrace``, ``all``: every tracer, tracefs too) adds
per event to generating them (the relay's first fill is in it).

Rows (JSON lines): ``tracer_batch_us_per_event[TRACER, run RUN, PATH]``
and ``tracer_batch_ms_per_batch[...]`` (the mean time of one batch; its
mean size in the detail: the workload splits a run where a task's name
changes).

    python -m bench.bench_tracer_batch
"""

from __future__ import annotations

import time

from . import CpuTimed, compiled_and_python, print_rows
from .bench_dataplane import engine_rate

TRACERS = ("ktrace", "kmemtrace")
RUNS = (16384, 1000)
EVENTS = 300_000
WARM_EVENTS = 50_000


def measure(tracer: str, run: int, events: int = EVENTS) -> dict:
    """Seconds in *tracer*'s ``write_batch`` per event and per batch."""
    from fakedebugfs.engine.kernel import Kernel
    from fakedebugfs.sources.workloads import make_workload

    k = Kernel(cpus=2, buffer_size=1 << 20)
    if tracer == "ktrace":
        k.enable_all(("ktrace",))
        owner = k.ktrace
    else:
        k.enable_all(("kmemtrace",))
        owner = k.kmemtrace
        for buf in owner.chan.bufs:  # the relay's pages committed
            buf.start[:] = bytes(len(buf.start))
    timed = CpuTimed(owner.write_batch, lambda args, _: len(args[0]))
    wl = make_workload("kmem", k, seed=1)
    wl.run(WARM_EVENTS)
    owner.write_batch = timed
    fired = 0
    while fired < events:
        fired += wl.run(run)
    return timed.figures()


def rows(path: str) -> list[dict]:
    rates = {mix: max(engine_rate(mix, clock=time.thread_time) for _ in range(3))
             for mix in ("none", "ktrace", "kmemtrace", "all")}
    out = [{"name": f"engine_cpu_us_per_event_over_none[{mix}, {path}]",
            "fake": round((1 / rates[mix] - 1 / rates["none"]) * 1e6, 4), "real": None,
            "unit": "us", "detail": {"events_per_s": round(rates[mix]),
                                     "none_events_per_s": round(rates["none"])}}
           for mix in ("ktrace", "kmemtrace", "all")]
    for tracer in TRACERS:
        for run in RUNS:
            m = measure(tracer, run)
            key = f"{tracer}, run {run}, {path}"
            out.append({"name": f"tracer_batch_us_per_event[{key}]",
                        "fake": round(m["us_per_event"], 4), "real": None, "unit": "us"})
            out.append({"name": f"tracer_batch_ms_per_batch[{key}]",
                        "fake": round(m["ms_per_batch"], 4), "real": None, "unit": "ms",
                        "detail": {"events_per_batch": round(m["events_per_batch"])}})
    return out


def run() -> list[dict]:
    return compiled_and_python("bench.bench_tracer_batch", rows)


if __name__ == "__main__":
    print_rows(run())
