"""ktrace/ (the 2009 ktrace RFC): the mmap + ioctl read path and poll wake-ups.

Rows (``run() -> list[dict]`` with name, fake, real, unit):

* ``ktrace_drain_events_per_s``: events per second that
  ``tests/c/ktrace_reader.c --drain`` (poll, GET_PRODUCED/GET_CONSUMED,
  copy the pages out of its MAP_SHARED mapping, decode, PUT_CONSUMED)
  takes from full buffers: a ``--rate 0 --count DRAIN_COUNT`` mount with
  16 MiB per CPU (nothing overwritten) is drained once the workload is
  done; the reader's clock starts as it disables tracing.
  Median of TRIALS fresh mounts; ``detail`` has each trial (events, pages,
  MB/s).
* ``ktrace_live_read_events_per_s``: the same reader attached while the
  workload fires LIVE_COUNT events flat out (``--rate 0``) into 1 MiB
  buffers: events read per second from the mount to the end of the final
  drain, with what was lost to overwrite in ``detail``.  The writer shares the server's one thread with the reader's
  requests, so this is the sustained rate of the whole loop, not of the
  reader alone.
* ``ktrace_poll_wake_latency_ms``: a poller blocked in poll() on every
  ``buffers/cpuN`` with only partial tail pages in the buffers; writing 0 to
  ``enabled`` finishes the tail pages and wakes it.  Time from the write to
  poll() returning, median of REPEATS (p90, min, max in ``detail``).

The real kernel has no ktrace (the RFC was never merged): ``real`` is n/a.

    python -m bench ktrace          # or: python -m bench.bench_ktrace (JSON lines)
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import statistics
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from . import Mount, cli

HERE = Path(__file__).resolve().parent
READER_SRC = HERE.parent / "tests" / "c" / "ktrace_reader.c"

DRAIN_COUNT = 600_000  # about 11 MB per CPU: fits 16 MiB buffers
TRIALS = 3
LIVE_COUNT = 300_000
REPEATS = 40

_IOR = lambda nr: (2 << 30) | (4 << 16) | (0xF5 << 8) | nr  # noqa: E731
_IOW = lambda nr: (1 << 30) | (4 << 16) | (0xF5 << 8) | nr  # noqa: E731
GET_PRODUCED, GET_CONSUMED, PUT_CONSUMED = _IOR(1), _IOR(2), _IOW(4)
U32 = struct.Struct("<I")


def _wait_done(mnt: str) -> dict:
    return json.loads(cli("status", mnt, "--wait-done", "--timeout", 600, timeout=700).stdout)


def _reader(workdir: str) -> str:
    out = os.path.join(workdir, "ktrace_reader")
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-o", out, str(READER_SRC)], check=True,
                   capture_output=True)
    return out


# --- read rates ------------------------------------------------------------------
# A --count workload starts firing at mount, so these mounts trace from boot
# with --enable ktrace: every ktrace event on, tracing/ and kmemtrace/ off, as
# a ktrace user runs it (--enable-all would also record each event into the
# 2,305-event tracefs buffers, and the workload's writer side would be timed).

def _enable_ktrace(mnt: str) -> None:
    """Switch every ktrace event and ktrace itself on through the files."""
    kt = os.path.join(mnt, "ktrace")
    for name in os.listdir(os.path.join(kt, "events")):
        with open(os.path.join(kt, "events", name), "w") as fp:
            fp.write("1")
    with open(os.path.join(kt, "enabled"), "w") as fp:
        fp.write("1")


def bench_drain(workdir: str, reader: str) -> dict:
    trials = []
    for seed in range(TRIALS):
        with Mount(workdir, "--enable", "ktrace", "--rate", 0, "--count", DRAIN_COUNT,
                   "--buffer-size", "16M", "--seed", seed) as mnt:
            _wait_done(mnt)  # an idle server: the drain has it to itself
            # --drain writes 0 to enabled (finishing the tail pages), then times the drain
            p = subprocess.run([reader, mnt, "--drain", "--json"], capture_output=True,
                               text=True, check=True, timeout=600)
            s = json.loads(p.stdout)
            trials.append({"events": s["read"], "overflow": s["overflow"], "pages": s["pages"],
                           "seconds": s["seconds"],
                           "events_per_s": round(s["read"] / s["seconds"]),
                           "MB_per_s": round(s["pages"] * 4096 / s["seconds"] / 1e6, 1)})
    return {"name": "ktrace_drain_events_per_s",
            "fake": statistics.median(t["events_per_s"] for t in trials),
            "real": None, "unit": "events/s", "detail": trials}


def bench_live(workdir: str, reader: str) -> dict:
    with Mount(workdir, "--enable", "ktrace", "--rate", 0, "--count", LIVE_COUNT,
               "--buffer-size", "1M") as mnt:
        t0 = time.monotonic()
        proc = subprocess.Popen([reader, mnt, "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            st = _wait_done(mnt)
            proc.terminate()  # the reader disables tracing, drains, reports
            out, err = proc.communicate(timeout=120)
            elapsed = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        s = json.loads(out)
    return {"name": "ktrace_live_read_events_per_s", "fake": round(s["read"] / elapsed),
            "real": None, "unit": "events/s",
            "detail": {"emitted": st["emitted"], "read": s["read"], "overflow": s["overflow"],
                       "seconds": round(elapsed, 3)}}


# --- poll wake latency ---------------------------------------------------------------

def _drain_fds(fds) -> None:
    for fd in fds:
        produced = U32.unpack(fcntl.ioctl(fd, GET_PRODUCED, b"\0" * 4))[0]
        fcntl.ioctl(fd, GET_CONSUMED, b"\0" * 4)
        fcntl.ioctl(fd, PUT_CONSUMED, U32.pack(produced))


def bench_poll_latency(workdir: str) -> dict:
    samples, retries = [], 0
    # 1000 events/s over 2 CPUs: a 4 KiB page holds ~110 events, so 20 ms of
    # tracing leaves partial tail pages and (almost always) no complete page.
    with Mount(workdir, "--rate", 1000) as mnt:
        _enable_ktrace(mnt)
        kt = os.path.join(mnt, "ktrace")
        names = sorted(os.listdir(os.path.join(kt, "buffers")))
        fds = [os.open(os.path.join(kt, "buffers", n), os.O_RDONLY) for n in names]
        enabled = os.open(os.path.join(kt, "enabled"), os.O_WRONLY)
        try:
            while len(samples) < REPEATS and retries < REPEATS:
                os.write(enabled, b"0")
                _drain_fds(fds)
                os.write(enabled, b"1")
                time.sleep(0.02)
                p = select.poll()
                for fd in fds:
                    p.register(fd, select.POLLIN)
                if p.poll(0):  # a page completed by itself: not this measurement
                    retries += 1
                    continue
                woke: list[int] = []
                armed = threading.Event()

                def poller():
                    armed.set()
                    if p.poll(5000):
                        woke.append(time.perf_counter_ns())

                t = threading.Thread(target=poller)
                t.start()
                armed.wait()
                time.sleep(0.005)  # let it block in poll()
                t0 = time.perf_counter_ns()
                os.write(enabled, b"0")
                t.join()
                if woke and woke[0] >= t0:
                    samples.append((woke[0] - t0) / 1e6)
                else:
                    retries += 1
        finally:
            os.close(enabled)
            for fd in fds:
                os.close(fd)
    if not samples:
        raise RuntimeError("no poll wake-up was measured")
    samples.sort()
    return {"name": "ktrace_poll_wake_latency_ms", "fake": round(statistics.median(samples), 3),
            "real": None, "unit": "ms",
            "detail": {"samples": len(samples), "retries": retries,
                       "p90": round(samples[int(0.9 * (len(samples) - 1))], 3),
                       "min": round(samples[0], 3), "max": round(samples[-1], 3)}}


def run() -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="bench-ktrace-") as workdir:
        reader = _reader(workdir)
        return [bench_drain(workdir, reader), bench_live(workdir, reader),
                bench_poll_latency(workdir)]


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
