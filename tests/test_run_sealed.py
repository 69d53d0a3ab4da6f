"""``fakedebugfs run``: sealed as root, rootless for everyone else.

As root, the command keeps its capabilities but runs under a seccomp
filter (fakedebugfs.sandbox.seal) in a PID namespace of its own: it cannot
mount the real tracefs or debugfs, unmount the fake, or walk into the
host's mounts through /proc/<pid>/root, while perf (perf_event_open) and
bpftrace (bpf, BTF with CAP_SYS_ADMIN) keep working; ``--unsealed`` lifts
the filter.

Without root, ``run`` enters a user namespace of its own
(fakedebugfs.sandbox.userns).  Those tests run the real CLI as uid 65534 with
Debian's /usr/bin/python3 (root's interpreter lives under /root, which
nobody else may enter), importing this checkout and the venv's
site-packages.  Each starts in a private mount namespace of the test
where /dev/fuse is a device node of the test's own, so this machine's
/dev/fuse (often 0600 in containers) is never changed.  After every test
the host's mounts must show nothing of a run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import fakedebugfs
import pyfuse3
from conftest import FAKEDEBUGFS
from support import realtracefs
from support.nobody import NOBODY, SYSTEM_PYTHON, usable as nobody_usable
from support.rootless import nobody_dir, rootless  # noqa: F401 (a fixture, a helper)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the tests start runs as root and "
                                                         "as uid 65534 (setpriv)")

CAP_SYS_PTRACE, CAP_SYS_ADMIN = 19, 21


def fake_lines() -> list[str]:
    """Host mount lines a run could leak: any fakedebugfs or tracefs/debugfs line."""
    with open("/proc/self/mounts") as fp:
        return sorted(line for line in fp
                      if "fakedebugfs" in line or line.split()[2] in ("tracefs", "debugfs"))


@pytest.fixture(autouse=True)
def no_leaks():
    before = fake_lines()
    yield
    # other tests' fakes may come and go concurrently: compare ours only
    leaked = [line for line in set(fake_lines()) - set(before)
              if "/run-" in line or " /sys/kernel/" in line or "/sealed-" in line]
    assert not leaked, f"fakedebugfs run left mounts in the host namespace: {leaked}"


# linux-6.18, this machine's kernel: the checks know the fake's tracefs by a
# 6.18 README (no set_ftrace_filter), and bpftrace attaches by the ids it reads
HOST_PROFILE = "linux-6.18"


def run(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([FAKEDEBUGFS, "run", "--profile", HOST_PROFILE, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def capabilities(status_text: str, field: str) -> int:
    return int(re.search(rf"^{field}:\s*([0-9a-f]+)$", status_text, re.M).group(1), 16)


# --- sealed, as root --------------------------------------------------------------

@pytest.mark.parametrize("fstype", ["tracefs", "debugfs"])
def test_sealed_mount_is_a_view_of_the_fake(tmp_path, fstype):
    """A sealed command's tracefs or debugfs mount is another view of its
    fake (sandbox/mountview.py): nothing real is mounted, nothing appears
    on the host; any other mount fails as mount(8) says on EPERM."""
    target = tmp_path / "x"
    target.mkdir()
    p = run("--", "sh", "-c", f"mount -t {fstype} nodev {target} && "
                              f"awk '$5 == \"{target}\"' /proc/self/mountinfo; "
                              f"mount -t tmpfs none {target}")
    assert " - fuse.fakedebugfs " in p.stdout, (p.stdout, p.stderr)
    assert " - tracefs " not in p.stdout and " - debugfs " not in p.stdout
    assert p.returncode != 0 and "permission denied" in p.stderr.lower()  # the tmpfs
    assert not os.path.ismount(target)


@pytest.fixture
def tracefs_holder():
    """The pid of a root process that sees the real tracefs at
    /sys/kernel/tracing (in a mount namespace of its own: the host's need
    not have one), else this process's."""
    if not realtracefs.available():
        yield os.getpid()
        return
    with realtracefs.holder() as pid:
        yield pid


