"""The kernel keeps directory listings (fs/dircache.py); none goes stale.

Each test lists a directory with ``ls`` first (the kernel then holds the
listing in its cache: no request reaches the fake for the next ``ls``),
changes it the way a user does, and checks that the next ``ls`` shows the
change: dynamic events defined and removed through ``kprobe_events``,
``uprobe_events``, ``synthetic_events`` and ``dynamic_events`` (their
system's directory, ``events/`` and an instance's ``events/``), a module
loaded and unloaded, a ``define`` from the API.  Instances and a tracer's
option files: tests/test_page_cache.py.
"""

from __future__ import annotations

import os
import subprocess
import textwrap

from conftest import append, run_cli

from fakedebugfs.fs.dircache import CACHE_LISTINGS


def ls(path) -> list[str]:
    """``ls -1 PATH`` in a process of its own ([] when PATH is missing)."""
    out = subprocess.run(["ls", "-1", str(path)], capture_output=True, text=True, timeout=60)
    return out.stdout.split() if out.returncode == 0 else []


def test_the_fake_lets_the_kernel_keep_listings():
    """Our pyfuse3 (dircache.patch) is what runs: otherwise nothing here
    is cached and the tests below check nothing new."""
    assert CACHE_LISTINGS


def test_dynamic_events_come_and_go_in_cached_listings(fake):
    mnt = fake("--workload", "none")  # debian-6.12: kprobes, uprobes, synthetic events
    t = mnt / "tracing"
    os.mkdir(t / "instances" / "lc")
    tops = (t / "events", t / "instances" / "lc" / "events")
    for events in tops:
        assert "lcgrp" not in ls(events) and "synthetic" not in ls(events)

    steps = [  # (file, definition, system, event)
        ("kprobe_events", "p:lcgrp/lck vfs_read", "lcgrp", "lck"),
        ("uprobe_events", "p:lcgrp/lcu /bin/sh:0x10", "lcgrp", "lcu"),
        ("dynamic_events", "p:lcgrp/lcd vfs_write", "lcgrp", "lcd"),
        ("synthetic_events", "lcsyn u64 lat", "synthetic", "lcsyn"),
    ]
    for file, line, system, event in steps:
        append(t / file, line)
        for events in tops:  # each listed before (and the group once it is made)
            assert system in ls(events), (file, events)
            assert event in ls(events / system), (file, events)
            assert "format" in ls(events / system / event)
    assert sorted(ls(t / "events" / "lcgrp")) == ["enable", "filter", "lcd", "lck", "lcu"]

    removals = [("uprobe_events", "-:lcgrp/lcu", "lcgrp", "lcu"),
                ("dynamic_events", "-:lcgrp/lcd", "lcgrp", "lcd"),
                ("synthetic_events", "!lcsyn", "synthetic", "lcsyn")]
    for file, line, system, event in removals:
        append(t / file, line)
        for events in tops:
            assert event not in ls(events / system), (file, events)
    for events in tops:
        assert ls(events / "lcgrp") == ["enable", "filter", "lck"]
    open(t / "kprobe_events", "w").close()  # O_TRUNC: every kprobe goes, its group with it
    for events in tops:
        assert "lcgrp" not in ls(events)
        assert ls(events / "lcgrp") == []
    os.rmdir(t / "instances" / "lc")


MODULE = textwrap.dedent("""\
    lc_rx "dev %s len %u"
    lc_io sector %llu bytes %d
""")


def test_module_load_and_unload_in_a_cached_listing(fake, tmp_path):
    mnt = fake("--workload", "none")
    events = mnt / "ktrace" / "events"
    before = ls(events)
    assert before and "lc_rx" not in before
    module = tmp_path / "lc.events"
    module.write_text(MODULE)
    run_cli("insmod", mnt, "lcmod", module)
    assert sorted(ls(events)) == sorted(before + ["lc_rx", "lc_io"])
    run_cli("rmmod", mnt, "lcmod")
    assert sorted(ls(events)) == sorted(before)


def test_define_from_the_api_reaches_every_cached_listing(fake):
    """A ``define`` into a new and into a listed system, seen at the top
    and in an instance listed before it (``trace_add_event_call`` makes
    the event in every trace array)."""
    mnt = fake("--workload", "none")
    t = mnt / "tracing"
    os.mkdir(t / "instances" / "def")
    tops = (t / "events", t / "instances" / "def" / "events")
    for events in tops:
        assert "lcdef" not in ls(events)
    run_cli("define", mnt, "lcdef:one", "int value")
    for events in tops:
        assert "lcdef" in ls(events)
        assert ls(events / "lcdef") == ["enable", "filter", "one"]
    run_cli("define", mnt, "lcdef:two", "long n")
    for events in tops:
        assert ls(events / "lcdef") == ["enable", "filter", "one", "two"]
    os.rmdir(t / "instances" / "def")


def test_a_changed_directory_moves_its_mtime(fake):
    """The directory's mtime and ctime move with its entries (tracefs'
    ``simple_rmdir`` moves the parent's when an instance goes): the kernel
    throws away a listing it cached from before the change."""
    mnt = fake("--workload", "none")
    instances = mnt / "tracing" / "instances"
    first = os.stat(instances)
    os.mkdir(instances / "mt")
    made = os.stat(instances)
    os.rmdir(instances / "mt")
    gone = os.stat(instances)
    assert first.st_mtime_ns < made.st_mtime_ns < gone.st_mtime_ns
    assert gone.st_ctime_ns == gone.st_mtime_ns
    assert (gone.st_size, gone.st_mode) == (first.st_size, first.st_mode)


def cat(path) -> str:
    """``cat PATH`` in a process of its own ("" when it fails)."""
    out = subprocess.run(["cat", str(path)], capture_output=True, text=True, timeout=60)
    return out.stdout if out.returncode == 0 else ""


def test_formats_read_as_they_are_after_each_change(fake):
    """A format's text is kept once unpacked (engine/ftrace/registry.py
    ``format_text``), and ``cat`` still shows each event's as it is after
    the fake changes the events: a kprobe removed and made again with
    other fields, an event defined into a system read before, an instance
    made after the reads."""
    mnt = fake("--workload", "none")  # debian-6.12: kprobes
    t = mnt / "tracing"
    switch = t / "events" / "sched" / "sched_switch" / "format"
    text = cat(switch)
    assert text.startswith("name: sched_switch\n") and "field:char prev_comm[16];" in text
    assert cat(switch) == text

    append(t / "kprobe_events", "p:fcgrp/fck vfs_read")
    probe = t / "events" / "fcgrp" / "fck" / "format"
    first = cat(probe)
    assert first.startswith("name: fck\n") and "arg1" not in first
    append(t / "kprobe_events", "-:fcgrp/fck")
    assert cat(probe) == ""
    append(t / "kprobe_events", "p:fcgrp/fck vfs_read arg1=%di:u64")
    again = cat(probe)
    assert "field:u64 arg1;" in again and again != first

    run_cli("define", mnt, "sched:fc_new", "int value")
    assert "field:int value;" in cat(t / "events" / "sched" / "fc_new" / "format")
    assert cat(switch) == text
    os.mkdir(t / "instances" / "fc")
    assert cat(t / "instances" / "fc" / "events" / "sched" / "sched_switch" / "format") == text
    assert "field:u64 arg1;" in cat(t / "instances" / "fc" / "events" / "fcgrp" / "fck" / "format")
    os.rmdir(t / "instances" / "fc")
    open(t / "kprobe_events", "w").close()
