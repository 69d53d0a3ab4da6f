"""trace-cmd against the fake, and trace_pipe_raw against the real tracefs.

Rows (``run() -> list[dict]`` with name, fake, real, unit):

* ``tracecmd_record_kmem_events_per_s``: kmem events per second that an
  unmodified ``trace-cmd record -e kmem`` (splice path, default 1408 KiB
  per-CPU buffers, through ``fakedebugfs run``) records from the fake with
  zero events lost (no overrun, no drop, no missed-events mark) over a
  SECONDS-long window: a sustained rate, not a burst the buffer absorbs.
  The workload is paced with ``--rate`` up a ladder (0: flat out) that
  stops at the first loss; the best lossless achieved rate (events recorded
  / span of their timestamps) is reported.  trace-cmd enables the kmem
  events itself (ktrace and kmemtrace stay off, as on a kernel without
  them), so the engine pays for tracing/ only; at ``--rate 0`` the figure is
  what the engine makes (``engine_events_per_s[tracefs]`` of the dataplane
  bench), not a limit of the read path.
  No real-kernel figure: the real kernel's rate is the workload's, not the
  tracer's.
* ``trace_pipe_raw_MB_per_s``: one reader (``raw_reader.c``: 64 KiB
  non-blocking read()s until EAGAIN) draining a full ``per_cpu/cpu0/
  trace_pipe_raw`` of BUFFER_KB, on the fake (filled by a ``--rate 0
  --count`` kmem workload) and on the real tracefs (filled by the four kmem
  events while ``find /usr`` runs on CPU 0).  The real tracefs is restored
  completely afterwards: tracing_on, event enables and per-CPU buffer sizes
  as found, trace cleared, our mount removed.  Each side is drained
  RAW_TRIALS times (a fresh fill each time), the two sides in turn, and
  the row gives the median MB/s of each, each pair's ratio and the load;
  ``detail`` has every drain and each side's best.

    python -m bench.bench_tracecmd          # prints the rows as JSON lines
    python -m bench.bench_tracecmd --raw    # the trace_pipe_raw row alone
    python -m bench.bench_tracecmd --trials 1000000 3   # one rate, 3 runs (a JSON line each:
                                            # events, span, lost, per-CPU counters, load)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from . import FAKEDEBUGFS, KMEM_STAMP, lost_marks, measured, recording, spread, write_trunc

HERE = Path(__file__).resolve().parent
RATES = (25_000, 50_000, 100_000, 150_000, 200_000, 300_000, 500_000, 1_000_000, 1_200_000,
         1_500_000, 0)  # --rate ladder (0: flat out), stops at the first loss
SECONDS = 6  # recording window
BUFFER_KB = 8192  # per-CPU buffer drained by the trace_pipe_raw row
RAW_TRIALS = 5  # drains on each side, in turn; the row gives the medians (one drain takes 10-40 ms)
KMEM_EVENTS = ("kmalloc", "kfree", "kmem_cache_alloc", "kmem_cache_free")


def _reader(workdir: str) -> str:
    out = os.path.join(workdir, "raw_reader")
    subprocess.run(["gcc", "-O2", "-Wall", "-o", out, str(HERE / "raw_reader.c")], check=True,
                   capture_output=True)
    return out


def _read_raw(reader: str, path: str) -> tuple[int, float]:
    out = subprocess.run([reader, path], capture_output=True, text=True, check=True,
                         timeout=120).stdout.split()
    return int(out[0]), float(out[1])


# --- trace-cmd record through fakedebugfs run -------------------------------------------

def record_trial(rate: int, workdir: str, batch_ms: float | None = None) -> dict:
    dat = os.path.join(workdir, f"rec{rate}.dat")
    count = (rate or 1_000_000) * (SECONDS + 4)  # more than the window takes
    extra = ["--batch-ms", str(batch_ms)] if batch_ms else []
    cmd = [FAKEDEBUGFS, "run", "--cpus", "2", "--workload", "kmem", "--rate", str(rate),
           "--count", str(count), "--seed", "1", *extra, "--",
           "trace-cmd", "record", "-e", "kmem", "-o", dat, "sleep", str(SECONDS)]
    _, text, stats = recording(cmd, dat)
    out = measured(text, stats, [float(m) for m in KMEM_STAMP.findall(text)])
    # where a loss was: each CPU's buffer counters at the end, and the
    # marks of pages a recorder found overwritten
    return {"rate": rate, **out, "per_cpu": _per_cpu(stats), "lost_marks": lost_marks(text)}


def _per_cpu(stats: str) -> list[dict]:
    """``trace-cmd report --stat``'s kernel buffer counters, per CPU."""
    out = []
    for part in re.split(r"^CPU: \d+$", stats, flags=re.M)[1:]:
        counts = {k.replace(" ", "_"): int(v) for k, v in re.findall(
            r"^(overrun|commit overrun|dropped events|read events): (\d+)", part, re.M)}
        out.append(counts)
    return out


