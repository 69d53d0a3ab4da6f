"""The data plane: engine speed per tracer mix, control-op latency under a
32-client read load, mount-ready time, server memory.

Rows (``run() -> list[dict]`` with name, fake, real, unit):

* ``engine_events_per_s[MIX]``: the kmem workload fired in process (no FUSE)
  with MIX enabled: ``none``, ``tracefs`` (every tracing/ event),
  ``ktrace``, ``kmemtrace``, ``all``; in runs of the workload's
  ``batch_hint`` events (the batch path), the detail giving the rate in
  runs of 16 (one event at a time).  No real figure: the real kernel's
  cost per event is not comparable (``find /usr`` with the kmem events on
  makes about 0.7 M events/s, docs/figures.md#the-real-kernel).
* ``control_op_ms[rate R, pQ]``: ``open + read + close`` of
  ``tracing/tracing_on`` every 5 ms for PROBE_SECONDS while CLIENTS readers
  (``cat trace_pipe``, ``cat per_cpu/cpuN/trace_pipe_raw``, loops of
  ``cat trace``) read and the kmem workload runs with every tracer on at
  ``--rate R`` (0: flat out); p50 and p99, the median of CONTROL_TRIALS
  mounts with their spread.  Real: the same probe and the same
  clients on a scratch instance of the real tracefs with the kmem events on
  while ``find /usr`` loops (removed afterwards).
* ``mount_ready_s``: from starting ``fakedebugfs mount`` to the first answer
  from the mount (``tracing/tracing_on`` read), median of READY_TRIALS after
  one untimed, the package's bytecode compiled first (as installed).
  Real: ``mount -t tracefs`` and the same read.
* ``server_rss_MB_beyond_buffers[...]``: the server's VmRSS minus its buffers
  (ring buffers of ktrace and tracing/, kmemtrace relay channel): just
  mounted (relay untouched), and after RSS_EVENTS events with every tracer
  on (relay full).

    python -m bench dataplane       # or: python -m bench.bench_dataplane (JSON lines)
    python -m bench.bench_dataplane engine   # the engine rows only
    python -m bench.bench_dataplane control 5 0   # flat out's control rows, 5 mounts
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from . import FAKEDEBUGFS, Mount, cli, spread, write_trunc
from .load import ReadLoad, percentile, probe

MIXES = ("none", "tracefs", "ktrace", "kmemtrace", "all")
ENGINE_EVENTS = 600_000
ENGINE_EVENTS_ONE_BY_ONE = 60_000
WARM_EVENTS = 50_000
CLIENTS = 32
PROBE_SECONDS = 8.0
RATES = (0, 50_000)
CONTROL_TRIALS = 3  # mounts per rate (and real runs) for the control_op rows
READY_TRIALS = 9
RSS_EVENTS = 400_000
KMEM_EVENTS = ("kmalloc", "kfree", "kmem_cache_alloc", "kmem_cache_free")


# --- engine in process ----------------------------------------------------------------

def engine_rate(mix: str, events: int = ENGINE_EVENTS, chunk: int | None = None,
                clock=time.perf_counter) -> float:
    """Events/s of the kmem workload with *mix* enabled, in this process,
    fired as the server fires it: ``run(chunk)`` again and again, *chunk*
    being the workload's ``batch_hint`` (the batch path: each run is one
    ``EventBatch``) unless given (16: the server's old chunk, one by one);
    timed with *clock* (``time.thread_time``: this thread's CPU time, what
    other processes on a shared machine do not change)."""
    from fakedebugfs.engine.kernel import Kernel
    from fakedebugfs.sources.workloads import make_workload

    k = Kernel(cpus=2, buffer_size=1 << 20)
    if mix in ("ktrace", "all"):
        for entry in list(k.ktrace.order):
            k.ktrace.set_event_enabled(entry.name, True)
        k.ktrace.set_enabled(True)
    if mix in ("tracefs", "all"):
        for key in k.ftrace.event_keys():
            k.ftrace.set_event(key, True)
        k.ftrace.tracing_on = True
    if mix in ("kmemtrace", "all"):
        k.kmemtrace.set_enabled(True)
    wl = make_workload("kmem", k, seed=1)
    chunk = chunk or getattr(wl, "batch_hint", 16)
    wl.run(WARM_EVENTS)  # warm up: a few blocks generated, buffers wrapped once
    fired = 0
    t0 = clock()
    while fired < events:
        fired += wl.run(chunk)
    return fired / (clock() - t0)


def _batch_hint() -> int:
    from fakedebugfs.sources.workloads.slab_batch import SlabWorkload

    return SlabWorkload.batch_hint


def bench_engine() -> list[dict]:
    rows = []
    for mix in MIXES:
        one_by_one = engine_rate(mix, ENGINE_EVENTS_ONE_BY_ONE, chunk=16)
        rows.append({"name": f"engine_events_per_s[{mix}]", "fake": round(engine_rate(mix)),
                     "real": None, "unit": "events/s",
                     "detail": {"chunk": _batch_hint(), "one_by_one_chunk_16": round(one_by_one)}})
    return rows


# --- control ops under load -------------------------------------------------------------

def fake_control(workdir: str, rate: int, batch_ms: float | None = None) -> dict:
    extra = ("--batch-ms", batch_ms) if batch_ms else ()
    with Mount(workdir, "--workload", "kmem", "--rate", rate, "--enable-all", *extra) as mnt:
        tracing = os.path.join(mnt, "tracing")
        with ReadLoad(tracing, CLIENTS):
            time.sleep(1.0)
            t0, e0 = time.monotonic(), _status(mnt)["emitted"]
            samples = probe(os.path.join(tracing, "tracing_on"), PROBE_SECONDS)
            emitted = (_status(mnt)["emitted"] - e0) / (time.monotonic() - t0)
    return {"samples": samples, "events_per_s_under_load": round(emitted)}


def _status(mnt: str) -> dict:
    return json.loads(cli("status", mnt).stdout)


class RealTracefs:
    """A real tracefs mounted at a scratch directory, unmounted on exit
    (None when it cannot be mounted)."""

    def __init__(self, workdir: str):
        self.path = os.path.join(workdir, "real-tracefs")

    def __enter__(self):
        os.makedirs(self.path, exist_ok=True)
        if os.geteuid() or subprocess.run(["mount", "-t", "tracefs", "nodev", self.path],
                                          capture_output=True).returncode:
            return None
        return self.path

    def __exit__(self, *exc):
        subprocess.run(["umount", self.path], capture_output=True)


def real_control(workdir: str) -> dict | None:
    """The 32 clients on a scratch instance with the kmem events on while
    ``find /usr`` loops; the instance is removed afterwards."""
    with RealTracefs(workdir) as root:
        if root is None:
            return None
        inst = os.path.join(root, "instances", "fakedebugfs-bench")
        try:
            os.mkdir(inst)
        except OSError:
            return None
        finder = None
        try:
            for e in KMEM_EVENTS:
                write_trunc(os.path.join(inst, "events", "kmem", e, "enable"), "1")
            write_trunc(os.path.join(inst, "tracing_on"), "1")
            finder = subprocess.Popen(["sh", "-c", "while :; do find /usr >/dev/null 2>&1; done"],
                                      start_new_session=True)
            ncpu = len([d for d in os.listdir(os.path.join(inst, "per_cpu"))
                        if d.startswith("cpu")])
            with ReadLoad(inst, CLIENTS, cpus=ncpu):
                time.sleep(1.0)
                samples = probe(os.path.join(inst, "tracing_on"), PROBE_SECONDS)
        finally:
            if finder is not None:
                os.killpg(finder.pid, 9)
                finder.wait()
            write_trunc(os.path.join(inst, "tracing_on"), "0")
            for _ in range(50):  # readers may still hold files for a moment
                try:
                    os.rmdir(inst)
                    break
                except OSError:
                    time.sleep(0.1)
    return {"samples": samples}


def bench_control(workdir: str, trials: int = CONTROL_TRIALS, rates=RATES,
                  real: bool = True, batch_ms: float | None = None) -> list[dict]:
    """Each rate's p50 and p99: the median of *trials* runs (a new mount
    each), with their spread; the real kernel's likewise."""
    reals = [real_control(workdir) for _ in range(trials)] if real else []
    reals = [r for r in reals if r is not None]
    rows = []
    for rate in rates:
        got = [fake_control(workdir, rate, batch_ms) for _ in range(trials)]
        for q in (0.5, 0.99):
            fake_q = [percentile(g["samples"], q) for g in got]
            real_q = [percentile(r["samples"], q) for r in reals]
            rows.append({
                "name": f"control_op_ms[rate {rate or 'flat out'}, p{int(q * 100)}]",
                "fake": round(statistics.median(fake_q), 3),
                "real": round(statistics.median(real_q), 3) if real_q else None,
                "unit": "ms",
                "spread": {"fake": spread(fake_q), "real": spread(real_q)},
                "detail": {"samples": [len(g["samples"]) for g in got],
                           "max": [round(max(g["samples"]), 3) for g in got],
                           "events_per_s_under_load": [g["events_per_s_under_load"]
                                                       for g in got],
                           "clients": CLIENTS, "trials": trials}})
    return rows


