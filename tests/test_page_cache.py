"""What the kernel caches of a mount, and that nothing cached goes stale.

The fake lets the kernel keep names and attributes for a long time
(``fs/operations.py``: ``STABLE_TIMEOUT``) and invalidates them itself when
they change.  Each test here has a real tool look first (``ls``, ``cat``,
``stat``: the kernel then holds the entries, attributes, and the misses),
changes the tree the way a user does (``fakedebugfs define``, an instance
``mkdir``/``rmdir``, chown), and checks the same tool sees the change at
once, as it does on tracefs.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import read, run_cli


def sh(*argv) -> subprocess.CompletedProcess:
    return subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=60)


def ls(path) -> list[str]:
    out = sh("ls", "-1", path)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_define_after_listing_and_miss_is_seen_at_once(fake):
    mnt = fake("--workload", "none")
    events = mnt / "tracing" / "events"
    new = events / "cachedemo" / "hit"
    assert "cachedemo" not in ls(events)  # the listing, and a miss, seen first
    assert sh("cat", new / "format").returncode != 0
    assert sh("stat", new).returncode != 0
    nlink = os.stat(events).st_nlink
    kmem_format = sh("cat", events / "kmem" / "kmalloc" / "format").stdout
    assert "field:" in kmem_format  # a static file read once: its entry is cached

    run_cli("define", mnt, "cachedemo:hit", "int value")
    assert os.stat(events).st_nlink == nlink + 1  # the parent's cached attributes went
    assert "cachedemo" in ls(events)
    assert ls(events / "cachedemo") == ["enable", "filter", "hit"]
    text = sh("cat", new / "format")
    assert text.returncode == 0 and "field:int value;" in text.stdout

    run_cli("define", mnt, "cachedemo:other", "long n")  # into the listed system
    assert "other" in ls(events / "cachedemo")
    assert "field:long n;" in read(events / "cachedemo" / "other" / "format")
    assert sh("cat", events / "kmem" / "kmalloc" / "format").stdout == kmem_format


def test_instance_mkdir_rmdir_after_listing_is_seen_at_once(fake):
    mnt = fake("--workload", "none")
    instances = mnt / "tracing" / "instances"
    inst = instances / "cached"
    assert ls(instances) == []
    assert sh("stat", inst / "trace").returncode != 0  # a miss the kernel saw
    nlink = os.stat(instances).st_nlink

    assert sh("mkdir", inst).returncode == 0
    assert ls(instances) == ["cached"]
    assert "tracing_on" in ls(inst)
    assert read(inst / "tracing_on") == "1\n"
    assert os.stat(instances).st_nlink == nlink + 1
    first = os.stat(inst / "tracing_on").st_ino

    assert sh("rmdir", inst).returncode == 0  # gone at once, though just looked at
    assert ls(instances) == []
    assert sh("cat", inst / "tracing_on").returncode != 0
    assert os.stat(instances).st_nlink == nlink

    assert sh("mkdir", inst).returncode == 0  # the same name again: a new directory
    assert os.stat(inst / "tracing_on").st_ino != first
    assert sh("sh", "-c", f"echo 0 > {inst / 'tracing_on'}").returncode == 0
    assert read(inst / "tracing_on") == "0\n"
    assert sh("rmdir", inst).returncode == 0


def test_chown_of_a_directory_reaches_the_cached_owners_below(fake):
    mnt = fake("--workload", "none")
    instances = mnt / "tracing" / "instances"
    os.mkdir(instances / "owned")
    deep = instances / "owned" / "events" / "sched" / "sched_switch" / "format"
    assert os.stat(deep).st_uid == 0  # the kernel has its attributes now
    os.chown(instances, 4242, 4343)
    st = os.stat(deep)  # tracefs: an instance's files follow instances/
    assert (st.st_uid, st.st_gid) == (4242, 4343)
    os.chown(instances, 0, 0)
    assert os.stat(deep).st_uid == 0
    os.rmdir(instances / "owned")


def test_option_files_follow_the_tracer_at_once(fake):
    """A tracer's own option files come and go with it while their names
    are in the kernel's cache."""
    mnt = fake("--workload", "none")
    tracing = mnt / "tracing"
    tracers = read(tracing / "available_tracers").split()
    before = set(ls(tracing / "options"))
    for tracer in tracers:
        with open(tracing / "current_tracer", "w") as fp:
            fp.write(tracer)
        now = set(ls(tracing / "options"))
        for name in now:  # every listed name opens, none of the gone ones does
            assert sh("cat", tracing / "options" / name).returncode == 0, (tracer, name)
        for name in before - now:
            assert sh("cat", tracing / "options" / name).returncode != 0, (tracer, name)
        before = now


def test_removals_just_before_unmounting_are_not_errors():
    """Instances removed right before the fake closes: their entries'
    invalidations are sent (or given up) before the session goes, so the
    server's log has no error (it had an EINVAL traceback for most of
    them: pyfuse3's own thread sent them after ``pyfuse3.close``)."""
    from fakedebugfs import Fake

    for _ in range(3):
        fk = Fake().start()
        instances = fk.tracing / "instances"
        for i in range(12):
            (instances / f"x{i}").mkdir()
        assert sorted(ls(instances)) == sorted(f"x{i}" for i in range(12))
        for i in range(12):
            (instances / f"x{i}").rmdir()
        fk.close()
        assert "ERROR" not in fk.log() and "Traceback" not in fk.log(), fk.log()[-600:]


@pytest.mark.skipif(shutil.which("trace-cmd") is None or shutil.which("perf") is None,
                    reason="needs trace-cmd and perf")
def test_tracecmd_and_perf_see_changes_at_once():
    """trace-cmd and perf, which walk ``events/`` and ``instances/`` by
    name, see a new event, a new instance and a removed one at once after
    having listed the tree (its names and attributes cached in the kernel)."""
    from fakedebugfs import Fake

    def out(fk, *argv) -> str:
        p = fk.run(list(argv), capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stdout

    with Fake() as fk:
        events = out(fk, "trace-cmd", "list", "-e").split()
        assert "cachedemo:late" not in events and "sched:sched_switch" in events
        assert "cachedemo:late" not in out(fk, "perf", "list", "tracepoint")
        assert "seen" not in out(fk, "trace-cmd", "list", "-B").split()
        fk.define("cachedemo", "late", ["int n"])
        assert "cachedemo:late" in out(fk, "trace-cmd", "list", "-e").split()
        assert "cachedemo:late" in out(fk, "perf", "list", "tracepoint")
        os.mkdir(fk.tracing / "instances" / "seen")
        assert "seen" in out(fk, "trace-cmd", "list", "-B").split()
        os.rmdir(fk.tracing / "instances" / "seen")
        assert "seen" not in out(fk, "trace-cmd", "list", "-B").split()
