"""Three traps of the Python API a newcomer fell into, closed: ``emit`` has
the CLI's ``repeat``; a file fault whose path glob names no file of the
mount is refused (naming the paths it could have meant) instead of never
firing; ``wait_readers`` waits for ``trace_pipe_raw`` readers unless told
another ``path``.  Each through a real fake and real readers."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from fakedebugfs import Fake, RequestError, ScenarioError, WaitTimeout
from fakedebugfs.errors import FaultError

KMALLOC = dict(call_site=0x10, ptr=0x20, bytes_req=8, bytes_alloc=8, gfp_flags=0xCC0, node=-1)


@pytest.fixture(scope="module")
def fk():
    with Fake(cpus=2) as fake:
        yield fake


@pytest.fixture
def fresh(fk):
    fk.reset()
    fk.clear_faults()
    return fk


def kmalloc_lines(fk) -> list[str]:
    return [line for line in (fk.tracing / "trace").read_text().splitlines()
            if " kmalloc: " in line]


def test_emit_repeat_fires_the_event_n_times(fresh):
    (fresh.tracing / "events/kmem/kmalloc/enable").write_text("1")
    assert fresh.emit("kmem:kmalloc", cpu=1, pid=42, comm="app", repeat=5, **KMALLOC) == 5
    lines = kmalloc_lines(fresh)
    assert len(lines) == 5 and all("app-42" in line and "[001]" in line for line in lines)
    assert fresh.emit("kmem:kmalloc", **KMALLOC) == 1  # the default: once
    assert len(kmalloc_lines(fresh)) == 6


@pytest.mark.parametrize("repeat", [0, -1, "3", True, 1 << 40])
def test_emit_repeat_out_of_range_is_refused_as_by_the_cli(fresh, repeat):
    (fresh.tracing / "events/kmem/kmalloc/enable").write_text("1")
    with pytest.raises(RequestError, match="repeat must be a whole number from 1 to"):
        fresh.emit("kmem:kmalloc", repeat=repeat, **KMALLOC)
    assert kmalloc_lines(fresh) == []


@pytest.mark.parametrize("path, meant", [
    ("tracing/per_cpu/cpu0/trace_pipe_rw", "tracing/per_cpu/cpu0/trace_pipe_raw"),
    ("tracing/percpu/cpu*/trace_pipe_raw", "tracing/per_cpu/cpu0/trace_pipe_raw"),
    ("tracing/events/kmem/kmaloc/enable", "tracing/events/kmem/kmalloc/enable"),
    ("/tracing/trace_pip", "tracing/trace_pipe"),  # (a leading / is taken away)
])
def test_a_fault_glob_that_names_no_file_is_refused_with_close_names(fresh, path, meant):
    with pytest.raises(FaultError) as err:
        fresh.fault("errno", path=path, op="read", errno="EINTR")
    assert f"'path' {path.lstrip('/')!r} matches no file of the mount" in str(err.value)
    assert meant in str(err.value).split("did you mean", 1)[1]
    assert fresh.faults() == []


def test_a_directory_is_not_a_fault_path(fresh):
    with pytest.raises(FaultError, match="'tracing/per_cpu' is a directory: a file fault "
                                         r"acts on files \(e.g. tracing/per_cpu/\*\)"):
        fresh.fault("stall", path="tracing/per_cpu", ms=10)


def test_globs_that_name_files_are_taken_and_fire(fresh):
    """A wildcard glob, and an event's file that eventfs has not made yet
    (no one has looked into kmem/kfree/): both taken, and the fault fires."""
    fresh.fault("errno", path="tracing/per_cpu/cpu*/stats", op="read", errno="EIO")
    fresh.fault("errno", path="tracing/events/kmem/kfree/enable", op="write", errno="EBUSY")
    assert len(fresh.faults()) == 2
    with pytest.raises(OSError) as err:
        (fresh.tracing / "per_cpu/cpu1/stats").read_text()
    assert err.value.errno == errno.EIO
    with pytest.raises(OSError) as err:
        (fresh.tracing / "events/kmem/kfree/enable").write_text("1")
    assert err.value.errno == errno.EBUSY


def test_the_cli_and_a_scenario_refuse_it_too(fresh):
    p = subprocess.run([sys.executable, "-m", "fakedebugfs", "fault", str(fresh.root), "errno",
                        "path=tracing/trace_pip", "errno=EINTR"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "matches no file of the mount (did you mean tracing/trace_pipe" in p.stderr
    injected = fresh.status()["injected"]
    with pytest.raises(ScenarioError, match="scenario:2: 'path' 'tracing/trace_pip' matches no file"):
        fresh.scenario("emit kmem:kfree ptr=1\nfault stall path=tracing/trace_pip ms=5\n")
    assert fresh.faults() == [] and fresh.status()["injected"] == injected  # nothing applied


def test_wait_readers_waits_for_trace_pipe_raw_unless_given_a_path(fresh):
    """A reader of ``trace_pipe`` is not what the default waits for (every
    CPU's ``trace_pipe_raw``, as trace-cmd record reads); with
    ``path="tracing/trace_pipe"`` the wait returns once it reads."""
    reader = fresh.popen(["cat", "/sys/kernel/tracing/trace_pipe"], stdout=subprocess.DEVNULL)
    try:
        fresh.wait_readers(path="tracing/trace_pipe", timeout=30)
        with pytest.raises(WaitTimeout, match="not open: tracing/per_cpu/cpu0/trace_pipe_raw"):
            fresh.wait_readers(timeout=0.5)
    finally:
        reader.kill()
        reader.wait()
