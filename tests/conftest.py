"""Shared fixtures: real FUSE mounts made with the real CLI, always unmounted.

``fake(*options)`` mounts fakedebugfs at a fresh directory with
``fakedebugfs mount DIR *options`` and returns the directory; teardown runs
``fakedebugfs umount`` and checks nothing is left mounted, even when the test
failed.  ``cc(source, name)`` compiles a C program with gcc into the test's
temporary directory and returns its path.

Nothing here mounts or unmounts the host's tracefs: a test that compares
with the real kernel mounts one in a private mount namespace of its own
(tests/support/realtracefs.py), so two sessions, or a session and another
tracing user of the host, never take a mount from under each other.

The session reads the host's state at its start and end
(tests/support/hoststate.py: the real tracefs's top level in a private
namespace, the host's tracefs and debugfs mounts, the tracing sysctls) and
fails, naming each difference, if the suite changed it; what changed is put
back.  ``FAKEDEBUGFS_HOST_GUARD=0`` turns that off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from support import hoststate
from support import oracle as oracle_support

VENV_BIN = Path(sys.executable).parent
FAKEDEBUGFS = str(VENV_BIN / "fakedebugfs")
C_DIR = Path(__file__).parent / "c"


def run_cli(*args, check=True, timeout=60, **kw) -> subprocess.CompletedProcess:
    """Run the ``fakedebugfs`` command; output captured as text."""
    return subprocess.run([FAKEDEBUGFS, *map(str, args)], capture_output=True, text=True,
                          check=check, timeout=timeout, **kw)


def is_mounted(path) -> bool:
    real = os.path.realpath(path)
    with open("/proc/self/mounts") as fp:
        return any(line.split()[1] == real for line in fp)


class Mounter:
    """Mounts fakedebugfs under *base* and unmounts everything it mounted."""

    def __init__(self, base: Path):
        self.base = base
        self.mounts: list[Path] = []

    def __call__(self, *options, name="mnt"):
        mnt = self.base / f"{name}{len(self.mounts)}"
        mnt.mkdir()
        mnt.chmod(0o755)
        self.mounts.append(mnt)
        run_cli("mount", mnt, *options)
        return mnt

    def unmount_all(self) -> None:
        for mnt in self.mounts:
            run_cli("umount", mnt, check=False)
            if is_mounted(mnt):  # last resort, so nothing outlives the test
                subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
            assert not is_mounted(mnt), f"{mnt} left mounted"


@pytest.fixture
def fake(tmp_path):
    mounter = Mounter(tmp_path)
    yield mounter
    mounter.unmount_all()


def build_c(source, out_dir: Path, name=None, flags=()) -> Path:
    """Compile tests/c/<source> (or a Path) with gcc -Wall -Wextra -Werror."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is required (make install installs it)")
    src = Path(source) if os.path.isabs(str(source)) else C_DIR / source
    out = out_dir / (name or src.stem)
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(src), *flags],
                   check=True, capture_output=True, text=True)
    return out


def libtracefs_flags() -> tuple:
    """``pkg-config --cflags --libs libtracefs``: a test's C program
    against the system's libtracefs (libtracefs-dev: make debs)."""
    return tuple(subprocess.run(["pkg-config", "--cflags", "--libs", "libtracefs"],
                                capture_output=True, text=True, check=True).stdout.split())


@pytest.fixture
def cc(tmp_path):
    """``cc(source, name=None, flags=())``: :func:`build_c` into the test's directory."""
    return lambda source, name=None, flags=(): build_c(source, tmp_path, name, flags)


def read(path) -> str:
    """The text of a file, read as ``cat`` reads it."""
    with open(path) as fp:
        return fp.read()


def write(path, data: str) -> None:
    """One write of *data*, as ``echo -n data > path``."""
    with open(path, "w") as fp:
        fp.write(data)


