"""What ``trace-cmd record`` does before its recorders start, through a
mounted fake: it clears every subsystem's ``filter`` (``echo 0 >
events/<sys>/filter``, 101 systems on 6.18), enables its events and opens
each CPU's ``trace_pipe_raw``.

A subsystem's ``enable`` and ``filter`` reach its events through the
registry's per-system index (``EventRegistry.system_keys``): these tests
check that the index follows the events a ``define`` or a dynamic event
adds and removes, so a system file never misses or keeps one.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time

import pytest

from conftest import append, write


def ncpus(tracing) -> int:
    return len(list((tracing / "per_cpu").glob("cpu*")))


def readers_open(pid: int) -> int:
    """How many distinct ``trace_pipe_raw`` files *pid*'s process tree holds open."""
    seen, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for name in glob.glob(f"/proc/{p}/task/*/children"):
            try:
                with open(name) as fp:
                    todo += [int(c) for c in fp.read().split()]
            except OSError:
                pass
        for fd in glob.glob(f"/proc/{p}/fd/*"):
            try:
                if os.readlink(fd).endswith("/trace_pipe_raw"):
                    seen.add(os.readlink(fd))
            except OSError:
                pass
    return len(seen)


def test_system_files_follow_a_define_into_a_listed_system(fakedebugfs):
    events = fakedebugfs.tracing / "events"
    assert (events / "sched" / "enable").read_text() == "0\n"  # the index is made
    fakedebugfs.define("sched", "h4_new", ["int value"])
    write(events / "sched" / "enable", "1")
    assert (events / "sched" / "h4_new" / "enable").read_text() == "1\n"
    write(events / "sched" / "filter", "value == 3")
    assert (events / "sched" / "h4_new" / "filter").read_text() == "value == 3\n"
    # sched_switch has no field named value: the subsystem's error, as the kernel's
    assert (events / "sched" / "sched_switch" / "filter").read_text() != "none\n"
    write(events / "sched" / "filter", "0")
    assert (events / "sched" / "h4_new" / "filter").read_text() == "none\n"
    write(events / "sched" / "enable", "0")
    assert (events / "sched" / "h4_new" / "enable").read_text() == "0\n"


def test_system_files_follow_a_new_system_and_a_removed_event(fakedebugfs):
    t = fakedebugfs.tracing
    assert (t / "events" / "kmem" / "enable").read_text() == "0\n"  # the index is made
    append(t / "uprobe_events", "p:h4grp/h4up /bin/sh:0x10")
    append(t / "uprobe_events", "p:h4grp/h4up2 /bin/sh:0x20")
    write(t / "events" / "h4grp" / "enable", "1")
    assert (t / "events" / "h4grp" / "h4up" / "enable").read_text() == "1\n"
    assert (t / "events" / "h4grp" / "h4up2" / "enable").read_text() == "1\n"
    write(t / "events" / "h4grp" / "enable", "0")
    append(t / "uprobe_events", "-:h4grp/h4up")
    write(t / "events" / "h4grp" / "enable", "1")  # the one left, not the removed one
    assert (t / "events" / "h4grp" / "h4up2" / "enable").read_text() == "1\n"
    assert (t / "events" / "h4grp" / "enable").read_text() == "1\n"
    write(t / "events" / "h4grp" / "enable", "0")
    write(t / "uprobe_events", "")


@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="needs trace-cmd")
def test_record_clears_every_system_filter_and_records(fakedebugfs, tmp_path):
    """trace-cmd record, started through the handle, clears the system
    filters a test left (its ``filter`` writes of ``0``) and records."""
    events = fakedebugfs.tracing / "events"
    write(events / "sched" / "filter", "prev_pid == 12345")
    assert (events / "sched" / "sched_switch" / "filter").read_text() == "prev_pid == 12345\n"
    dat = tmp_path / "t.dat"
    proc = fakedebugfs.popen(["trace-cmd", "record", "-e", "sched:sched_switch", "-o", str(dat)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while readers_open(proc.pid) < ncpus(fakedebugfs.tracing):  # it clears filters first
            assert time.monotonic() < deadline, "trace-cmd record's readers did not start"
            time.sleep(0.01)
        assert (events / "sched" / "sched_switch" / "filter").read_text() == "none\n"
    finally:
        proc.send_signal(2)
        assert proc.wait(timeout=60) == 0
    assert dat.exists()


def test_events_enable_off_reaches_every_event_on_and_soft(fakedebugfs):
    """``events/enable`` <- 0 (trace-cmd record and reset write it) turns
    off each event that is on, leaves one a trigger holds in soft mode
    registered (``0*``), and no instance's events."""
    t = fakedebugfs.tracing
    ev = t / "events"
    fakedebugfs.define("h4sys", "h4ev", ["int v"])
    for e in ("sched/sched_switch", "kmem/kmalloc", "h4sys/h4ev"):
        write(ev / e / "enable", "1")
    write(ev / "sched" / "sched_switch" / "trigger", "enable_event:kmem:kfree")
    (t / "instances" / "h4i").mkdir()
    try:
        write(t / "instances" / "h4i" / "events" / "kmem" / "enable", "1")
        write(ev / "enable", "0")
        assert [(ev / e / "enable").read_text() for e in
                ("sched/sched_switch", "kmem/kmalloc", "h4sys/h4ev", "kmem/kfree")] == \
            ["0*\n", "0\n", "0\n", "0*\n"]
        assert (t / "set_event").read_text() == "sched:sched_switch\nkmem:kfree\n"
        assert (t / "instances" / "h4i" / "events" / "kmem" / "enable").read_text() == "1\n"
        write(ev / "sched" / "sched_switch" / "trigger", "!enable_event:kmem:kfree")
        write(ev / "enable", "0")
        assert (ev / "sched" / "sched_switch" / "enable").read_text() == "0\n"
        assert (t / "set_event").read_text() == ""
    finally:
        (t / "instances" / "h4i").rmdir()
