"""The seal against the command it hosts: every indirect way out tried as
an adversary would, as root, from inside ``fakedebugfs run`` and from a
command of a ``Fake`` (its keeper's namespace), and checked from outside.

* E1, through the fake's own processes: the fake's keeper and server are
  not in the command's PID namespace; its PID 1 is a minimal init that is
  confined and sealed as the command is, so ptrace of it, its
  ``/proc/1/mem`` and its ``/proc/1/root`` lead nowhere new, and
  ``kill -9 -1`` ends the command's tree only;
* E2, the host's sysctls: ``/proc/1/root/proc/sys`` is read-only, the
  host's values stay;
* E3, other fakes: their control sockets, found in ``/proc/net/unix``,
  refuse the command (server/peers.py), wherever they are
  (``FAKEDEBUGFS_RUNDIR``), and so does a fork server's;
* and, from outside: the host's tracing sysctls and mounts are as they
  were, and no real tracefs instance appeared (tests/support/hoststate.py).

What the seal cannot promise while BPF is allowed (E4) is in
docs/cli.md#the-seal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fakedebugfs import Fake
from fakedebugfs.control import runstate
from fakedebugfs.server import forkserver

from conftest import FAKEDEBUGFS
from support import hoststate, realtracefs

ADVERSARY = Path(__file__).parent / "support" / "adversary.py"

ROOT = os.geteuid() == 0

# connect to the socket at argv[1], send a hello, print what comes back
# (or the error): a command needs no fakedebugfs to try
CONNECT = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(sys.argv[1])
        s.sendall(sys.argv[2].encode() + b"\\n")
        print("REPLY", s.recv(4096).decode().strip() or "EOF")
    except OSError as err:
        print("ERROR", err)
""")


