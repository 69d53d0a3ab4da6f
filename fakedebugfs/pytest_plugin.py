"""pytest plugin: a fake kernel tracing interface per test (or per session).

Registered through the ``pytest11`` entry point when fakedebugfs is
installed; nothing to import.  Fixtures:

``fakedebugfs``
    a fresh :class:`~fakedebugfs.api.Fake` for the test, started with the
    options of the closest ``@pytest.mark.fakedebugfs(...)`` marker, always
    stopped and unmounted afterwards.
``fakedebugfs_session``
    one fake for the whole session (options from the ``fakedebugfs_options``
    ini value, a Python dict literal, e.g. ``{"cpus": 4}``).

Where FUSE cannot be used (no /dev/fuse, no permission to mount, a pyfuse3
without our patch) a test using them is skipped with the reason; when a
test fails, the server's log is attached to its report ("fakedebugfs log").

::

    @pytest.mark.fakedebugfs(cpus=4, clock="virtual")
    def test_tool_reports_allocations(fakedebugfs):
        fakedebugfs.emit("kmem:kmalloc", cpu=1, pid=42, comm="app", bytes_req=8)
        out = fakedebugfs.run(["mytool", "--once"], capture_output=True, text=True)
        assert "8 bytes" in out.stdout
"""

from __future__ import annotations

import ast
import os
from typing import Optional

import pytest

MARKER = "fakedebugfs"
LOG_SECTION = "fakedebugfs log"


def pytest_addoption(parser) -> None:
    parser.addini("fakedebugfs_options", "options of the session-scoped fake (a dict literal)",
                  default="{}")


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(**options): options of the fake the `fakedebugfs` fixture "
                   "starts (cpus=, workload=, clock=, enable_all=, replay=, ... as `fakedebugfs mount`)")


def fuse_unusable() -> Optional[str]:
    """Why this machine cannot mount a fake, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (load the fuse module, or give the container the device)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if os.geteuid() != 0 and not any(os.access(os.path.join(d, "fusermount3"), os.X_OK)
                                     for d in os.environ.get("PATH", "").split(os.pathsep)):
        return "not root and no fusermount3 to mount with"
    try:
        from fakedebugfs.fs.operations import has_ioctl_support
    except ImportError as err:
        return f"pyfuse3 is not importable ({err})"
    if not has_ioctl_support():
        return "the installed pyfuse3 lacks fakedebugfs's patch (run `make install`)"
    return None


def _start(options: dict):
    from fakedebugfs.api import Fake, MountError

    reason = fuse_unusable()
    if reason:
        pytest.skip(f"fakedebugfs: FUSE unusable: {reason}")
    fake = Fake(**options)
    try:
        fake.start()
    except MountError as err:
        if "ermission" in str(err) or "not permitted" in str(err):
            pytest.skip(f"fakedebugfs: cannot mount: {err}")
        raise
    return fake


@pytest.fixture
def fakedebugfs(request):
    """A fresh fake for this test (options from ``@pytest.mark.fakedebugfs``)."""
    marker = request.node.get_closest_marker(MARKER)
    options = dict(marker.kwargs) if marker else {}
    if marker and marker.args:
        raise pytest.UsageError("@pytest.mark.fakedebugfs takes keyword arguments only")
    if options.get("replay") and not os.path.isabs(os.fspath(options["replay"])):
        beside = request.path.parent / options["replay"]  # beside the test file first
        if beside.exists():
            options["replay"] = str(beside)
    fake = _start(options)
    request.node.stash[_FAKES] = request.node.stash.get(_FAKES, []) + [fake]
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture(scope="session")
def fakedebugfs_session(request):
    """One fake shared by the session (options: the ``fakedebugfs_options`` ini)."""
    text = request.config.getini("fakedebugfs_options")
    try:
        options = ast.literal_eval(text or "{}")
    except (ValueError, SyntaxError):
        raise pytest.UsageError(f"fakedebugfs_options is not a dict literal: {text!r}") from None
    fake = _start(options)
    try:
        yield fake
    finally:
        fake.close()


_FAKES = pytest.StashKey[list]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the server log of each of its fakes."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    fakes = list(item.stash.get(_FAKES, []))
    session_fake = item.funcargs.get("fakedebugfs_session") if hasattr(item, "funcargs") else None
    if session_fake is not None:
        fakes.append(session_fake)
    for fake in fakes:
        text = fake.log().strip()
        report.sections.append((f"{LOG_SECTION} ({fake.root})", text or "(empty)"))
