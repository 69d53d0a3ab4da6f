"""pytest plugin: a fake kernel tracing interface per test (or per session).

Registered through the ``pytest11`` entry point when fakedebugfs is
installed; nothing to import.  Fixtures:

``fakedebugfs``
    a fresh :class:`~fakedebugfs.api.Fake` for the test, started with the
    options of the closest ``@pytest.mark.fakedebugfs(...)`` marker, always
    stopped and unmounted afterwards, with every command its ``run`` and
    ``popen`` started.
``fakedebugfs_session``
    one fake for the whole session (options from the ``fakedebugfs_options``
    ini value, a Python dict literal, e.g. ``{"cpus": 4}``); a test that
    needs it as mounted calls ``fakedebugfs_session.reset()`` first.  A
    ``@pytest.mark.fakedebugfs`` marker on a test that uses only this
    fixture is an error (its options would be ignored).

The fakes' servers are forked by a fork server the plugin starts for the
session at the first fake (:mod:`fakedebugfs.server.forkserver`: Python's
imports and a kernel made once; a fake then starts in tens of
milliseconds instead of a second).  It is stopped at the end of the
session, however that ends, and with the pytest process if that is
killed.  Only the fixtures' fakes are forked from it (a ``Fake`` a test
makes itself, and the processes it starts, see no difference).
``FAKEDEBUGFS_FORKSERVER=0`` turns it off (each fake then starts its
server as a new process); ``FAKEDEBUGFS_FORKSERVER=SOCKET`` uses a fork
server of one's own.  When it cannot start, each fake starts its
server itself and the terminal summary says why.

Where no fake can start (no /dev/fuse or no permission to use it, no
setuid fusermount3, a pyfuse3 without our patch) a test using them is
skipped with the precise cause and its fix, and the terminal summary counts
those skips.  In CI (``CI`` set to a true value, as GitHub Actions, GitLab
CI and most others set it), or with ``--fakedebugfs-require`` or
``FAKEDEBUGFS_REQUIRE=1``, such a test fails with that cause instead, so a
CI run cannot go green without testing anything; ``FAKEDEBUGFS_REQUIRE=0``
lets a CI job skip them, and the summary says it did.  When a test fails, the
server's log is attached to its report ("fakedebugfs log").

::

    @pytest.mark.fakedebugfs(cpus=4, clock="virtual", enable_all=True)  # so it is recorded
    def test_tool_reports_allocations(fakedebugfs):
        fakedebugfs.emit("kmem:kmalloc", cpu=1, pid=42, comm="app", bytes_req=8)
        out = fakedebugfs.run(["mytool", "--once"], capture_output=True, text=True)
        assert "8 bytes" in out.stdout
"""

from __future__ import annotations

import ast
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from typing import Optional

import pytest

MARKER = "fakedebugfs"
LOG_SECTION = "fakedebugfs log"
REQUIRE_ENV = "FAKEDEBUGFS_REQUIRE"
CI_ENV = "CI"  # set to a true value by CI services: the require mode's default
SKIP_PREFIX = "fakedebugfs: no usable fake: "

FORKSERVER_ENV = "FAKEDEBUGFS_FORKSERVER"  # a socket, or 0 for none

_FAKES = pytest.StashKey[list]()
_FORK = pytest.StashKey[dict]()  # the session's fork server: {"server", "dir"} or {"failed"}
_SKIPPED = pytest.StashKey[dict]()  # reason -> tests skipped for want of a fake


def pytest_addoption(parser) -> None:
    parser.addini("fakedebugfs_options", "options of the session-scoped fake (a dict literal)",
                  default="{}")
    group = parser.getgroup("fakedebugfs")
    group.addoption("--fakedebugfs-require", action="store_true", default=False,
                    help="a fake that cannot start fails the test instead of skipping it "
                         f"(also {REQUIRE_ENV}=1; the default when {CI_ENV} is true, "
                         f"{REQUIRE_ENV}=0 turns it off there)")


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(**options): options of the fake the `fakedebugfs` fixture "
                   "starts (cpus=, workload=, clock=, enable_all=, replay=, ... as `fakedebugfs mount`)")
    config.stash[_SKIPPED] = {}
    config.add_cleanup(_wait_ended)


def _wait_ended() -> None:
    """The function fixture closes its fakes without waiting for their
    servers' processes to finish exiting (each has unmounted already):
    the session's end waits for them."""
    fake = sys.modules.get("fakedebugfs.api.fake")
    if fake is not None:
        fake.wait_ended()


