"""The parents of the function tracer's entries (issue 32), with the
debian-6.12 profile's own call trees, beside the Debian 6.12 guest.

* Every entry has a parent, the outermost call of a tree too: the kernel
  always has a caller (``__schedule`` for the switch's
  ``finish_task_switch``), and the guest shows ``<-`` on every line.  The
  outermost calls and their parents, with ``sym-offset``, are among those
  the guest showed (fixtures/functions/debian-6.12-root-callers.txt): the
  call's ip is its record's (``+0x0`` for a function without endbr64).
* A call its caller made by a jump (a tail call) has its caller's parent,
  as ``trace-cmd report -R`` of the guest shows: ``ksys_read``'s parent is
  ``do_syscall_64``, not ``__x64_sys_read``
  (fixtures/functions/debian-6.12-report-R.txt).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import read, run_cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "functions"
ROOTS = {"sched:sched_switch": "finish_task_switch.isra.0",
         "sched:sched_wakeup": "proc_exit_connector",
         "exceptions:page_fault_user": "lock_vma_under_rcu",
         "raw_syscalls:sys_enter": "x64_sys_call",
         # (a function without endbr64: its record, its ip, at +0)
         "sched:sched_process_fork": "syscall_exit_to_user_mode_prepare"}
ARGS = {"raw_syscalls:sys_enter": ["id=0"],
        "sched:sched_process_fork": ["parent_pid=42", "child_pid=44"]}


def guest_pairs(name: str, pattern: str) -> set:
    text = (FIXTURES / name).read_text()
    return {m.groups() for m in re.finditer(pattern, text, re.M)}


def test_every_entry_has_its_guests_parent(fake):
    mnt = fake("--workload", "none", "--clock", "virtual", "--cpus", "2",
               "--profile", "debian-6.12")
    tracing = mnt / "tracing"
    (tracing / "set_ftrace_filter").write_text(" ".join(ROOTS.values()) + " ksys_read\n")
    (tracing / "options/sym-offset").write_text("1\n")
    (tracing / "current_tracer").write_text("function\n")
    for event in ROOTS:
        run_cli("emit", mnt, event, *ARGS.get(event, ()), "--pid", "42", "--comm", "cat",
                "--cpu", "1")
    lines = [ln.split(": ", 1)[1] for ln in read(tracing / "trace").splitlines()
             if not ln.startswith("#")]
    calls = [re.fullmatch(r"((\S+)\+0x[0-9a-f]+/0x[0-9a-f]+) <-(\S+)", ln) for ln in lines]
    assert calls and all(calls), lines
    got = {(m[1], m[3]) for m in calls}
    assert {m[2] for m in calls} == set(ROOTS.values()) | {"ksys_read"}
    seen = guest_pairs("debian-6.12-root-callers.txt", r"^(\S+) <-(\S+) \d+$")
    for func, parent in got:
        if not func.startswith("ksys_read+"):
            assert (func, parent) in seen, (func, parent)
        else:  # reached from __x64_sys_read by a jump
            assert parent.startswith("do_syscall_64+0x87/"), parent


@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="needs trace-cmd")
def test_trace_cmd_report_raw_shows_the_guests_parents(tmp_path):
    """``trace-cmd report -R`` prints ``ip=`` and ``parent_ip=`` by
    symbol: each pair is one the guest's report has."""
    from fakedebugfs import Fake

    with Fake(profile="debian-6.12", clock="virtual", cpus=2) as fk:
        out = str(tmp_path / "r.dat")
        funcs = ["vfs_read", "ksys_read", "x64_sys_call", "finish_task_switch.isra.0"]
        rec = fk.popen(["trace-cmd", "record", "-p", "function",
                        *[a for f in funcs for a in ("-l", f)], "-o", out],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fk.wait_readers()
        fk.emit("raw_syscalls:sys_enter", cpu=1, pid=42, comm="cat", id=0)
        fk.emit("sched:sched_switch", cpu=1, pid=42, comm="cat", prev_pid=42, next_pid=0)
        rec.send_signal(signal.SIGINT)
        rec.wait(timeout=60)
        report = fk.run(["trace-cmd", "report", "-R", "-i", out], capture_output=True,
                        text=True)
    got = set(re.findall(r"ip=(\S+) parent_ip=(\S+)", report.stdout))
    assert {f for f, _ in got} == set(funcs), report.stdout + report.stderr
    assert got <= guest_pairs("debian-6.12-report-R.txt", r"ip=(\S+) parent_ip=(\S+)$")
