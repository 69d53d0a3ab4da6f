"""``--mirror``: the real kernel's events mirrored into the fake.

Rows (``run() -> list[dict]`` with name, fake, real, unit, spread, detail),
each measured TRIALS times (``FAKEDEBUGFS_BENCH_TRIALS``, at least 3), the
fake and the real tracefs taking turns, figures the median and ``spread``
[min, median, max]:

* ``mirror_getppid_events_per_s``: a C program (built here) makes CALLS
  getppid(2) calls with ``syscalls:sys_enter_getppid`` enabled, under
  ``fakedebugfs run --mirror=tree`` (the fake's buffer large enough to
  hold them all) and on the real tracefs (a scratch instance of a tracefs
  mounted in a private mount namespace, removed after).  The figure is
  the events recorded per second of the program's run (recorded / its wall
  time: the tracing's cost slows the program on both sides); ``detail``
  has each trial's events recorded and lost (``overrun``: on the fake, what
  the kernel reported lost from the perf rings), the untraced program's
  rate and the load average before and after.
* ``mirror_sched_switch_per_s``: two processes pinned to one CPU pass a
  byte back and forth ROUNDS times through two pipes (two context
  switches a round) with ``sched:sched_switch`` enabled: an event with
  string fields (``prev_comm``, ``next_comm``).  The figure is the
  program's context switches per second of its run (the real instance
  records every task's, so its entries are not the program's alone);
  ``detail`` has the fake's recorded and lost per trial.

    python -m bench.bench_mirror          # prints the rows as JSON lines
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import tempfile

from . import FAKEDEBUGFS, spread

CALLS = 1_000_000
ROUNDS = 100_000
TRIALS = max(3, int(os.environ.get("FAKEDEBUGFS_BENCH_TRIALS", "3")))
BUFFER_KB = 65536  # per CPU: every event of the run fits (getppid's 16 bytes, sched_switch's 72)
GETPPID = r"""
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    for (long i = 0; i < n; i++)
        syscall(SYS_getppid);
    return 0;
}
"""
PINGPONG = r"""
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    int ab[2], ba[2];
    char c = 0;
    if (pipe(ab) || pipe(ba))
        return 1;
    pid_t child = fork();
    if (child == 0) {
        for (long i = 0; i < n; i++)
            if (read(ab[0], &c, 1) != 1 || write(ba[1], &c, 1) != 1)
                _exit(1);
        _exit(0);
    }
    for (long i = 0; i < n; i++)
        if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
            return 1;
    waitpid(child, NULL, 0);
    return 0;
}
"""
# $1: a tracefs (or instance) directory, $2: the event, then the command;
# prints the command's ns and the stats
SCRIPT = r"""
d=$1; ev=$2; shift 2
echo {kb} > $d/buffer_size_kb
echo $ev > $d/set_event
s=$(date +%s%N); "$@"; e=$(date +%s%N)
echo elapsed_ns $((e - s))
sleep 0.3
echo 0 > $d/tracing_on
cat $d/per_cpu/cpu*/stats
"""


def _figures(out: str, count: int = 0) -> dict:
    """*count*: the program's own events (its rate), else the entries'."""
    ns = int(re.search(r"^elapsed_ns (\d+)", out, re.M)[1])
    entries = sum(int(x) for x in re.findall(r"^entries: (\d+)", out, re.M))
    overrun = sum(int(x) for x in re.findall(r"^overrun: (\d+)", out, re.M))
    return {"seconds": ns / 1e9, "recorded": entries, "lost": overrun,
            "events_per_s": (count or entries) / (ns / 1e9)}


def _load() -> list:
    with open("/proc/loadavg") as fp:
        return fp.read().split()[:3]


def _fake(script: str, event: str, command: list) -> str:
    return subprocess.run([FAKEDEBUGFS, "run", "--mirror=tree", "--", "sh", script,
                           "/sys/kernel/tracing", event, *command],
                          capture_output=True, text=True, timeout=600, check=True).stdout


def _real(script: str, event: str, command: list) -> str:
    """The same in a scratch instance of a tracefs mounted in a private
    mount namespace (removed after; the top level is not touched)."""
    return subprocess.run(
        ["flock", "-o", "/tmp/real-tracefs.lock", "unshare", "-m", "--propagation", "private",
         "sh", "-c", "set -e; d=$(mktemp -d); mount -t tracefs nodev $d; "
         "i=$d/instances/fdfs-bench-mirror-$$; mkdir $i; "
         f"sh {script} $i {event} {' '.join(command)}; echo 0 > $i/events/enable; rmdir $i; "
         "umount $d; rmdir $d"],
        capture_output=True, text=True, timeout=600, check=True).stdout


def _row(name: str, unit: str, fakes: list, reals: list, extra: dict) -> dict:
    f = [t["events_per_s"] for t in fakes]
    r = [t["events_per_s"] for t in reals]
    return {"name": name, "fake": statistics.median(f), "real": statistics.median(r),
            "unit": unit, "spread": {"fake": spread(f), "real": spread(r)},
            "detail": {"fake_lost": [t["lost"] for t in fakes],
                       "fake_recorded": [t["recorded"] for t in fakes],
                       "real_lost": [t["lost"] for t in reals],
                       "real_recorded": [t["recorded"] for t in reals], **extra}}


def _build(work: str, name: str, source: str) -> str:
    prog = os.path.join(work, name)
    with open(prog + ".c", "w") as fp:
        fp.write(source)
    subprocess.run(["gcc", "-O2", "-o", prog, prog + ".c"], check=True)
    return prog


def run() -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as work:
        os.chmod(work, 0o755)
        return _run(work)


def _run(work: str) -> list[dict]:
    getppid = _build(work, "getppid", GETPPID)
    pingpong = _build(work, "pingpong", PINGPONG)
    script = os.path.join(work, "bench.sh")
    with open(script, "w") as fp:
        fp.write(SCRIPT.format(kb=BUFFER_KB))
    load_before = _load()

    plain = []
    for _ in range(TRIALS):
        out = subprocess.run(["sh", "-c", f"s=$(date +%s%N); {getppid} {CALLS}; "
                              "e=$(date +%s%N); echo $((e - s))"],
                             capture_output=True, text=True, check=True)
        plain.append(CALLS / (int(out.stdout) / 1e9))

    calls = {"fake": [], "real": []}
    switches = {"fake": [], "real": []}
    sw_cmd = ["taskset", "-c", "0", pingpong, str(ROUNDS)]
    for _ in range(TRIALS):
        calls["fake"].append(_figures(_fake(script, "syscalls:sys_enter_getppid",
                                            [getppid, str(CALLS)])))
        calls["real"].append(_figures(_real(script, "syscalls:sys_enter_getppid",
                                            [getppid, str(CALLS)])))
        switches["fake"].append(_figures(_fake(script, "sched:sched_switch", sw_cmd),
                                         2 * ROUNDS))
        switches["real"].append(_figures(_real(script, "sched:sched_switch", sw_cmd),
                                         2 * ROUNDS))
    load = {"load_before": load_before, "load_after": _load()}
    return [
        _row("mirror_getppid_events_per_s", "events/s", calls["fake"], calls["real"],
             {"calls": CALLS, "trials": TRIALS, "untraced_calls_per_s": spread(plain), **load}),
        _row("mirror_sched_switch_per_s", "switches/s", switches["fake"], switches["real"],
             {"switches": 2 * ROUNDS, "trials": TRIALS, **load}),
    ]


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
