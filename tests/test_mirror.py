"""``--mirror``: the running kernel's real events in the fake (sources/mirror.py).

Real mounts through the real CLI (``fakedebugfs run --mirror=...``), a C
program built here that calls getppid(2) N times, the real kernel's
tracepoints read with perf_event_open: the fake's ``trace`` must hold
exactly the program's N calls."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS, build_c
from support import realtracefs

# the mirror serves the running kernel's events where the profile's formats
# are its own (other events are refused): this machine's kernel is linux-6.18
HOST_PROFILE = "linux-6.18"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="--mirror needs root (CAP_PERFMON)"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc builds the workload"),
]


@pytest.fixture(scope="module")
def getppid(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("mirror")
    os.chmod(d, 0o755)
    return str(build_c("getppid.c", d))


def run(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    """``fakedebugfs run --profile linux-6.18 ARGS`` (a later --profile wins)."""
    return subprocess.run([FAKEDEBUGFS, "run", "--profile", HOST_PROFILE, *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def lines_of(out: str, pid: str, what: str = "sys_getppid()") -> list[str]:
    return [line for line in out.splitlines() if f"-{pid} " in line and what in line]


def test_tree_mirrors_the_programs_syscalls(getppid):
    n = 5000
    res = run("--mirror=tree", "--", "sh", "-c",
              "cd /sys/kernel/tracing; echo syscalls:sys_enter_getppid > set_event; "
              f"echo 1 > tracing_on; {getppid} {n}; cat trace")
    assert res.returncode == 0, res.stderr
    pid = res.stdout.splitlines()[0].strip()
    got = lines_of(res.stdout, pid)
    assert len(got) == n, res.stdout[-2000:]
    assert all("getppid-" in line for line in got[:5]), got[:5]  # saved_cmdlines has its name
    # nothing else was opened: no other event's lines
    assert not [line for line in res.stdout.splitlines()
                if not line.startswith("#") and line.strip() and ": sys_" in line
                and "sys_getppid" not in line]


def test_a_task_forked_before_the_enable_is_mirrored(getppid):
    res = run("--mirror=tree", "--", "sh", "-c",
              f"cd /sys/kernel/tracing; (sleep 0.5; {getppid} 300) & "
              "echo syscalls:sys_enter_getppid > set_event; wait; cat trace")
    assert res.returncode == 0, res.stderr
    pid = res.stdout.splitlines()[0].strip()
    assert len(lines_of(res.stdout, pid)) == 300


def test_without_mirror_nothing_is_mirrored(getppid):
    res = run("--mirror=none", "--", "sh", "-c", "cd /sys/kernel/tracing; echo syscalls:sys_enter_getppid "
              f"> set_event; {getppid} 100; cat trace")
    assert res.returncode == 0, res.stderr
    pid = res.stdout.splitlines()[0].strip()
    assert lines_of(res.stdout, pid) == []


def test_lost_samples_are_accounted(getppid):
    """A one-page perf ring overflows: what the kernel reports lost is the
    fake's overrun, so read + overrun = the program's calls.  The kernel
    reports losses (PERF_RECORD_LOST) when the ring next takes a record, so
    one more traced call, after the ring had time to drain, brings the count
    of the last losses."""
    n = 200000
    env = dict(os.environ, FAKEDEBUGFS_MIRROR_PAGES="1")
    res = run("--mirror=tree", "--", "sh", "-c",
              "cd /sys/kernel/tracing; echo syscalls:sys_enter_getppid > set_event; "
              f"{getppid} {n}; sleep 0.5; {getppid} 1 >/dev/null; cat trace; "
              "cat per_cpu/cpu*/stats", env=env)
    assert res.returncode == 0, res.stderr
    pid = res.stdout.splitlines()[0].strip()
    got = len(lines_of(res.stdout, pid))
    overrun = sum(int(line.split()[1]) for line in res.stdout.splitlines()
                  if line.startswith("overrun:"))
    assert overrun > 0 and got < n
    # the leader's own records (the program's exec) may be among the lost
    assert n <= got + overrun <= n + 8, (got, overrun)


def test_a_field_that_cannot_be_translated_is_refused(getppid, tmp_path):
    """The profile's ``__syscall_nr`` made a char array (the kernel's is an
    int): no translation, the enable is EINVAL and the event stays off."""
    from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES

    prof = tmp_path / "profile"
    shutil.copytree(SHIPPED_PROFILES / HOST_PROFILE, prof)
    fmt = prof / "formats"
    text = fmt.read_text()
    head = "### syscalls/sys_enter_getppid\n"
    at = text.index(head)
    end = text.index("\n### ", at + 1)
    section = text[at:end].replace("field:int __syscall_nr;", "field:char __syscall_nr[4];")
    assert section != text[at:end]
    fmt.write_text(text[:at] + section + text[end:])
    res = run("--mirror=tree", "--profile", str(prof), "--", "sh", "-c",
              "cd /sys/kernel/tracing; /bin/echo 1 > events/syscalls/sys_enter_getppid/enable; "
              f"echo rc=$?; cat events/syscalls/sys_enter_getppid/enable; "
              "echo 1 > events/syscalls/sys_enter_getpid/enable; echo rc=$?; "
              f"{getppid} 10; cat trace")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[0] != "rc=0" and out[1] == "0", res.stdout  # refused, left disabled
    assert "Invalid argument" in res.stderr, res.stderr
    assert "rc=0" in out[2]  # another event is mirrored as ever
    assert not lines_of(res.stdout, out[3].strip())


def test_unprivileged_is_refused_before_mounting():
    res = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                          FAKEDEBUGFS, "run", "--mirror=tree", "--", "true"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "CAP_PERFMON" in err[0], res.stderr


# --- the same recording on the real tracefs -------------------------------------

# ``trace-cmd record -F``'s way: the shell's pid in set_event_pid with
# event-fork, then it becomes ls ($1: the tracefs)
LS = """echo $$
echo $$ > $1/set_event_pid
echo 1 > $1/options/event-fork
echo 'syscalls:*' > $1/set_event
echo 1 > $1/tracing_on
LD_PRELOAD= exec ls / > /dev/null
"""
NUMBER = re.compile(r"\b(0x[0-9a-f]+|\d+)\b")


def _value(m) -> str:
    """A number as a number (the kernel prints small ones in decimal); a
    user address masked (another run, another layout)."""
    v = int(m[1], 0)
    return "ADDR" if v >= 1 << 36 else str(v)


def syscalls_of(trace: str, pid: str) -> list[str]:
    """``ls``'s syscalls after its exec: names, and the arguments of the
    entries with addresses masked (exits' return values apart)."""
    out = []
    for line in trace.splitlines():
        if f"-{pid} " not in line or line.startswith("#"):
            continue
        what = line.split(": ", 1)[1].strip()
        if "sys_execve(" in what:
            out = []
        out.append(NUMBER.sub(_value, what) if "(" in what else what.split(" -> ")[0])
    return out


def real_tracefs_ls(script: str) -> str:
    """``ls /`` as the real tracefs records it, in a scratch instance of a
    tracefs mounted in a private mount namespace (nothing else changed)."""
    outer = ("set -e; i=/sys/kernel/tracing/instances/fdfs-h8-$$; "
             f"mkdir $i; sh {script} $i; echo 0 > $i/tracing_on; cat $i/trace; rmdir $i")
    res = realtracefs.shell(outer, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_ls_syscalls_as_the_real_tracefs_records_them(tmp_path):
    script = tmp_path / "ls.sh"
    script.write_text(LS)
    os.chmod(tmp_path, 0o755)
    fake = run("--mirror=tree", "--", "sh", "-c",
               f"sh {script} /sys/kernel/tracing; "
               "echo 0 > /sys/kernel/tracing/tracing_on; cat /sys/kernel/tracing/trace")
    assert fake.returncode == 0, fake.stderr
    real = real_tracefs_ls(str(script))
    got = syscalls_of(fake.stdout, fake.stdout.splitlines()[0].strip())
    want = syscalls_of(real, real.splitlines()[0].strip())
    assert len(want) > 50
    assert got == want


# ``trace-cmd record -e syscalls -F ls /``: ls's syscalls as trace-cmd reports them

def report_syscalls(report: str, comm: str = "ls") -> list[str]:
    """``trace-cmd report``'s lines of the task that became *comm*, after
    its last execve: each entry's name and arguments (addresses masked as
    in :func:`syscalls_of`), each exit's name (return values apart).  (A
    line may start with its instance's name.)"""
    lines = []
    for line in report.splitlines():
        m = re.match(r"\s*(?:\S+:\s+)?(\S+)-(\d+)\s+\[\d+\]\s+[\d.]+:\s+(sys_\w+):\s*(.*)$",
                     line)
        if m:
            lines.append(m.groups())
    pid = next((p for c, p, *_ in lines if c == comm), None)
    out = []
    for _, p, name, args in lines:
        if p != pid:
            continue
        if name == "sys_enter_execve":
            out = []
        out.append(f"{name} {NUMBER.sub(_value, args.strip())}" if name.startswith("sys_enter")
                   else name)
    return out


def preload_of_run() -> str:
    """The ``LD_PRELOAD`` that ``fakedebugfs run`` gives its command."""
    p = run("--", "sh", "-c", "echo $LD_PRELOAD", timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def real_tracecmd(cwd: Path, preload: str, instance: str) -> subprocess.CompletedProcess:
    """``trace-cmd record -B INSTANCE -e syscalls -F ls /`` on the real
    kernel into CWD/trace.dat (:func:`realtracefs.record`: a private mount
    namespace, a file of ours over /proc/sys/kernel/ftrace_enabled, which
    trace-cmd writes and this sandbox's /proc refuses, and the instance
    removed after).  ``-F`` puts the top instance in trace-cmd's list too,
    so the run holds the lock and the top level is put back after it
    (trace-cmd turns its tracing off and, refused ``set_ftrace_filter``
    here, exits before it turns it on again).  ``--no-filter``: no
    function-tracer pid files (refused here too; with -F they filter
    nothing of ls's).  *preload*: ls gets the LD_PRELOAD that
    ``fakedebugfs run`` gives its command, as the fake's ls does."""
    proc, _ = realtracefs.record(cwd / "trace.dat", instance, "-e", "syscalls", "-F",
                                 command=("ls", "/"), env=dict(os.environ, LD_PRELOAD=preload),
                                 cwd=cwd, timeout=600)
    return proc


@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="needs trace-cmd")
@pytest.mark.timeout(900)  # the real tracefs's lock may be held by another test a while
def test_tracecmd_F_ls_as_the_real_tracefs_records_it(tmp_path):
    """The exact recording of the issue, ``fakedebugfs run -- trace-cmd
    record -e syscalls -F ls /`` with no option (run mirrors its command's
    tree by default; the default profile, Debian's 6.12, translates this
    kernel's entries), and on the real tracefs (a scratch instance): the
    same syscalls, with the same arguments, in the same order, in one run.
    trace-cmd's own syscalls (its recorders' splices, its 1,400 writes)
    are mirrored too and dropped by ``set_event_pid``: the ``tracing_on``
    0 that ends the recording must find all of them drained first."""
    fake_dir, real_dir = tmp_path / "fake", tmp_path / "real"
    fake_dir.mkdir()
    real_dir.mkdir()
    os.chmod(tmp_path, 0o755)
    real = real_tracecmd(real_dir, preload_of_run(), f"fdfs-h2-tc-{os.getpid()}")
    # (this kernel refuses set_ftrace_filter: trace-cmd fails at exit, after
    # trace.dat is written)
    assert (real_dir / "trace.dat").exists(), real.stderr
    rep = subprocess.run(["trace-cmd", "report", "-i", str(real_dir / "trace.dat")],
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    want = report_syscalls(rep.stdout)
    assert len(want) > 50, rep.stdout[-2000:]
    fake = subprocess.run([FAKEDEBUGFS, "run", "--", "sh", "-c",
                           f"cd {fake_dir} && trace-cmd record -e syscalls -F ls / > ls.out && "
                           "trace-cmd report -i trace.dat > report.txt"],
                          capture_output=True, text=True, timeout=600)
    assert fake.returncode == 0, fake.stderr
    assert "not mirrored" not in fake.stderr, fake.stderr  # root: mirrored, no notice
    got = report_syscalls((fake_dir / "report.txt").read_text())
    assert got == want


THREE_CATS = "cat /etc/hostname; cat /etc/hostname; cat /etc/hostname"


def cat_openats(report: str) -> list[int]:
    """The ``sys_enter_openat`` entries of each ``cat`` task of a report,
    by task, sorted."""
    per = {}
    for pid in re.findall(r"^\s*(?:\S+:\s+)?cat-(\d+)\s+\[\d+\].*\bsys_enter_openat:",
                          report, re.M):
        per[pid] = per.get(pid, 0) + 1
    return sorted(per.values())


@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="needs trace-cmd")
@pytest.mark.timeout(900)  # the real tracefs's lock may be held by another test a while
def test_tracecmd_c_F_records_the_commands_children(tmp_path):
    """``trace-cmd record -c -F sh -c 'cat X; cat X; cat X'``: ``-c`` sets
    ``event-fork``, so each cat joins ``set_event_pid`` at its fork and
    leaves it at its exit.  The cats' mirrored samples meet the pid list
    as it was when they made them: each cat's every ``openat``, as on the
    real tracefs (a scratch instance).  (The watcher's fork and exit came
    in apart from the samples: a cat's openats were dropped, all or some,
    in 4 of 8 runs; with the fork in before each drain and the exit's
    removal held until the samples before it are in, 8 of 8 whole.)"""
    fake_dir, real_dir = tmp_path / "fake", tmp_path / "real"
    fake_dir.mkdir()
    real_dir.mkdir()
    os.chmod(tmp_path, 0o755)
    fake = subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", "--", "sh", "-c",
                           f"cd {fake_dir} && trace-cmd record -q -e syscalls:sys_enter_openat "
                           f"-c -F sh -c '{THREE_CATS}' > /dev/null && "
                           "trace-cmd report -i trace.dat > report.txt"],
                          capture_output=True, text=True, timeout=600)
    assert fake.returncode == 0, fake.stderr
    got = cat_openats((fake_dir / "report.txt").read_text())
    assert len(got) == 3 and got[0] > 0 and len(set(got)) == 1, got
    if realtracefs.available():
        real, _ = realtracefs.record(real_dir / "trace.dat", f"fdfs-h2-cats-{os.getpid()}",
                                     "-e", "syscalls:sys_enter_openat", "-c", "-F",
                                     command=("sh", "-c", THREE_CATS),
                                     env=dict(os.environ, LD_PRELOAD=preload_of_run()),
                                     cwd=real_dir, timeout=600)
        assert (real_dir / "trace.dat").exists(), real.stderr
        rep = subprocess.run(["trace-cmd", "report", "-i", str(real_dir / "trace.dat")],
                             capture_output=True, text=True, timeout=120)
        assert rep.returncode == 0, rep.stderr
        assert got == cat_openats(rep.stdout)


