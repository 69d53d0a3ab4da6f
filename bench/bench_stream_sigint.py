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
is killed and counted as hung.  ``--host`` adds the same trials on this
machine's own kernel (a native one: its recorders' system calls take
microseconds, as the fake's round trips cannot), one task a CPU switching
every millisecond beside whatever else runs here; they run in a private
mount namespace holding the real top level (``bench_control``'s lock and
stand-ins: this host refuses the function tracer's files, on which
trace-cmd 3.1.6 crashes; nothing timed uses them).  A trial that has not
ended after ``HOST_BOUND`` s is killed and counted as hung, with the state
it hung in: ``stop`` (the parent waiting for its recorders, each blocked
writing into its full pipe: docs/cli.md's stop deadlock) or ``start-up``
(no recorder was forked yet at the SIGINT: the parent polls its exited
recorders' pipes for ever).

Each trial also samples, just before the SIGINT, what the ring holds that
the recorders have not read yet (``entries`` of every
``per_cpu/cpuN/stats``): the backlog a recorder still moves through its
64 KiB pipe after the signal, and so what decides trace-cmd's stop
(docs/cli.md, "trace-cmd's races").

Rows: ``stream_sigint_ended[at N s]``, the fraction of trials that ended
within ``BOUND`` s (fake, guest), with each trial's detail.

    python -m bench.bench_stream_sigint [--at 2 --at 25] [--runs 10] [--no-guest] [--paced] [--host]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from . import FAKEDEBUGFS, ROOT

BOUND = 5.0
RUNS = 3
POINTS = (2.0, 25.0)
STREAM = "trace-cmd stream -e sched_switch"
PROFILE = ROOT / "fakedebugfs" / "profiles" / "debian-6.12"  # the guest's kernel
GUEST = os.environ.get("FAKEDEBUGFS_BENCH_GUEST", "bench")  # the oracle guest's name
# the unread entries of each CPU's ring, one "backlog=N,N,..." line
BACKLOG = ("echo backlog=$(cat /sys/kernel/tracing/per_cpu/cpu*/stats"
           " | sed -n 's/^entries: //p' | paste -sd,)")

# The idle guest switches tasks some 10-60 times a second a CPU: its rings
# hold a few hundred entries at 25 s, the fake's (about 1,400 sched_switch
# a second a CPU) half their buffer.  --paced starts one task a CPU that
# sleeps 1 ms at a time (some 600 sched_switch a second a CPU in the
# emulated guest), so that its recorders, too, reach the buffer_percent
# mark before the SIGINT.
PACERS = """\
for c in $(seq 0 $(($(nproc) - 1))); do
  taskset -c $c python3 -c 'import time
while True: time.sleep(0.001)' & done
"""

# the guest's trials: one line each, "at=N recorders=K backlog=N,.. ended=MS"
# or "... hang"
GUEST_LOOP = """\
{pacers}for i in $(seq {runs}); do
  {stream} > /dev/null 2>&1 & pid=$!
  sleep {at}
  kids=$(pgrep -c -P $pid); b=$({backlog})
  t0=$(date +%s%N); kill -INT $pid
  for j in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then
    echo "at={at} recorders=$kids $b hang"; pkill -9 -P $pid; kill -9 $pid
    wait $pid 2>/dev/null; trace-cmd reset > /dev/null 2>&1
  else
    wait $pid; echo "at={at} recorders=$kids $b ended=$(( ($(date +%s%N) - t0) / 1000000 ))"
  fi
done
{stop}"""


def _tracecmds(sid: int) -> int:
    out = subprocess.run(["ps", "-s", str(sid), "-o", "comm="], capture_output=True,
                         text=True).stdout
    return out.split().count("trace-cmd")


def _hang(states: list[str]) -> str:
    """How a trace-cmd stream that did not end hung, from its processes'
    ``ps`` states: ``start-up`` when its recorders had exited (zombies:
    they were forked after the SIGINT, the parent polls their closed
    pipes), else ``stop``."""
    return "start-up" if any(st.startswith("Z") for st in states) else "stop"


def _after_sigint(proc, sent: float, bound: float, hang) -> tuple:
    """``(seconds from *sent* to its end, None)`` of a trial SIGINTed at
    *sent*, or ``(None, hang())`` when it is still running after *bound*
    seconds."""
    try:
        proc.wait(timeout=bound)
        return round(time.monotonic() - sent, 2), None
    except subprocess.TimeoutExpired:
        return None, hang()


def _session_hang(sid: int) -> str:
    """:func:`_hang` of the trace-cmd processes of session *sid*."""
    out = subprocess.run(["ps", "-s", str(sid), "-o", "stat=,comm="], capture_output=True,
                         text=True).stdout
    return _hang([w[0] for w in (ln.split() for ln in out.splitlines())
                  if len(w) == 2 and w[1] == "trace-cmd"])


def _backlog(line: bytes) -> list[int] | None:
    words = line.decode().split("=")
    if len(words) != 2 or words[0] != "backlog" or not words[1].strip():
        return None
    return [int(n) for n in words[1].split(",")]


def fake_trial(at: float, bound: float = BOUND) -> dict:
    """One trial on the fake: seconds from the SIGINT to the end (None:
    not within *bound*), when the recorders forked, each CPU's backlog
    just before the SIGINT, the load."""
    sample = f"(sleep {max(at - 0.1, 0):g}; {BACKLOG}) &"
    proc = subprocess.Popen([FAKEDEBUGFS, "run", "--", "sh", "-c",
                             f"echo go; {sample} exec {STREAM} > /dev/null 2>&1"],
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
        ended, hung = _after_sigint(proc, sent, bound, lambda: _session_hang(proc.pid))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # run's init takes the rest with it
            proc.wait()
        backlog = _backlog(proc.stdout.readline())
        proc.stdout.close()
    return {"at": at, "recorders_after_s": forked, "backlog": backlog,
            "ended_after_s": ended, "hung": hung, "load": round(os.getloadavg()[0], 2)}


def guest_trials(at: float, runs: int, paced: bool = False, profile=PROFILE) -> list[dict]:
    """The same trials in the oracle guest (*paced*: with PACERS); []
    when it cannot run here."""
    from . import guest_outputs

    script = GUEST_LOOP.format(runs=runs, at=at, stream=STREAM, backlog=BACKLOG,
                               pacers=PACERS if paced else "",
                               stop="kill $(jobs -p) 2>/dev/null\n" if paced else "")
    out = guest_outputs(profile, script, 1, GUEST)
    trials = []
    for line in "".join(out).splitlines():
        words = dict(w.split("=") for w in line.split() if "=" in w)
        if "at" in words:
            ms = words.get("ended")
            backlog = words.get("backlog")
            trials.append({"at": at, "recorders": int(words["recorders"]),
                           "backlog": [int(n) for n in backlog.split(",")] if backlog else None,
                           "ended_after_s": int(ms) / 1000 if ms else None})
    return trials


HOST_BOUND = 15.0  # s after the SIGINT before a host trial counts as hung


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of *pid*'s children."""
    out = subprocess.run(["ps", "--ppid", str(pid), "-o", "pid=,stat="], capture_output=True,
                         text=True).stdout
    return [(int(w[0]), w[1]) for w in (ln.split() for ln in out.splitlines()) if len(w) == 2]


def host_trial(at: float, bound: float = HOST_BOUND) -> dict:
    """(In the namespace of :func:`host_trials`) one trial on this host's
    kernel: as :func:`fake_trial`, and how it hung."""
    from .bench_control import TRACING

    proc = subprocess.Popen(STREAM.split(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    time.sleep(at)
    recorders = len(_children(proc.pid))
    backlog = []
    for cpu in sorted(glob.glob(os.path.join(TRACING, "per_cpu", "cpu*")),
                      key=lambda d: int(d.rsplit("cpu", 1)[1])):
        with open(os.path.join(cpu, "stats")) as fp:
            backlog += [int(ln.split()[1]) for ln in fp if ln.startswith("entries:")]
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    ended, hung = _after_sigint(proc, sent, bound,
                                lambda: _hang([st for _, st in _children(proc.pid)]))
    if ended is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return {"at": at, "recorders": recorders, "backlog": backlog, "ended_after_s": ended,
            "hung": hung, "load": round(os.getloadavg()[0], 2)}


def _host_loop(at: float, runs: int) -> None:
    """(The child in a private mount namespace) *runs* host trials at
    *at* s, the top level held and put back, one pacing task a CPU."""
    from .bench_control import _in_namespace_mount, top_level_saved

    _in_namespace_mount()
    pacers = [subprocess.Popen(["taskset", "-c", str(c), sys.executable, "-c",
                                "import time\nwhile True: time.sleep(0.001)"])
              for c in range(os.cpu_count() or 1)]
    try:
        with top_level_saved():
            trials = [host_trial(at) for _ in range(runs)]
    finally:
        for p in pacers:
            p.kill()
            p.wait()
    print(json.dumps(trials), flush=True)


def host_trials(at: float, runs: int) -> list[dict]:
    """The trials on this machine's kernel, by a child of this module in a
    private mount namespace; [] when it cannot reach the real tracefs."""
    from .bench_control import real_available

    if not real_available() or shutil.which("trace-cmd") is None:
        return []
    p = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-m",
                        "bench.bench_stream_sigint", "--host-loop", str(at), str(runs)],
                       cwd=ROOT, capture_output=True, text=True,
                       timeout=runs * (at + HOST_BOUND + 30) + 600)
    if p.returncode != 0:
        print(f"host trials: {p.stderr[-800:]}", file=sys.stderr)
        return []
    return json.loads(p.stdout.strip().splitlines()[-1])


def ended(trials: list[dict], bound: float = BOUND) -> float | None:
    """The fraction of *trials* that ended within *bound* s."""
    if not trials:
        return None
    done = [t for t in trials if t["ended_after_s"] is not None and t["ended_after_s"] <= bound]
    return round(len(done) / len(trials), 2)


def run(points=POINTS, runs: int = RUNS, guest: bool = True, paced: bool = False,
        host: bool = False) -> list[dict]:
    """The rows; ``real`` is the guest's fraction, or the host's when there
    is no guest side."""
    rows = []
    for at in points:
        fake = [fake_trial(at) for _ in range(runs)]
        real = guest_trials(at, runs, paced) if guest else []
        native = host_trials(at, runs) if host else []
        rows.append({"name": f"stream_sigint_ended[at {at:g} s]", "fake": ended(fake),
                     "real": ended(real) if real else ended(native), "unit": "fraction",
                     "detail": {"fake": fake, "guest": real, "guest_paced": paced,
                                "host": native}})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_stream_sigint")
    ap.add_argument("--at", type=float, action="append", help="seconds (default 2 and 25)")
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--no-guest", action="store_true")
    ap.add_argument("--paced", action="store_true",
                    help="the guest's CPUs switch tasks at about the fake's rate")
    ap.add_argument("--host", action="store_true",
                    help="the same trials on this machine's kernel too (root)")
    ap.add_argument("--host-loop", nargs=2, metavar=("AT", "RUNS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.host_loop:
        _host_loop(float(args.host_loop[0]), int(args.host_loop[1]))
        return
    for row in run(tuple(args.at or POINTS), args.runs, not args.no_guest, args.paced,
                   args.host):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
