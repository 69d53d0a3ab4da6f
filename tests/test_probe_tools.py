"""Real tools that define uprobes through tracefs, under ``fakedebugfs run``:
``perf probe -x``/``-d``, perf-tools' ``uprobe`` script, ``trace-cmd
record -e GROUP`` and ``trace-cmd reset``, and a uprobe hit by an exec
the run's process watcher sees (ftracetest's ``add_remove_uprobe.tc``).

The expected listings, formats and messages are what the same commands
printed on this machine's 6.18 kernel (a private mount namespace, every
probe removed afterwards): ``perf probe`` prints the same lines there and
the event gets the same id; ``trace-cmd reset`` removes every uprobe, an
enabled one included.  The hits are the fake's own: an exec of the probed
binary by a watched task (one hit of each enabled entry probe on it, at
the address the exec mapped its offset at), or ``fakedebugfs emit``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from conftest import FAKEDEBUGFS

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="fakedebugfs run needs root"),
]
UPROBE_SCRIPT = shutil.which("uprobe-perf") or shutil.which("uprobe")
BASH = os.path.realpath("/bin/bash")
# perf probe's probe_bash:main, as 6.18's tracefs shows its format
MAIN_FORMAT_TAIL = ("\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
                    "\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;\n\n"
                    'print fmt: "(%lx)", REC->__probe_ip\n')
LINE = re.compile(r"^\s*(?P<comm>\S+)-(?P<pid>\d+)\s+\[\d+\]\s+\S*\s*[\d.]+:\s+(?P<name>\w+):"
                  r"\s+\((?P<ip>0x[0-9a-f]+|[0-9a-f]+)\)(?P<rest>.*)$", re.M)


def run(script: str, timeout=120) -> subprocess.CompletedProcess:
    """``fakedebugfs run --workload none -- bash -c SCRIPT`` (the tracing
    directory as cwd), its output as text."""
    env = dict(os.environ, FAKEDEBUGFS=FAKEDEBUGFS)
    return subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", "--", "bash", "-ec",
                           "cd /sys/kernel/tracing\n" + script],
                          capture_output=True, text=True, timeout=timeout, env=env)


def main_offset() -> int:
    """The file offset of bash's ``main`` (its dynamic symbol's address
    less its segment's vaddr, plus the segment's file offset), as perf
    probe computes it."""
    sym = subprocess.run(["objdump", "-T", BASH], capture_output=True, text=True).stdout
    addr = int(next(l.split()[0] for l in sym.splitlines() if l.split()[-1:] == ["main"]), 16)
    heads = subprocess.run(["objdump", "-p", BASH], capture_output=True, text=True).stdout
    for m in re.finditer(r"LOAD off +(0x[0-9a-f]+) vaddr +(0x[0-9a-f]+).*\n.*memsz (0x[0-9a-f]+)",
                         heads):
        off, vaddr, memsz = (int(x, 16) for x in m.groups())
        if vaddr <= addr < vaddr + memsz:
            return addr - vaddr + off
    raise AssertionError("main is in no LOAD segment of bash")


needs_perf = pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
needs_objdump = pytest.mark.skipif(shutil.which("objdump") is None, reason="no objdump")


@needs_perf
@needs_objdump
def test_perf_probe_adds_and_deletes_a_uprobe():
    r = run("perf probe -x /bin/bash -a main\n"
            "echo '== events'; cat uprobe_events\n"
            "echo '== dir'; ls events/probe_bash/main\n"
            "echo '== tracepoint'; ls events/sched/sched_switch\n"
            "echo '== format'; cat events/probe_bash/main/format\n"
            "echo '== list'; perf probe -l\n"
            "echo '== delete'; perf probe -d probe_bash:main\n"
            "echo '== after'; cat uprobe_events; ls events | grep -c probe_bash || true\n")
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "Added new event:\n  probe_bash:main      (on main in /usr/bin/bash)\n" in out
    assert "perf record -e probe_bash:main -aR sleep 1" in out
    parts = dict(p.split("\n", 1) for p in r.stdout.split("== ")[1:])
    assert parts["events"] == f"p:probe_bash/main {BASH}:0x{main_offset():016x}\n"
    # a tracepoint's files (hist too where the profile's kernel has hist triggers)
    assert parts["dir"].split() == parts["tracepoint"].split()
    assert {"enable", "filter", "format", "id", "trigger"} <= set(parts["dir"].split())
    assert parts["format"].startswith("name: main\nID: ")
    assert parts["format"].endswith(MAIN_FORMAT_TAIL)
    assert "probe_bash:main      (on main in /usr/bin/bash)" in parts["list"]
    assert "Removed event: probe_bash:main" in out
    assert parts["after"] == "0\n"


def test_exec_of_the_probed_binary_hits_the_uprobe():
    """ftracetest's add_remove_uprobe.tc: a probe at the start of the
    shell's text, hit when a watched task execs the shell; a disabled
    probe and a return probe are not hit; ``$comm`` is the task's name,
    immediates their values, ``__probe_ip`` where the exec mapped it."""
    r = run(r"""