def run_sh(script: str, *options, timeout=120, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([FAKEDEBUGFS, "run", *options, "--workload", "none", "--", "sh",
                           "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def reached(stdout: str) -> bool:
    """A CONNECT line that got a real answer ("ok": true)."""
    for line in stdout.splitlines():
        if line.startswith("REPLY ") and '"ok":true' in line.replace(" ", ""):
            return True
    return False


# --- E3: other fakes' sockets, wherever they are -------------------------------------------

@pytest.fixture
def elsewhere(tmp_path):
    """A fake whose state directory is a FAKEDEBUGFS_RUNDIR of its own (not
    one the confinement knows of); its socket path."""
    rundir = tmp_path / "fakedebugfs-elsewhere"  # (the adversary asks every such socket)
    mnt = tmp_path / "other"
    mnt.mkdir()
    env = dict(os.environ, FAKEDEBUGFS_RUNDIR=str(rundir))
    subprocess.run([FAKEDEBUGFS, "mount", str(mnt), "--workload", "none"], env=env,
                   check=True, capture_output=True, timeout=60)
    try:
        socks = list(rundir.glob("*.sock"))
        assert len(socks) == 1
        yield mnt, socks[0], env
    finally:
        subprocess.run([FAKEDEBUGFS, "umount", str(mnt)], env=env, capture_output=True,
                       timeout=60)


def test_state_directory_and_socket_are_the_owners_alone(elsewhere):
    mnt, sock, _ = elsewhere
    assert sock.stat().st_mode & 0o777 == 0o600
    assert sock.parent.stat().st_mode & 0o777 == 0o700


def test_a_state_directory_open_to_others_is_closed(tmp_path):
    rundir = tmp_path / "open"
    rundir.mkdir(mode=0o755)
    rundir.chmod(0o755)
    p = subprocess.run([FAKEDEBUGFS, "status", str(tmp_path)], capture_output=True, text=True,
                       env=dict(os.environ, FAKEDEBUGFS_RUNDIR=str(rundir)), timeout=60)
    assert "no fakedebugfs server" in p.stderr, p.stderr
    assert rundir.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(not ROOT, reason="run as root here (rootless runs: test_isolation)")
def test_another_fakes_socket_refuses_a_run(elsewhere):
    """E3: the path is in /proc/net/unix, and in sight (a FAKEDEBUGFS_RUNDIR
    the run does not hide): connecting gets no answer; the fake's own
    socket answers, and the other fake saw nothing."""
    mnt, sock, env = elsewhere
    hello = json.dumps({"v": 1, "cmd": "hello"})
    emit = json.dumps({"v": 1, "cmd": "emit", "events": [{"event": "kmem:kfree", "cpu": 0,
                                                          "pid": 1, "fields": {}}]})
    p = run_sh(f"""
        grep -c {sock} /proc/net/unix
        python3 -c '{CONNECT}' {sock} '{hello}'
        python3 -c '{CONNECT}' {sock} '{emit}'
        {FAKEDEBUGFS} status "$FAKEDEBUGFS_MOUNT" >/dev/null && echo OWN_OK
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] != "0", "the socket should be listed: the test sees it"
    assert not reached(p.stdout), p.stdout
    assert "OWN_OK" in p.stdout, (p.stdout, p.stderr)
    status = json.loads(subprocess.run([FAKEDEBUGFS, "status", str(mnt)], env=env,
                                       capture_output=True, text=True, check=True).stdout)
    assert status["injected"] == 0


@pytest.mark.skipif(not ROOT, reason="run as root here (rootless runs: test_isolation)")
def test_another_fakes_socket_refuses_a_fake_command(elsewhere):
    """E3 from a Fake's command (its keeper's namespace): the same."""
    mnt, sock, env = elsewhere
    hello = json.dumps({"v": 1, "cmd": "hello"})
    with Fake() as fk:
        r = fk.run([sys.executable, "-c", CONNECT, str(sock), hello], capture_output=True,
                   text=True, timeout=60)
        assert not reached(r.stdout), r.stdout
        own = runstate.read_state(str(fk.root))["sock"]
        r = fk.run([sys.executable, "-c", CONNECT, own, hello], capture_output=True, text=True,
                   timeout=60)
        assert reached(r.stdout), (r.stdout, r.stderr)


@pytest.mark.skipif(not ROOT, reason="run as root here (rootless runs: test_isolation)")
def test_admit_is_refused_from_inside(elsewhere):
    """A command cannot let itself in: ``admit`` is taken only from the
    server's own namespace."""
    with Fake() as fk:
        own = runstate.read_state(str(fk.root))["sock"]
        admit = json.dumps({"v": 1, "cmd": "admit", "pid": 1})
        r = fk.run([sys.executable, "-c", CONNECT, own, admit], capture_output=True, text=True,
                   timeout=60)
        assert "outside any run" in r.stdout and not reached(r.stdout), r.stdout


@pytest.fixture
def a_forkserver(tmp_path):
    folder = tmp_path / "fakedebugfs-forkserver-x"
    folder.mkdir(mode=0o700)
    sock = str(folder / "fork.sock")
    pid = forkserver.start(sock)
    yield sock
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while runstate.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.skipif(not ROOT, reason="run as root here (rootless runs: test_isolation)")
def test_a_fork_server_refuses_a_run(a_forkserver):
    """A fork server forks unsealed processes on the host: a request from
    inside a run gets none (the uid is right, the PID namespace is not)."""
    request = json.dumps({"module": "fakedebugfs.sandbox.keeper", "argv": [], "env": {}})
    p = run_sh(f"python3 -c '{CONNECT}' {a_forkserver} '{request}'")
    assert p.returncode == 0, p.stderr
    assert "serves its own PID namespace only" in p.stdout, p.stdout
    host = subprocess.run([sys.executable, "-c", CONNECT, a_forkserver, request],
                          capture_output=True, text=True, timeout=30)
    assert "REPLY" in host.stdout and "PID namespace" not in host.stdout, host.stdout


# --- E1, E2 and everything at once: the adversary, then the host from outside ---------------

def host_state() -> dict:
    """What must not change: the host's tracefs/debugfs mounts, the tracing
    sysctls, the real tracefs's instances (None where it cannot be read)."""
    state = hoststate.snapshot()
    top = state["top"] or {}
    return {"mounts": state["mounts"], "sysctl": state["sysctl"],
            "instances": top.get("instances")}


def assert_host_unchanged(before: dict) -> None:
    after = host_state()
    assert after["mounts"] == before["mounts"]
    assert after["sysctl"] == before["sysctl"]
    if isinstance(before["instances"], list):
        deadline = time.monotonic() + 5  # (another session's scratch instance comes and goes)
        while True:
            added = [n for n in after["instances"] or [] if n not in before["instances"]]
            if not added or time.monotonic() > deadline:
                break
            time.sleep(0.5)
            after = host_state()
        assert not added, f"real tracefs instances appeared: {added}"


def judge(found: dict, own_sock: str, others: list[str]) -> None:
    """What the adversary (tests/support/adversary.py) got from inside."""
    procs = found["procs"]
    assert "1" in procs and found["me"] != 1
    for pid, proc in procs.items():
        # nothing in sight is a FUSE server or outside the seal
        assert not proc["fuse"], (pid, proc)
        assert (proc["seccomp"], proc["nnp"]) == ("2", "1"), (pid, proc)
        assert proc["same_mntns"], (pid, proc)
        assert proc["root_sysctl"] == "EROFS", (pid, proc)
    # mount() of a real tracefs injected into PID 1 by ptrace: refused, or
    # given a view of the fake (a sealed run's answer to a tracefs mount)
    assert found["ptrace"].get("1") in ("EPERM", "ok"), found["ptrace"]
    assert set(found["target_mounted"]) <= {"fuse.fakedebugfs"}, found["target_mounted"]
    assert bool(found["target_mounted"]) == (found["ptrace"]["1"] == "ok")
    assert found["finit_module"] == "EPERM"  # the seal's answer (EBADF through it)
    writes = found["writes"]
    for path in ("/proc/sys/vm/swappiness", "/proc/sys/kernel/panic_on_warn",
                 "/proc/1/root/proc/sys/vm/swappiness", "/sys/devices/system/cpu/cpu1/online",
                 "/sys/fs/cgroup/cgroup.procs"):
        assert writes.get(path, "EROFS") != "ok", (path, writes)
    answered = [path for path, how in found["sockets"].items() if how == "answered"]
    assert answered == [own_sock], found["sockets"]
    for other in others:
        assert found["sockets"].get(other, "unseen") != "answered"


@pytest.mark.skipif(not ROOT, reason="the adversary is root (run's usual case in CI)")
def test_the_adversary_gets_nowhere_from_run(elsewhere, tmp_path):
    """E1-E3 from inside ``run``: ptrace of PID 1 and a mount() injected into
    it, /proc/N/root and /proc/N/mem of everything in sight, the host's
    sysctls, CPU and cgroup files, every fakedebugfs socket in
    /proc/net/unix (another run's, a FAKEDEBUGFS_RUNDIR's, a Fake's), then
    ``kill(-1, SIGKILL)``: nothing on the host changed, the other fakes
    saw nothing, and the run's fake served to the end."""
    mnt, sock, env = elsewhere
    target = tmp_path / "target"  # where the injected mount goes (a fake's view, at most)
    before = host_state()
    with Fake() as fk:
        fake_sock = runstate.read_state(str(fk.root))["sock"]
        p = subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", "--", sys.executable,
                            str(ADVERSARY), "--target", str(target), "--kill", "/sys/kernel/tracing"],
                           capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stderr
        found = json.loads(p.stdout)
        judge(found, str(runstate.paths(found["mount"])["sock"]), [str(sock), fake_sock])
        assert found["kill"] == {"children_killed": True, "tracing_on": "1"}
        assert fk.status()["injected"] == 0 and fk.call("hello")
    status = json.loads(subprocess.run([FAKEDEBUGFS, "status", str(mnt)], env=env,
                                       capture_output=True, text=True, check=True).stdout)
    assert status["injected"] == 0
    assert_host_unchanged(before)


@pytest.mark.skipif(not ROOT, reason="the adversary is root (a Fake's commands are, in CI)")
def test_the_adversary_gets_nowhere_from_a_fake_command(elsewhere, tmp_path):
    """The same from a command of a Fake (its keeper's namespace): its PID 1
    is the keeper's holder, sealed; after ``kill(-1, SIGKILL)`` (which
    ends the Fake's other commands) the fake answers and runs commands."""
    mnt, sock, env = elsewhere
    target = tmp_path / "target"  # where the injected mount goes (a fake's view, at most)
    before = host_state()
    with Fake() as fk, Fake() as other:
        own = runstate.read_state(str(fk.root))["sock"]
        other_sock = runstate.read_state(str(other.root))["sock"]
        sleeper = fk.popen(["sleep", "300"])
        r = fk.run([sys.executable, str(ADVERSARY), "--target", str(target), "--kill", str(fk.tracing)],
                   capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        found = json.loads(r.stdout)
        judge(found, own, [str(sock), other_sock])
        assert found["kill"] == {"children_killed": True, "tracing_on": "1"}
        assert sleeper.wait(10) in (-signal.SIGKILL, 128 + signal.SIGKILL)  # (its launcher's)
        assert "after kill -1" in (fk.tracing / "trace").read_text()
        assert fk.run(["true"]).returncode == 0
        assert other.status()["injected"] == 0 and fk.status()["injected"] == 0
    assert_host_unchanged(before)


@pytest.mark.skipif(not ROOT, reason="the adversary is root")
def test_the_adversary_gets_nowhere_from_run_attach(elsewhere, tmp_path):
    """The same from ``run --attach MNT`` (a fake mounted already): its
    PID 1 is the command's own init, confined and sealed as it is."""
    mnt, sock, env = elsewhere
    target = tmp_path / "target"  # where the injected mount goes (a fake's view, at most)
    before = host_state()
    with Fake() as fk:
        own = runstate.read_state(str(fk.root))["sock"]
        p = subprocess.run([FAKEDEBUGFS, "run", "--attach", str(fk.root), "--", sys.executable,
                            str(ADVERSARY), "--target", str(target), "--kill", "/sys/kernel/tracing"],
                           capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stderr
        found = json.loads(p.stdout)
        judge(found, own, [str(sock)])
        assert found["kill"] == {"children_killed": True, "tracing_on": "1"}
        assert fk.call("hello") and fk.status()["injected"] == 0
    assert_host_unchanged(before)


@pytest.mark.skipif(not ROOT, reason="starts runs as root")
def test_kill_minus_one_ends_the_command_tree_not_the_fake():
    """``sh -c 'sleep & kill -9 -1'``: the shell and its children die (137),
    nothing is left, and the fake served until then."""
    p = run_sh("""
        sleep 300 & sleep 300 &
        echo before > /sys/kernel/tracing/trace_marker
        sh -c 'kill -9 -1'
        echo not reached
    """)
    assert p.returncode == 137 and "not reached" not in p.stdout, (p.returncode, p.stdout)
    assert "fakedebugfs run:" not in p.stderr, p.stderr
