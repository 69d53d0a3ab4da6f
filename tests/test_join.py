"""Commands of ``Fake.popen``/``Fake.run`` join the namespace the fake's
keeper holds (fakedebugfs/sandbox/keeper.py, fakedebugfs/native/join.c):
they see what a ``run --attach`` command sees (the fake at
/sys/kernel/tracing and /sys/kernel/debug, its /proc/mounts lines and
kallsyms, the sysctl copies), sealed, with Popen's stdio, cwd, env and
pass_fds, the exit statuses and signals of ``run``; the commands of one
fake share a PID namespace; nothing is left when the fake closes; where
the namespace cannot be held or joined, commands go the ``run --attach``
way and the reason is logged."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fakedebugfs import Fake
from fakedebugfs.api import commands
from fakedebugfs.control import runstate
from fakedebugfs.engine.core.kallsyms import PROC_FILE
from support.nobody import nobody_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the tests start commands as root")

HAVE_TRACECMD = shutil.which("trace-cmd") is not None
nobody = pytest.fixture(scope="module")(nobody_user)


def joined(proc: subprocess.Popen) -> bool:
    """Started by the join launcher (not ``run --attach``)."""
    return os.path.basename(str(proc.args[0])).startswith("join")


def ns_processes(fake_or_ns) -> list[int]:
    """Host pids of the processes in the PID namespace *fake_or_ns*
    (a ``/proc/PID/ns/pid`` link's text)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == fake_or_ns:
                    out.append(int(name))
            except OSError:
                pass
    return out


def with_cmdline(seconds: str) -> list[int]:
    """Host pids of the processes running ``sleep SECONDS``."""
    want = b"sleep\0" + seconds.encode() + b"\0"
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fp:
                    if fp.read() == want:
                        out.append(int(name))
            except OSError:
                pass
    return out


@pytest.fixture
def fk():
    with Fake() as fake:
        yield fake


def held(fake: Fake, timeout: float = 30.0) -> None:
    """Start a first command if none ran, and wait until the keeper holds the namespace."""
    if fake._keeper is None:
        assert fake.run(["true"]).returncode == 0
    deadline = time.monotonic() + timeout
    while not fake._keeper.ready():
        assert fake._keeper.off is None, fake._keeper.off
        assert time.monotonic() < deadline, "the keeper did not hold the namespace"
        time.sleep(0.01)


SEES = textwrap.dedent("""
    cat /sys/kernel/tracing/tracing_on
    grep -c ' /sys/kernel/tracing tracefs ' /proc/mounts
    grep -c ' /sys/kernel/debug debugfs ' /proc/mounts
    head -c 100 /sys/kernel/debug/tracing/README | head -1
    grep -c . /proc/kallsyms
    echo -1 > /proc/sys/kernel/sched_rt_runtime_us && cat /proc/sys/kernel/sched_rt_runtime_us
    grep ^Seccomp: /proc/self/status | tr -d '\\t'
    echo "$FAKEDEBUGFS_MOUNT"
    echo "$LD_PRELOAD" | tr ':' '\\n' | grep -c splice_preload
    pwd
""")


def test_first_and_joined_commands_see_the_fake(fk, tmp_path):
    host_rt = Path("/proc/sys/kernel/sched_rt_runtime_us").read_text()
    outs = []
    for i in range(3):
        done = fk.run(["sh", "-c", SEES], capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        outs.append(done.stdout)
        if i == 0:
            assert "--wait-fd" in done.args  # the first waits for the keeper
            held(fk)
        else:
            assert "--pidfd" in done.args
    assert outs[0] == outs[1] == outs[2]
    lines = outs[0].splitlines()
    assert lines[:3] == ["1", "1", "1"]
    assert lines[3] == (fk.tracing / "README").read_text().splitlines()[0]
    assert int(lines[4]) > 0
    assert lines[5] == "-1" and Path("/proc/sys/kernel/sched_rt_runtime_us").read_text() == host_rt
    assert lines[6] == "Seccomp:2"
    assert lines[7] == str(fk.root)
    assert lines[8] == "1"
    assert lines[9] == str(tmp_path)
    # the fake's kallsyms, not the host's
    assert fk.run(["cmp", "-s", "/proc/kallsyms", str(fk.root / PROC_FILE)]).returncode == 0


def test_joined_command_is_sealed(fk):
    held(fk)
    script = ("mount -t tmpfs none /mnt 2>/dev/null && echo MOUNTED; "
              "umount /sys/kernel/tracing 2>/dev/null && echo UNMOUNTED; "
              "unshare -m true 2>/dev/null && echo UNSHARED; "
              "nsenter -t 1 -m true 2>/dev/null && echo ENTERED; "
              "mount -t tracefs nodev /mnt 2>/dev/null && echo TRACEFS; echo done")
    done = fk.run(["sh", "-c", script], capture_output=True, text=True)
    assert joined(done) and done.returncode == 0
    assert done.stdout == "done\n", done.stdout


def test_exit_status_signals_and_errors(fk):
    held(fk)
    assert fk.run(["sh", "-c", "exit 7"]).returncode == 7
    assert fk.run(["sh", "-c", "kill -TERM $$"]).returncode == 128 + signal.SIGTERM
    # (SIGINT at its default in the command whatever this test run inherited:
    # a run started in the background of a script has it ignored, and an
    # ignored signal stays ignored across exec, here as on any machine)
    proc = fk.popen(["sleep", "30.25"],
                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert joined(proc)
    deadline = time.monotonic() + 10  # (once the command runs: a loaded machine takes its time)
    while not with_cmdline("30.25") and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)  # to the launcher: forwarded, as run does
    assert proc.wait(timeout=10) == 128 + signal.SIGINT
    missing = fk.run(["no-such-command-h1"], capture_output=True, text=True)
    assert missing.returncode == 127
    assert missing.stderr == "fakedebugfs run: no-such-command-h1: No such file or directory\n"
    denied = fk.run(["/etc/hostname"], capture_output=True, text=True)
    assert denied.returncode == 126 and denied.stderr.startswith("fakedebugfs run: ")


def test_run_with_a_time_limit(fk):
    """``run(..., timeout=)`` without a pipe is waited for on a pidfd, not
    with Popen's sleeps (which saw a command end up to 50 ms late): the
    status is still the command's, and past its limit the command and its
    group are ended and TimeoutExpired raised, as before."""
    held(fk)
    assert fk.run(["sh", "-c", "exit 5"], timeout=30).returncode == 5
    assert fk.run(["sh", "-c", "kill -TERM $$"], timeout=30).returncode == 128 + signal.SIGTERM
    with pytest.raises(subprocess.CalledProcessError):
        fk.run(["false"], timeout=30, check=True)
    with pytest.raises(subprocess.TimeoutExpired):
        fk.run(["sh", "-c", "sleep 323.5 & sleep 323.5; wait"], timeout=0.5)
    deadline = time.monotonic() + 5
    while with_cmdline("323.5") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert with_cmdline("323.5") == []


def test_stdio_env_pass_fds_and_cwd(fk, tmp_path):
    held(fk)
    done = fk.run(["sh", "-c", "cat; echo err >&2; echo $FOO; pwd"], input="in\n",
                  capture_output=True, text=True, cwd=tmp_path,
                  env={"FOO": "bar", "PATH": os.environ["PATH"], "LD_PRELOAD": "libc.so.6"})
    assert joined(done)
    assert done.stdout.splitlines() == ["in", "bar", str(tmp_path)]
    assert done.stderr == "err\n"
    env = fk.run(["sh", "-c", "echo $LD_PRELOAD"], capture_output=True, text=True,
                 env={"PATH": os.environ["PATH"], "LD_PRELOAD": "libc.so.6"}).stdout
    assert env.startswith("libc.so.6:") and "splice_preload" in env  # appended
    r, w = os.pipe()
    try:
        done = fk.run(["sh", "-c", f"echo through >/proc/self/fd/{w}"], pass_fds=(w,))
        os.close(w)
        w = None
        assert done.returncode == 0 and os.read(r, 100) == b"through\n"
    finally:
        os.close(r)
        if w is not None:
            os.close(w)


def test_commands_share_one_pid_namespace_and_groups_end(fk):
    held(fk)
    sleeper = fk.popen(["sleep", "321.5"])
    time.sleep(0.2)
    seen = fk.run(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"],
                  capture_output=True, text=True).stdout
    assert "sleep 321.5" in seen  # another command of this fake, as on one machine
    group = fk.popen(["sh", "-c", "sleep 322.5 & sleep 322.5 & wait"])
    time.sleep(0.2)
    assert len(with_cmdline("322.5")) == 2
    fk.end_commands()
    assert sleeper.poll() is not None and group.poll() is not None
    assert with_cmdline("321.5") == [] and with_cmdline("322.5") == []


def leave_a_sleeper(fake, seconds: str) -> tuple[int, str, str]:
    """A command of *fake* leaves ``sleep SECONDS`` running outside its
    group (setsid); the keeper's pid, its work folder and the namespace."""
    held(fake)
    keeper, work = fake._keeper.proc.pid, fake._keeper.work
    ns = os.readlink(f"/proc/{fake._keeper.info['holder']}/ns/pid")
    done = fake.run(["sh", "-c", f"setsid sleep {seconds} </dev/null >/dev/null 2>&1 & echo ok"],
                    capture_output=True, text=True)
    assert done.stdout == "ok\n"
    deadline = time.monotonic() + 5
    while not with_cmdline(seconds) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(with_cmdline(seconds)) == 1  # it outlives its command ...
    return keeper, work, ns


def test_what_a_command_leaves_outside_its_group_ends_with_the_fake(tmp_path):
    with Fake() as fake:
        keeper, work, ns = leave_a_sleeper(fake, "323.5")
    assert with_cmdline("323.5") == []  # ... not the fake
    assert ns_processes(ns) == []
    assert not Path(f"/proc/{keeper}").exists() and not Path(work).exists()


def test_close_without_waiting_leaves_no_namespace_behind():
    """``close(wait=False)`` (the plugin's fixture) ends the keeper without
    waiting for its process: ``close_keeper(wait=False)`` returns once the
    keeper says it is done, and by then what a command left outside its
    group is gone, with every process of the namespace and the keeper's
    work folder; the keeper's own process may still be exiting (returned)."""
    from fakedebugfs.api.fake import wait_ended

    fake = Fake().start()
    keeper, work, ns = leave_a_sleeper(fake, "324.5")
    ending = fake.close_keeper(wait=False)
    assert with_cmdline("324.5") == [] and ns_processes(ns) == []
    assert not Path(work).exists()
    assert ending is None or ending.pid == keeper
    fake.close(wait=False)
    wait_ended()
    if ending is not None:
        ending.wait(10)
    assert not Path(f"/proc/{keeper}").exists()


def test_reset_ends_what_commands_left_and_keeps_the_namespace(fk):
    held(fk)
    holder = fk._keeper.info["holder"]
    fk.run(["sh", "-c", "setsid sleep 325.5 </dev/null >/dev/null 2>&1 &"])
    time.sleep(0.2)
    assert len(with_cmdline("325.5")) == 1
    fk.reset()
    deadline = time.monotonic() + 5
    while with_cmdline("325.5") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert with_cmdline("325.5") == []
    assert fk._keeper.ready() and fk._keeper.info["holder"] == holder
    assert fk.run(["cat", "/sys/kernel/tracing/tracing_on"], capture_output=True,
                  text=True).stdout == "1\n"


def test_nothing_left_when_the_body_fails():
    state = {}
    with pytest.raises(RuntimeError):
        with Fake() as fake:
            first = fake.popen(["sleep", "324.5"])  # waits for the keeper
            held(fake)
            fake.popen(["sleep", "324.5"])
            state.update(keeper=fake._keeper.proc.pid, work=fake._keeper.work,
                         ns=os.readlink(f"/proc/{fake._keeper.info['holder']}/ns/pid"),
                         root=str(fake.root))
            assert first.poll() is None
            raise RuntimeError("the test failed")
    assert with_cmdline("324.5") == []
    assert ns_processes(state["ns"]) == []
    assert not Path(f"/proc/{state['keeper']}").exists()
    assert not Path(state["work"]).exists()
    with open("/proc/self/mountinfo") as fp:
        assert state["root"] not in fp.read()


def test_nothing_left_when_the_fakes_process_is_killed(tmp_path):
    """SIGKILL to the process that holds the fake: its server goes (its
    lifeline), the keeper sees its stdin close and ends the namespace."""
    script = textwrap.dedent("""
        import os, sys, time
        from fakedebugfs import Fake
        fk = Fake().start()
        fk.popen(["sleep", "326.5"])
        while not fk._keeper.ready():
            time.sleep(0.01)
        fk.popen(["sh", "-c", "setsid sleep 326.5 </dev/null >/dev/null 2>&1 & wait"])
        print(fk._keeper.proc.pid, fk._keeper.info["holder"], fk._keeper.work, flush=True)
        time.sleep(300)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        keeper, holder, work = proc.stdout.readline().split()
        ns = os.readlink(f"/proc/{holder}/ns/pid")
        time.sleep(0.3)
        assert len(with_cmdline("326.5")) == 2
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 30  # (4 of them were still there after 10 s once, 2 cores busy)
    while (ns_processes(ns) or Path(f"/proc/{keeper}").exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ns_processes(ns) == [] and with_cmdline("326.5") == []
    assert not Path(f"/proc/{keeper}").exists() and not Path(work).exists()


def test_keeper_still_starting_when_the_fake_closes():
    with Fake() as fake:
        proc = fake.popen(["true"])
        keeper = fake._keeper
        work, pid = keeper.work, keeper.proc.pid
    assert proc.poll() is not None
    assert not Path(f"/proc/{pid}").exists() and not Path(work).exists()


@pytest.mark.skipif(not HAVE_TRACECMD, reason="needs trace-cmd")
def test_trace_cmd_record_through_popen(fk, tmp_path):
    held(fk)
    dat = tmp_path / "t.dat"
    proc = fk.popen(["trace-cmd", "record", "-e", "sched:sched_switch", "-o", str(dat)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert joined(proc)
    fk.wait_readers(timeout=30)
    (fk.tracing / "trace_marker").write_text("h1-joined-marker")
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = subprocess.run(["trace-cmd", "report", "-i", str(dat)], capture_output=True,
                            text=True, timeout=120)
    assert "h1-joined-marker" in report.stdout, report.stderr


def test_fallback_when_join_is_off(fk, monkeypatch):
    monkeypatch.setenv(commands.JOIN_ENV, "0")
    for _ in range(2):
        done = fk.run(["cat", "/sys/kernel/tracing/tracing_on"], capture_output=True,
                      text=True)
        assert done.stdout == "1\n" and "--attach" in done.args and not joined(done)


def test_fallback_when_the_keeper_cannot_start(fk, monkeypatch, caplog):
    monkeypatch.setattr(commands, "KEEPER_MODULE", "fakedebugfs.no_such_keeper_h1")
    caplog.set_level(logging.WARNING, logger=commands.__name__)
    commands._said.clear()
    first = fk.run(["cat", "/sys/kernel/tracing/tracing_on"], capture_output=True, text=True)
    assert first.stdout == "1\n" and first.returncode == 0  # waited, then run --attach
    second = fk.run(["cat", "/sys/kernel/tracing/tracing_on"], capture_output=True, text=True)
    assert second.stdout == "1\n" and "--attach" in second.args and not joined(second)
    assert "commands start the slow way" in caplog.text


def test_fallback_when_the_namespace_cannot_be_joined(fk, caplog):
    """A working directory that is not there in the namespace (the state
    folders are hidden from commands): the launcher says why and runs
    ``run --attach``, whose command keeps that directory."""
    held(fk)
    caplog.set_level(logging.WARNING, logger=commands.__name__)
    commands._said.clear()
    hidden = runstate.rundir() / "h1-hidden-cwd"
    hidden.mkdir(exist_ok=True)
    try:
        done = fk.run(["sh", "-c", "cat /sys/kernel/tracing/tracing_on; pwd"], cwd=hidden,
                      capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == "1"
        later = fk.run(["true"])
        assert "--attach" in later.args and not joined(later)
        assert "cannot join the fake's namespace (chdir" in caplog.text
    finally:
        hidden.rmdir()


def test_rootless_joined_commands(nobody):
    script = textwrap.dedent("""
        import time
        from fakedebugfs import Fake
        with Fake() as fk:
            for i in range(3):
                done = fk.run(["sh", "-c", "id -u; cat /sys/kernel/tracing/tracing_on; "
                               "grep -c ' /sys/kernel/tracing tracefs ' /proc/mounts; "
                               "grep ^Seccomp: /proc/self/status | tr -d '\\\\t'; "
                               "mount -t tmpfs none /tmp 2>/dev/null && echo MOUNTED; true"],
                              capture_output=True, text=True)
                print(i, "--pidfd" in done.args, done.returncode, done.stdout.split(), done.stderr)
                if i == 0:
                    while not fk._keeper.ready():
                        time.sleep(0.01)
    """)
    p = nobody.run([nobody.python, "-c", script], env={"XDG_RUNTIME_DIR": str(nobody.home)})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 3, p.stdout
    for i, line in enumerate(lines):
        assert line.startswith(f"{i} {i > 0} 0 ['0', '1', '1', 'Seccomp:2'] "), line


def test_rootless_keeper_forked_by_a_fork_server(nobody):
    """As a normal user, a fake started from a fork server (the plugin's
    fixtures) has its keeper forked there: it makes its user namespace in
    that fork, and the commands join it as uid 0 of it, sealed."""
    script = textwrap.dedent("""
        import os, tempfile
        from fakedebugfs import Fake
        from fakedebugfs.server import forkserver
        sock = os.path.join(tempfile.mkdtemp(), "fork.sock")
        with forkserver.ForkServer(sock, rmdir=True):  # (its folder goes with it)
            os.environ[forkserver.ENV] = sock
            with Fake() as fk:
                del os.environ[forkserver.ENV]
                for i in range(2):
                    done = fk.run(["sh", "-c", "id -u; cat /sys/kernel/tracing/tracing_on; "
                                   "grep ^Seccomp: /proc/self/status | tr -d '\\t'"],
                                  capture_output=True, text=True)
                    print(i, type(fk._keeper.proc).__name__, done.returncode,
                          done.stdout.split(), done.stderr)
    """)
    # (-P: the run folder, $XDG_RUNTIME_DIR/fakedebugfs, is in the working
    # directory, where `import fakedebugfs` would find it first)
    p = nobody.run([nobody.python, "-P", "-c", script],
                   env={"XDG_RUNTIME_DIR": str(nobody.home)})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines == [f"{i} Forked 0 ['0', '1', 'Seccomp:2'] " for i in range(2)], p.stdout


def test_remount_gid_through_joined_commands(fk):
    """mount(8)'s remount reaches the fake through the mount helper the
    keeper's namespace has (ftracetest's test_ownership.tc)."""
    for gid in (1234, 4321):
        done = fk.run(["mount", "-o", f"remount,gid={gid}", "/sys/kernel/tracing"],
                      capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert joined(done) and os.stat(fk.tracing / "trace").st_gid == gid
