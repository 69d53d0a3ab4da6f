"""The session's host check (tests/conftest.py with tests/support/hoststate.py)
and the put-back of the real top level (tests/support/realtracefs.py): a
session that leaves the real tracefs changed fails, naming what changed,
and the change is put back; a session that changes nothing passes with
nothing said.  Each session is a pytest of its own, in a subprocess, with
the suite's hooks."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support import hoststate, realtracefs

TESTS = Path(__file__).parent
LEAK = "fdfsguardleak"  # no digits: not taken for another session's scratch instance

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
    realtracefs.call(lambda root: os.mkdir(os.path.join(root, "instances", {LEAK!r})))
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


def test_a_leak_fails_the_session_is_named_and_put_back(tmp_path):
    try:
        p = session(tmp_path, LEAKY)
        out = p.stdout
        assert "1 passed" in out, out + p.stderr  # the test itself passed ...
        assert p.returncode == 1, out + p.stderr  # ... the session did not
        assert "the suite changed the host" in out, out
        assert f"real tracefs instances: added ['{LEAK}']" in out, out
        assert f"put back: instance {LEAK}" in out, out
        assert LEAK not in realtracefs.call(instances)
    finally:  # whatever happened above, nothing of it stays
        realtracefs.call(realtracefs.remove_instance, LEAK)


def test_off_switch(tmp_path):
    """``FAKEDEBUGFS_HOST_GUARD=0``: no check (the leak is removed here)."""
    try:
        p = session(tmp_path, LEAKY, FAKEDEBUGFS_HOST_GUARD="0")
        assert p.returncode == 0, p.stdout + p.stderr
        assert "changed the host" not in p.stdout, p.stdout
        assert LEAK in realtracefs.call(instances)
    finally:
        realtracefs.call(realtracefs.remove_instance, LEAK)


def _change_in_kept_block(root):
    """Inside top_level_kept: buffer_percent, an option and set_event_pid
    changed; what each reads inside and after."""
    before = realtracefs.top_level(root)
    percent = int(before["buffer_percent"])
    with realtracefs.top_level_kept(root):
        for name, value in (("buffer_percent", str(percent - 1 if percent else 1)),
                            ("trace_options", "noirq-info" if "irq-info" in
                             before["trace_options"].split() else "irq-info"),
                            ("set_event_pid", str(os.getpid()))):
            with open(os.path.join(root, name), "w") as fp:
                fp.write(value)
        inside = realtracefs.top_level(root)
    return before, inside, realtracefs.top_level(root)


def test_top_level_kept_puts_back_what_changed():
    """What trace-cmd record -F leaves at the top level is put back (the
    lock held: no test of ours writes it meanwhile)."""
    before, inside, after = realtracefs.call(_change_in_kept_block, lock=True)
    names = ("buffer_percent", "trace_options", "set_event_pid")
    assert all(inside[n] != before[n] for n in names), (before, inside)
    assert {n: after[n] for n in names} == {n: before[n] for n in names}


def _writes_seen(root):
    """A write of buffer_percent (its own value) from another mount
    namespace, 0.3 s into a 2 s watch."""
    value = realtracefs.read_or_errno(os.path.join(root, "buffer_percent")).strip()

    def write():
        time.sleep(0.3)
        subprocess.run(realtracefs.argv(["sh", "-c", f"echo {value} > "
                                         f"{realtracefs.POINT}/buffer_percent"]), check=True)
    writer = threading.Thread(target=write)
    writer.start()
    try:
        return hoststate._written(root, 2.0)
    finally:
        writer.join()


def test_a_writer_of_the_top_level_is_seen():
    """The check tells a change made while someone else writes the real
    top level (inotify sees a write from any mount namespace)."""
    assert "buffer_percent" in realtracefs.call(_writes_seen, lock=True)
