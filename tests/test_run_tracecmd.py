"""``fakedebugfs run -- COMMAND``: unmodified trace-cmd against a fake of its own.

Every test starts the real CLI (``fakedebugfs run [options] -- …``), which
serves a fake in a private mount namespace at /sys/kernel/debug and
/sys/kernel/tracing.  The events trace-cmd records are compared with a list
computed here, independently of the file system: the same deterministic
workload (same seed, virtual clock) run in-process on a bare
:class:`fakedebugfs.engine.kernel.Kernel`, with probes of our own on its
tracepoints.  After every test the host's mounts must show nothing of it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from conftest import FAKEDEBUGFS
from support.kmem import KMEM, assert_window, expected_events

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="fakedebugfs run needs root"),
    pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="trace-cmd is not installed"),
]

SYM_ADDR = re.compile(r" \(0x[0-9a-f]+\)")
LINE = re.compile(r"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<sec>\d+)\.(?P<frac>\d+):"
                  r"\s+(?P<name>\w+):\s+(?P<rest>.*)$")


def host_mounts() -> list[str]:
    with open("/proc/self/mounts") as fp:
        return fp.read().splitlines()


def ours(lines) -> list[str]:
    """Mount lines a run could have leaked into this (the host's) namespace."""
    return [line for line in lines
            if "/run/fakedebugfs/run-" in line or line.split()[1] in ("/sys/kernel/tracing",
                                                                      "/sys/kernel/debug")]


def work_dirs() -> set[str]:
    return {d for d in os.listdir("/run/fakedebugfs") if d.startswith("run-")} \
        if os.path.isdir("/run/fakedebugfs") else set()


@pytest.fixture(autouse=True)
def no_leaks():
    before, dirs = ours(host_mounts()), work_dirs()
    yield
    # a leak is a mount that appears (another session may unmount its own meanwhile)
    leaked = set(ours(host_mounts())) - set(before)
    assert not leaked, f"fakedebugfs run left mounts in the host namespace: {leaked}"
    # a work folder made meanwhile whose run is over (another session's
    # runs, going on or killed before this test, are theirs); the last of
    # a run's processes may still be removing it
    give_up = time.monotonic() + 10
    while (left := [d for d in work_dirs() - dirs if _owner_gone(d)]) and \
            time.monotonic() < give_up:
        time.sleep(0.2)
    assert not left, f"work directories left: {left}"


def _owner_gone(name: str) -> bool:
    """The run that made work folder *name* has ended (its ``pid`` file
    names a process that is gone; without one, the folder is a minute old)."""
    path = os.path.join("/run/fakedebugfs", name)
    try:
        pid = int(open(os.path.join(path, "pid")).read())
    except (OSError, ValueError):
        try:
            return time.time() - os.stat(path).st_mtime > 60
        except FileNotFoundError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return os.path.exists(path)
    except PermissionError:
        pass
    return False


def run(*args, timeout=120, **kw) -> subprocess.CompletedProcess:
    """``fakedebugfs run ARGS`` (options, "--", command), output as text."""
    return subprocess.run([FAKEDEBUGFS, "run", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, **kw)


# --- the expected events, computed without the file system ------------------------


def report(dat) -> list[tuple]:
    """The kmalloc/kfree events of a trace-cmd data file, in the same shape."""
    proc = subprocess.run(["trace-cmd", "report", "-R", "-t", "-i", str(dat)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = []
    for line in proc.stdout.splitlines():
        m = LINE.match(line)
        if not m or m["name"] not in KMEM:
            continue
        ts = int(m["sec"]) * 10**9 + int(m["frac"].ljust(9, "0"))
        # libtraceevent 1.8 adds the address after a symbol: "sym+0x4 (0xffff...)"
        fields = dict(kv.split("=", 1) for kv in SYM_ADDR.sub("", m["rest"]).split())
        out.append((m["name"], int(m["cpu"]), int(m["pid"]), ts, fields))
    return out


def lost_events(dat) -> int:
    """Overruns and drops the kernel buffer stats recorded, plus missed-event marks."""
    proc = subprocess.run(["trace-cmd", "report", "--stat", "-i", str(dat)],
                          capture_output=True, text=True, timeout=60)
    lost = sum(int(n) for n in re.findall(r"^(?:overrun|dropped events|commit overrun): (\d+)",
                                          proc.stdout, re.M))
    text = subprocess.run(["trace-cmd", "report", "-i", str(dat)], capture_output=True,
                          text=True, timeout=60).stdout
    return lost + text.count("LOST EVENTS") + text.count("EVENTS DROPPED")


# --- the namespace ----------------------------------------------------------------------

def test_mounts_listed_as_debugfs_and_tracefs():
    p = run("--workload", "none", "--", "cat", "/proc/mounts")
    assert p.returncode == 0, p.stderr
    lines = [line.split() for line in p.stdout.splitlines()]
    tracefs = [f for f in lines if f[2] == "tracefs"]
    debugfs = [f for f in lines if f[2] == "debugfs"]
    assert [f[1] for f in tracefs] == ["/sys/kernel/tracing"]
    assert [f[1] for f in debugfs] == ["/sys/kernel/debug"]
    fakes = [f[1] for f in lines if f[2] == "fuse.fakedebugfs"]
    assert "/sys/kernel/tracing" in fakes and "/sys/kernel/debug" in fakes


def test_fake_is_at_both_paths_and_proc_files_are_bound():
    script = ("ls /sys/kernel/debug; ls /sys/kernel/tracing; "
              "stat -f -c %T /sys/kernel/tracing/tracing_on; "
              "echo 0 > /proc/sys/kernel/ftrace_enabled && cat /proc/sys/kernel/ftrace_enabled; "
              "head -1 /proc/kallsyms")
    p = run("--workload", "none", "--", "sh", "-c", script)
    assert p.returncode == 0, p.stderr
    out = p.stdout.split()
    assert {"ktrace", "tracing"} <= set(out)
    assert {"tracing_on", "trace_pipe", "per_cpu", "events"} <= set(out)
    assert "tracefs" in out  # statfs() magic: the preload library's (issue 11)
    from fakedebugfs.engine.kernel import Kernel

    first = Kernel(cpus=2).engine.kallsyms.proc_kallsyms().splitlines()[0]
    assert p.stdout.rstrip().endswith(first)
    assert "0" in out  # the write went to our file, not the host's sysctl
    with open("/proc/sys/kernel/ftrace_enabled") as fp:
        host = fp.read()
    assert host.strip() in ("0", "1")


def test_exit_status_is_the_commands():
    assert run("--workload", "none", "--", "sh", "-c", "exit 7").returncode == 7
    assert run("--workload", "none", "--", "true").returncode == 0
    p = run("--workload", "none", "--", "/nonexistent/command")
    assert p.returncode == 127 and "No such file" in p.stderr
    p = run("--workload", "none", "--", "sh", "-c", "kill -TERM $$")
    assert p.returncode == 128 + signal.SIGTERM


def test_no_command_is_an_error():
    p = run("--workload", "none")
    assert p.returncode != 0 and "no command" in p.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_are_forwarded(sig):
    proc = subprocess.Popen([FAKEDEBUGFS, "run", "--workload", "none", "--", "sh", "-c",
                             "echo started; exec sleep 60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        assert proc.stdout.readline() == b"started\n"  # the command runs: run took the signals
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == 128 + sig
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_run_killed_outright_is_swept_by_the_next(tmp_path):
    """``run`` killed with SIGKILL takes its command and server with it; what
    it leaves in the run directory (its work folder, its server's state
    file and socket) goes at the next ``run``."""
    rundir = tmp_path / "rundir"
    env = dict(os.environ, FAKEDEBUGFS_RUNDIR=str(rundir))
    proc = subprocess.Popen([FAKEDEBUGFS, "run", "--workload", "none", "--", "sleep", "60"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not list(rundir.glob("*.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(rundir.glob("run-*")) and list(rundir.glob("*.json"))
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 20  # the server sees its parent go and unmounts
    while any(m.startswith("fakedebugfs ") for m in host_mounts()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", "--", "true"], env=env,
                          timeout=60).returncode == 0
    assert sorted(p.name for p in rundir.iterdir() if not p.name.endswith(".log")) == []


def test_splice_preload(cc):
    """splice() from a fake file into a pipe moves the bytes read() gives;
    without the preload it sees end of file (docs/fuse.md#splice)."""
    splice_cat = cc("splice_cat.c")
    path = "/sys/kernel/tracing/events/header_page"
    # (no `cmp -s`: it trusts st_size, which is 0 for the fake's files)
    script = (f"{splice_cat} {path} > /tmp/spl.$$; cat {path} | cmp - /tmp/spl.$$ && echo same; "
              f"LD_PRELOAD= {splice_cat} {path} | wc -c; "
              f"{splice_cat} /etc/hostname | cmp - /etc/hostname && echo host-same; "
              f"{splice_cat} /sys/kernel/tracing/per_cpu/cpu0/trace_pipe_raw 65536 nonblock "
              f"| wc -c; rm -f /tmp/spl.$$")
    p = run("--workload", "none", "--", "sh", "-c", script)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split()
    assert lines[0] == "same", (p.stdout, p.stderr)
    assert lines[1] == "0"
    assert lines[2] == "host-same"
    assert lines[3] == "0" and "Resource temporarily unavailable" in p.stderr


# --- trace-cmd ----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [[], ["-d", "--no-filter"]], ids=["splice", "no-ftrace"])
def test_record_report_matches_engine(tmp_path, mode):
    # 4 s of workload paced in real time: trace-cmd, which may take over a
    # second to start on a busy machine, still records most of it
    count, seed = 4000, 11 + len(mode)
    dat = tmp_path / "k.dat"
    p = run("--cpus", 2, "--workload", "kmem", "--count", count, "--rate", 1000, "--seed", seed,
            "--clock", "virtual", "--enable-all", "--",
            "trace-cmd", "record", *mode, "-e", "kmem:kmalloc", "-e", "kmem:kfree",
            "-o", dat, "sleep", 5.5)
    assert p.returncode == 0, p.stderr
    assert_window(report(dat), expected_events(2, seed, count))
    assert lost_events(dat) == 0


@pytest.mark.parametrize("preload", [True, False], ids=["preload", "plain-splice"])
def test_record_streams_without_loss(tmp_path, preload):
    """30,000 kmem events/s for 5 s overflow the fake's 1408 KiB per-CPU
    buffers several times: only a recorder that keeps up loses nothing.
    With the kernel's own splice (0 from a FUSE file) trace-cmd gets only
    what is left at the end (the control)."""
    dat = tmp_path / "s.dat"
    env = dict(os.environ, FAKEDEBUGFS_NO_SPLICE_PRELOAD="0" if preload else "1")
    if not preload:  # the control: the fake as a plain FUSE file system, statfs() included
        env["FAKEDEBUGFS_NO_STATFS_MAGIC"] = "1"
    p = run("--cpus", 2, "--workload", "kmem", "--rate", 30000, "--enable-all", "--",
            "trace-cmd", "record", "-e", "kmem", "-o", dat, "sleep", 5, env=env)
    assert p.returncode == 0, p.stderr
    if preload:
        assert lost_events(dat) == 0
    else:
        assert lost_events(dat) > 0


def test_extract_has_every_event(tmp_path):
    """With the whole workload in the buffer, extract gets all of it."""
    count, seed = 3000, 5
    dat = tmp_path / "x.dat"
    script = f"{FAKEDEBUGFS} status \"$FAKEDEBUGFS_MOUNT\" --wait-done >/dev/null && " \
             f"trace-cmd extract -o {dat}"
    p = run("--cpus", 2, "--workload", "kmem", "--count", count, "--rate", 0, "--seed", seed,
            "--clock", "virtual", "--enable-all", "--", "sh", "-c", script)
    assert p.returncode == 0, p.stderr
    assert report(dat) == expected_events(2, seed, count)


def test_tracecmd_commands_exit_zero(tmp_path):
    # trace-cmd stream reads every events/*/*/format (2,300 of them) while its
    # recorders start; a SIGINT in that window (seconds on a busy machine, too
    # short to hit on the kernel) left trace-cmd 3.1.6 in poll(2) with no
    # timeout on its recorders' pipes, its recorders exited and unreaped:
    # interrupt it once it streams, as a user would
    out = tmp_path / "out"
    script = f"""
        set -u
        trace-cmd list -e > {out}.list; echo list=$?
        trace-cmd show > {out}.show; echo show=$?
        trace-cmd stream -e kmem:kmalloc > {out}.stream 2>&1 & pid=$!
        i=0; while ! grep -q kmalloc: {out}.stream && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
        kill -INT $pid; wait $pid
        echo stream=$?
        trace-cmd reset; echo reset=$?
    """
    # the kmem workload's events only: with run's default mirror every
    # event --enable-all turns on is mirrored too, and the stream's first
    # kmalloc line took 40-60 s under load (docs/mirroring.md)
    p = run("--mirror", "none", "--cpus", 2, "--workload", "kmem", "--rate", 2000, "--seed", 1,
            "--enable-all", "--", "sh", "-c", script)
    assert p.returncode == 0, p.stderr
    status = dict(line.split("=") for line in p.stdout.split())
    assert status == {"list": "0", "show": "0", "stream": "0", "reset": "0"}, p.stdout
    events = (tmp_path / "out.list").read_text().split()
    assert "kmem:kmalloc" in events and "kmem:kfree" in events
    assert (tmp_path / "out.show").read_text().startswith("# tracer:")
    assert "kmalloc:" in (tmp_path / "out.stream").read_text()


def test_stream_ends_on_sigint_within_seconds(tmp_path):
    """SIGINT 2 s after trace-cmd stream's recorders are up: it ends in a few
    seconds with status 0, as on the kernel.  (The parent disables
    tracing_on, SIGUSR1s its recorders, whose non-blocking reads of
    trace_pipe_raw drain the ring to EAGAIN, and reads their pipes to EOF.)

    Two races of trace-cmd 3.1.6 itself are kept out, as a user would: a
    SIGINT before the recorders fork (while it reads 2,300 formats) makes
    them exit at once and leaves the parent in poll(2) with no timeout on
    closed pipes, on any kernel; and a recorder that has lagged more than a
    pipe's 64 KiB behind can block in write(2) once the parent, finding its
    pipe empty for an instant, stops reading.  With the default
    ``buffer_percent`` (50) a recorder's blocking read waits for half of a
    1,410 KiB buffer, so the kernel's as the fake's leaves 2 s of this
    workload (some 200 KiB a CPU) for the recorders' final flush, more than
    the pipe holds: the test sets ``buffer_percent`` to 0 first, so that
    each recorder takes every page as it fills (the race then needs a
    64 KiB burst in one wake-up).  Without it the test hung in about a
    third of runs, old code and new alike."""
    out = tmp_path / "out.stream"
    script = f"""
        echo 0 > /sys/kernel/tracing/buffer_percent
        trace-cmd stream -e sched_switch > {out} 2>&1 & pid=$!
        i=0; while [ "$(pgrep -c -P $pid)" -lt 2 ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
        sleep 2
        start=$(date +%s%N); kill -INT $pid; wait $pid; status=$?
        echo status=$status ms=$(( ($(date +%s%N) - start) / 1000000 ))
    """
    p = run("--cpus", 2, "--rate", 2000, "--", "sh", "-c", script, timeout=180)
    assert p.returncode == 0, p.stderr
    got = dict(kv.split("=") for kv in p.stdout.split())
    # (a hang is what this catches: the bound is generous, not a figure)
    assert got["status"] == "0" and int(got["ms"]) < 60_000, p.stdout
    assert "sched_switch:" in out.read_text()


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed (linux-perf)")
def test_perf_lists_kmem_tracepoints():
    p = run("--workload", "none", "--", "env", "TRACEFS_PATH=/sys/kernel/tracing",
            "perf", "list", "tracepoint")
    assert p.returncode == 0, p.stderr
    listed = re.findall(r"^\s*(kmem:\w+)\s", p.stdout, re.M)
    assert {"kmem:kmalloc", "kmem:kfree"} <= set(listed)