# --- mount-ready time ----------------------------------------------------------------------

def _compile_package() -> None:
    """The package's bytecode, as an installed package has it (pip compiles
    on install): an editable checkout run with PYTHONDONTWRITEBYTECODE has
    none for the modules edited since, and recompiling them at every start
    would add ~0.25 s to each trial."""
    import compileall

    import fakedebugfs

    compileall.compile_dir(os.path.dirname(fakedebugfs.__file__), quiet=1)


def _ready_fake(workdir: str) -> float:
    mnt = tempfile.mkdtemp(prefix="ready-", dir=workdir)
    try:
        t0 = time.perf_counter()
        subprocess.run([FAKEDEBUGFS, "mount", mnt, "--workload", "kmem"], check=True,
                       capture_output=True, timeout=60)
        with open(os.path.join(mnt, "tracing", "tracing_on")) as fp:
            fp.read()
        return time.perf_counter() - t0
    finally:
        subprocess.run([FAKEDEBUGFS, "umount", mnt], capture_output=True, timeout=60)
        os.rmdir(mnt)


def _ready_real(workdir: str) -> float | None:
    mnt = tempfile.mkdtemp(prefix="ready-real-", dir=workdir)
    try:
        t0 = time.perf_counter()
        if os.geteuid() or subprocess.run(["mount", "-t", "tracefs", "nodev", mnt],
                                          capture_output=True).returncode:
            return None
        with open(os.path.join(mnt, "tracing_on")) as fp:
            fp.read()
        return time.perf_counter() - t0
    finally:
        subprocess.run(["umount", mnt], capture_output=True)
        os.rmdir(mnt)