def test_sealed_sees_only_the_fake(tmp_path, tracefs_holder):
    """/sys/kernel/tracing and /sys/kernel/debug are the fake's; unmounting
    the fake uncovers nothing real (what it covered goes with it:
    sandbox/mountview.py), and the host's mounts cannot be reached through
    /proc/<pid>/root."""
    host = f"/proc/{tracefs_holder}/root/sys/kernel/tracing/tracing_on"
    assert os.path.exists(host) or not realtracefs.available()  # there to be reached
    script = textwrap.dedent(f"""
        grep -q 'set_ftrace_filter' /sys/kernel/tracing/README || echo fakedebugfs README
        grep -q 'set_ftrace_filter' /sys/kernel/debug/tracing/README || echo fakedebugfs README
        grep -E '^(CapEff|CapBnd|Seccomp|NoNewPrivs):' /proc/self/status
        umount /sys/kernel/tracing && echo UMOUNTED
        test -e /sys/kernel/tracing/tracing_on && echo UNCOVERED
        cat {host} && echo HOST_REACHED
        true
    """)
    p = run("--", "sh", "-c", script)
    assert p.returncode == 0, p.stderr
    readme = p.stdout.splitlines()[:2]
    assert all("fakedebugfs" in line for line in readme), p.stdout  # the fake's README
    for field in ("CapEff", "CapBnd"):  # kept: bpftrace needs CAP_SYS_ADMIN
        caps = capabilities(p.stdout, field)
        assert caps & (1 << CAP_SYS_ADMIN | 1 << CAP_SYS_PTRACE), (field, p.stdout)
    assert re.search(r"^Seccomp:\s*2$", p.stdout, re.M), p.stdout  # SECCOMP_MODE_FILTER
    assert re.search(r"^NoNewPrivs:\s*1$", p.stdout, re.M), p.stdout
    assert "UMOUNTED" in p.stdout and "UNCOVERED" not in p.stdout
    assert "HOST_REACHED" not in p.stdout


def test_unsealed_mount_works(tmp_path):
    target = tmp_path / "x"
    target.mkdir()
    script = f"mount -t tracefs nodev {target} && test -e {target}/tracing_on && umount {target}"
    p = run("--unsealed", "--", "sh", "-c", script)
    assert p.returncode == 0, p.stderr
    assert not os.path.ismount(target)


def test_unsealed_keeps_capabilities():
    p = run("--unsealed", "--", "grep", "^CapBnd:", "/proc/self/status")
    assert p.returncode == 0, p.stderr
    assert capabilities(p.stdout, "CapBnd") & (1 << CAP_SYS_ADMIN)


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_sealed_perf_still_counts():
    """perf_event_open needs CAP_PERFMON, which the seal keeps."""
    p = run("--", "perf", "stat", "-x,", "-e", "task-clock", "true")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^[0-9.]+,msec,task-clock", p.stderr, re.M), p.stderr


@pytest.mark.skipif(shutil.which("bpftrace") is None, reason="bpftrace is not installed")
def test_sealed_bpftrace_still_attaches():
    """bpf(2) and perf_event_open(2) need CAP_BPF and CAP_PERFMON, which
    the seal keeps: a program on a real tracepoint counts real switches."""
    p = run("--", "bpftrace", "-e", "tracepoint:sched:sched_switch { @n = count(); } "
                                    "interval:s:1 { exit(); }")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^@n: [1-9]\d*$", p.stdout, re.M), p.stdout + p.stderr


# --- rootless ---------------------------------------------------------------------

def _userns_forbidden() -> str | None:
    from fakedebugfs.sandbox.userns import forbidding_setting

    if setting := forbidding_setting():
        return f"this system forbids unprivileged user namespaces ({setting})"
    p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                        "unshare", "-Urm", "true"], capture_output=True, text=True)
    if p.returncode != 0:
        return f"unprivileged user namespaces fail here: {p.stderr.strip()}"
    return None


def test_rootless_says_once_that_it_does_not_mirror(nobody_dir):
    """run mirrors its command's tree by default where perf_event_open
    allows it; uid 65534 (perf_event_paranoid 2 here) runs without, told
    so in one line with the fix; --mirror none is silent."""
    if reason := _userns_forbidden():
        pytest.skip(reason)
    p = rootless(nobody_dir, ["--", "sh", "-c", "echo ran"])
    assert p.returncode == 0 and p.stdout == "ran\n", p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "not mirrored" in lines[0], p.stderr
    assert "perf_event_paranoid=-1" in lines[0] and "--mirror none" in lines[0]
    again = nobody_dir / "again"
    again.mkdir()
    os.chown(again, NOBODY, NOBODY)
    quiet = rootless(again, ["--mirror", "none", "--", "sh", "-c", "echo ran"])
    assert quiet.returncode == 0 and quiet.stdout == "ran\n", quiet.stderr
    assert "mirror" not in quiet.stderr, quiet.stderr