line=$(echo 'cat /proc/$$/maps' | /bin/sh | grep "r-xp .*/bin/.*sh$")
off=0x$(echo "$line" | awk '{print $3}'); file=$(echo "$line" | awk '{print $6}')
echo "p:myevent $file:$off c=\$comm i=\-42:s16 s=\\\"hi\":string x=\0x10:x8" >> uprobe_events
echo "p:quiet $file:$off" >> uprobe_events
echo "r:myret $file:$off" >> uprobe_events
echo 1 > events/uprobes/myevent/enable
echo 1 > events/uprobes/myret/enable
echo 'ls' | /bin/sh > /dev/null
/bin/sh -c true
echo 0 > events/uprobes/myevent/enable
echo 0 > events/uprobes/myret/enable
echo "== trace"; grep -v '^#' trace
echo "== profile"; cat uprobe_profile
echo > uprobe_events
echo "== left"; cat uprobe_events
""")
    assert r.returncode == 0, r.stderr
    parts = dict(p.split("\n", 1) for p in r.stdout.split("== ")[1:])
    hits = list(LINE.finditer(parts["trace"]))
    assert len(hits) == 2, parts["trace"]
    for hit in hits:
        assert hit["comm"] == "sh" and hit["name"] == "myevent"
        assert hit["rest"] == ' c="sh" i=-42 s="hi" x=0x10'
        assert int(hit["ip"], 16) >= 0x10000  # mapped, not the bare file offset
    assert hits[0]["pid"] != hits[1]["pid"]
    profile = {l.split()[1]: int(l.split()[2]) for l in parts["profile"].splitlines()}
    assert profile == {"myevent": 2, "quiet": 0, "myret": 0}
    assert parts["left"] == ""


@pytest.mark.skipif(UPROBE_SCRIPT is None, reason="perf-tools' uprobe is not installed "
                    "(apt-get install perf-tools-unstable)")
@needs_objdump
def test_perf_tools_uprobe_script():
    """``uprobe -d 3 p:/bin/bash:main``: its uprobe hit by a bash the run
    starts and by an injected event; removed when it ends."""
    r = run(f"""
{UPROBE_SCRIPT} -d 3 p:/bin/bash:main > /tmp/uprobe.out 2>&1 &
for i in $(seq 200); do
    [ "$(cat events/uprobes/main/enable 2>/dev/null)" = 1 ] && break; sleep 0.05
done
/bin/bash -c true
"$FAKEDEBUGFS" emit "$FAKEDEBUGFS_MOUNT" uprobes:main __probe_ip=0x1234 --pid 77 --comm inj
wait
cat /tmp/uprobe.out
echo "== left"; cat uprobe_events
""")
    assert r.returncode == 0, r.stderr
    out, left = r.stdout.split("== left\n")
    assert out.startswith("Tracing uprobe main for 3 seconds (buffered)...\n"), out
    hits = {(m["comm"], m["ip"]) for m in LINE.finditer(out)}
    assert ("inj", "0x1234") in hits, out
    bash = [ip for comm, ip in hits if comm == "bash"]
    assert len(bash) == 1 and int(bash[0], 16) & 0xFFF == main_offset() & 0xFFF, out
    assert "Ending tracing..." in out
    assert left == ""


@needs_perf
@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="trace-cmd is not installed")
def test_trace_cmd_records_probe_events_and_reset_removes_uprobes():
    r = run("""
perf probe -q -x /bin/bash -a main
echo 'r:probe_bash/main_ret /bin/bash:0x10' >> uprobe_events
trace-cmd record -q -e probe_bash -o /tmp/probe.dat /bin/bash -c \
    '"$FAKEDEBUGFS" emit "$FAKEDEBUGFS_MOUNT" probe_bash:main __probe_ip=0x1234 --pid 77 --comm inj'
echo "== report"; trace-cmd report /tmp/probe.dat
echo 1 > events/probe_bash/main/enable
trace-cmd reset
echo "== left"; cat uprobe_events; ls events | grep -c probe_bash || true
""")
    assert r.returncode == 0, r.stderr
    parts = dict(p.split("\n", 1) for p in r.stdout.split("== ")[1:])
    report = [l.split() for l in parts["report"].splitlines() if ": main:" in l]
    # the exec of bash by trace-cmd's child, then the injected event
    assert [(w[0].rsplit("-", 1)[0], w[-1]) for w in report][-1] == ("inj", "(1234)"), report
    assert [w[0].startswith("bash-") for w in report] == [True, False], report
    assert parts["left"] == "0\n"
