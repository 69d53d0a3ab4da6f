"""Replay rate: events/s from a large recording, as fast as possible, into
a reader that keeps up (fakedebugfs.sources.replay).

The large recording is made first, by trace-cmd itself: the kmem/sched
fixture ``fixtures/replay/default-v7-zstd.dat`` replayed ``--loop`` times
into a fake while ``trace-cmd record`` records it (a v7 zstd trace.dat of
about LARGE_EVENTS events).  Rows (``run() -> list[dict]``):

* ``replay_events_per_s[engine]``: :func:`fakedebugfs.sources.replay.replay.replay_sync`
  of the large recording into an in-process kernel with every event
  enabled (no FUSE, no reader: the ring buffers overwrite).
* ``replay_events_per_s[mount, trace-cmd record]``: ``fakedebugfs replay
  MNT large.dat --as-fast-as-possible`` while ``trace-cmd record -e kmem -e
  sched -e raw_syscalls`` reads the mount; the replay's own event count and
  seconds (``replay_status``).  ``detail`` says whether every event was kept
  (the reader kept up: nothing overwritten).
* ``replay_events_per_s[mount, cat trace_pipe_raw]``: the same with one
  ``cat per_cpu/cpuN/trace_pipe_raw > /dev/null`` per CPU.

No real figure: the kernel has no replay.

    python -m bench replay       # or: python -m bench.bench_replay (JSON lines)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import ROOT

FIXTURE = ROOT / "fixtures" / "replay" / "default-v7-zstd.dat"
LARGE_EVENTS = int(os.environ.get("BENCH_REPLAY_EVENTS", 300_000))
SYSTEMS = ("kmem", "sched", "raw_syscalls")


def _record(fk, out: Path):
    argv = ["trace-cmd", "record", "-o", str(out)]
    for system in SYSTEMS:
        argv += ["-e", system]
    return fk.popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _cats(fk):
    cpus = sorted((fk.tracing / "per_cpu").iterdir())
    (fk.tracing / "events" / "enable").write_text("1")
    return [subprocess.Popen(["cat", str(d / "trace_pipe_raw")], stdout=subprocess.DEVNULL)
            for d in cpus]


def _stop(procs) -> None:
    for p in procs:
        p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def replay_into_mount(recording: Path, reader: str, out: Path, loop: int = 1) -> dict:
    """Replay *recording* into a fresh fake read by *reader* (``trace-cmd``
    recording into *out*, or ``cat``); the replay's status."""
    from fakedebugfs import Fake

    with Fake(cpus=2) as fk:
        procs = [_record(fk, out)] if reader == "trace-cmd" else _cats(fk)
        try:
            fk.wait_readers(timeout=60)
            cli = subprocess.run([sys.executable, "-m", "fakedebugfs", "replay", str(fk.root),
                                  str(recording), "--as-fast-as-possible", "--loop", str(loop),
                                  "--keep-timestamps", "--wait-enabled", "-q"],
                                 capture_output=True, text=True, timeout=1800)
            if cli.returncode != 0:
                raise RuntimeError(cli.stderr.strip())
            st = fk.call("replay_status", wait=0)
            fk.wait_consumed(complete_pages=True, timeout=300)
        finally:
            _stop(procs)
    return st


def large_recording(work: Path) -> tuple[Path, int]:
    """A v7 trace.dat of about LARGE_EVENTS events, recorded by trace-cmd."""
    from fakedebugfs.sources.replay import open_recording

    base = sum(cd.events for cd in open_recording(FIXTURE).buffer().cpus.values())
    out = work / "large.dat"
    replay_into_mount(FIXTURE, "trace-cmd", out, loop=max(1, LARGE_EVENTS // base))
    rec = open_recording(out)
    return out, sum(cd.events for cd in rec.buffer().cpus.values())


def engine_rate(recording: Path) -> dict:
    from fakedebugfs.engine.kernel import Kernel
    from fakedebugfs.sources.replay import open_recording
    from fakedebugfs.sources.replay.replay import replay_sync

    rec = open_recording(recording)
    kernel = Kernel(cpus=2)
    for key in kernel.ftrace.event_keys():
        kernel.ftrace.set_event(key, True)
    t = time.perf_counter()
    r = replay_sync(kernel, rec, keep_timestamps=True)
    seconds = time.perf_counter() - t
    return {"name": "replay_events_per_s[engine]", "fake": r.done / seconds, "real": None,
            "unit": "events/s", "detail": {"events": r.done, "seconds": round(seconds, 3)}}


def mount_rate(recording: Path, reader: str, work: Path) -> dict:
    st = replay_into_mount(recording, reader, work / f"again-{reader}.dat")
    label = "trace-cmd record" if reader == "trace-cmd" else "cat trace_pipe_raw"
    return {"name": f"replay_events_per_s[mount, {label}]",
            "fake": st["done"] / st["seconds"] if st["seconds"] else None, "real": None,
            "unit": "events/s",
            "detail": {"events": st["done"], "seconds": st["seconds"],
                       "committed": st["committed"], "kept_up": st["committed"] == st["done"]}}


def run() -> list[dict]:
    if shutil.which("trace-cmd") is None:
        raise RuntimeError("trace-cmd is not installed")
    work = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    try:
        large, events = large_recording(work)
        rows = [engine_rate(large)]
        for reader in ("trace-cmd", "cat"):
            rows.append(mount_rate(large, reader, work))
        for row in rows:
            row["detail"]["recording"] = f"{events} events, {large.stat().st_size} bytes (v7 zstd)"
        return rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
