"""``trace-cmd stream -e sched_switch`` interrupted by SIGINT: does it end?
(issue 35; docs/cli.md, "trace-cmd's races, lost at the fake's pace").

Each trial starts ``fakedebugfs run -- trace-cmd stream -e sched_switch``
(default workload), sends SIGINT to run's process group *at* seconds after
trace-cmd started (run forwards it once), and counts the trial as ended
when everything exited within ``BOUND`` seconds of the SIGINT; it also
notes when trace-cmd forked its recorders (polled).  The real side is the
same in the profile's oracle guest (the Debian 6.12 kernel under QEMU: its
own context switches, about 1,600 ``sched_switch`` a second idle, against
the default workload's 2,600), where a trial that has not ended after 30 s
is killed and counted as hung.

Rows: ``stream_sigint_ended[at N s]``, the fraction of trials that ended
within ``BOUND`` s (fake, guest), with each trial's detail.

    python -m bench.bench_stream_sigint [--at 2 --at 25] [--runs 10] [--no-guest]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time

from . import FAKEDEBUGFS

BOUND = 5.0
RUNS = 3
POINTS = (2.0, 25.0)
STREAM = "trace-cmd stream -e sched_switch"

# the guest's trials: one line each, "at=N recorders=K ended=MS" or "... hang"
GUEST_LOOP = """\
for i in $(seq {runs}); do
  {stream} > /dev/null 2>&1 & pid=$!
  sleep {at}
  kids=$(pgrep -c -P $pid)
  t0=$(date +%s%N); kill -INT $pid
  for j in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then
    echo "at={at} recorders=$kids hang"; pkill -9 -P $pid; kill -9 $pid
    wait $pid 2>/dev/null; trace-cmd reset > /dev/null 2>&1
  else
    wait $pid; echo "at={at} recorders=$kids ended=$(( ($(date +%s%N) - t0) / 1000000 ))"
  fi
done
"""


def _tracecmds(sid: int) -> int:
    out = subprocess.run(["ps", "-s", str(sid), "-o", "comm="], capture_output=True,
                         text=True).stdout
    return out.split().count("trace-cmd")


def fake_trial(at: float, bound: float = BOUND) -> dict:
    """One trial on the fake: seconds from the SIGINT to the end (None:
    not within *bound*), when the recorders forked, the load."""
    proc = subprocess.Popen([FAKEDEBUGFS, "run", "--", "sh", "-c",
                             f"echo go; exec {STREAM} > /dev/null 2>&1"],
                            stdout=subprocess.PIPE, start_new_session=True)
    try:
        proc.stdout.readline()  # trace-cmd starts now
        start = time.monotonic()
        forked = None
        while time.monotonic() < start + at:
            if forked is None and _tracecmds(proc.pid) >= 2:
                forked = round(time.monotonic() - start, 2)
            time.sleep(0.05)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=bound)
            ended = round(time.monotonic() - sent, 2)
        except subprocess.TimeoutExpired:
            ended = None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # run's init takes the rest with it
            proc.wait()
    return {"at": at, "recorders_after_s": forked, "ended_after_s": ended,
            "load": round(os.getloadavg()[0], 2)}


def guest_trials(at: float, runs: int, profile: str = "debian-6.12") -> list[dict]:
    """The same trials in the oracle guest; [] when it cannot run here."""
    from . import guest_outputs

    out = guest_outputs(profile, GUEST_LOOP.format(runs=runs, at=at, stream=STREAM), 1)
    trials = []
    for line in "".join(out).splitlines():
        words = dict(w.split("=") for w in line.split() if "=" in w)
        if "at" in words:
            ms = words.get("ended")
            trials.append({"at": at, "recorders": int(words["recorders"]),
                           "ended_after_s": int(ms) / 1000 if ms else None})
    return trials


def ended(trials: list[dict], bound: float = BOUND) -> float | None:
    """The fraction of *trials* that ended within *bound* s."""
    if not trials:
        return None
    done = [t for t in trials if t["ended_after_s"] is not None and t["ended_after_s"] <= bound]
    return round(len(done) / len(trials), 2)


def run(points=POINTS, runs: int = RUNS, guest: bool = True) -> list[dict]:
    rows = []
    for at in points:
        fake = [fake_trial(at) for _ in range(runs)]
        real = guest_trials(at, runs) if guest else []
        rows.append({"name": f"stream_sigint_ended[at {at:g} s]", "fake": ended(fake),
                     "real": ended(real), "unit": "fraction",
                     "detail": {"fake": fake, "guest": real}})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_stream_sigint")
    ap.add_argument("--at", type=float, action="append", help="seconds (default 2 and 25)")
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--no-guest", action="store_true")
    args = ap.parse_args()
    for row in run(tuple(args.at or POINTS), args.runs, not args.no_guest):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
