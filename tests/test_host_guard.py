"""The session's host check (tests/conftest.py with tests/support/hoststate.py)
and the put-back of the real top level (tests/support/realtracefs.py): a
session that leaves the real tracefs changed fails, naming what changed,
and the change is put back; a session that changes nothing passes with
nothing said.  Each session is a pytest of its own, in a subprocess, with
the suite's hooks."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support import hoststate, realtracefs

TESTS = Path(__file__).parent
NAME = "leak-name"  # where the leaking session writes its instance's name

CONFTEST = f"""
import importlib.util, sys
sys.path.insert(0, {str(TESTS)!r})
spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
pytest_sessionstart = suite.pytest_sessionstart
pytest_sessionfinish = suite.pytest_sessionfinish
pytest_terminal_summary = suite.pytest_terminal_summary
"""

CLEAN = """
def test_nothing():
    assert True
"""

LEAKY = f"""
import os
from support import realtracefs

def test_leaves_an_instance():
    # named with this session's pid: its own to this session, another
    # live session's scratch instance to every other (not theirs to check)
    name = f"fdfsguardleak{{os.getpid()}}"
    with open({NAME!r}, "w") as fp:
        fp.write(name)
    realtracefs.call(lambda root: os.mkdir(os.path.join(root, "instances", name)))
"""


pytestmark = pytest.mark.skipif(not realtracefs.available(),
                                reason="needs root and a kernel with tracefs")


def session(tmp_path: Path, source: str, **env) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_case.py").write_text(source)
    env = dict({k: v for k, v in os.environ.items() if k != "FAKEDEBUGFS_HOST_GUARD"}, **env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_case.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)


def instances(root) -> list[str]:
    return os.listdir(os.path.join(root, "instances"))


def test_a_clean_session_passes_with_nothing_said(tmp_path):
    p = session(tmp_path, CLEAN)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "changed the host" not in p.stdout and "host check" not in p.stdout, p.stdout


def _leaked(tmp_path: Path) -> str:
    """The leaking session's instance name, and it removed if still there."""
    name = (tmp_path / NAME).read_text()
    realtracefs.call(realtracefs.remove_instance, name)
    return name


def test_a_leak_fails_the_session_is_named_and_put_back(tmp_path):
    try:
        p = session(tmp_path, LEAKY)
        out = p.stdout
        leak = (tmp_path / NAME).read_text()
        assert "1 passed" in out, out + p.stderr  # the test itself passed ...
        assert p.returncode == 1, out + p.stderr  # ... the session did not
        assert "the suite changed the host" in out, out
        assert f"real tracefs instances: added ['{leak}']" in out, out
        assert f"put back: instance {leak}" in out, out
        assert leak not in realtracefs.call(instances)
    finally:  # whatever happened above, nothing of it stays
        _leaked(tmp_path)


def test_off_switch(tmp_path):
    """``FAKEDEBUGFS_HOST_GUARD=0``: no check (the leak is removed here)."""
    try:
        p = session(tmp_path, LEAKY, FAKEDEBUGFS_HOST_GUARD="0")
        assert p.returncode == 0, p.stdout + p.stderr
        assert "changed the host" not in p.stdout, p.stdout
        assert (tmp_path / NAME).read_text() in realtracefs.call(instances)
    finally:
        _leaked(tmp_path)


@contextlib.contextmanager
def scratch(root):
    """A scratch instance of ours: an instance has the top level's settings
    files (tracing_on, buffer_percent, trace_options, set_event_pid...), so
    the put-back and the watch are tried there, the top level untouched."""
    path = os.path.join(root, "instances", f"fdfs_guard{os.getpid()}")
    os.mkdir(path)
    try:
        yield path
    finally:
        realtracefs.remove_instance(root, os.path.basename(path))


def _change_in_kept_block(root):
    """Inside top_level_kept: buffer_percent, an option, set_event_pid and
    tracing_on changed; what they read before, inside and after."""
    with scratch(root) as top:
        before = realtracefs.top_level(top)
        percent = int(before["buffer_percent"])
        with realtracefs.top_level_kept(top):
            for name, value in (("buffer_percent", str(percent - 1 if percent else 1)),
                                ("trace_options", "noirq-info" if "irq-info" in
                                 before["trace_options"].split() else "irq-info"),
                                ("set_event_pid", str(os.getpid())),
                                ("tracing_on", "0" if before["tracing_on"] == "1\n" else "1")):
                with open(os.path.join(top, name), "w") as fp:
                    fp.write(value)
            inside = realtracefs.top_level(top)
        return before, inside, realtracefs.top_level(top)


def test_top_level_kept_puts_back_what_changed():
    """What trace-cmd record -F leaves at the top level is put back (tried
    on a scratch instance)."""
    before, inside, after = realtracefs.call(_change_in_kept_block)
    names = ("buffer_percent", "trace_options", "set_event_pid", "tracing_on")
    assert all(inside[n] != before[n] for n in names), (before, inside)
    assert {n: after[n] for n in names} == {n: before[n] for n in names}


def _writes_seen(root):
    """A write of a scratch instance's buffer_percent (its own value) from
    another mount namespace, 0.3 s into a 2 s watch of the instance."""
    with scratch(root) as top:
        value = realtracefs.read_or_errno(os.path.join(top, "buffer_percent")).strip()
        rel = os.path.relpath(top, root)

        def write():
            time.sleep(0.3)
            subprocess.run(realtracefs.argv(["sh", "-c", f"echo {value} > "
                                             f"{realtracefs.POINT}/{rel}/buffer_percent"]),
                           check=True)
        writer = threading.Thread(target=write)
        writer.start()
        try:
            return hoststate._written(top, 2.0)
        finally:
            writer.join()


def test_a_writer_of_the_top_level_is_seen():
    """The check tells a change made while someone else writes the real
    top level (inotify sees a write from any mount namespace)."""
    assert realtracefs.call(_writes_seen) == ["buffer_percent"]