@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="trace-cmd is not installed")
def test_rootless_trace_cmd_records(nobody_dir):
    if reason := _userns_forbidden():
        pytest.skip(reason)
    out = nobody_dir / "trace.dat"
    p = rootless(nobody_dir, ["--workload", "kmem", "--enable-all", "--",
                              "trace-cmd", "record", "-e", "kmem", "-o", out, "sleep", "2"])
    assert p.returncode == 0, p.stderr
    assert out.stat().st_uid == NOBODY  # uid 0 inside is uid 65534 outside
    report = subprocess.run(["trace-cmd", "report", "-i", str(out)], capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    events = re.findall(r"^\s*\S.*?\[\d+\]\s+[\d.]+:\s+(kmalloc|kfree|kmem_cache_\w+):",
                        report.stdout, re.M)
    assert len(events) > 100, report.stdout[:2000]
    assert {"kmalloc", "kfree"} <= set(events)


@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="trace-cmd is not installed")
def test_rootless_where_no_tracefs_is_mounted(nobody_dir):
    """A container without tracefs or debugfs mounts: the tracefs line
    trace-cmd needs comes from run's own /proc/mounts only."""
    if reason := _userns_forbidden():
        pytest.skip(reason)
    out = nobody_dir / "trace.dat"
    unmount_all = ("awk '$3 == \"tracefs\" || $3 == \"debugfs\" {print $2}' /proc/self/mounts"
                   " | sort -r | xargs -r -n1 umount -l")
    p = rootless(nobody_dir, ["--workload", "kmem", "--enable-all", "--", "sh", "-c",
                              f"grep -c ' tracefs ' /proc/self/mountinfo; "
                              f"trace-cmd record -e kmem:kmalloc -o {out} sleep 1"],
                 root_setup=unmount_all)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "0"  # no real tracefs mount in sight
    report = subprocess.run(["trace-cmd", "report", "-i", str(out)], capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert len(re.findall(r"\bkmalloc:", report.stdout)) > 100, report.stdout[:2000]


def test_rootless_sees_only_the_fake(nobody_dir):
    if reason := _userns_forbidden():
        pytest.skip(reason)
    target = nobody_dir / "x"
    script = textwrap.dedent(f"""
        id -u
        head -1 /proc/mounts
        grep -q 'set_ftrace_filter' /sys/kernel/tracing/README || echo fakedebugfs README
        grep -q 'set_ftrace_filter' /sys/kernel/debug/tracing/README || echo fakedebugfs README
        mkdir {target}; mount -t tmpfs none {target} && echo MOUNTED
        true
    """)
    p = rootless(nobody_dir, ["--profile", HOST_PROFILE, "--", "sh", "-c", script])
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "0"  # root of its user namespace
    assert lines[1].split()[1:3] == ["/sys/kernel/tracing", "tracefs"]  # what libtracefs reads
    assert "fakedebugfs" in lines[2] and "fakedebugfs" in lines[3]
    assert "MOUNTED" not in p.stdout  # sealed there too


def test_rootless_without_dev_fuse(nobody_dir):
    p = rootless(nobody_dir, ["--", "true"], fuse_mode=0o600)
    assert p.returncode != 0
    assert "/dev/fuse is not readable and writable by uid 65534 (mode 0600)" in p.stderr


USERNS_LIMIT = textwrap.dedent("""
    # Become root of a user namespace mapping uids 0-65535 to themselves,
    # forbid user namespaces below it (user.max_user_namespaces is per
    # namespace), then exec argv[1:] (which drops to uid 65534 itself).
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if libc.unshare(0x10000000) != 0:
            sys.exit("unshare: " + os.strerror(ctypes.get_errno()))
        os.write(w, b"x")
        os.close(w)
        while open("/proc/self/uid_map").read().split()[:3] != ["0", "0", "65536"]:
            pass
        open("/proc/sys/user/max_user_namespaces", "w").write("0")
        os.execvp(sys.argv[1], sys.argv[1:])
    os.close(w)
    os.read(r, 1)
    for name in ("uid_map", "gid_map"):
        open(f"/proc/{pid}/{name}", "w").write("0 0 65536")
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
""")


def test_rootless_where_user_namespaces_are_forbidden(nobody_dir):
    """One clear line naming the setting that forbids them."""
    script = nobody_dir / "limit.py"
    script.write_text(USERNS_LIMIT)
    p = rootless(nobody_dir, ["--", "true"], prelude=f"{sys.executable} {script}")
    assert p.returncode != 0
    message = p.stderr.strip().splitlines()
    assert len(message) == 1, p.stderr
    assert "forbids unprivileged user namespaces (user.max_user_namespaces = 0)" in message[0]


# --- process events of the command -------------------------------------------------

PROCESS_EVENTS = textwrap.dedent(r"""
    cd /sys/kernel/tracing
    for e in fork exec exit; do echo 1 > events/sched/sched_process_$e/enable; done
    /bin/true & child=$!
    wait $child
    # no waiting: what happened before trace is opened is in it, as on the kernel
    echo "me=$$ child=$child"
    grep -v '^#' trace
""")


def test_process_events_of_the_command():
    """sched_process_fork/exec/exit for what the command starts, with the
    pids it sees (getpid(), $!), in trace as soon as they happened."""
    p = run("--workload", "none", "--", "sh", "-c", PROCESS_EVENTS)
    assert p.returncode == 0, p.stderr
    ids = re.search(r"^me=(\d+) child=(\d+)$", p.stdout, re.M)
    me, child = ids.groups()
    lines = p.stdout[ids.end():]
    fork = re.search(rf"^\s*sh-{me}\s+\[\d+\].*sched_process_fork: comm=sh pid={me} "
                     rf"child_comm=sh child_pid={child}$", lines, re.M)
    exec_ = re.search(rf"^\s*true-{child}\s+\[\d+\].*sched_process_exec: "
                      rf"filename=(\S+) pid={child} old_pid={child}$", lines, re.M)
    exit_ = re.search(rf"^\s*true-{child}\s+\[\d+\].*sched_process_exit: comm=true "
                      rf"pid={child} prio=120", lines, re.M)
    assert fork and exec_ and exit_, lines
    assert os.path.realpath(exec_.group(1)) == os.path.realpath(shutil.which("true"))
    assert fork.start() < exec_.start() < exit_.start()  # in the order they happened


CONTEXT_SWITCHES = textwrap.dedent(r"""
    cd /sys/kernel/tracing
    echo $$ > set_event_pid
    echo 1 > options/event-fork
    echo 1 > events/sched/sched_switch/enable
    echo 1 > events/sched/sched_process_fork/enable
    sleep 0.2 & child=$!
    wait $child
    echo 0 > events/sched/sched_switch/enable
    echo "me=$$ child=$child"
    grep -v '^#' trace
""")


def test_context_switches_of_the_command_follow_fork():
    """The command's real context switches become sched_switch events
    (to and from the CPU's idle task), and set_event_pid with event-fork
    keeps those of its child and nothing of the workload's tasks: what
    ftracetest's event-pid test and ``trace-cmd record -F`` rely on."""
    p = run("--workload", "default", "--", "sh", "-c", CONTEXT_SWITCHES)
    assert p.returncode == 0, p.stderr
    me, child = re.search(r"^me=(\d+) child=(\d+)$", p.stdout, re.M).groups()
    lines = [ln for ln in p.stdout.splitlines() if "sched_switch:" in ln]
    assert lines, p.stdout
    out = [ln for ln in lines if re.search(rf"prev_comm=sleep prev_pid={child} prev_prio=120 "
                                           rf"prev_state=S ==> next_comm=swapper/\d+ next_pid=0 ", ln)]
    into = [ln for ln in lines if re.search(rf"prev_comm=swapper/\d+ prev_pid=0 prev_prio=120 "
                                            rf"prev_state=R ==> next_comm=(sh|sleep) "
                                            rf"next_pid={child} ", ln)]
    assert out and into, lines
    # the pid list keeps only the shell's switches and its descendants'
    # (event-fork adds each child as it is forked): no workload task's
    traced = {me} | set(re.findall(r"sched_process_fork: .* child_pid=(\d+)$", p.stdout, re.M))
    assert child in traced
    for ln in lines:
        pids = set(re.findall(r"(?:prev|next)_pid=(\d+)", ln)) - {"0"}
        assert pids <= traced, ln
