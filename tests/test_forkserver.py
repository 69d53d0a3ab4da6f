"""The fork server (fakedebugfs/server/forkserver.py): a mount's server
forked from a process whose imports are done, through the real API
(``Fake``) and real FUSE mounts.  A forked server serves as a spawned one
does, dies with the client that asked for it, and is not used by a client
whose environment differs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import is_mounted, read

from fakedebugfs.api import Fake
from fakedebugfs.control import runstate
from fakedebugfs.server import forkserver


@pytest.fixture
def forking(tmp_path, monkeypatch):
    """A fork server for the test, named in FAKEDEBUGFS_FORKSERVER; stopped after."""
    sock = str(tmp_path / "fork.sock")
    pid = forkserver.start(sock)
    monkeypatch.setenv(forkserver.ENV, sock)
    yield sock
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while runstate.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not runstate.alive(pid)
    assert not os.path.exists(sock)


def test_a_forked_server_serves_and_stops(forking):
    with Fake() as fake:
        assert isinstance(fake._proc, forkserver.Forked)
        pid = fake._proc.pid
        assert read(fake.tracing / "tracing_on") == "1\n"
        assert "sched" in os.listdir(fake.tracing / "events")
        fake.define("forked", "ev", ["int x"])
        assert "field:int x;" in read(fake.tracing / "events" / "forked" / "ev" / "format")
        root = fake.root
    assert not is_mounted(root)
    assert not runstate.alive(pid)
    with Fake() as again:  # the fork server serves the next one as well
        assert isinstance(again._proc, forkserver.Forked)
        assert read(again.tracing / "tracing_on") == "1\n"


def test_a_forked_server_dies_with_its_client(forking, tmp_path):
    """The client killed (no close, no atexit): its lifeline closes, the
    server unmounts and exits, as ``--die-with-parent`` makes a spawned one."""
    out = tmp_path / "client.out"
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time
        from fakedebugfs.api import Fake
        fake = Fake().start()
        with open({str(out)!r}, "w") as fp:
            fp.write(f"{{fake._proc.pid}} {{fake.root}} {{type(fake._proc).__name__}}")
        time.sleep(60)
        """)], env=dict(os.environ))
    deadline = time.monotonic() + 60
    while not (out.exists() and out.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid, root, kind = out.read_text().split()
    assert kind == "Forked"
    assert is_mounted(root)
    client.kill()
    client.wait()
    deadline = time.monotonic() + 15
    while (runstate.alive(int(pid)) or is_mounted(root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not runstate.alive(int(pid))
    assert not is_mounted(root)
    os.rmdir(root)


def test_another_environment_is_started_as_before(forking, monkeypatch):
    """``FAKEDEBUGFS_*`` variables are read at import: a client whose
    environment differs gets a server started the usual way."""
    monkeypatch.setenv("FAKEDEBUGFS_NOT_THE_FORK_SERVERS", "1")
    with Fake() as fake:
        assert isinstance(fake._proc, subprocess.Popen)
        assert read(fake.tracing / "tracing_on") == "1\n"


def test_no_fork_server_there_is_started_as_before(tmp_path, monkeypatch):
    monkeypatch.setenv(forkserver.ENV, str(tmp_path / "nobody.sock"))
    with Fake() as fake:
        assert isinstance(fake._proc, subprocess.Popen)
        assert read(fake.tracing / "tracing_on") == "1\n"
