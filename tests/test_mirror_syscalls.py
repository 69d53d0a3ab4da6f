"""syscalls events mirrored from the kernel's raw_syscalls perf events
(sources/mirror_syscalls.py): the entries the kernel records, in its
order, through a few perf events however many syscalls events are on.

Real mounts through the real CLI (``fakedebugfs run``, the default
profile, Debian's 6.12, whose ``syscalls`` file names the numbers), a C
program built here that calls getppid(2), and this machine's own tracefs
(a scratch instance) for the kernel's recording."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading

import pytest

from conftest import FAKEDEBUGFS, build_c
from support import realtracefs

PROFILE = "debian-6.12"  # a profile with a syscalls file (the fan-out's table)

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="--mirror needs root (CAP_PERFMON)"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc builds the workload"),
]


def real_tracefs(script: str) -> str:
    """What SCRIPT records on this machine's kernel, in a scratch instance
    (its $1) of a tracefs mounted in a private mount namespace."""
    res = realtracefs.shell("set -e; i=/sys/kernel/tracing/instances/fdfs-sc-$$; mkdir $i; "
                            f"sh {script} $i; echo 0 > $i/tracing_on; cat $i/trace; rmdir $i",
                            timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.fixture(scope="module")
def getppid(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("mirror-syscalls")
    os.chmod(d, 0o755)
    return str(build_c("getppid.c", d))


# raw_syscalls' enter probe registered before the syscalls one, the exit
# probe after it: an array records a getppid call as raw enter, sys enter,
# sys exit, raw exit ($1: the trace array's directory)
BOTH = """echo $$ > $1/set_event_pid
echo 1 > $1/options/event-fork
echo raw_syscalls:sys_enter >> $1/set_event
echo syscalls:sys_enter_getppid >> $1/set_event
echo syscalls:sys_exit_getppid >> $1/set_event
echo raw_syscalls:sys_exit >> $1/set_event
echo 1 > $1/tracing_on
exec {getppid} 3
"""
GETPPID_NR = 110  # x86-64
ENTRY = re.compile(r"-(\d+)\s+\[\d+\].*?: (sys_enter: NR (\d+) \(.*\)"
                   r"|sys_exit: NR (\d+) = (-?\d+)|sys_getppid\(\)|sys_getppid -> 0x([0-9a-f]+))\s*$")


def getppid_entries(trace: str, pid: str) -> list[tuple[str, int]]:
    """The entries of *pid*'s getppid calls: each one's event, and an
    exit's return value."""
    out = []
    for line in trace.splitlines():
        m = ENTRY.search(line)
        if not m or m[1] != pid:
            continue
        if m[3] is not None:
            if int(m[3]) == GETPPID_NR:
                out.append(("sys_enter", None))
        elif m[4] is not None:
            if int(m[4]) == GETPPID_NR:
                out.append(("sys_exit", int(m[5])))
        elif m[6] is not None:
            out.append(("sys_exit_getppid", int(m[6], 16)))
        else:
            out.append(("sys_enter_getppid", None))
    return out


@pytest.mark.skipif(not realtracefs.available(), reason="needs root and tracefs")
def test_raw_and_syscalls_events_together_as_the_kernel_records_them(getppid, tmp_path):
    script = tmp_path / "both.sh"
    script.write_text(BOTH.format(getppid=getppid))
    os.chmod(tmp_path, 0o755)
    fake = subprocess.run(
        [FAKEDEBUGFS, "run", "--profile", PROFILE, "--", "sh", "-c",
         "t=/sys/kernel/tracing/instances/both; mkdir $t; "
         f"sh {script} $t; echo 0 > $t/tracing_on; cat $t/trace"],
        capture_output=True, text=True, timeout=300)
    assert fake.returncode == 0, fake.stderr
    real = real_tracefs(str(script))

    def calls(out: str) -> list[list[tuple[str, int]]]:
        entries = getppid_entries(out, out.splitlines()[0].strip())
        return [entries[i:i + 4] for i in range(0, len(entries), 4)]

    got, want = calls(fake.stdout), calls(real)
    assert len(want) == 3, real[-3000:]
    order = ["sys_enter", "sys_enter_getppid", "sys_exit_getppid", "sys_exit"]
    assert [[e for e, _ in call] for call in want] == [order] * 3  # the kernel's order
    assert [[e for e, _ in call] for call in got] == [order] * 3, fake.stdout[-3000:]
    # the syscalls exit's value is the raw one's, as the kernel stores it
    # (the parent's pid: another number in run's namespace than on the host)
    for call in got + want:
        assert call[2][1] == call[3][1] > 0


