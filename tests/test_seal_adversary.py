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
    rundir = tmp_path / "rundir"
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
