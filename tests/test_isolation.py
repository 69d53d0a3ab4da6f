"""``fakedebugfs run``: nothing outside the fake changes, nothing outlives the run.

Every test starts the real CLI as root and looks from inside the command
(a shell script) and from the host (this process) at what the sandbox
promises (fakedebugfs.sandbox.run, .confine, .seal):

* /proc/sys and /sys are read-only to the command, but private writable
  copies of the sysctls tracing tools write (ftracetest's
  ``echo -1 > /proc/sys/kernel/sched_rt_runtime_us``): the host's values stay;
* the command has a PID namespace of its own: no host process in its
  /proc, so no ``/proc/<pid>/root`` into the host's mounts;
* other fakes' control sockets are out of its sight, its own fake's is not;
* when ``run`` ends, every process its command started ends too;
* it keeps root's capabilities (bpftrace needs CAP_SYS_ADMIN), while the
  seccomp filter refuses mounts, setns and new namespaces;
* /proc/kallsyms is the fake's, live: a replay's symbols are seen at once.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS
from support.nobody import NOBODY, SYSTEM_PYTHON, usable as nobody_usable

from fakedebugfs.sandbox.cmdinit import FIRST_PID

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the tests start runs as root")

HAVE_TRACECMD = shutil.which("trace-cmd") is not None
HAVE_BPFTRACE = shutil.which("bpftrace") is not None
FIXTURES = Path(__file__).parent.parent / "fixtures"


def run(*args, timeout=120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([FAKEDEBUGFS, "run", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, **kw)


def sh(script: str, *options, timeout=120, **kw) -> subprocess.CompletedProcess:
    return run(*options, "--workload", "none", "--", "sh", "-c", textwrap.dedent(script),
               timeout=timeout, **kw)


def host_value(path: str) -> str:
    with open(path) as fp:
        return fp.read()


# --- kernel settings --------------------------------------------------------------

def test_sysctl_copies_are_private():
    """ftracetest's setup writes -1 to sched_rt_runtime_us: the command reads
    -1 back, the host keeps its value; the same for the perf and ftrace sysctls."""
    names = ["kernel/sched_rt_runtime_us", "kernel/perf_event_paranoid",
             "kernel/kptr_restrict", "kernel/ftrace_enabled", "kernel/traceoff_on_warning",
             "kernel/tracepoint_printk", "kernel/perf_event_max_sample_rate"]
    names = [n for n in names if os.path.exists(f"/proc/sys/{n}")]
    before = {n: host_value(f"/proc/sys/{n}") for n in names}
    writes = {"kernel/sched_rt_runtime_us": "-1", "kernel/perf_event_paranoid": "-1",
              "kernel/kptr_restrict": "0", "kernel/ftrace_enabled": "0",
              "kernel/traceoff_on_warning": "1", "kernel/tracepoint_printk": "1",
              "kernel/perf_event_max_sample_rate": "1000"}
    script = "\n".join(f"echo {writes[n]} > /proc/sys/{n} && echo {n}=$(cat /proc/sys/{n})"
                       for n in names)
    p = sh(script)
    assert p.returncode == 0, p.stderr
    got = dict(line.split("=", 1) for line in p.stdout.split())
    assert got == {n: writes[n] for n in names}, p.stdout
    assert {n: host_value(f"/proc/sys/{n}") for n in names} == before


def test_proc_sys_and_sys_are_read_only():
    """Other sysctls and /sys answer EROFS: no host CPU goes offline
    (ftracetest's func_hotplug.tc: the CPUs' online files are absent, as
    for CPUs a kernel cannot offline), no host setting changes; the fake's
    files under /sys/kernel/tracing stay writable."""
    cpu_online = sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/online"))
    swappiness = host_value("/proc/sys/vm/swappiness")
    targets = ["/proc/sys/vm/swappiness", "/proc/sys/kernel/panic_on_warn"]
    targets += [str(p) for p in cpu_online[-1:]]
    script = "\n".join(f"(echo 0 > {t}) 2>/dev/null && echo WROTE {t}" for t in targets)
    # a CPU that cannot go offline has no online file (sandbox/hotplug.py)
    script += "".join(f"\n[ -e {c} ] || echo ABSENT {c}" for c in cpu_online)
    script += ("\nmount -o remount,rw /sys 2>/dev/null && echo REMOUNTED"
               "\necho 1 > /sys/kernel/tracing/tracing_on && echo TRACING_OK"
               "\necho 0 > /sys/kernel/debug/tracing/tracing_on && echo DEBUG_OK")
    p = sh(script)
    assert p.returncode == 0, p.stderr
    assert "WROTE" not in p.stdout and "REMOUNTED" not in p.stdout, p.stdout
    assert "TRACING_OK" in p.stdout and "DEBUG_OK" in p.stdout, p.stdout
    assert [ln for ln in p.stdout.splitlines() if ln.startswith("ABSENT")] == \
        [f"ABSENT {c}" for c in cpu_online], p.stdout
    assert host_value("/proc/sys/vm/swappiness") == swappiness
    assert all(host_value(str(c)).strip() == "1" for c in cpu_online)
    q = sh("echo 1 > /proc/sys/vm/swappiness", timeout=60)
    assert "Read-only file system" in q.stderr, q.stderr


# --- processes --------------------------------------------------------------------

def test_no_host_process_in_sight():
    """A PID namespace of its own: this test's process (a root process of
    the host) is not in the command's /proc, so its root is no way out."""
    me = os.getpid()
    p = sh(f"""
        echo self=$$
        ls -d /proc/[0-9]* | wc -l
        cat /proc/{me}/root/proc/self/mounts >/dev/null 2>&1 && echo HOST_REACHED
        cat /proc/1/comm
        true
    """)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    # a pid of the new namespace: its first after its init's (sandbox/cmdinit.py)
    assert int(lines[0].split("=")[1]) == FIRST_PID
    assert int(lines[1]) < 20  # init, the server, the shell and what it runs
    assert "HOST_REACHED" not in lines
    assert lines[2] == "fakedebugfs"  # init is run's own


