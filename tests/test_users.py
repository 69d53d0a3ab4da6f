"""A normal user (uid 65534, Debian's /usr/bin/python3) mounts a fake, uses
the Python API and the pytest plugin, without root and without
``user_allow_other``: the fake's files are that user's, the mount is made
without ``allow_other``; where the system forbids it (/dev/fuse 0600, no
device), one line names the cause and the fix.  Each runs in a private
mount namespace whose /dev/fuse is a node of its own (tests/support/nobody.py)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import textwrap

import pytest

from conftest import is_mounted, run_cli
from support.nobody import NOBODY, nobody_user

nobody = pytest.fixture(scope="module")(nobody_user)
pytestmark = pytest.mark.timeout(600)


def test_user_mounts_and_reads_its_own_fake(nobody):
    mnt = nobody.home / "mnt"
    script = f"""
        set -e
        mkdir -p {mnt}
        fakedebugfs mount {mnt} --workload none
        grep " {mnt} " /proc/mounts
        stat -c '%u:%g %a %n' {mnt}/tracing {mnt}/tracing/trace {mnt}/tracing/events/enable
        echo 1 > {mnt}/tracing/events/kmem/kmalloc/enable
        fakedebugfs emit {mnt} kmem:kmalloc bytes_req=24 --comm app --pid 7
        grep -c "kmalloc:.*bytes_req=24" {mnt}/tracing/trace
        fakedebugfs umount {mnt}
        grep -c " {mnt} " /proc/mounts || true
    """
    p = nobody.run(["sh", "-c", textwrap.dedent(script)])
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    mount_line = lines[0].split()
    assert mount_line[2] == "fuse.fakedebugfs"
    opts = mount_line[3].split(",")
    assert f"user_id={NOBODY}" in opts and "allow_other" not in opts
    assert lines[1:4] == [f"{NOBODY}:{NOBODY} 700 {mnt}/tracing",
                          f"{NOBODY}:{NOBODY} 640 {mnt}/tracing/trace",
                          f"{NOBODY}:{NOBODY} 640 {mnt}/tracing/events/enable"]
    assert lines[4:] == ["1", "0"]


def test_user_refused_names_the_cause_and_the_fix(nobody):
    """/dev/fuse 0600 (this machine's), then no device at all."""
    mnt = nobody.home / "mnt-refused"
    p = nobody.run(["sh", "-c", f"mkdir -p {mnt} && fakedebugfs mount {mnt}"], fuse_mode=0o600)
    assert p.returncode == 1
    # the cause, then the least invasive fix this machine can take (fusefix:
    # a container's own device, the fuse group, an ACL, a udev rule, 0666)
    line = p.stderr.strip()
    assert "\n" not in line
    assert line.startswith(f"fakedebugfs mount: /dev/fuse is mode 0600, not readable and "
                           f"writable by uid {NOBODY}: ")
    assert "/dev/fuse" in line.split(": ", 2)[2] and "fakedebugfs doctor" in line
    assert line.endswith("or run as root")
    p = nobody.run(["python", "-c", "from fakedebugfs import Fake; Fake().start()"],
                   fuse_mode="missing")
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1].startswith(
        "fakedebugfs.errors.MountError: /dev/fuse is missing: load the module "
        "(`sudo modprobe fuse`)")


def test_user_mount_refused_by_fusermount_says_why(nobody):
    """fusermount3's own reason, not libfuse's "fuse_session_mount failed"
    alone: here a mount point the user cannot write to."""
    theirs = nobody.base / "roots"
    theirs.mkdir(mode=0o755, exist_ok=True)
    p = nobody.run(["fakedebugfs", "mount", str(theirs)])
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == (
        f"fakedebugfs mount: cannot mount {theirs}: fuse_session_mount failed: fusermount3: "
        f"user has no write access to mountpoint {theirs}")


