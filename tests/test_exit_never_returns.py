"""Return probes on the calls a task never returns from.

A task that exits goes from ``exit_group`` through ``do_exit`` to its
last switch away and is freed there: a kretprobe or fprobe exit on those
calls never fires on the kernel, while one on a call that returns inside
the exit (``exit_signals``) fires once per entry.  Checked in the Debian
6.12 guest and on the fake under that profile, the same script.
"""

from __future__ import annotations

import subprocess

from conftest import FAKEDEBUGFS

PROBES = {"myp": "p __x64_sys_exit_group", "myr": r"r __x64_sys_exit_group \$retval",
          "myexit": "r do_exit", "mysig": "r exit_signals", "mysigp": "p exit_signals"}
SCRIPT = ("cd /sys/kernel/tracing && echo > trace && "
          + " && ".join(f'echo "{d.split()[0]}:{n} {" ".join(d.split()[1:])}" >> kprobe_events'
                        for n, d in PROBES.items())
          + " && echo 1 > events/kprobes/enable && for i in 1 2 3 4 5 6; do /bin/true; done"
          + " && echo 0 > events/kprobes/enable && for n in " + " ".join(PROBES)
          + '; do echo "$n $(grep -c " $n: " trace)"; done; echo > kprobe_events')


def counts(text: str) -> dict:
    return {name: int(n) for name, n in (line.split() for line in text.splitlines())}


def check(got: dict) -> None:
    assert got["myp"] >= 6, got  # each /bin/true's exit (and others' on the kernel)
    assert got["myr"] == 0 and got["myexit"] == 0, got  # never returned from
    assert got["mysig"] == got["mysigp"] >= 6, got  # returned from, inside the exit


def test_exit_calls_never_return_in_the_guest_and_on_the_fake(oracle):
    res = oracle.run(SCRIPT, timeout=300)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    check(counts(res.text))
    fake = subprocess.run([FAKEDEBUGFS, "run", "--profile", "debian-6.12", "--workload", "none",
                           "--", "sh", "-c", SCRIPT], capture_output=True, text=True,
                          timeout=300)
    assert fake.returncode == 0, fake.stderr[-2000:]
    check(counts(fake.stdout))