def bench_ready(workdir: str) -> dict:
    _compile_package()
    _ready_fake(workdir)  # untimed: the files read at a start in the page cache
    fake = [_ready_fake(workdir) for _ in range(READY_TRIALS)]
    real = [r for r in (_ready_real(workdir) for _ in range(READY_TRIALS)) if r is not None]
    return {"name": "mount_ready_s", "fake": round(statistics.median(fake), 3),
            "real": round(statistics.median(real), 4) if real else None, "unit": "s",
            "spread": {"fake": spread(fake), "real": spread(real) if real else None},
            "detail": {"trials": [round(t, 3) for t in fake]}}


# --- memory -----------------------------------------------------------------------------------

def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fp:
        for line in fp:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _buffers(pid: int) -> int:
    """Resident bytes of the server's buffers at the default sizes, 2 CPUs:
    the ring buffers of ktrace and tracing/ (written whole at reset), and of
    the kmemtrace relay channel what /proc/PID/smaps shows resident in its
    per-CPU mappings (anonymous, touched as records arrive)."""
    from fakedebugfs.engine.ftrace.tracer import DEFAULT_BUFFER_KB
    from fakedebugfs.engine.kmemtrace.tracer import DEFAULT_SUBBUF_EVENTS, Abi
    from fakedebugfs.engine.ktrace.tracer import DEFAULT_BUF_SIZE

    ring = 2 * (DEFAULT_BUF_SIZE + DEFAULT_BUFFER_KB * 1024)
    relay_kb = 20 * DEFAULT_SUBBUF_EVENTS * Abi("2008-08").slot // 1024
    resident, size = 0, None
    with open(f"/proc/{pid}/smaps") as fp:
        for line in fp:
            if line.startswith("Size:"):
                size = int(line.split()[1])
            elif line.startswith("Rss:") and size == relay_kb:
                resident += int(line.split()[1]) * 1024
    return ring + resident


def bench_rss(workdir: str) -> list[dict]:
    rows = []
    with Mount(workdir, "--workload", "none", "--enable-all") as mnt:
        st = _status(mnt)
        rows.append({"name": "server_rss_MB_beyond_buffers[mounted]",
                     "fake": round((_rss(st["pid"]) - _buffers(st["pid"])) / 2**20, 1),
                     "real": None, "unit": "MB"})
    with Mount(workdir, "--workload", "kmem", "--rate", 0, "--count", RSS_EVENTS,
                   "--enable-all") as mnt:
        st = json.loads(cli("status", mnt, "--wait-done", "--timeout", 600, timeout=700).stdout)
        rows.append({"name": f"server_rss_MB_beyond_buffers[{RSS_EVENTS:,} events]",
                     "fake": round((_rss(st["pid"]) - _buffers(st["pid"])) / 2**20, 1),
                     "real": None, "unit": "MB"})
    return rows


def run() -> list[dict]:
    workdir = tempfile.mkdtemp(prefix="bench-dataplane-")
    try:
        return bench_engine() + bench_control(workdir) + [bench_ready(workdir)] + \
            bench_rss(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str]) -> list[dict]:
    """``engine``: the engine rows; ``control [TRIALS [RATE [BATCH_MS]]]``:
    the control_op rows of one rate (0: flat out), fake only; else all."""
    if argv[:1] == ["engine"]:
        return bench_engine()
    if argv[:1] == ["control"]:
        trials = int(argv[1]) if len(argv) > 1 else CONTROL_TRIALS
        rates = (int(argv[2]),) if len(argv) > 2 else RATES
        batch_ms = float(argv[3]) if len(argv) > 3 else None
        workdir = tempfile.mkdtemp(prefix="bench-dataplane-")
        try:
            return bench_control(workdir, trials, rates, real=False, batch_ms=batch_ms)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return run()


if __name__ == "__main__":
    import sys

    for row in main(sys.argv[1:]):
        print(json.dumps(row))
