"""kmemtrace/ relay reads by the C reader.

Rows (``run() -> list[dict]`` with name, fake, real, unit):

* ``kmemtrace_relay_read_records_per_s``: records per second that
  ``tests/c/kmemtrace_reader.c -d -q`` (August 2008 ABI, read() of 256 KiB
  until 0 on every ``kmemtrace/cpuN``) decodes while draining full relay
  channels: a ``--workload kmem --rate 0 --count COUNT`` mount with
  SUBBUFS x 512 KiB sub-buffers per CPU (nothing overrun), read once the
  workload is done; the median of TRIALS fills, each trial in ``detail``
  (records, bytes, seconds, MB/s).  A drain lasts tens of milliseconds, so
  trials on a busy 2-CPU machine spread by 2x.  No real-kernel figure: the
  relay kmemtrace was never merged and today's kernel has no such file.

    python -m bench.bench_kmemtrace          # prints the rows as JSON lines
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from . import FAKEDEBUGFS

HERE = Path(__file__).resolve().parent
READER_SRC = HERE.parent / "tests" / "c" / "kmemtrace_reader.c"
COUNT = 400_000  # about 7.2 MB per CPU
SUBBUFS = 20  # x 512 KiB = 10 MiB per CPU (the default): nothing is overrun
TRIALS = 5  # a drain takes a few tens of ms: the median of several fills
READ_SIZE = 256 * 1024
SUMMARY = re.compile(r"records (\d+) bytes (\d+) seconds ([0-9.]+)")


def _reader(workdir: str) -> str:
    out = os.path.join(workdir, "kmemtrace_reader")
    subprocess.run(["gcc", "-O2", "-Wall", "-o", out, str(READER_SRC)], check=True,
                   capture_output=True)
    return out


def _drain(reader: str, mnt: str, read_size: int) -> dict:
    p = subprocess.run([reader, "-d", "-q", "-b", str(read_size), os.path.join(mnt, "kmemtrace")],
                       capture_output=True, text=True, check=True, timeout=600)
    records, nbytes, seconds = SUMMARY.search(p.stderr).groups()
    return {"read_size": read_size, "records": int(records), "bytes": int(nbytes),
            "seconds": float(seconds)}


def _filled_mount(mnt: str) -> None:
    subprocess.run([FAKEDEBUGFS, "mount", mnt, "--cpus", "2", "--workload", "kmem", "--rate", "0",
                    "--count", str(COUNT), "--kmemtrace-subbufs", str(SUBBUFS), "--enable-all",
                    "--seed", "1"],
                   check=True, capture_output=True, timeout=60)
    subprocess.run([FAKEDEBUGFS, "status", mnt, "--wait-done", "--timeout", "600"],
                   check=True, capture_output=True, timeout=700)


def _overruns(mnt: str) -> int:
    with open(os.path.join(mnt, "kmemtrace", "total_overruns")) as fp:
        return int(fp.read())


def bench_relay_read(workdir: str) -> dict:
    reader = _reader(workdir)
    trials = []
    for _ in range(TRIALS):
        mnt = tempfile.mkdtemp(prefix="kmtbench-", dir=workdir)
        try:
            _filled_mount(mnt)
            trial = _drain(reader, mnt, READ_SIZE)
            trial["overruns"] = _overruns(mnt)
            trials.append(trial)
        finally:
            subprocess.run([FAKEDEBUGFS, "umount", mnt], capture_output=True, timeout=60)
            os.rmdir(mnt)
    for t in trials:
        t["records_per_s"] = round(t["records"] / t["seconds"]) if t["seconds"] else 0
        t["MB_per_s"] = round(t["bytes"] / t["seconds"] / 1e6, 1) if t["seconds"] else 0
    if any(t["overruns"] or t["records"] != COUNT for t in trials):
        raise RuntimeError(f"records were lost: {trials}")
    median = statistics.median(t["records_per_s"] for t in trials)
    return {"name": "kmemtrace_relay_read_records_per_s", "fake": round(median),
            "real": None, "unit": "records/s", "detail": trials}


def run() -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="bench-kmemtrace-") as workdir:
        return [bench_relay_read(workdir)]


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
