"""The pytest plugin, through pytest's own pytester: a user's test file run
by a pytest subprocess that finds the plugin through its ``pytest11`` entry
point, exactly as in a project that installed fakedebugfs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent

# A user's test: three kmallocs on CPU 1, recorded and reported by trace-cmd.
USER_TEST = '''
import re
import signal
import subprocess
import time

import pytest


@pytest.mark.fakedebugfs(cpus=2, clock="virtual")
def test_three_kmallocs(fakedebugfs, tmp_path):
    fk = fakedebugfs
    syms = fk.run(["grep", " getname_flags$", "/proc/kallsyms"], capture_output=True, text=True)
    base = int(syms.stdout.split()[0], 16)
    dat = tmp_path / "trace.dat"
    rec = fk.popen(["trace-cmd", "record", "-e", "kmem:kmalloc", "-o", str(dat)],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fk.wait_readers()  # trace-cmd reads every CPU's trace_pipe_raw
    deadline = time.monotonic() + 30
    while (fk.tracing / "tracing_on").read_text() != "1\\n":  # ... and has switched tracing on
        assert time.monotonic() < deadline and rec.poll() is None
        time.sleep(0.01)
    for i in range(3):
        fk.emit("kmem:kmalloc", cpu=1, pid=4242, comm="myapp", call_site=base + 4 * i,
                ptr=0xFFFF888100000000 + 64 * i, bytes_req=8 * (i + 1), bytes_alloc=16 * (i + 1),
                gfp_flags=0xCC0, node=-1)
    rec.send_signal(signal.SIGINT)
    rec.communicate(timeout=60)
    assert rec.returncode == 0
    report = fk.run(["trace-cmd", "report", "-i", str(dat)], capture_output=True, text=True)
    lines = [re.sub(r"\\s+", " ", l).strip() for l in report.stdout.splitlines() if "kmalloc:" in l]
    assert lines == [
        "myapp-4242 [001] 1.000000: kmalloc: (getname_flags+0x0) call_site=getname_flags+0x0 "
        "ptr=0xffff888100000000 bytes_req=8 bytes_alloc=16 gfp_flags=GFP_KERNEL node=-1 "
        "accounted=false",
        "myapp-4242 [001] 1.000001: kmalloc: (getname_flags+0x4) call_site=getname_flags+0x4 "
        "ptr=0xffff888100000040 bytes_req=16 bytes_alloc=32 gfp_flags=GFP_KERNEL node=-1 "
        "accounted=false",
        "myapp-4242 [001] 1.000002: kmalloc: (getname_flags+0x8) call_site=getname_flags+0x8 "
        "ptr=0xffff888100000080 bytes_req=24 bytes_alloc=48 gfp_flags=GFP_KERNEL node=-1 "
        "accounted=false",
    ]
'''


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


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="hiding /dev/fuse needs root and unshare(1)")
def test_skips_with_a_reason_without_dev_fuse(pytester):
    """In a mount namespace whose /dev has no fuse device, tests using the
    fixture are skipped, saying why."""
    pytester.makepyfile(test_user='''
        def test_needs_fuse(fakedebugfs):
            raise AssertionError("must not run")
    ''')
    script = (f"mount -t tmpfs none /dev && mknod -m 666 /dev/null c 1 3 && "
              f"exec {sys.executable} -m pytest -p no:cacheprovider -rs test_user.py")
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                       cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert "1 skipped" in p.stdout, p.stdout + p.stderr
    assert "FUSE unusable: no /dev/fuse" in p.stdout