def _processes_with(mark: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if mark.encode() in (d / "environ").read_bytes():
                found.append(int(d.name))
        except OSError:
            pass
    return found


@pytest.mark.skipif(not HAVE_TRACECMD, reason="trace-cmd is not installed")
def test_nothing_outlives_run():
    """``timeout -s TERM 5 fakedebugfs run -- bash -c '(trace-cmd stream ...); true'``:
    bash dies of the SIGTERM run forwards, and trace-cmd stream, in a
    subshell that no signal reached, goes with the run's PID namespace."""
    mark = f"FAKEDEBUGFS_ISOLATION_MARK={uuid.uuid4().hex}"
    env = dict(os.environ, **dict([mark.split("=")]))
    p = subprocess.run(["timeout", "-s", "TERM", "5", FAKEDEBUGFS, "run", "--", "bash", "-c",
                        "(trace-cmd stream -e sched_switch > /dev/null); true"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 124, p.stderr  # timeout's own status: it had to send SIGTERM
    time.sleep(1)
    left = _processes_with(mark)
    assert not left, f"processes of the run left behind: {left}"


def test_run_killed_outright_takes_its_tree():
    """SIGKILL to run: its init dies with it, and with init every process
    of the namespace (the server, the command and what it started)."""
    mark = f"FAKEDEBUGFS_ISOLATION_MARK={uuid.uuid4().hex}"
    env = dict(os.environ, **dict([mark.split("=")]))
    proc = subprocess.Popen([FAKEDEBUGFS, "run", "--workload", "none", "--", "sh", "-c",
                             "(sleep 1000; true) & echo started; wait"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout.readline() == b"started\n"
        assert len(_processes_with(mark)) >= 4  # run, init, server, sh, sleep...
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _processes_with(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _processes_with(mark)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- other fakes ------------------------------------------------------------------

def test_other_fakes_are_out_of_sight(fake):
    """Another fake's state file and socket are hidden (a tmpfs over the
    state directory); this run's own fake answers ``fakedebugfs emit``."""
    other = fake("--workload", "none")
    from fakedebugfs.control import runstate

    sock = runstate.paths(str(other))["sock"]
    assert sock.exists()
    p = sh(f"""
        test -e {sock} && echo OTHER_SOCKET_SEEN
        {FAKEDEBUGFS} emit {other} kmem:kmalloc 2>/dev/null && echo OTHER_REACHED
        echo 1 > /sys/kernel/tracing/events/kmem/kmalloc/enable
        {FAKEDEBUGFS} emit "$FAKEDEBUGFS_MOUNT" kmem:kmalloc bytes_req=77 && echo OWN_OK
        grep -c 'bytes_req=77' /sys/kernel/tracing/trace
    """, "--mirror", "none")  # (the emitted event alone: not the shell's real kmallocs)
    assert p.returncode == 0, p.stderr
    assert "OTHER_SOCKET_SEEN" not in p.stdout and "OTHER_REACHED" not in p.stdout, p.stdout
    assert "OWN_OK" in p.stdout and p.stdout.split()[-1] == "1", (p.stdout, p.stderr)
    assert sock.exists()  # the host's view is unchanged


# --- the seal -----------------------------------------------------------------------

def test_seal_refuses_mounts_and_namespaces(tmp_path):
    """EPERM from mount(2), umount(2) of a mount that is not a view of the
    fake (the fake's own uncovers nothing real: test_run_sealed),
    unshare(2), setns(2) and the new mount API; clone3 answers ENOSYS, so
    fork still works through clone."""
    target = tmp_path / "x"
    target.mkdir()
    p = sh(f"""
        mount -t tmpfs none {target} 2>/dev/null && echo MOUNTED
        umount -l /proc 2>/dev/null && echo UMOUNTED
        umount -l /sys 2>/dev/null && echo UMOUNTED
        unshare -m true 2>/dev/null && echo UNSHARED
        unshare -U true 2>/dev/null && echo USERNS
        nsenter -t 1 -m true 2>/dev/null && echo SETNS
        python3 -c 'import os, subprocess; print("child", subprocess.run(["true"]).returncode)'
        (echo subshell)
    """)
    assert p.returncode == 0, p.stderr
    for word in ("MOUNTED", "UMOUNTED", "UNSHARED", "USERNS", "SETNS"):
        assert word not in p.stdout, p.stdout
    assert "child 0" in p.stdout and "subshell" in p.stdout
    assert not os.path.ismount(target)


def test_seal_kills_a_system_call_of_another_abi():
    """An x32 system call (getpid | __X32_SYSCALL_BIT), which the filter's
    numbers do not describe, ends the process (SIGSYS), never gets through."""
    code = "import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39); print('survived')"
    p = sh(f"python3 -c \"{code}\"; echo status=$?")
    assert p.returncode == 0, p.stderr
    assert "survived" not in p.stdout and "status=159" in p.stdout, p.stdout  # 128 + SIGSYS


def test_unsealed_is_not_confined(tmp_path):
    p = run("--unsealed", "--workload", "none", "--", "sh", "-c",
            "grep ^Seccomp: /proc/self/status; unshare -m true && echo UNSHARED")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^Seccomp:\s*0$", p.stdout, re.M) and "UNSHARED" in p.stdout, p.stdout


@pytest.mark.skipif(not HAVE_BPFTRACE, reason="bpftrace is not installed")
@pytest.mark.parametrize("tool", ["oneliner", "execsnoop.bt", "opensnoop.bt"])
def test_bpftrace_works_sealed(tmp_path, tool):
    """bpftrace walks the kernel's BTF (CAP_SYS_ADMIN, kept) and attaches
    to real tracepoints under the seal, as outside; no real tracefs can be mounted."""
    out = tmp_path / "bpf.out"
    marker = tmp_path / "opened-by-the-test"
    if tool == "oneliner":
        prog = ["bpftrace", "-e", "tracepoint:sched:sched_switch { @n = count(); } "
                                  "interval:s:2 { exit(); }"]
    else:
        path = shutil.which(tool) or f"/usr/sbin/{tool}"
        if not os.path.exists(path):
            pytest.skip(f"{tool} is not installed (Debian's bpftrace package has it)")
        prog = [path]
    script = f"""
        {shlex.join(prog)} > {out} 2>&1 & pid=$!
        i=0; while ! grep -q '^Attaching' {out} && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
        sleep 1
        (cd {tmp_path} && cat {marker.name} >/dev/null 2>&1); /bin/true
        sleep 1
        kill -INT $pid 2>/dev/null; wait $pid
        mount -t tracefs nodev {tmp_path} 2>/dev/null  # (a view of the fake: mountview.py)
        awk '$5 == "{tmp_path}"' /proc/self/mountinfo | grep -q ' - tracefs ' && echo MOUNTED
        true
    """
    # linux-6.18, this machine's kernel: bpftrace attaches by the ids it reads in the fake
    p = sh(script, "--profile", "linux-6.18", timeout=180)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert "MOUNTED" not in p.stdout
    assert "BTF" not in text and "unknown type name" not in text, text[-2000:]
    if tool == "oneliner":
        assert re.search(r"^@n: [1-9]\d*$", text, re.M), text[-2000:]
    elif tool == "execsnoop.bt":
        assert re.search(r"^\d+\s+\d+\s+/bin/true", text, re.M), text[-2000:]
    else:
        assert re.search(rf"\scat\s+-1\s+2\s+{marker.name}$", text, re.M), text[-2000:]


# --- mount -o remount,gid= ------------------------------------------------------------

def test_remount_gid_from_the_sealed_command():
    """tracefs' ``gid=`` remount works inside a sealed run, installed or not
    (mount(8) -> mount.fuse3 -> the fakedebugfs run makes reachable; with
    ``-t tracefs``, mount(2) -> run's preload library -> the same helper),
    new instances included, and the README documents it as the kernel's does (ftracetest's test_ownership.tc
    requires its ``[gid=<gid>]`` line), while no real tracefs can be mounted (a new
    tracefs mount is a view of the fake: sandbox/mountview.py)."""
    script = """
        T=/sys/kernel/tracing
        grep -qF '[gid=<gid>]' $T/README && echo readme=yes
        mount -o remount,gid=4242 $T; echo remount=$?
        echo gid=$(stat -c %g $T $T/events $T/events/sched/sched_switch/enable | sort -u)
        mount -o remount,gid=0 $T; echo back=$(stat -c %g $T/events)
        mount -t tracefs -o remount,gid=4343 nodev $T; echo tracefs_remount=$?
        mkdir $T/instances/gidx; echo tgid=$(stat -c %g $T/events $T/instances/gidx/events | sort -u)
        rmdir $T/instances/gidx; mount -t tracefs -o remount,gid=0 nodev $T
        echo tback=$(stat -c %g $T/events)
        mount -t tracefs -o remount,gid=x nodev $T 2>/dev/null || echo bad=refused
        d=$(mktemp -d); mount -t tracefs nodev $d 2>/dev/null; echo dir=$d
        awk -v d=$d '$5 == d' /proc/self/mountinfo | grep -q ' - tracefs ' && echo MOUNTED
        true
    """
    p = sh(script)
    made = [w[4:] for w in p.stdout.split() if w.startswith("dir=")]
    for d in made:  # (the fake's view was mounted there, in the run's namespace only)
        os.rmdir(d)
    assert p.returncode == 0, p.stderr
    assert [w for w in p.stdout.split() if not w.startswith("dir=")] == ["readme=yes", "remount=0", "gid=4242", "back=0",
                                "tracefs_remount=0", "tgid=4343", "tback=0", "bad=refused"], \
        p.stdout + p.stderr


# --- /proc/kallsyms -------------------------------------------------------------------

def test_kallsyms_hidden_from_listing(fake):
    """The fake's /proc/kallsyms has no entry in debugfs' listing."""
    mnt = fake("--workload", "none")
    from fakedebugfs.trees.kallsyms import NAME

    assert NAME not in os.listdir(mnt)
    assert sorted(os.listdir(mnt)) == ["kmemtrace", "ktrace", "tracing"]
    # the kernel's table: the per-CPU symbols (0000000000000000 A ...) first, then the text
    assert re.match(r"[0-9a-f]{16} [A-Za-z] \S+\n", (mnt / NAME).read_text())
    assert " T _stext\n" in (mnt / NAME).read_text()


@pytest.mark.skipif(not HAVE_TRACECMD, reason="trace-cmd is not installed")
def test_kallsyms_is_live(tmp_path):
    """A replay while trace-cmd records: the recording's symbols are the
    fake's /proc/kallsyms at once, so the re-recording's call sites print
    as the original's do."""
    src = FIXTURES / "replay" / "large" / "real-kmem-v7.dat"
    orig = report_lines(src)
    out = tmp_path / "out.dat"
    script = (f"trace-cmd record -e kmem -o {out} sleep 8 & sleep 3; "
              f"{FAKEDEBUGFS} replay \"$FAKEDEBUGFS_MOUNT\" {src} --keep-timestamps; wait")
    # linux-6.18: the profile of the kernel the recording comes from
    # (--mirror none: the recording's events alone, not trace-cmd's and the
    # replay's own real kmem events, which run mirrors by default)
    p = run("--profile", "linux-6.18", "--workload", "none", "--mirror", "none", "--", "bash",
            "-c", script, timeout=180)
    assert p.returncode == 0, p.stderr
    got = report_lines(out)
    sites = [m for line in orig for m in re.findall(r"call_site=(\S+)", line)]
    assert sites and not any(s.startswith("0x") for s in sites)  # a symbolised original
    assert got == orig


MODULE_LINE = re.compile(r"^ffffffffc0[0-9a-f]{6} t (\S+)\t\[(\S+)\]$")


def module_symbols(text: str, module: str) -> list[str]:
    """The names of *module*'s lines of a /proc/kallsyms text, each checked
    against the kernel's ``%px %c %s\\t[%s]`` of a module symbol."""
    names = []
    for line in text.splitlines():
        if line.endswith(f"[{module}]"):
            m = MODULE_LINE.match(line)
            assert m and m.group(2) == module, repr(line)
            names.append(m.group(1))
    return names


def test_insmod_symbols_in_proc_kallsyms(tmp_path):
    """``fakedebugfs insmod`` while the command runs: its /proc/kallsyms shows
    the module's functions at once (in the module area, ``[module]`` after a
    tab, as the kernel prints a module's), after the kernel's own; ``rmmod``
    takes them away at once."""
    events = tmp_path / "netdisk.events"
    events.write_text("net_rx len %u\ndisk_io sector %llu\n")
    script = f"""
        set -e
        cp /proc/kallsyms before
        {FAKEDEBUGFS} insmod "$FAKEDEBUGFS_MOUNT" netdisk {events} >/dev/null
        cp /proc/kallsyms loaded
        {FAKEDEBUGFS} rmmod "$FAKEDEBUGFS_MOUNT" netdisk
        cp /proc/kallsyms after
    """
    p = sh(script, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    before, loaded, after = ((tmp_path / n).read_text() for n in ("before", "loaded", "after"))
    assert module_symbols(before, "netdisk") == []
    names = module_symbols(loaded, "netdisk")
    assert {"__traceiter_net_rx", "__traceiter_disk_io", "cleanup_module"} <= set(names), names
    assert loaded.startswith(before) and loaded.index("[netdisk]") > len(before) - 1
    assert after == before


def test_insmod_symbols_in_the_fakes_kallsyms(fake, tmp_path):
    """From the host: the fake's live symbol file (what ``run`` binds over
    /proc/kallsyms) has a loaded module's symbols, in a module area of their
    own for each module (page-aligned, no overlap), the last loaded first as
    the kernel's module list has them, and loses them on ``rmmod``."""
    from fakedebugfs.trees.kallsyms import NAME

    mnt = fake("--workload", "none")
    for module in ("first", "second"):
        events = tmp_path / f"{module}.events"
        events.write_text(f"{module}_ev a %d\n")
        subprocess.run([FAKEDEBUGFS, "insmod", str(mnt), module, str(events)], check=True,
                       capture_output=True, timeout=60)
    text = (mnt / NAME).read_text()
    first, second = (module_symbols(text, m) for m in ("first", "second"))
    assert "__traceiter_first_ev" in first and "__traceiter_second_ev" in second
    assert text.index("[second]") < text.index("[first]")
    starts = {m: min(int(line.split()[0], 16) for line in text.splitlines()
                     if line.endswith(f"[{m}]")) for m in ("first", "second")}
    assert all(a % 0x1000 == 0 for a in starts.values()) and starts["first"] != starts["second"]
    subprocess.run([FAKEDEBUGFS, "rmmod", str(mnt), "first"], check=True, timeout=60)
    text = (mnt / NAME).read_text()
    assert module_symbols(text, "first") == [] and module_symbols(text, "second") == second


def report_lines(dat: Path) -> list[str]:
    """kmem events of ``trace-cmd report`` as ``name: (call site) fields``,
    without the buffer name a recording made with ``-B`` prints first."""
    p = subprocess.run(["trace-cmd", "report", "-i", str(dat)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    events = (re.search(r"\s((?:kmalloc|kfree|kmem_cache_\w+|mm_page_\w+):.*)$", line)
              for line in p.stdout.splitlines())
    return [m.group(1).strip() for m in events if m]


# --- rootless --attach -------------------------------------------------------------------



def as_nobody(work: Path, script: str) -> subprocess.CompletedProcess:
    """*script* (sh) as uid 65534 with Debian's python3 importing this
    checkout, in a private mount namespace whose /dev/fuse is a node of
    mode 0666 of the test's own (the host's is never changed)."""
    import pyfuse3

    import fakedebugfs

    if problem := nobody_usable():
        pytest.skip(problem)
    from fakedebugfs.sandbox.userns import forbidding_setting

    if setting := forbidding_setting():
        pytest.skip(f"this system forbids unprivileged user namespaces ({setting})")
    site = str(Path(pyfuse3.__file__).parents[1])
    repo = str(Path(fakedebugfs.__file__).parents[1])
    dev = work / "dev"
    dev.mkdir()
    setup = textwrap.dedent(f"""
        set -e
        mount -t tmpfs -o mode=755 tmpfs {dev}
        mknod -m 666 {dev}/fuse c 10 229
        mount --bind {dev}/fuse /dev/fuse
        cd {work}
        exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups sh -c "$1"
    """)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(work),
           "XDG_RUNTIME_DIR": str(work), "FAKEDEBUGFS_BUILD": str(work / "build"),
           "PYTHONPATH": f"{repo}:{site}", "FK": f"{SYSTEM_PYTHON} -m fakedebugfs"}
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", setup,
                           "setup", textwrap.dedent(script)],
                          capture_output=True, text=True, timeout=180, env=env)


@pytest.fixture
def nobody_dir():
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="isolation-"))
    os.chown(d, NOBODY, NOBODY)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_rootless_attach(nobody_dir):
    """``run --attach`` as a normal user, on the fake that user mounted: a
    user namespace of its own where that mount is bound at
    /sys/kernel/tracing, sealed, its control socket in reach."""
    p = as_nobody(nobody_dir, """
        mkdir mnt
        $FK mount mnt --workload none || exit 3
        $FK run --attach mnt -- sh -c '
            id -u
            head -1 /proc/mounts
            echo 1 > /sys/kernel/tracing/events/kmem/kmalloc/enable
            python3 -m fakedebugfs emit "$FAKEDEBUGFS_MOUNT" kmem:kmalloc bytes_req=99
            grep -c bytes_req=99 /sys/kernel/tracing/trace
            grep ^Seccomp: /proc/self/status
            mount -t tmpfs none /tmp 2>/dev/null && echo MOUNTED
            true'
        echo run=$?
        $FK umount mnt
    """)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "0"  # root of its user namespace
    assert lines[1].split()[1:3] == ["/sys/kernel/tracing", "tracefs"]
    assert lines[2] == "1", (p.stdout, p.stderr)  # the fake the user mounted, and its socket
    assert re.match(r"Seccomp:\s*2$", lines[3])
    assert "MOUNTED" not in p.stdout and "run=0" in p.stdout