# --- system mode: two fakes at once, the host's tracefs untouched ------------------

def real_tracefs_state(root: str) -> dict:
    """What a tracing user of the host would see changed by what the mirrors'
    commands write: syscalls events in set_event, set_event_pid,
    current_tracer.  (Not tracing_on, sched events, instances: another
    tracing user of the host, or another test's scratch instance, changes
    those meanwhile.)"""
    out = {}
    for name in ("set_event", "set_event_pid", "current_tracer"):
        with open(os.path.join(root, name)) as fp:
            out[name] = [line for line in fp.read().splitlines()
                         if name != "set_event" or line.startswith("syscalls:")]
    return out


def body_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if ": " in line and not line.startswith("#")
            and "[" in line]


@pytest.mark.skipif(not realtracefs.available(), reason="needs root and tracefs")
def test_two_system_mirrors_at_once(getppid):
    # the real tracefs is read in private mount namespaces of its own
    before = realtracefs.call(real_tracefs_state)
    sched = subprocess.Popen(
        [FAKEDEBUGFS, "run", "--profile", HOST_PROFILE, "--mirror=system", "--", "sh", "-c",
         "cd /sys/kernel/tracing; for e in fork exec exit wait; do "
         "echo sched:sched_process_$e >> set_event; done; sleep 1.5; "
         "echo 0 > tracing_on; echo ==; cat set_event; echo ==; cat trace"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # (every task's syscalls on a busy host are more than this test needs)
    sysc = run("--mirror=system", "--", "sh", "-c",
               "cd /sys/kernel/tracing; echo syscalls:sys_enter_getppid > set_event; "
               "echo syscalls:sys_exit_getppid >> set_event; sleep 0.3; "
               f"{getppid} 1000; echo 0 > tracing_on; echo ==; cat set_event; echo ==; "
               "cat trace")
    out, err = sched.communicate(timeout=120)
    after = realtracefs.call(real_tracefs_state)
    assert sched.returncode == 0 and sysc.returncode == 0, err + sysc.stderr
    assert after == before

    pid, set_event, trace = sysc.stdout.split("==\n")
    pid = pid.strip()
    assert {line.split(":")[0] for line in set_event.split()} == {"syscalls"}
    lines = body_lines(trace)
    assert all(": sys_" in line for line in lines)
    assert len(lines_of(trace, pid)) == 1000  # every task's, the program's among them
    assert len(lines_of(trace, pid, "sys_getppid ->")) == 1000

    _, set_event, trace = out.split("==\n")
    assert {line.split(":")[0] for line in set_event.split()} == {"sched"}
    lines = body_lines(trace)
    assert lines and all(": sched_" in line for line in lines)
    assert not [line for line in lines if ": sys_" in line]


# --- trace_marker on the writer's CPU ------------------------------------------------

@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs")
@pytest.mark.parametrize("mirror", [[], ["--mirror=tree"]], ids=["plain", "mirror"])
def test_marker_is_recorded_on_the_writers_cpu(mirror):
    res = run(*mirror, "--workload", "none", "--", "sh", "-c",
              "cd /sys/kernel/tracing; echo 1 > tracing_on; "
              "taskset -c 1 sh -c 'echo on-one > trace_marker'; "
              "taskset -c 0 sh -c 'echo on-zero > trace_marker'; "
              "taskset -c 1 sh -c 'printf \"\\001\\000\\000\\000raw\" > trace_marker_raw'; "
              "cat per_cpu/cpu1/trace; echo ==; cat per_cpu/cpu0/trace")
    assert res.returncode == 0, res.stderr
    one, zero = res.stdout.split("==\n")
    assert "on-one" in one and "on-zero" not in one, res.stdout
    assert "on-zero" in zero and "on-one" not in zero, res.stdout
    assert "buf: 72 61 77" in one and "buf:" not in zero, res.stdout  # raw_data: "raw"


def test_tree_on_the_virtual_clock_is_refused():
    res = run("--mirror=tree", "--clock", "virtual", "--", "true")
    assert res.returncode != 0
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "--clock virtual" in err[0], res.stderr


def test_a_probe_defined_in_the_fake_is_enabled_not_mirrored():
    """A uprobe made in the fake's ``uprobe_events`` has no kernel event
    behind it (its hits are injected): enabling it under ``--mirror`` is
    not refused, as without."""
    res = run("--mirror=tree", "--", "sh", "-c",
              "cd /sys/kernel/tracing; "
              "echo 'p:utest/utest_u /bin/true:0x3e8' >> uprobe_events; "
              "echo 1 > events/utest/utest_u/enable; echo rc=$?; "
              "cat events/utest/utest_u/enable; echo 0 > events/utest/utest_u/enable; "
              "echo rc=$?")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["rc=0", "1", "rc=0"], res.stdout + res.stderr


# --- a consuming reader beside a burst ---------------------------------------------

SPLICE_READER_PY = r"""
# A reader of per_cpu/cpu0/trace_pipe_raw as libtracefs' tracefs_cpu_write
# (the "trace cpu pipe" utest): O_NONBLOCK, splice(SPLICE_F_NONBLOCK) into a
# pipe in a loop until STOP exists, then read() what is left.  Prints, per
# task, the entries it took, and the pages that had the missed-events flag.
import errno, os, struct, sys, time
from collections import Counter
path, stop = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
r, w = os.pipe()
data = bytearray()
def take():
    try:
        n = os.splice(fd, w, 65536, flags=os.SPLICE_F_NONBLOCK | os.SPLICE_F_MOVE)
    except BlockingIOError:
        return 0
    while n > 0:
        got = os.read(r, n)
        data.extend(got)
        n -= len(got)
    return 1
open(stop + ".ready", "w").close()
early = None
while not os.path.exists(stop):
    take()
    if early is None and os.path.exists(stop + ".early"):
        early = len(data)  # what it took of the first, small burst while it ran
idle = time.monotonic()
while time.monotonic() - idle < 1.0:  # the rest: whole pages, then the last part
    try:
        page = os.read(fd, 4096)
    except BlockingIOError:
        time.sleep(0.01)
        continue
    if page:
        data.extend(page)
        idle = time.monotonic()
def entries(data):
    pids, missed = Counter(), 0
    for at in range(0, len(data) - 15, 4096):
        commit = struct.unpack_from("<Q", data, at + 8)[0]
        missed += bool(commit & (1 << 31))
        end, off = at + 16 + (commit & 0xFFFFF), at + 16
        while off + 4 <= end:
            head = struct.unpack_from("<I", data, off)[0]
            kind = head & 0x1F
            if kind == 0:  # a long entry: its length, then the data
                size = struct.unpack_from("<I", data, off + 4)[0]
                pids[struct.unpack_from("<i", data, off + 12)[0]] += 1
                off += 4 + size
            elif kind <= 28:
                pids[struct.unpack_from("<i", data, off + 8)[0]] += 1
                off += 4 + 4 * kind
            elif kind == 29:  # padding
                off += 4 + struct.unpack_from("<I", data, off + 4)[0]
            else:  # time extend, absolute time stamp
                off += 8
    return pids, missed
pids, missed = entries(data)
for pid, n in pids.items():
    print("entries", pid, n)
for pid, n in entries(data[:early or 0])[0].items():
    print("early", pid, n)
print("missed", missed)
"""
# $1: the tracing directory (top level or an instance); $2: the reader; $3: the program
BURST_SH = r"""
set -e
d=$1; stop=$(mktemp -u)
echo 256 > $d/buffer_size_kb
echo 100 > $d/buffer_percent
echo 1 > $d/events/syscalls/sys_enter_getppid/enable
python3 $2 $d/per_cpu/cpu0/trace_pipe_raw $stop &
while [ ! -e $stop.ready ]; do sleep 0.05; done
taskset -c 0 $3 6000; sleep 0.5; touch $stop.early
for round in 1 2 3; do taskset -c 0 $3 60000; sleep 0.5; done
touch $stop; wait
rm -f $stop $stop.ready $stop.early
echo 0 > $d/events/syscalls/sys_enter_getppid/enable
cat $d/per_cpu/cpu0/stats
"""


def burst_result(out: str) -> tuple[int, int, int, int]:
    """What the reader took of the small burst while it ran, the entries
    of the three big ones it took, its pages flagged missed, and cpu0's
    overrun."""
    first, *pids = (int(line) for line in out.splitlines()[:4])
    early = sum(int(n) for p, n in re.findall(r"^early (-?\d+) (\d+)$", out, re.M)
                if int(p) == first)
    took = sum(int(n) for p, n in re.findall(r"^entries (-?\d+) (\d+)$", out, re.M)
               if int(p) in pids)
    missed = int(re.search(r"^missed (\d+)$", out, re.M)[1])
    overrun = int(re.search(r"^overrun: (\d+)$", out, re.M)[1])
    return early, took, missed, overrun


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs")
@pytest.mark.skipif(not hasattr(os, "splice"), reason="needs os.splice (Python 3.10)")
def test_a_splicing_reader_keeps_up_with_a_burst(getppid, tmp_path):
    """libtracefs' "trace cpu pipe": a nonblocking splice reader of
    ``trace_pipe_raw`` beside three bursts of 60,000 getppid() pinned to
    CPU 0, in a 256 KB buffer (13,000 entries; with 128 KB this Python
    reader loses some on the kernel too) with buffer_percent 100.  On the
    kernel the reader takes every page as it fills (a nonblocking splice
    ignores buffer_percent) and loses nothing; a small burst first (6,000,
    30 pages) is taken while it runs.  On the fake a big burst lost up to
    35,000 (in 3 of 4 runs):
    the splice emulation asked poll, which waits for buffer_percent, so the
    reader took nothing until the buffer was full; a read drained the perf
    rings' backlog (up to 50 ms of it) into the buffer before its pages
    were taken; and the server's drains took the CPU the reader needed."""
    reader = tmp_path / "reader.py"
    reader.write_text(SPLICE_READER_PY)
    script = tmp_path / "burst.sh"
    script.write_text(BURST_SH)
    os.chmod(tmp_path, 0o755)
    fake = run("--mirror=tree", "--", "sh", str(script), "/sys/kernel/tracing", str(reader),
               getppid)
    assert fake.returncode == 0, fake.stderr
    early, *rest = burst_result(fake.stdout)
    assert early >= 6000 - 204 and rest == [180000, 0, 0], fake.stdout[-1500:]
    if realtracefs.available():  # the same reader and burst in a scratch instance
        real = realtracefs.shell(
            f"i=/sys/kernel/tracing/instances/fdfs-h1-burst-$$; mkdir $i; "
            f"sh {script} $i {reader} {getppid}; s=$?; rmdir $i; exit $s", timeout=120)
        assert real.returncode == 0, real.stderr
        # its whole pages: all but the last; under load (another suite
        # beside this one) the Python reader falls behind on the kernel too,
        # which then counts what it overwrote: every event is taken or counted
        early, took, missed, overrun = burst_result(real.stdout)
        assert took + overrun == 180000 and bool(missed) == bool(overrun), real.stdout[-1500:]