def test_user_python_api(nobody):
    """``Fake`` as the user: files of the user's, events injected and read,
    reset(), everything unmounted at the end."""
    script = textwrap.dedent("""
        import os
        from fakedebugfs import Fake
        from fakedebugfs.control.runstate import is_mounted

        with Fake(cpus=2, clock="virtual") as fk:
            st = os.stat(fk.tracing / "trace")
            print("owner", st.st_uid, st.st_gid)
            (fk.tracing / "events/kmem/kmalloc/enable").write_text("1")
            fk.emit("kmem:kmalloc", cpu=1, pid=42, comm="app", bytes_req=8)
            print("lines", sum("kmalloc:" in l for l in (fk.tracing / "trace").read_text().splitlines()))
            fk.reset()
            print("after reset", repr((fk.tracing / "set_event").read_text()),
                  sum("kmalloc:" in l for l in (fk.tracing / "trace").read_text().splitlines()))
            root = fk.root
        print("mounted after", is_mounted(root), root.exists())
    """)
    p = nobody.run(["python", "-c", script])
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines() == [f"owner {NOBODY} {NOBODY}", "lines 1",
                                     "after reset '' 0", "mounted after False False"]


USER_FILE = """
import os

def test_kmalloc_seen(fakedebugfs):
    fk = fakedebugfs
    assert os.stat(fk.tracing / "trace").st_uid == os.getuid()
    (fk.tracing / "events/kmem/kmalloc/enable").write_text("1")
    fk.emit("kmem:kmalloc", cpu=0, pid=42, comm="app", bytes_req=8)
    assert "bytes_req=8" in (fk.tracing / "trace").read_text()
"""


