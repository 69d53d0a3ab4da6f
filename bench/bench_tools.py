"""Control tools as a user runs them, under the default workload and
without one, beside the real kernel (issue 37).

Every row takes its trials in turn (fake, [fake,] kernel, fake, ...): each
side is a process set up first and kept between trials (the fake's inside
one ``fakedebugfs run``, its start not timed; the kernel's in a private
mount namespace), so a pair of trials is measured at one moment of this
shared machine's drifting speed.  Each row carries ``"load"``: the
1-minute load average before and after its trials, and the module's first
row the machine's kernel (``uname -r``): a figure without the load it was
taken at says little here.

* ``tracecmd_stat_s[workload default]``, ``[workload none]``: ``trace-cmd
  stat`` inside a ``fakedebugfs run`` with the default workload (30,000
  events/s) and with ``--workload none``, against the kernel's;
  ``tracecmd_stat_s default/none``: the pairs' ratio of the two fakes
  (``fake`` the default workload's, ``real`` the other's): what the
  workload costs a control tool (the target: within 1.2x).
* ``tracecmd_reset_s[...]``: the same for ``trace-cmd reset`` (the kernel's
  under ``flock /tmp/real-tracefs.lock``, its top level put back).
* ``perf_list_tracepoint_s``, ``tracecmd_list_eto_s`` (``trace-cmd list -e
  -t -o``), ``bpftrace_list_s`` (``bpftrace -l 'tracepoint:*'``, where it
  runs): listings, default workload.
* ``tracecmd_stream_ready_s``: ``trace-cmd stream -e sched:sched_switch``
  started until every CPU's ``trace_pipe_raw`` is open in one of its
  processes, then ^C (default workload).

The C libfuse floor of the same system calls is ``python -m bench floor``.

    python -m bench tools floor           # these rows and the floor's, as one table
    python -m bench.bench_tools           # rows as JSON lines
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import FAKEDEBUGFS, ROOT, run_exact
from .bench_control import (TrialProcess, _in_namespace_mount, _ncpus, _until_readers,
                            interleaved, namespace_trials, real_process, row, top_level_saved)

TRIALS = 5
TRACING = "/sys/kernel/tracing"
LISTINGS = {
    "perf_list_tracepoint_s": ["perf", "list", "tracepoint"],
    "tracecmd_list_eto_s": ["trace-cmd", "list", "-e", "-t", "-o"],
    "bpftrace_list_s": ["bpftrace", "-l", "tracepoint:*"],
}
STREAM = ["trace-cmd", "stream", "-e", "sched:sched_switch"]


def machine() -> dict:
    """The machine's kernel and CPUs, and its load now."""
    return {"kernel": os.uname().release, "cpus": os.cpu_count(), "load": os.getloadavg()[0]}


def loaded(rows: list[dict], before: float) -> list[dict]:
    """*rows* with the load average before and after their trials."""
    after = os.getloadavg()[0]
    for r in rows:
        r["load"] = [round(before, 2), round(after, 2)]
    return rows


# --- one trial per line read, in the side's namespace ---------------------------------------

def command_loop(argv) -> None:
    """A trial per line read: *argv* run to its end, its seconds answered."""
    print("ready", flush=True)
    for _ in sys.stdin:
        t0 = time.perf_counter()
        run_exact(argv, 600, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(time.perf_counter() - t0, flush=True)


def stream_loop() -> None:
    """A trial per line read: ``trace-cmd stream`` until its readers are
    open, then SIGINT (not timed)."""
    ncpus = _ncpus(TRACING)
    print("ready", flush=True)
    for _ in sys.stdin:
        proc = subprocess.Popen(STREAM, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        t0 = time.perf_counter()
        try:
            took = _until_readers(proc.pid, ncpus, t0)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        print(took, flush=True)


def fake_side(what: str, workload: str = "default"):
    """Trials of *what* (a LISTINGS name, ``stream``, or a trace-cmd
    subcommand) inside one ``fakedebugfs run --workload WORKLOAD``."""
    return TrialProcess([FAKEDEBUGFS, "run", "--workload", workload, "--", sys.executable,
                         "-m", "bench.bench_tools", "--loop", what], cwd=ROOT)


def real_side(what: str):
    return namespace_trials([sys.executable, "-m", "bench.bench_tools", "--real-loop", what],
                            what, cwd=ROOT)


# --- rows ----------------------------------------------------------------------------------

def workload_rows(tool: str, trials: int) -> list[dict]:
    """``trace-cmd TOOL`` under the default workload and none, with the
    kernel's, in turn."""
    before = os.getloadavg()[0]
    with fake_side(tool) as busy, fake_side(tool, "none") as idle, real_process(tool) as real:
        (b, i), r = interleaved(trials, real, busy, idle)
    name = f"tracecmd_{tool}_s"
    return loaded([row(f"{name}[workload default]", "s", b, r, paired=True),
                   row(f"{name}[workload none]", "s", i, r, paired=True),
                   row(f"{name} default/none", "s", b, i, paired=True)], before)


def single_row(name: str, what: str, trials: int) -> list[dict]:
    before = os.getloadavg()[0]
    with fake_side(what) as fake, real_side(what) as real:
        (f,), r = interleaved(trials, real, fake)
    return loaded([row(name, "s", f, r, paired=True)], before)


def run(trials: int = TRIALS) -> list[dict]:
    if shutil.which("trace-cmd") is None:
        return []
    rows: list[dict] = []

    def add(name: str, make) -> None:
        try:
            rows.extend(make())
        except Exception as err:  # report, go on with the next row
            rows.append({"name": f"{name}: error", "fake": None, "real": None, "unit": "",
                         "detail": f"{type(err).__name__}: {err}"})
    for tool in ("stat", "reset"):
        add(f"tracecmd_{tool}_s", lambda tool=tool: workload_rows(tool, trials))
    for name, argv in LISTINGS.items():
        if shutil.which(argv[0]):
            add(name, lambda name=name: single_row(name, name, trials))
    add("tracecmd_stream_ready_s",
        lambda: single_row("tracecmd_stream_ready_s", "stream", trials))
    if rows:
        rows[0].setdefault("detail", {})
        if isinstance(rows[0]["detail"], dict):
            rows[0]["detail"]["machine"] = machine()
    return rows


def _main(argv: list[str]) -> None:
    if argv[:1] in (["--loop"], ["--real-loop"]):
        what = argv[1]
        if argv[0] == "--real-loop":
            _in_namespace_mount()
        if what == "stream":
            with (top_level_saved() if argv[0] == "--real-loop" else contextlib.nullcontext()):
                stream_loop()
        elif what in LISTINGS:
            command_loop(LISTINGS[what])
        else:
            command_loop(["trace-cmd", what])
        return
    for r in run():
        print(json.dumps(r))


if __name__ == "__main__":
    _main(sys.argv[1:])
