"""The calls a task never returns from.

A task that exits goes from ``exit_group`` through ``do_exit`` to its
last switch away and is freed there: a kretprobe on those calls never
fires on the kernel, while one on a call that returns inside the exit
(``exit_signals``) fires once per entry; ``function_graph`` writes their
entries and no exit, so ``do_group_exit() {`` and ``do_exit() {`` are
never closed.  Checked in the Debian 6.12 guest and on the fake under
that profile, the same scripts.
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
    # returned from, inside the exit: a return for each entry, but one exit
    # (another task's, on the kernel) may be between the two when the probes
    # are disabled: its entry is counted, its return not
    assert got["mysigp"] - 1 <= got["mysig"] <= got["mysigp"], got
    assert got["mysig"] >= 6, got


GRAPH = ("cd /sys/kernel/tracing && echo do_group_exit > set_graph_function && "
         "echo 2 > max_graph_depth && echo function_graph > current_tracer && "
         "/bin/true && /bin/true && echo 0 > tracing_on && grep -v '^#' trace; "
         "echo nop > current_tracer; echo > set_graph_function; echo 0 > max_graph_depth; "
         "echo 1 > tracing_on")


def both(oracle, script: str) -> tuple:
    res = oracle.run(script, timeout=300)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    fake = subprocess.run([FAKEDEBUGFS, "run", "--profile", "debian-6.12", "--workload", "none",
                           "--", "sh", "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert fake.returncode == 0, fake.stderr[-2000:]
    return res.text, fake.stdout


def test_exit_calls_never_return_in_the_guest_and_on_the_fake(oracle):
    real, fake = both(oracle, SCRIPT)
    check(counts(real))
    check(counts(fake))


def graph_calls(text: str) -> list:
    """The function column of function_graph's lines (context switch
    banners left out)."""
    return [line.split("|", 1)[1].strip() for line in text.splitlines()
            if line.count("|") == 1 and ")" in line.split("|", 1)[0]]


def test_function_graph_leaves_the_exit_open(oracle):
    for text in both(oracle, GRAPH):
        calls = graph_calls(text)
        assert calls.count("do_group_exit() {") >= 2, text
        assert calls.count("do_exit() {") == calls.count("do_group_exit() {"), text
        assert "}" not in calls and "do_exit();" not in calls, text