def test_user_pytest_plugin(nobody):
    """The user's own test file with the fixture: passes where /dev/fuse is
    usable; where it is 0600, skipped with the cause (counted in the
    summary), and with FAKEDEBUGFS_REQUIRE=1 a failure with that cause."""
    project = nobody.home / "project"
    project.mkdir(exist_ok=True)
    (project / "test_mine.py").write_text(USER_FILE)
    os.chown(project, NOBODY, NOBODY)
    argv = ["python", "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "test_mine.py"]
    p = nobody.run(argv, cwd=str(project))
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr
    p = nobody.run(argv, cwd=str(project), fuse_mode=0o600)
    assert p.returncode == 0 and "1 skipped" in p.stdout, p.stdout + p.stderr
    assert "1 test skipped for lack of a usable fake: /dev/fuse is mode 0600" in p.stdout
    p = nobody.run(argv, cwd=str(project), fuse_mode=0o600, env={"FAKEDEBUGFS_REQUIRE": "1"})
    assert p.returncode == 1 and "1 error" in p.stdout, p.stdout + p.stderr
    assert "cannot start a fake (FAKEDEBUGFS_REQUIRE=1 or --fakedebugfs-require forbid " \
           "skipping): /dev/fuse is mode 0600" in p.stdout


THREE_TESTS = """
import re, signal, subprocess, time

from fakedebugfs import Event

KMALLOC = dict(call_site=0x10, ptr=0x20, bytes_req=8, bytes_alloc=8, gfp_flags=0xCC0, node=-1)


def record(fk, out, *events):
    rec = fk.popen(["trace-cmd", "record", *[a for e in events for a in ("-e", e)], "-o", out],
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    fk.wait_readers(timeout=60)
    deadline = time.monotonic() + 30
    while (fk.tracing / "tracing_on").read_text() != "1\\n":
        assert time.monotonic() < deadline and rec.poll() is None
        time.sleep(0.01)
    return rec


def report(fk, rec, out):
    rec.send_signal(signal.SIGINT)
    _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    return fk.run(["trace-cmd", "report", "-i", out], capture_output=True, text=True).stdout


def test_injected_kmem_events_are_read(fakedebugfs):
    (fakedebugfs.tracing / "events/kmem/enable").write_text("1")
    fakedebugfs.emit_many([Event("kmem:kmalloc", dict(KMALLOC, bytes_req=i)) for i in range(1, 4)])
    fakedebugfs.emit("kmem:kfree", call_site=0x10, ptr=0x20)
    text = (fakedebugfs.tracing / "trace").read_text()
    assert len(re.findall(r"kmalloc:.*bytes_req=[123] ", text)) == 3 and "kfree:" in text


def test_trace_cmd_records_and_reports(fakedebugfs, tmp_path):
    out = str(tmp_path / "t.dat")
    rec = record(fakedebugfs, out, "kmem:kmalloc")
    fakedebugfs.emit_many([Event("kmem:kmalloc", KMALLOC, cpu=i % 2, pid=77, comm="app")
                           for i in range(50)])
    fakedebugfs.wait_consumed(timeout=30)
    lines = [l for l in report(fakedebugfs, rec, out).splitlines() if "kmalloc:" in l]
    assert len(lines) == 50 and all("app-77" in l for l in lines)


def test_an_overrun_shows_in_the_report(fakedebugfs, tmp_path):
    out = str(tmp_path / "t.dat")
    rec = record(fakedebugfs, out, "kmem:kmalloc")
    fakedebugfs.fault("overrun", cpu=0, events=300)
    fakedebugfs.emit_many([Event("kmem:kmalloc", KMALLOC) for _ in range(1000)])
    fakedebugfs.wait_consumed(timeout=30)
    text = report(fakedebugfs, rec, out)
    assert re.search(r"CPU:0 \\[(300 )?EVENTS DROPPED\\]", text)  # (no count: a full page)
    assert sum("kmalloc:" in l for l in text.splitlines()) == 700
"""


def test_user_three_tests_with_trace_cmd(nobody):
    """The user's test file: injected events, trace-cmd record/report
    through the fake's handle (``run --attach`` in a user namespace), an
    overrun: 3 passed, 0 skipped, as uid 65534 without root."""
    project = nobody.home / "three"
    project.mkdir(exist_ok=True)
    (project / "test_tool.py").write_text(THREE_TESTS)
    os.chown(project, NOBODY, NOBODY)
    p = nobody.run(["python", "-m", "pytest", "-p", "no:cacheprovider", "-q",
                    "--fakedebugfs-require", "test_tool.py"], cwd=str(project))
    assert p.returncode == 0 and "3 passed" in p.stdout and "skipped" not in p.stdout, \
        p.stdout[-4000:] + p.stderr[-2000:]


def test_uid_and_gid_options(tmp_path):
    """``--uid``/``--gid`` (tracefs' ``uid=``/``gid=``): the files' owner,
    from the one options table (CLI and API), checked."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    run_cli("mount", mnt, "--uid", "1234", "--gid", "5678", "--workload", "none")
    try:
        for path in (mnt / "tracing", mnt / "tracing" / "trace", mnt / "ktrace" / "enabled"):
            st = os.stat(path)
            assert (st.st_uid, st.st_gid) == (1234, 5678), path
    finally:
        run_cli("umount", mnt)
    assert not is_mounted(mnt)
    p = run_cli("mount", mnt, "--uid", "-1", check=False)
    assert p.returncode == 2 and "--uid: must be a whole number >= 0" in p.stderr
    from fakedebugfs import Fake

    with Fake(uid=4321) as fk:
        assert os.stat(fk.tracing / "tracing_on").st_uid == 4321
        assert stat.S_IMODE(os.stat(fk.tracing).st_mode) == 0o700
        mounts = open("/proc/self/mounts").read()
        line = next(l for l in mounts.splitlines() if f" {fk.root} " in l)
        assert "allow_other" in line.split()[3].split(",")  # root's fake: for everyone


def test_umount_of_what_is_not_a_fake(tmp_path):
    """umount: nothing mounted is an error; a symlink to the mount point and
    a mount point with a space, a tab and a backslash in its name work."""
    empty = tmp_path / "empty"
    empty.mkdir()
    p = run_cli("umount", empty, check=False)
    assert p.returncode == 1 and p.stderr.strip() == f"fakedebugfs umount: {empty}: not mounted"
    p = run_cli("umount", tmp_path / "nothing", check=False)
    assert p.returncode == 1 and "no such file or directory" in p.stderr
    from fakedebugfs.control.runstate import mounted_fstype

    odd = tmp_path / "a b\tc\\d"
    odd.mkdir()
    run_cli("mount", odd, "--workload", "none")
    try:
        link = tmp_path / "link"
        link.symlink_to(odd)
        assert re.search(r" \S*/a\\040b\\011c\\134d fuse.fakedebugfs ",
                         open("/proc/self/mounts").read())
        assert mounted_fstype(str(odd)) == "fuse.fakedebugfs"
        p = run_cli("umount", link, check=False)
        assert p.returncode == 0, p.stderr
        assert mounted_fstype(str(odd)) is None
    finally:
        if mounted_fstype(str(odd)):
            subprocess.run(["umount", "-l", str(odd)])
