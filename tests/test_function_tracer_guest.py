"""trace-cmd's function-tracer commands of issue 32's "Must show", run in the
Debian 6.12 guest and under ``fakedebugfs run --profile debian-6.12``,
compared as a user compares them: ``trace-cmd list -f | wc -l``,
``trace-cmd stack``, ``trace-cmd record -p function -l 'vfs_*' ls`` and
``trace-cmd record -p function -n 'rcu_*' ls``.

The guest runs live only what costs it a few seconds (``list -f`` and the
idle ``trace-cmd stack``: the suite's guest, tests/support/oracle.py).
The rest was run in the guest once and kept in fixtures/functions (in the
emulated guest the two recordings take 20-80 s each and turning the stack
tracer off 18 s): the report of the ``-l`` recording, the functions of
``ls``'s task in the ``-n`` recording (``debian-6.12-record-n-rcu-ls-
functions.txt``) and ``trace-cmd stack`` after ``ls`` ran with the stack
tracer on.  To make them again::

    python -m fakedebugfs.oracle run "cd /tmp && trace-cmd record -p function \\
        -l 'vfs_*' ls && trace-cmd report"  # (and -n 'rcu_*': its ls-PID lines)

On the fake, ``run``'s process watcher gives ``ls`` its exec and exit
(their call trees, recorded in the guest); its system calls come only with
``--mirror``.  The command is ``sh -c 'WAIT; exec ls'``, WAIT being until
trace-cmd's recorders hold their ``trace_pipe_raw``: a recorder told to
stop before it reads anything records nothing (trace-cmd's own race,
docs/function-tracing.md#trace-cmd-record-with-a-short-command).
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS
from fakedebugfs.oracle.image import MODULES

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "fakedebugfs" / "profiles" / "debian-6.12"
FIXTURES = ROOT / "fixtures" / "functions"

pytestmark = pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="needs trace-cmd")

# until each CPU trace-cmd records has a recorder holding its trace_pipe_raw
# (at most 30 s), and a little more for its first read
WAIT = ("n=$(ls -d /sys/kernel/tracing/per_cpu/cpu* | wc -l); c=$(nproc); "
        "[ $c -lt $n ] && n=$c; i=0; "
        "while [ $(ls -l /proc/[0-9]*/fd 2>/dev/null | grep -c trace_pipe_raw) -lt $n ] "
        "&& [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; sleep 0.5")
FAKE_SCRIPT = f"""
cd "$1" || exit 1
trace-cmd list -f | wc -l
echo ====
trace-cmd stack
echo ====
echo 1 > /proc/sys/kernel/stack_tracer_enabled
sleep 0.5
echo 0 > /proc/sys/kernel/stack_tracer_enabled
trace-cmd stack
echo ====
trace-cmd record -q -p function -l 'vfs_*' -o l.dat sh -c '{WAIT}; exec ls' > /dev/null
trace-cmd record -q -p function -n 'rcu_*' -o n.dat sh -c '{WAIT}; exec ls' > /dev/null
trace-cmd report -i l.dat > l.txt
trace-cmd report -i n.dat > n.txt
"""
# the lines of the guest's modules (the oracle's 9p share) in trace-cmd list -f:
# the profile leaves them out (docs/oracle.md)
GUEST_SCRIPT = (r"trace-cmd list -f > /tmp/listf.txt; wc -l < /tmp/listf.txt; "
                r"grep -cE ' \[(" + "|".join(MODULES) + r")\]$' /tmp/listf.txt || true; "
                "echo ====; trace-cmd stack")

# trace-cmd report's line of a function entry, and of its header
ENTRY = re.compile(r"^ *(?P<comm>.+)-(?P<pid>\d+) +\[(?P<cpu>\d{3})\] +\d+\.\d{6}: "
                   r"function: +(?P<func>\S+)$")
HEADER = re.compile(r"^cpus=\d+$")
DROPPED = re.compile(r"^CPU:\d+ \[\d+ EVENTS DROPPED\]$")
# kernel/trace/trace_stack.c: stack_trace's header and t_show's rows
STACK_HEAD = re.compile(r"^        Depth    Size   Location    \((\d+) entries\)$")
STACK_SEP = "        -----    ----   --------"
STACK_ROW = re.compile(r"^ *(\d+)\) +(\d+) +(\d+)   (\S+)\+0x[0-9a-f]+/0x[0-9a-f]+$")


@pytest.fixture(scope="module")
def fake_outputs(tmp_path_factory):
    """The commands run under ``fakedebugfs run --profile debian-6.12
    --workload none`` (one run): ``list -f | wc -l``, the idle and the
    running ``trace-cmd stack``, and the two recordings' reports."""
    work = tmp_path_factory.mktemp("fn")
    res = subprocess.run([FAKEDEBUGFS, "run", "--profile", "debian-6.12", "--workload", "none",
                          "--", "sh", "-c", FAKE_SCRIPT, "sh", str(work)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    count, idle, running, _ = res.stdout.split("====\n")
    return {"count": int(count), "idle": idle, "running": running,
            "l": (work / "l.txt").read_text(), "n": (work / "n.txt").read_text()}


@pytest.fixture(scope="module")
def guest_outputs(oracle):
    res = oracle.run(GUEST_SCRIPT, timeout=300)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    counts, idle = res.text.split("====\n")
    total, modules = (int(x) for x in counts.split())
    return {"total": total, "modules": modules, "idle": idle}


def available() -> set:
    return set((PROFILE / "available_filter_functions").read_text().split())


def entries(report: str) -> list:
    """The function entries of a report (each a match of ENTRY); every
    line but the header and the notes of events lost must be one."""
    lines = report.splitlines()
    assert lines and HEADER.match(lines[0]), lines[:3]
    body = [ln for ln in lines[1:] if not DROPPED.match(ln)]  # a recorder behind (both sides)
    got = [ENTRY.match(ln) for ln in body]
    bad = [ln for ln, m in zip(body, got) if m is None]
    assert not bad, bad[:5]
    return got


def of_task(found: list, comm: str) -> set:
    return {m["func"] for m in found if m["comm"].strip() == comm}


def stack_rows(text: str) -> list:
    """``trace-cmd stack``'s rows, checked as trace_stack.c prints them:
    the header's count, ``%3ld) %8d   %5d   %pS``, each frame's size the
    difference of its depth and the next one's, the last's its depth."""
    lines = text.splitlines()
    assert lines[0] == "(stack tracer not running)", text
    head = STACK_HEAD.match(lines[1])
    assert head and lines[2] == STACK_SEP, text
    rows = [STACK_ROW.match(ln) for ln in lines[3:]]
    assert all(rows) and len(rows) == int(head[1]), text
    for i, m in enumerate(rows):
        index, depth, size = int(m[1]), int(m[2]), int(m[3])
        assert index == i and m[0].startswith(f"{i:3d}) {depth:8d}   {size:5d}   "), m[0]
        below = int(rows[i + 1][2]) if i + 1 < len(rows) else 0
        assert size == depth - below, text
    return [m[4] for m in rows]


def test_list_f_counts_the_guests_functions(guest_outputs, fake_outputs):
    """``trace-cmd list -f | wc -l``: the guest's count, less the functions of
    the modules only the oracle loads."""
    assert guest_outputs["modules"] > 0  # the 9p share's modules are listed there
    assert fake_outputs["count"] == guest_outputs["total"] - guest_outputs["modules"]


def test_trace_cmd_stack_idle_is_the_guests(guest_outputs, fake_outputs):
    """``trace-cmd stack`` with the stack tracer off: the same notice and
    header (the guest's count may be a maximum an earlier test left)."""
    guest, fake = guest_outputs["idle"].splitlines(), fake_outputs["idle"].splitlines()
    assert guest[0] == fake[0] == "(stack tracer not running)"
    assert guest[2] == fake[2] == STACK_SEP
    stack_rows(guest_outputs["idle"])  # whatever it holds, in the kernel's layout
    assert stack_rows(fake_outputs["idle"]) == [] and fake[1] == \
        "        Depth    Size   Location    (0 entries)"


def test_trace_cmd_stack_after_a_command_has_the_guests_columns(fake_outputs):
    """``trace-cmd stack`` after the stack tracer ran while a command ran:
    the guest's layout (fixture), frames of the profile's kernel, and the
    stack's bottom is the guest's system-call entry."""
    guest = stack_rows((FIXTURES / "debian-6.12-stack-after-ls.txt").read_text())
    fake = stack_rows(fake_outputs["running"])
    assert len(fake) > 3, fake_outputs["running"]
    # traceable functions, and the entry code below them (not traceable:
    # noinstr), as the guest's stack shows it
    assert set(fake) <= available() | set(guest), set(fake) - available()
    assert fake[-1] == guest[-1] == "entry_SYSCALL_64_after_hwframe"


def test_record_function_filter_shows_only_its_functions(fake_outputs):
    """``trace-cmd record -p function -l 'vfs_*' ls``: every entry is a
    ``vfs_`` function the guest can trace, in the guest's report layout,
    and ``ls``'s entries name functions the guest's ``ls`` called."""
    guest = entries((FIXTURES / "debian-6.12-record-l-vfs-ls.txt").read_text())
    fake = entries(fake_outputs["l"])
    funcs = {m["func"] for m in fake}
    assert funcs and all(fnmatch.fnmatchcase(f, "vfs_*") for f in funcs), funcs
    assert funcs <= available()
    ls_fake, ls_guest = of_task(fake, "ls"), of_task(guest, "ls")
    assert ls_guest and ls_fake & ls_guest, (ls_fake, ls_guest)


def test_record_function_notrace_hides_its_functions(fake_outputs):
    """``trace-cmd record -p function -n 'rcu_*' ls``: no ``rcu_`` function
    anywhere; ``ls``'s entries are traceable functions, most of them ones
    the guest's ``ls`` called (the trees of its exec and exit were
    recorded there)."""
    fake = entries(fake_outputs["n"])
    funcs = {m["func"] for m in fake}
    assert not [f for f in funcs if fnmatch.fnmatchcase(f, "rcu_*")]
    assert funcs <= available()
    guest_ls = set((FIXTURES / "debian-6.12-record-n-rcu-ls-functions.txt").read_text()
                   .split("\n", 1)[1].split())
    assert not [f for f in guest_ls if fnmatch.fnmatchcase(f, "rcu_*")]
    ls_fake = of_task(fake, "ls")
    assert len(ls_fake) > 100, sorted(ls_fake)[:20]
    assert len(ls_fake & guest_ls) > len(ls_fake) / 2, sorted(ls_fake - guest_ls)[:50]