def append(path, line: str) -> None:
    """One write of *line* and a newline, as ``echo line >> path`` (O_APPEND:
    no O_TRUNC, which clears ``trace`` or a probe list)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line.encode() + b"\n")
    finally:
        os.close(fd)


def read_chunks(path, size: int = 4096, nonblock: bool = True) -> list[bytes]:
    """Every read(2) of *path* until EOF (or EAGAIN with *nonblock*), one
    chunk per call: how a page reader drains ``trace_pipe_raw``."""
    fd = os.open(path, os.O_RDONLY | (os.O_NONBLOCK if nonblock else 0))
    chunks = []
    try:
        while True:
            try:
                data = os.read(fd, size)
            except BlockingIOError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(fd)
    return chunks


def errno_of(fn, *args):
    """The errno *fn* fails with, or None if it succeeds."""
    try:
        fn(*args)
    except OSError as err:
        return err.errno
    return None


def status(mnt) -> dict:
    import json

    return json.loads(run_cli("status", mnt).stdout)


def wait_done(mnt, timeout=120) -> dict:
    """Wait for the mount's workload to reach its --count."""
    import json

    return json.loads(run_cli("status", mnt, "--wait-done", "--timeout", timeout,
                              timeout=timeout + 10).stdout)


@pytest.fixture
def public_fake():
    """Like ``fake``, but the mount point is under a 0755 directory in /tmp,
    so an unprivileged user can reach it."""
    base = Path(tempfile.mkdtemp(prefix="fakedebugfs-perm-", dir="/tmp"))
    base.chmod(0o755)
    mounter = Mounter(base)
    try:
        yield mounter
        mounter.unmount_all()
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- the host as the suite found it -------------------------------------------------

_HOST: dict = {}


@pytest.fixture(scope="session")
def oracle(request):
    """The Debian 6.12 guest (tests/support/oracle.py): booted at the first
    test that asks, stopped at the session's end (unless it was running)."""
    return oracle_support.session_guest(request.config, "debian-6.12")


def _host_guard(config) -> bool:
    off = os.environ.get("FAKEDEBUGFS_HOST_GUARD", "").strip().lower() in ("0", "no", "off")
    return not off and not hasattr(config, "workerinput")  # xdist: the controller checks


def pytest_sessionstart(session):
    """Read the host's state before any test (reads only)."""
    if _host_guard(session.config):
        try:
            _HOST["before"] = hoststate.start()
        except Exception as exc:  # noqa: BLE001 (a read that fails is named, not fatal)
            _HOST["report"] = [f"could not read the host's state, not checked: {exc}"]


def pytest_sessionfinish(session, exitstatus):
    """Stop the oracle guests the session booted; read the host's state
    again: a difference that stays (:func:`hoststate.changes`)
    fails the session and is put back; a change of the real top level's
    files while another tracing user of the host is at work there cannot
    be told from ours: it is named, neither failed nor put back."""
    oracle_support.stop_booted()
    before = _HOST.pop("before", None)
    if before is None:
        return
    try:
        changed, after, busy = hoststate.changes(before)
    except Exception as exc:  # noqa: BLE001
        _HOST["report"] = [f"could not read the host's state again, not checked: {exc}"]
        return
    if busy:  # the top level's files, not its instances (named by pid: told apart)
        ours = [line for line in changed if not line.startswith("real tracefs ")
                or line.startswith("real tracefs instances")]
        _HOST["report"] = [f"{line} (not counted: someone else was at the real top level "
                           f"meanwhile: {', '.join(busy)})" for line in changed if line not in ours]
        changed = ours
    if changed:
        _HOST["report"] = changed + hoststate.restore(before, after, top=not busy) + \
            _HOST.get("report", [])
        _HOST["failed"] = True
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if oracle_support.summary():
        terminalreporter.section("oracle", sep="-")
        terminalreporter.write_line(oracle_support.summary())
    if _HOST.get("report"):
        failed = _HOST.get("failed")
        terminalreporter.section("the suite changed the host" if failed else "host check",
                                 sep="=", red=bool(failed), bold=bool(failed))
        for line in _HOST["report"]:
            terminalreporter.write_line(line)
        if failed:
            terminalreporter.write_line("(read before and after the session by "
                                        "tests/support/hoststate.py: some test reached the host)")