def perf_fds(pid: int) -> int:
    """Perf event descriptors held by *pid* and its descendants, as ``ls -l
    /proc/PID/fd`` shows them (``anon_inode:[perf_event]``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fp:
                    ppid = int(fp.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    count, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, ()))
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                count += os.readlink(f"/proc/{p}/fd/{fd}") == "anon_inode:[perf_event]"
            except OSError:
                pass
    return count


def test_every_syscalls_event_through_a_few_perf_events(tmp_path):
    """``echo 'syscalls:*' > set_event`` under ``run`` opens no more perf
    events than one syscalls event of each direction (each syscalls event
    used to open one per CPU: ~1,400 on two CPUs)."""
    os.chmod(tmp_path, 0o755)
    out, back = tmp_path / "out", tmp_path / "in"
    os.mkfifo(out)
    os.mkfifo(back)
    proc = subprocess.Popen(
        [FAKEDEBUGFS, "run", "--profile", PROFILE, "--", "sh", "-c",
         "cd /sys/kernel/tracing; echo syscalls:sys_enter_getppid > set_event; "
         f"echo syscalls:sys_exit_getppid >> set_event; echo one > {out}; read x < {back}; "
         f"echo 'syscalls:*' > set_event; wc -l < set_event > {out}; read x < {back}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    counts, said = [], []
    # (a reader of the FIFO, given up on when run ends first)
    timer = threading.Timer(240, proc.kill)
    timer.start()
    try:
        for _ in range(2):
            with open(out) as fp:
                said.append(fp.read().strip())
            counts.append(perf_fds(proc.pid))
            with open(back, "w") as fp:
                fp.write("go\n")
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert said[0] == "one" and int(said[1]) > 600, said  # every syscalls event enabled
    one, every = counts
    assert 0 < one and every == one, counts


# a 32-bit program without libc: getppid(2) three times through int $0x80
# (the 32-bit table's number 64, semget's in the 64-bit one), then exit
P32_C = r"""
static int sys0(int nr) { int r; __asm__ volatile ("int $0x80" : "=a"(r) : "a"(nr) : "memory"); return r; }
void _start(void) {
    for (int i = 0; i < 3; i++)
        sys0(64);
    __asm__ volatile ("int $0x80" : : "a"(1), "b"(0));
    for (;;) ;
}
"""
RAW_OR_SYS = re.compile(r"-(\d+)\s+\[\d+\].*?: (sys_enter: NR \d+|sys_exit: NR \d+|sys_\w+)")


def after_exec(trace: str, pid: str) -> list[str]:
    """*pid*'s entries after its execve's: ``sys_enter: NR 64`` for the
    raw events, the event's printed name for the syscalls ones."""
    out = []
    for line in trace.splitlines():
        m = RAW_OR_SYS.search(line)
        if m and m[1] == pid:
            out = [] if m[2] == "sys_execve" else out + [m[2]]
    return out


def test_32_bit_calls_are_raw_syscalls_only(tmp_path):
    """A 32-bit task's system calls: the raw events record them by the
    32-bit table's numbers, no syscalls event does (x86-64's
    ``trace_get_syscall_nr``), on the kernel as in the fake mirroring every
    task (``--mirror system``: run's own command may not make 32-bit calls)."""
    src, prog = tmp_path / "p32.c", tmp_path / "p32"
    src.write_text(P32_C)
    built = subprocess.run(
        f"gcc -m32 -O2 -ffreestanding -fno-pie -fno-stack-protector -c {src} -o {prog}.o && "
        f"ld -m elf_i386 -static -o {prog} {prog}.o && {prog}", shell=True,
        capture_output=True, text=True)
    if built.returncode:
        pytest.skip(f"no 32-bit program here: {built.stderr.strip()[-200:]}")
    os.chmod(tmp_path, 0o755)
    go, out, back = tmp_path / "go", tmp_path / "out", tmp_path / "in"
    for fifo in (go, out, back):
        os.mkfifo(fifo)
    task = subprocess.Popen(["sh", "-c", f"read x < {go}; exec {prog}"])
    fake = subprocess.Popen(
        [FAKEDEBUGFS, "run", "--profile", PROFILE, "--mirror=system", "--", "sh", "-c",
         f"cd /sys/kernel/tracing; echo {task.pid} > set_event_pid; "
         "echo 'raw_syscalls:*' >> set_event; echo 'syscalls:*' >> set_event; "
         f"echo ready > {out}; read x < {back}; echo 0 > tracing_on; cat trace"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(240, lambda: (fake.kill(), task.kill()))
    timer.start()
    try:
        with open(out) as fp:
            assert fp.read().strip() == "ready"
        with open(go, "w") as fp:
            fp.write("go\n")
        assert task.wait() == 0
        with open(back, "w") as fp:
            fp.write("go\n")
        stdout, stderr = fake.communicate(timeout=120)
    finally:
        timer.cancel()
        for p in (fake, task):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert fake.returncode == 0, stderr
    got = after_exec(stdout, str(task.pid))
    # the execve's exit under the 32-bit number the kernel gives it (11)
    assert got == ["sys_exit: NR 11"] + ["sys_enter: NR 64", "sys_exit: NR 64"] * 3 + \
        ["sys_enter: NR 1"], stdout[-3000:]
    if realtracefs.available():  # the kernel's own recording of the same program
        script = tmp_path / "p32.sh"
        script.write_text("echo $$\necho $$ > $1/set_event_pid\n"
                          "echo 'raw_syscalls:*' >> $1/set_event\n"
                          f"echo 'syscalls:*' >> $1/set_event\necho 1 > $1/tracing_on\n"
                          f"exec {prog}\n")
        real = real_tracefs(str(script))
        assert after_exec(real, real.splitlines()[0].strip()) == got