def _flag(name: str) -> Optional[bool]:
    """An environment flag: None when unset or empty, else whether it is
    true (anything but 0, no, false, off)."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    return value not in ("0", "no", "false", "off")


def require_mode(config) -> tuple[bool, str]:
    """Whether a fake that cannot start fails the test, and what said so:
    ``--fakedebugfs-require``, then ``FAKEDEBUGFS_REQUIRE`` (1 or 0), then
    ``CI`` (true: on; a CI job skips only when it opts out)."""
    if config.getoption("fakedebugfs_require", False):
        return True, "--fakedebugfs-require"
    explicit = _flag(REQUIRE_ENV)
    if explicit is not None:
        return explicit, f"{REQUIRE_ENV}={os.environ[REQUIRE_ENV].strip()}"
    if _flag(CI_ENV):
        return True, f"{CI_ENV}={os.environ[CI_ENV].strip()}"
    return False, ""


def required(config) -> bool:
    """No skips: ``--fakedebugfs-require``, ``FAKEDEBUGFS_REQUIRE=1``, or in
    CI unless ``FAKEDEBUGFS_REQUIRE=0``."""
    return require_mode(config)[0]


def _opted_out_in_ci(config) -> bool:
    """A CI run that let the fakes' tests skip (``FAKEDEBUGFS_REQUIRE=0``)."""
    return bool(_flag(CI_ENV)) and not required(config)


def fuse_unusable() -> Optional[str]:
    """Why this process cannot mount a fake, with the fix, or None
    (:func:`fakedebugfs.server.fusecheck.mount_problem`)."""
    from fakedebugfs.server.fusecheck import mount_problem

    return mount_problem()


def _unusable(config, reason: str):
    """Skip, or (required) fail, for want of a usable fake."""
    on, why = require_mode(config)
    if on and why.startswith(f"{CI_ENV}="):
        pytest.fail(f"fakedebugfs: cannot start a fake (in CI, {why}, a skip for lack of a "
                    f"fake is a failure; {REQUIRE_ENV}=0 allows it): {reason}", pytrace=False)
    if on:
        pytest.fail(f"fakedebugfs: cannot start a fake ({REQUIRE_ENV}=1 or "
                    f"--fakedebugfs-require forbid skipping): {reason}", pytrace=False)
    pytest.skip(SKIP_PREFIX + reason)


def fork_server(config) -> Optional[str]:
    """The socket of the session's fork server, started at the first call
    (None: none is used, or the one ``FAKEDEBUGFS_FORKSERVER`` names;
    the reason it could not start is in ``config.stash[_FORK]["failed"]``,
    logged and shown in the summary)."""
    _launch_fork_server(config)
    state = config.stash[_FORK]
    if "pending" in state:
        folder = state["dir"]
        try:
            state["server"].wait()
        except Exception as err:  # noqa: BLE001 - the fakes start the slow way
            _no_fork_server(state, err, folder)
            stop_fork_server(config)
        except BaseException:
            stop_fork_server(config)
            raise
        else:
            with contextlib.suppress(OSError):  # (what it says once started: nothing)
                os.unlink(os.path.join(folder, "log"))
            state["socket"] = state["pending"]
        del state["pending"]
    return state.get("socket")


def _launch_fork_server(config) -> None:
    """Start the session's fork server if none was started or tried, not
    waiting for it to listen (:func:`fork_server` waits)."""
    state = config.stash.setdefault(_FORK, {})
    if state:
        return
    given = os.environ.get(FORKSERVER_ENV, "").strip()
    if given:  # off ("0"), or someone's own fork server
        state["given"] = given
        return
    from fakedebugfs.server.forkserver import ForkServer

    folder = ""
    try:
        folder = tempfile.mkdtemp(prefix="fakedebugfs-forkserver-")  # 0700: ours alone
        sock = os.path.join(folder, "sock")
        server = ForkServer(sock, log=os.path.join(folder, "log"), rmdir=True, wait=False)
    except Exception as err:  # noqa: BLE001 - the fakes start the slow way
        _no_fork_server(state, err, folder)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
        return
    except BaseException:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    state.update(server=server, dir=folder, pending=sock)
    config.add_cleanup(lambda: stop_fork_server(config))


def _no_fork_server(state: dict, err: Exception, folder: str) -> None:
    state["failed"] = f"{type(err).__name__}: {err}" + \
        (_tail(os.path.join(folder, "log")) if folder else "")
    logging.getLogger("fakedebugfs").warning(
        "no fork server (%s): every fake starts its own server", state["failed"])


@contextlib.contextmanager
def _forking(sock: Optional[str]):
    """``FAKEDEBUGFS_FORKSERVER`` names *sock* while a fixture's fake starts
    (``Fake.start`` asks it: server/launcher.py), and only then."""
    if sock is None:
        yield
        return
    before = os.environ.get(FORKSERVER_ENV)
    os.environ[FORKSERVER_ENV] = sock
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FORKSERVER_ENV, None)
        else:
            os.environ[FORKSERVER_ENV] = before


