"""fakedebugfs benchmarks: ``python -m bench [NAME ...]`` (``make bench``).

Each ``bench/bench_<name>.py`` module exposes ``run() -> list[dict]``; a row
is ``{"name", "fake", "real", "unit"}`` plus an optional ``"detail"`` (any
JSON) and ``"spread"``: ``{"fake": [min, median, max], "real": [...]}`` over
the row's trials, printed beside the figures (a row measured once has
none); a row whose two sides' trials were taken in turn (fake, real, fake,
...) says ``"paired": true`` and adds ``"ratio"`` to ``spread``: min/median/max
of each pair's fake/real (``pair_ratios``).  ``fake`` is the figure measured on fakedebugfs (the median of the
trials where there are several), ``real`` the same measurement on the real
kernel, or None when the real kernel has nothing to compare (printed
``n/a``).  ``python -m bench`` runs every module (or
those named) and prints one table; a module that fails gets an ``error``
row and the command exits nonzero.  To add rows, drop in a new module.
"""

from __future__ import annotations

import json
import os
import pkgutil
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PREFIX = "bench_"
FAKEDEBUGFS = str(Path(sys.executable).parent / "fakedebugfs")


def cli(*args, timeout=120) -> subprocess.CompletedProcess:
    """Run the ``fakedebugfs`` command (output captured; CalledProcessError on failure)."""
    return subprocess.run([FAKEDEBUGFS, *map(str, args)], check=True, capture_output=True,
                          text=True, timeout=timeout)


# the kmem events of a recording's ``trace-cmd report -t``: their timestamps
KMEM_STAMP = re.compile(r"\]\s+(\d+\.\d+): (?:kmalloc|kfree|kmem_cache_alloc|kmem_cache_free|"
                        r"mm_page_alloc|mm_page_free):")


def recording(cmd, dat: str, timeout: float = 300) -> tuple:
    """Run *cmd* (a ``fakedebugfs run ...`` that records into *dat*;
    RuntimeError if it fails), then read the recording back: ``(its
    CompletedProcess, trace-cmd report -t, trace-cmd report --stat)``."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-500:]}")
    report = subprocess.run(["trace-cmd", "report", "-t", "-i", dat], capture_output=True,
                            text=True, timeout=300).stdout
    stats = subprocess.run(["trace-cmd", "report", "--stat", "-i", dat], capture_output=True,
                           text=True, timeout=60).stdout
    return p, report, stats


def lost_marks(report: str) -> int:
    """The pages a recorder found overwritten, as ``trace-cmd report``
    marks them (trace-cmd 3.1: ``CPU:N [123 EVENTS DROPPED]``)."""
    return report.count("LOST EVENTS") + report.count("EVENTS DROPPED")


def measured(report: str, stats: str, stamps) -> dict:
    """Events, span, rate and losses of one recording (its ``trace-cmd
    report -t`` and ``report --stat`` texts; *stamps*: its events'
    timestamps): the buffers' overruns and drops, and the lost marks."""
    lost = sum(int(n) for n in re.findall(r"^(?:overrun|dropped events|commit overrun): (\d+)",
                                          stats, re.M))
    span = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
    return {"events": len(stamps), "span": span, "lost": lost + lost_marks(report),
            "per_s": len(stamps) / span if span else 0.0,
            "load": round(os.getloadavg()[0], 2)}