def trials_at(rate: int, trials: int, batch_ms: float | None = None) -> list[dict]:
    """*trials* recordings at one *rate* (each a fresh ``fakedebugfs run``):
    whether a rate holds every run, not once."""
    workdir = tempfile.mkdtemp(prefix="bench-tracecmd-")
    try:
        return [record_trial(rate, workdir, batch_ms) for _ in range(trials)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def bench_record(workdir: str, batch_ms: float | None = None) -> dict:
    """The best rate recorded without loss, at the default ``--batch-ms``
    or the one given (longer batches: the engine faster, requests slower)."""
    trials = []
    for rate in RATES:
        trials.append(record_trial(rate, workdir, batch_ms))
        if trials[-1]["lost"]:
            break
    clean = [t for t in trials if t["lost"] == 0 and t["events"]]
    best = max(clean, key=lambda t: t["per_s"]) if clean else None
    label = f"[--batch-ms {batch_ms}]" if batch_ms else ""
    return {"name": f"tracecmd_record_kmem_events_per_s{label}",
            "fake": round(best["per_s"]) if best else 0, "real": None, "unit": "events/s",
            "detail": trials}


# --- trace_pipe_raw: fake -------------------------------------------------------------------

def _fake_fill_and_read(reader: str, mnt: str, count: int) -> tuple[int, float]:
    subprocess.run([FAKEDEBUGFS, "mount", mnt, "--cpus", "2", "--workload", "kmem",
                    "--rate", "0", "--count", str(count), "--enable-all"],
                   check=True, capture_output=True, timeout=60)
    try:
        tr = os.path.join(mnt, "tracing")
        write_trunc(os.path.join(tr, "tracing_on"), "0")
        write_trunc(os.path.join(tr, "buffer_size_kb"), str(BUFFER_KB))
        write_trunc(os.path.join(tr, "trace"), "")
        write_trunc(os.path.join(tr, "tracing_on"), "1")
        subprocess.run([FAKEDEBUGFS, "status", mnt, "--wait-done", "--timeout", "600"],
                       check=True, capture_output=True, timeout=700)
        write_trunc(os.path.join(tr, "tracing_on"), "0")
        return _read_raw(reader, os.path.join(tr, "per_cpu", "cpu0", "trace_pipe_raw"))
    finally:
        subprocess.run([FAKEDEBUGFS, "umount", mnt], capture_output=True, timeout=60)


# --- trace_pipe_raw: the real tracefs -------------------------------------------------------

def _read(path: str) -> str:
    with open(path) as fp:
        return fp.read()


def real_raw(reader: str, workdir: str) -> tuple[int, float] | None:
    mnt = os.path.join(workdir, "real")
    os.mkdir(mnt)
    if subprocess.run(["mount", "-t", "tracefs", "nodev", mnt], capture_output=True).returncode:
        return None
    saved: dict[str, str] = {}
    try:
        ncpu = len([d for d in os.listdir(os.path.join(mnt, "per_cpu")) if d.startswith("cpu")])
        files = ["tracing_on"] + [f"per_cpu/cpu{c}/buffer_size_kb" for c in range(ncpu)] + \
                [f"events/kmem/{e}/enable" for e in KMEM_EVENTS]
        for f in files:
            text = _read(os.path.join(mnt, f))
            # "7 (expanded: 1408)": a never-used buffer; the size it expands
            # to is what any later user gets, so that is what is restored
            m = re.search(r"expanded: (\d+)", text)
            saved[f] = m.group(1) if m else text.split()[0]
        write_trunc(os.path.join(mnt, "tracing_on"), "0")
        write_trunc(os.path.join(mnt, "buffer_size_kb"), str(BUFFER_KB))
        write_trunc(os.path.join(mnt, "trace"), "")
        for e in KMEM_EVENTS:
            write_trunc(os.path.join(mnt, f"events/kmem/{e}/enable"), "1")
        write_trunc(os.path.join(mnt, "tracing_on"), "1")
        stats = os.path.join(mnt, "per_cpu/cpu0/stats")
        for _ in range(6):  # until cpu0's buffer has wrapped (overrun) at least once
            subprocess.run(["taskset", "-c", "0", "find", "/usr"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=120)
            if int(re.search(r"overrun: (\d+)", _read(stats)).group(1)):
                break
        write_trunc(os.path.join(mnt, "tracing_on"), "0")
        return _read_raw(reader, os.path.join(mnt, "per_cpu/cpu0/trace_pipe_raw"))
    finally:
        try:
            write_trunc(os.path.join(mnt, "tracing_on"), "0")
            for e in KMEM_EVENTS:
                f = f"events/kmem/{e}/enable"
                if f in saved:
                    write_trunc(os.path.join(mnt, f), saved[f])
            write_trunc(os.path.join(mnt, "trace"), "")
            for f, value in saved.items():
                if f.endswith("buffer_size_kb"):
                    write_trunc(os.path.join(mnt, f), value)
            write_trunc(os.path.join(mnt, "tracing_on"), saved.get("tracing_on", "0"))
        finally:
            subprocess.run(["umount", mnt], capture_output=True)


def bench_raw(workdir: str) -> dict:
    """The drains of each side taken in turn (fake, kernel, fake, ...), the
    kernel's under ``flock /tmp/real-tracefs.lock``: a drain lasts 10-40 ms,
    a few of this shared machine's scheduling slices, so a pair is only
    comparable when taken at one moment (``spread["ratio"]``: each pair's
    fake/real MB/s); ``detail["best"]``: each side's fastest drain, the one
    least cut into by other work."""
    import fcntl

    from . import pair_ratios

    reader = _reader(workdir)
    count = 2 * BUFFER_KB * 1024 // 40
    before = os.getloadavg()[0]
    fake, real = [], []
    for i in range(RAW_TRIALS):
        fake.append(_fake_fill_and_read(reader, _mkdir(workdir, f"mnt{i}"), count))
        with open("/tmp/real-tracefs.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            real.append(real_raw(reader, _mkdir(workdir, f"real{i}")))
    row = {"name": "trace_pipe_raw_MB_per_s", "fake": _median_mb(fake), "real": None,
           "unit": "MB/s", "detail": {"fake": fake, "best": {"fake": max(_rates(fake))}},
           "spread": {"fake": spread(_rates(fake)), "real": None},
           "load": [round(before, 2), round(os.getloadavg()[0], 2)]}
    if all(real):
        row["real"] = _median_mb(real)
        row["detail"]["real"] = real
        row["detail"]["best"]["real"] = max(_rates(real))
        row["spread"]["real"] = spread(_rates(real))
        row["spread"]["ratio"] = spread(pair_ratios(_rates(fake), _rates(real)))
        row["paired"] = True
    return row


def _rates(drains: list[tuple[int, float]]) -> list[float]:
    return [round(b / t / 1e6, 1) if t else 0.0 for b, t in drains]


def _median_mb(drains: list[tuple[int, float]]) -> float:
    """The median MB/s of ``(bytes, seconds)`` drains."""
    return round(statistics.median(b / t / 1e6 if t else 0.0 for b, t in drains), 1)


def _mkdir(parent: str, name: str) -> str:
    path = os.path.join(parent, name)
    os.makedirs(path, exist_ok=True)
    return path


def run() -> list[dict]:
    if os.geteuid() != 0 or shutil.which("trace-cmd") is None:
        return []
    workdir = tempfile.mkdtemp(prefix="bench-tracecmd-")
    try:
        return [bench_record(workdir), bench_record(workdir, 4), bench_raw(workdir)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--raw"]:
        workdir = tempfile.mkdtemp(prefix="bench-tracecmd-")
        try:
            print(json.dumps(bench_raw(workdir)))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    elif sys.argv[1:2] == ["--trials"]:  # --trials RATE N [BATCH_MS]: one rate, N runs
        args = sys.argv[2:]
        for t in trials_at(int(args[0]), int(args[1]), float(args[2]) if args[2:] else None):
            print(json.dumps(t))
    else:
        for row in run():
            print(json.dumps(row))
