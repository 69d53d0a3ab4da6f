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
from fakedebugfs.api.fake import wait_ended
from fakedebugfs.control import runstate
from fakedebugfs.server import forkserver, launcher


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
    assert not os.path.lexists(root)  # the mount point Fake() made: its server removed it


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


def test_zero_turns_it_off(forking, monkeypatch):
    """``FAKEDEBUGFS_FORKSERVER=0`` (what turns the plugin's off): started as before."""
    monkeypatch.setenv(forkserver.ENV, "0")
    with Fake() as fake:
        assert isinstance(fake._proc, subprocess.Popen)


def test_each_forked_server_starts_from_the_mount_time_state(forking):
    """The kernel made before the fork is each forked server's own copy:
    what one fake's test did is not in the next one's."""
    with Fake() as first:
        (first.tracing / "events/kmem/kmalloc/enable").write_text("1")
        first.emit("kmem:kmalloc", cpu=0, pid=42, comm="app", bytes_req=8)
        assert "bytes_req=8" in read(first.tracing / "trace")
        first.define("forked", "once", ["int x"])
    with Fake() as second:
        assert isinstance(second._proc, forkserver.Forked)
        assert read(second.tracing / "events/kmem/kmalloc/enable") == "0\n"
        assert "kmalloc" not in read(second.tracing / "trace")
        assert not (second.tracing / "events" / "forked").exists()
        second.reset()  # its mount-time settings: the first fake's
        assert read(second.tracing / "tracing_on") == "1\n"


def test_the_api_default_takes_the_prebuilt_kernel_once(monkeypatch):
    """``Fake()``'s kernel configuration is the one the fork server makes
    before forking (else no forked server would ever find it), taken once,
    and not for other options."""
    from fakedebugfs.api.options import MountOptions
    from fakedebugfs.engine.kernel import Kernel

    kernel = Kernel()
    monkeypatch.setattr(forkserver, "_KERNELS", {kernel.config: kernel})
    default = MountOptions.make(workload="none").kernel_kwargs()
    assert forkserver.prebuilt_kernel(MountOptions.make(workload="none", cpus=4)
                                      .kernel_kwargs()) is None
    assert forkserver.prebuilt_kernel(default) is kernel
    assert forkserver.prebuilt_kernel(default) is None


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fp:
        fields = fp.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_forked_server_starts_on_a_fraction_of_the_cpu(forking, monkeypatch):
    """CPU time (not wall time: the machine may be busy) a server has spent
    once its mount answers: forked, a few ms (the imports, the parser and
    the kernel are the fork server's); spawned, Python's start and imports."""
    with Fake() as fake:
        forked = _cpu_seconds(fake._proc.pid)
    monkeypatch.setenv(forkserver.ENV, "0")
    with Fake() as fake:
        spawned = _cpu_seconds(fake._proc.pid)
    assert forked <= 0.1 and forked * 4 <= spawned, (forked, spawned)


def test_a_fork_server_goes_with_its_starter(tmp_path):
    """:class:`ForkServer`: killed with SIGKILL (no cleanup runs), the
    process that started it takes it along (its lifeline pipe closes), and
    the servers it forked go with their own clients."""
    sock = tmp_path / "fs.sock"
    starter = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time
        from fakedebugfs.api import Fake
        from fakedebugfs.server.forkserver import ENV, ForkServer
        server = ForkServer({str(sock)!r})
        os.environ[ENV] = {str(sock)!r}
        fake = Fake().start()
        print(server.pid, fake._proc.pid, fake.root, flush=True)
        time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        server, forked, root = starter.stdout.readline().split()
        assert runstate.alive(int(server)) and runstate.alive(int(forked)) and sock.exists()
        assert is_mounted(root)
    finally:
        starter.kill()
        starter.wait()
    deadline = time.monotonic() + 15
    while (runstate.alive(int(server)) or runstate.alive(int(forked)) or is_mounted(root)) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not runstate.alive(int(server)) and not sock.exists()
    assert not runstate.alive(int(forked)) and not is_mounted(root)
    assert not os.path.lexists(root)


def test_a_forked_fakes_keeper_is_forked_there_too(forking, monkeypatch):
    """The namespace a fake's commands join (its keeper, made at the first
    command) comes from the fork server that started the fake, also once
    FAKEDEBUGFS_FORKSERVER is gone (the plugin names it only while a fake
    starts); the command sees the fake, and closing the fake ends the keeper."""
    with Fake() as fake:
        monkeypatch.delenv(forkserver.ENV)
        fake.define("forked", "ev", ["int x"])
        done = fake.run(["cat", "/sys/kernel/tracing/events/forked/ev/format"],
                        capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "field:int x;" in done.stdout
        keeper = fake._keeper.proc
        assert isinstance(keeper, forkserver.Forked)
        assert os.getppid() != keeper.pid and runstate.alive(keeper.pid)
        with open(f"/proc/{keeper.pid}/status") as fp:
            parent = [line.split()[1] for line in fp if line.startswith("PPid:")]
        assert parent != [str(os.getpid())]  # not a child of ours: the fork server's
        pid = keeper.pid
    assert not runstate.alive(pid)


def test_a_module_the_fork_server_does_not_run_is_refused(forking):
    r, w = os.pipe()
    try:
        with pytest.raises(OSError, match="not a module the fork server runs"):
            forkserver.spawn_module(forking, "os", ["-c", "x"], [r, w])
    finally:
        os.close(r)
        os.close(w)


@pytest.fixture(params=[True, False], ids=["forked", "spawned"])
def forked(request, monkeypatch) -> bool:
    """A test's servers forked by a fork server (True), or each started as
    a command (False)."""
    if request.param:
        request.getfixturevalue("forking")
    else:
        monkeypatch.setenv(forkserver.ENV, "0")
    return request.param


def test_a_server_is_done_before_its_process_ends(forked, tmp_path):
    """``stop_server(ended=...)`` returns when the ready pipe reads end of
    file: by then the server has unmounted and removed its state files and
    (``--rmdir``) its mount point; its process ends on its own after."""
    root = tmp_path / "mnt"
    root.mkdir()
    proc, ended = launcher.spawn_server(str(root), Fake().options.argv(), rmdir=True)
    try:
        assert isinstance(proc, forkserver.Forked) == forked
        assert is_mounted(root) and runstate.read_state(str(root))["pid"] == proc.pid
        assert launcher.stop_server(proc.pid, ended=ended)
        assert not is_mounted(root) and not root.exists()
        assert [p for p in runstate.paths(str(root)).values() if p.exists()] == []
    finally:
        os.close(ended)
        proc.wait(10)


def test_close_without_waiting(forked):
    """``Fake.close(wait=False)`` (the plugin's fixture): nothing mounted
    when it returns; :func:`wait_ended` waits for the process (reaped, no
    zombie left)."""
    fake = Fake().start()
    pid, root = fake._proc.pid, fake.root
    fake.close(wait=False)
    assert not is_mounted(root) and not root.exists()
    wait_ended()
    assert not os.path.exists(f"/proc/{pid}")