def write_trunc(path: str, text: str) -> None:
    """One write of *text* to a file opened O_WRONLY | O_TRUNC, as trace-cmd
    writes control files (tracefs's ``trace`` is cleared by the O_TRUNC)."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def run_exact(argv, timeout: float, check: bool = True, capture: bool = False,
              **popen) -> subprocess.CompletedProcess:
    """``subprocess.run(argv)`` whose end is seen the moment the command
    exits, for a command whose time is measured.  ``subprocess.run(...,
    timeout=T)`` waits in sleeps that double up to 50 ms (CPython's wait
    loop on POSIX), so a timed command came out as 63.5 ms or that plus a
    multiple of 50 (the real kernel's ``trace-cmd stat``, 65-85 ms, read
    0.064 or 0.115 s).  Here the wait blocks in ``waitpid``, and a timer
    kills the command after *timeout* s (TimeoutExpired).  *capture*: its
    stdout and stderr as text.  (A Popen already started is waited for
    the same way with ``fakedebugfs.server.launcher.wait_exit``.)"""
    if capture:
        popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = subprocess.Popen(argv, **popen)
    expired = threading.Event()

    def kill() -> None:
        expired.set()
        proc.kill()
    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        out, err = proc.communicate()
    finally:
        timer.cancel()
    if expired.is_set():
        raise subprocess.TimeoutExpired(argv, timeout, out, err)
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv, out, err)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


class Mount:
    """A fakedebugfs mount made with the CLI for the length of a ``with`` block."""

    def __init__(self, workdir: str, *options):
        self.path = tempfile.mkdtemp(prefix="bench-", dir=workdir)
        self.options = options

    def __enter__(self) -> str:
        cli("mount", self.path, *self.options)
        return self.path

    def __exit__(self, *exc):
        subprocess.run([FAKEDEBUGFS, "umount", self.path], capture_output=True, timeout=60)
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def spread(values) -> list:
    """``[min, median, max]`` of a row's trials (None when there are none):
    its ``"spread"`` for one side."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return [round(min(values), 6), round(statistics.median(values), 6), round(max(values), 6)]


def pair_ratios(fake, real) -> list:
    """``fake[i] / real[i]`` of trials taken in turn (fake, real, fake, ...),
    the pairs where both sides have a figure: each pair's ratio is taken at
    one moment of the machine's drifting speed, which the ratio of the two
    sides' medians is not.  ``spread`` of it is a row's ``spread["ratio"]``."""
    return [f / r for f, r in zip(fake, real) if f is not None and r]


def guest_outputs(profile: str, script: str, trials: int, name: str = "bench") -> list[str]:
    """The text *script* prints in the oracle guest of *profile*, run
    *trials* times in one guest of the bench's own (*name*: booted for it
    and stopped after); empty when the oracle cannot run here."""
    from fakedebugfs.oracle import Guest, why_not

    if why_not():
        return []
    guest = Guest(profile, name=name)
    out = []
    try:
        guest.start()  # (Guest.run boots none)
        for _ in range(trials):
            out.append(guest.run(script, check=True).text)
    finally:
        guest.stop()
    return out


def available() -> list[str]:
    """Names of the benchmark modules (without ``bench_``), sorted."""
    return sorted(m.name[len(PREFIX):] for m in pkgutil.iter_modules([str(HERE)])
                  if m.name.startswith(PREFIX))


def compiled_and_python(module: str, rows) -> list[dict]:
    """``rows(PATH)`` of a benchmark of the engine's compiled fast paths:
    here ("compiled", or "python" when ``FAKEDEBUGFS_PURE`` is set or they
    are not built), then the Python paths' in a child process run with
    ``FAKEDEBUGFS_PURE=1`` (the switch is read once, at import)."""
    from fakedebugfs.engine.core import fast

    out = rows("compiled" if fast.use_fast() else "python")
    if fast.use_fast():
        env = dict(os.environ, FAKEDEBUGFS_PURE="1")
        child = subprocess.run([sys.executable, "-m", module], env=env, cwd=ROOT,
                               capture_output=True, text=True, check=True)
        out += [json.loads(line) for line in child.stdout.splitlines() if line.strip()]
    return out


def print_rows(rows) -> None:
    """A benchmark module run alone: its rows as JSON lines."""
    for row in rows:
        print(json.dumps(row))


class CpuTimed:
    """*fn* wrapped to add up the thread CPU time of its calls, the calls
    and the events they handled (``count(args, result)``): what a batch
    costs per batch and per event, whatever else this shared machine runs."""

    def __init__(self, fn, count):
        self.fn, self.count = fn, count
        self.spent, self.calls, self.events = 0.0, 0, 0

    def __call__(self, *args):
        t0 = time.thread_time()
        result = self.fn(*args)
        self.spent += time.thread_time() - t0
        self.calls += 1
        self.events += self.count(args, result)
        return result

    def figures(self) -> dict:
        return {"us_per_event": self.spent / max(self.events, 1) * 1e6,
                "ms_per_batch": self.spent / max(self.calls, 1) * 1e3,
                "events_per_batch": self.events / max(self.calls, 1)}