def stop_fork_server(config) -> None:
    """The session's fork server stopped, its socket's folder removed."""
    state = config.stash.get(_FORK, {})
    server = state.pop("server", None)
    if server is None:
        return
    try:
        server.stop()
    finally:
        shutil.rmtree(state.get("dir", ""), ignore_errors=True)


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as fp:
            lines = [line.strip() for line in fp if line.strip()]
    except OSError:
        return ""
    return f" ({lines[-1]})" if lines else ""


def _start(options: dict, config):
    from fakedebugfs.api import Fake, MountError

    from fakedebugfs.server.fusecheck import device_problem, fusermount_problem

    if not (device_problem() or fusermount_problem()):
        # it warms up while this process imports what the next check needs
        _launch_fork_server(config)
    reason = fuse_unusable()
    if reason:
        _unusable(config, reason)
    sock = fork_server(config)
    fake = Fake(**options)
    try:
        with _forking(sock):
            fake.start()
    except MountError as err:
        if "ermission" in str(err) or "not permitted" in str(err):
            _unusable(config, f"cannot mount: {err}")
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
    fake = _start(options, request.config)
    request.node.stash[_FAKES] = request.node.stash.get(_FAKES, []) + [fake]
    try:
        yield fake
    finally:
        fake.close(wait=False)  # unmounted when it returns; its process ends meanwhile


@pytest.fixture(scope="session")
def fakedebugfs_session(request):
    """One fake shared by the session (options: the ``fakedebugfs_options`` ini)."""
    text = request.config.getini("fakedebugfs_options")
    try:
        options = ast.literal_eval(text or "{}")
    except (ValueError, SyntaxError):
        raise pytest.UsageError(f"fakedebugfs_options is not a dict literal: {text!r}") from None
    fake = _start(options, request.config)
    try:
        yield fake
    finally:
        fake.close()


def pytest_runtest_setup(item) -> None:
    """A marker's options reach only the ``fakedebugfs`` fixture: on a test
    of the session fake alone they would be silently ignored: an error."""
    names = getattr(item, "fixturenames", ())
    if item.get_closest_marker(MARKER) is not None and "fakedebugfs_session" in names \
            and "fakedebugfs" not in names:
        pytest.fail(f"@pytest.mark.{MARKER}(...) sets the options of the `fakedebugfs` "
                    "fixture; the session fake (`fakedebugfs_session`) takes its options "
                    "from the `fakedebugfs_options` ini value: use one or the other",
                    pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the server log of each of its fakes;
    a test skipped for want of a fake is counted (by cause) for the summary."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple) \
            and SKIP_PREFIX in str(report.longrepr[2]):
        reason = str(report.longrepr[2]).split(SKIP_PREFIX, 1)[1]
        skipped = item.config.stash.setdefault(_SKIPPED, {})
        skipped[reason] = skipped.get(reason, 0) + 1
    if not report.failed:
        return
    fakes = list(item.stash.get(_FAKES, []))
    session_fake = item.funcargs.get("fakedebugfs_session") if hasattr(item, "funcargs") else None
    if session_fake is not None:
        fakes.append(session_fake)
    for fake in fakes:
        text = fake.log().strip()
        report.sections.append((f"{LOG_SECTION} ({fake.root})", text or "(empty)"))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """How many tests were skipped because no fake could start, and why: a
    run that skipped them is not a pass of them."""
    failed = config.stash.get(_FORK, {}).get("failed")
    if failed:
        terminalreporter.section("fakedebugfs", sep="-", yellow=True)
        terminalreporter.line(f"no fork server ({failed}): each fake started its own server "
                              f"(slower; {FORKSERVER_ENV}=0 turns it off)", yellow=True)
    skipped = config.stash.get(_SKIPPED, {})
    if not skipped:
        return
    if not failed:
        terminalreporter.section("fakedebugfs", sep="-", yellow=True)
    for reason, n in skipped.items():
        terminalreporter.line(f"{n} test{'s' if n != 1 else ''} skipped for lack of a usable "
                              f"fake: {reason}", yellow=True)
    if _opted_out_in_ci(config):
        terminalreporter.line(f"(in CI, but {REQUIRE_ENV}=0 let them skip: this run did not "
                              "test them)", yellow=True)
    else:
        terminalreporter.line(f"(--fakedebugfs-require or {REQUIRE_ENV}=1 makes them fail "
                              f"instead; in CI, {CI_ENV}=true, they fail by default)")
