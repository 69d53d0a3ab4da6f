"""The pytest plugin, through pytest's own pytester: a user's test file run
by a pytest subprocess that finds the plugin through its ``pytest11`` entry
point, exactly as in a project that installed fakedebugfs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.plugin import USER_TEST

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent


def test_fixture_injects_and_trace_cmd_reports(pytester):
    pytester.makepyfile(test_user=USER_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=1)


def test_marker_options_reach_the_fake(pytester):
    pytester.makepyfile(test_user='''
        import pytest

        @pytest.mark.fakedebugfs(cpus=4, workload="kmem", count=500, rate=0, enable_all=True)
        def test_options(fakedebugfs):
            fakedebugfs.wait_done(timeout=60)
            assert sorted(p.name for p in (fakedebugfs.tracing / "per_cpu").iterdir()) == \\
                ["cpu0", "cpu1", "cpu2", "cpu3"]
            assert fakedebugfs.status()["emitted"] == 500

        def test_fresh_fake_per_test(fakedebugfs):
            assert fakedebugfs.status()["emitted"] == 0
            assert (fakedebugfs.tracing / "events" / "kmem" / "kmalloc" / "enable").read_text() \\
                == "0\\n"
    ''')
    pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120).assert_outcomes(passed=2)


def test_session_fixture_is_shared_and_cleaned_up(pytester):
    pytester.makeini('[pytest]\nfakedebugfs_options = {"cpus": 3}\n')
    pytester.makepyfile(test_user='''
        seen = []

        def test_one(fakedebugfs_session):
            seen.append(fakedebugfs_session.root)
            assert len(list((fakedebugfs_session.tracing / "per_cpu").iterdir())) == 3

        def test_two(fakedebugfs_session):
            assert seen == [fakedebugfs_session.root]
            print("ROOT", fakedebugfs_session.root)
    ''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", timeout=120)
    result.assert_outcomes(passed=2)
    root = re.search(r"ROOT (\S+)", result.stdout.str()).group(1)
    assert not os.path.exists(root)  # unmounted and removed at session end
    with open("/proc/mounts") as fp:
        assert root not in fp.read()


def test_failed_test_report_carries_the_server_log(pytester):
    pytester.makepyfile(test_user='''
        import pytest

        @pytest.mark.fakedebugfs(verbose=True)
        def test_fails(fakedebugfs):
            fakedebugfs.emit("kmem:kfree", ptr=1)
            assert False, "the tool under test printed garbage"
    ''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*fakedebugfs log*", "*control: emit*"])


def test_marker_with_positional_arguments_is_a_usage_error(pytester):
    pytester.makepyfile(test_user='''
        import pytest

        @pytest.mark.fakedebugfs(4)
        def test_bad(fakedebugfs):
            pass
    ''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*keyword arguments only*"])


def _hidden_fuse(pytester, *args, env=None):
    """pytest on test_user.py in a mount namespace whose /dev has no fuse
    device (a tmpfs over /dev): the plugin's real checks find it missing.
    ``CI`` and ``FAKEDEBUGFS_REQUIRE`` are only what *env* says (this suite
    may itself run in CI)."""
    script = (f"mount -t tmpfs none /dev && mknod -m 666 /dev/null c 1 3 && "
              f"exec {sys.executable} -m pytest -p no:cacheprovider -rs {' '.join(args)} "
              f"test_user.py")
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          cwd=pytester.path, capture_output=True, text=True, timeout=120,
                          env={**{k: v for k, v in os.environ.items()
                                  if k not in ("CI", "FAKEDEBUGFS_REQUIRE")}, **(env or {})})


HIDDEN = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                            reason="hiding /dev/fuse needs root and unshare(1)")
NEEDS_FUSE = '''
    def test_needs_fuse(fakedebugfs):
        raise AssertionError("must not run")

    def test_needs_the_session_fake(fakedebugfs_session):
        raise AssertionError("must not run")

    def test_without_a_fake():
        pass
'''


@HIDDEN
def test_skips_with_a_reason_without_dev_fuse(pytester):
    """Without a fuse device, tests using the fixtures are skipped, saying
    why and how to fix it, and the summary counts them."""
    pytester.makepyfile(test_user=NEEDS_FUSE)
    p = _hidden_fuse(pytester)
    assert "1 passed, 2 skipped" in p.stdout, p.stdout + p.stderr
    assert "fakedebugfs: no usable fake: /dev/fuse is missing: load the module " \
           "(`sudo modprobe fuse`)" in p.stdout
    assert re.search(r"-+ fakedebugfs -+\n2 tests skipped for lack of a usable fake: "
                     r"/dev/fuse is missing", p.stdout), p.stdout


@HIDDEN
@pytest.mark.parametrize("how", ["option", "environment"])
def test_require_makes_a_missing_fake_an_error(pytester, how):
    """--fakedebugfs-require or FAKEDEBUGFS_REQUIRE=1: the same tests fail
    with the cause; nothing is skipped, the run is not green."""
    pytester.makepyfile(test_user=NEEDS_FUSE)
    if how == "option":
        p = _hidden_fuse(pytester, "--fakedebugfs-require")
    else:
        p = _hidden_fuse(pytester, env={"FAKEDEBUGFS_REQUIRE": "1"})
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 passed, 2 errors" in p.stdout and "skipped" not in p.stdout
    assert p.stdout.count("fakedebugfs: cannot start a fake (FAKEDEBUGFS_REQUIRE=1 or "
                          "--fakedebugfs-require forbid skipping): /dev/fuse is missing") >= 2


@HIDDEN
@pytest.mark.parametrize("ci", ["true", "1"])
def test_in_ci_a_missing_fake_is_a_failure(pytester, ci):
    """``CI`` set to a true value (as CI services set it): the tests that
    need a fake fail with the cause, the session exits nonzero."""
    pytester.makepyfile(test_user=NEEDS_FUSE)
    p = _hidden_fuse(pytester, env={"CI": ci})
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 passed, 2 errors" in p.stdout and "skipped" not in p.stdout, p.stdout
    assert p.stdout.count(f"fakedebugfs: cannot start a fake (in CI, CI={ci}, a skip for lack "
                          "of a fake is a failure; FAKEDEBUGFS_REQUIRE=0 allows it): "
                          "/dev/fuse is missing") >= 2, p.stdout


@HIDDEN
def test_in_ci_require_0_skips_and_says_so(pytester):
    """``CI=true`` with ``FAKEDEBUGFS_REQUIRE=0``: the tests skip as outside
    CI, and the summary says this CI run did not test them."""
    pytester.makepyfile(test_user=NEEDS_FUSE)
    p = _hidden_fuse(pytester, env={"CI": "true", "FAKEDEBUGFS_REQUIRE": "0"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 passed, 2 skipped" in p.stdout, p.stdout
    assert re.search(r"2 tests skipped for lack of a usable fake: /dev/fuse is missing.*\n"
                     r"\(in CI, but FAKEDEBUGFS_REQUIRE=0 let them skip: this run did not "
                     r"test them\)", p.stdout), p.stdout


@HIDDEN
def test_ci_false_skips(pytester):
    """``CI=false`` (or unset) is not CI: skips stay skips."""
    pytester.makepyfile(test_user=NEEDS_FUSE)
    p = _hidden_fuse(pytester, env={"CI": "false"})
    assert p.returncode == 0 and "1 passed, 2 skipped" in p.stdout, p.stdout + p.stderr
    assert "they fail by default" in p.stdout


def test_marker_on_a_session_fake_test_is_an_error(pytester):
    pytester.makepyfile(test_user='''
        import pytest

        @pytest.mark.fakedebugfs(cpus=4)
        def test_marked(fakedebugfs_session):
            raise AssertionError("must not run")

        def test_plain(fakedebugfs_session):
            assert fakedebugfs_session.running
    ''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*sets the options of the `fakedebugfs` fixture; the "
                                 "session fake*"])


def _marked(token: str) -> list[str]:
    """``pid comm`` of each process whose environment holds *token*."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fp:
                if token.encode() not in fp.read():
                    continue
            with open(f"/proc/{pid}/comm") as fp:
                out.append(f"{pid} {fp.read().strip()}")
        except OSError:
            pass
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="reads other processes' environments")
def test_a_failed_test_leaves_no_process(pytester, monkeypatch):
    """A test that raises while ``trace-cmd record`` runs (started with
    popen): once the session is over, no trace-cmd, no ``run --attach``
    wrapper and no server of it remains (found by a token in their
    environment)."""
    token = f"FDFS_ORPHAN_CHECK_{os.getpid()}_{id(pytester)}"
    monkeypatch.setenv(token, "1")
    pytester.makepyfile(test_user='''
        import os, subprocess

        def comms():
            out = []
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/environ", "rb") as fp:
                        if b"%s" in fp.read():
                            out.append(open(f"/proc/{pid}/comm").read().strip())
                except OSError:
                    pass
            return out

        def test_fails_mid_recording(fakedebugfs, tmp_path):
            rec = fakedebugfs.popen(["trace-cmd", "record", "-e", "kmem", "-o",
                                     str(tmp_path / "t.dat")], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            fakedebugfs.wait_readers(timeout=60)
            running = comms()
            print("RUNNING", sorted(running))
            assert running.count("trace-cmd") >= 3  # the recorder and its per-CPU readers
            raise RuntimeError("the test fails here")
    ''' % token)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", timeout=300)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError: the test fails here*"])
    deadline = time.monotonic() + 10
    while _marked(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _marked(token) == []


FORKED_TESTS = '''
    import os

    import pytest

    def fork_server_socket(pid):
        """The socket of the fork server that forked server *pid* (its
        parent's command line), or "-" when it is not one."""
        with open(f"/proc/{pid}/stat") as fp:
            ppid = fp.read().rsplit(")", 1)[1].split()[1]
        with open(f"/proc/{ppid}/cmdline") as fp:
            argv = fp.read().split("\\0")
        module = "fakedebugfs.server.forkserver"
        return argv[argv.index(module) + 1] if module in argv else "-"

    @pytest.mark.parametrize("i", range(%d))
    def test_reads(fakedebugfs, i):
        assert os.environ.get("FAKEDEBUGFS_FORKSERVER") in (None, "0")  # not the test's
        print("FAKE", type(fakedebugfs._proc).__name__, fakedebugfs._proc.pid, fakedebugfs.root,
              fork_server_socket(fakedebugfs._proc.pid))
        assert (fakedebugfs.tracing / "tracing_on").read_text() == "1\\n"
'''


def _fakes(stdout: str) -> list[tuple[str, int, str, str]]:
    return [(kind, int(pid), root, sock) for kind, pid, root, sock in
            re.findall(r"FAKE (\w+) (\d+) (\S+) (\S+)", stdout)]


def _mounts() -> str:
    with open("/proc/mounts") as fp:
        return fp.read()


def _left_behind(token: str, fakes) -> tuple[list, list]:
    """Processes still carrying *token*, and the fakes' roots still mounted
    (waited for a little: a server unmounts as it exits)."""
    deadline = time.monotonic() + 15
    while True:
        procs = _marked(token) if os.geteuid() == 0 else []
        mounted = [root for _, _, root, _ in fakes if f" {root} " in _mounts()]
        if not (procs or mounted) or time.monotonic() > deadline:
            return procs, mounted
        time.sleep(0.1)


@pytest.fixture
def token(monkeypatch, request):
    """An environment variable every process of the run under test inherits."""
    value = f"FDFS_FORK_CHECK_{os.getpid()}_{request.node.name}"
    monkeypatch.setenv(value, "1")
    monkeypatch.delenv("FAKEDEBUGFS_FORKSERVER", raising=False)
    return value


def test_the_fixture_forks_its_servers_and_leaves_nothing(pytester, token):
    """The function fixture's fakes are forked by one fork server for the
    session, started at the first fake; afterwards no process of the run
    (fork server, servers) and no mount remains, nor the socket's folder."""
    pytester.makepyfile(test_user=FORKED_TESTS % 5)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", timeout=300)
    result.assert_outcomes(passed=5)
    fakes = _fakes(result.stdout.str())
    assert len(fakes) == 5 and {kind for kind, *_ in fakes} == {"Forked"}
    socks = {sock for *_, sock in fakes}
    assert len(socks) == 1
    assert _left_behind(token, fakes) == ([], [])
    assert not os.path.exists(os.path.dirname(socks.pop()))


def test_forkserver_0_turns_it_off(pytester, token, monkeypatch):
    monkeypatch.setenv("FAKEDEBUGFS_FORKSERVER", "0")
    pytester.makepyfile(test_user=FORKED_TESTS % 2)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", timeout=300)
    result.assert_outcomes(passed=2)
    assert {kind for kind, *_ in _fakes(result.stdout.str())} == {"Popen"}


def test_without_a_fork_server_the_fakes_start_as_before_and_say_why(pytester, token,
                                                                     monkeypatch):
    """A fork server that cannot start (its socket's path too long for
    AF_UNIX): the fakes start their own servers; the summary says why."""
    tmp = pytester.path / ("x" * 110)
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    pytester.makepyfile(test_user=FORKED_TESTS % 2)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", timeout=300)
    result.assert_outcomes(passed=2)
    fakes = _fakes(result.stdout.str())
    assert {kind for kind, *_ in fakes} == {"Popen"}
    result.stdout.fnmatch_lines(["*no fork server (*AF_UNIX path too long*each fake started "
                                 "its own server*"])
    assert _left_behind(token, fakes) == ([], [])


@pytest.mark.parametrize("how", ["KeyboardInterrupt", "SIGKILL"])
def test_an_interrupted_session_leaves_nothing(pytester, token, how):
    """Ctrl-C in a test (pytest ends the session), or pytest killed with
    SIGKILL (nothing of its own runs): the fork server and the fakes'
    servers go, and nothing stays mounted."""
    pytester.makepyfile(test_user=FORKED_TESTS % 1 + '''
    def test_interrupted(fakedebugfs):
        print("FAKE", type(fakedebugfs._proc).__name__, fakedebugfs._proc.pid, fakedebugfs.root,
              fork_server_socket(fakedebugfs._proc.pid), flush=True)
        if %r == "SIGKILL":
            os.kill(os.getpid(), 9)
        raise KeyboardInterrupt
    ''' % how)
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s",
                        "test_user.py"], cwd=pytester.path, capture_output=True, text=True,
                       timeout=300)
    fakes = _fakes(p.stdout)
    assert len(fakes) == 2 and {kind for kind, *_ in fakes} == {"Forked"}, p.stdout + p.stderr
    if how == "KeyboardInterrupt":
        assert "KeyboardInterrupt" in p.stdout and p.returncode == 2
    else:
        assert p.returncode == -9
    assert _left_behind(token, fakes) == ([], [])
    assert not os.path.exists(os.path.dirname(fakes[0][3]))  # the socket's folder
    assert not [root for _, _, root, _ in fakes if os.path.lexists(root)]  # their servers rmdir'd them
