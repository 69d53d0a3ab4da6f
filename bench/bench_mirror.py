"""``--mirror``: the real kernel's events mirrored into the fake.

Rows (``run() -> list[dict]`` with name, fake, real, unit):

* ``mirror_getppid_events_per_s``: a C program (built here) makes CALLS
  getppid(2) calls with ``syscalls:sys_enter_getppid`` enabled, under
  ``fakedebugfs run --mirror=tree`` (the fake's buffer large enough to
  hold them all) and on the real tracefs (a scratch instance of a tracefs
  mounted in a private mount namespace, removed after).  The figure is
  the events recorded per second of the program's run (its calls / its
  wall time: the tracing's cost slows the program on both sides); ``detail``
  has the events recorded and lost (``overrun``: on the fake, what the
  kernel reported lost from the perf rings) and the untraced program's rate.

    python -m bench.bench_mirror          # prints the rows as JSON lines
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile

from . import FAKEDEBUGFS

CALLS = 1_000_000
BUFFER_KB = 32768  # per CPU: every event of the run fits (16 bytes each)
PROGRAM = r"""
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
# $1: a tracefs (or instance) directory; prints the program's ns and the stats
SCRIPT = r"""
echo {kb} > $1/buffer_size_kb
echo syscalls:sys_enter_getppid > $1/set_event
s=$(date +%s%N); {prog} {calls}; e=$(date +%s%N)
echo elapsed_ns $((e - s))
sleep 0.3
echo 0 > $1/tracing_on
cat $1/per_cpu/cpu*/stats
"""


def _figures(out: str) -> dict:
    ns = int(re.search(r"^elapsed_ns (\d+)", out, re.M)[1])
    entries = sum(int(x) for x in re.findall(r"^entries: (\d+)", out, re.M))
    overrun = sum(int(x) for x in re.findall(r"^overrun: (\d+)", out, re.M))
    return {"seconds": ns / 1e9, "recorded": entries, "lost": overrun,
            "events_per_s": entries / (ns / 1e9)}


def run() -> list[dict]:
    work = tempfile.mkdtemp(prefix="bench-mirror-")
    os.chmod(work, 0o755)
    prog = os.path.join(work, "getppid")
    with open(prog + ".c", "w") as fp:
        fp.write(PROGRAM)
    subprocess.run(["gcc", "-O2", "-o", prog, prog + ".c"], check=True)
    script = os.path.join(work, "bench.sh")
    with open(script, "w") as fp:
        fp.write(SCRIPT.format(kb=BUFFER_KB, prog=prog, calls=CALLS))

    plain = subprocess.run(["sh", "-c", f"s=$(date +%s%N); {prog} {CALLS}; e=$(date +%s%N); "
                            "echo $((e - s))"], capture_output=True, text=True, check=True)
    plain_rate = CALLS / (int(plain.stdout) / 1e9)

    fake = subprocess.run([FAKEDEBUGFS, "run", "--mirror=tree", "--", "sh", script,
                           "/sys/kernel/tracing"], capture_output=True, text=True, timeout=300,
                          check=True)
    real = subprocess.run(
        ["flock", "-o", "/tmp/real-tracefs.lock", "unshare", "-m", "--propagation", "private",
         "sh", "-c", "set -e; d=$(mktemp -d); mount -t tracefs nodev $d; "
         "i=$d/instances/fdfs-bench-mirror-$$; mkdir $i; "
         f"sh {script} $i; rmdir $i; umount $d; rmdir $d"],
        capture_output=True, text=True, timeout=300, check=True)
    f, r = _figures(fake.stdout), _figures(real.stdout)
    return [{"name": "mirror_getppid_events_per_s", "fake": f["events_per_s"],
             "real": r["events_per_s"], "unit": "events/s",
             "detail": {"calls": CALLS, "fake": f, "real": r,
                        "untraced_calls_per_s": plain_rate,
                        "load": open("/proc/loadavg").read().split()[:3]}}]


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
