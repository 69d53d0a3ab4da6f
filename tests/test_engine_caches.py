"""The engine's kept answers follow what they answer: the list of events
with tracepoints (``available_events``, ``events/enable``, wildcards) after
an event is defined, a uprobe event added or removed, a module loaded or
unloaded; "does a probe listen to a side-band tracepoint" (asked before
every open inside ``run``) after an enable, a disable, a trigger's soft
enable, a uprobe's enable; a system filter's ``0`` with and without
filters set.  Plain engine objects: no mount."""

from __future__ import annotations

import os

import pytest

from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES
from fakedebugfs.engine.ftrace.trace_dynevent import dyn_events
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.server.watch import Watches


def walked(ft) -> list[str]:
    """``event_keys`` as it is without a cache: every event of the registry
    with a tracepoint."""
    return [k for k in ft.events if not k.startswith("ftrace:") and k in ft.engine.tracepoints]


def test_event_keys_follow_define_uprobe_and_modules():
    k = Kernel().warm()
    ft = k.ftrace
    before = ft.event_keys()
    assert before == walked(ft) and "sched:sched_switch" in before
    before.append("not:kept")  # a caller's list is its own
    assert "not:kept" not in ft.event_keys()

    k.define_event("mine", "ev", ["int a;"])
    assert "mine:ev" in ft.event_keys() and ft.event_keys() == walked(ft)

    dyn = dyn_events(ft, stat_path=os.stat)
    dyn.write(b"p:ugrp/uev /bin/sh:0x10\n")
    assert "ugrp:uev" in ft.event_keys() and ft.event_keys() == walked(ft)
    dyn.write(b"-:ugrp/uev\n")
    assert "ugrp:uev" not in ft.event_keys() and ft.event_keys() == walked(ft)

    k.insmod("m1", [("m1_ev", "x=%d")])
    assert ft.event_keys() == walked(ft)
    k.rmmod("m1")
    assert ft.event_keys() == walked(ft)

    by_system = ft.event_keys_by_system()
    for system, keys in by_system.items():
        assert keys == [key for key in walked(ft) if key.split(":")[0] == system]
    assert sum(map(len, by_system.values())) == len(walked(ft))
    assert by_system["mine"] == ["mine:ev"]
    k.define_event("mine", "ev2", ["int b;"])
    assert ft.event_keys_by_system()["mine"] == ["mine:ev", "mine:ev2"]


def test_system_filter_zero_clears_what_is_set():
    ft = Kernel().ftrace
    ft.set_system_filter("sched", b"0\n")  # nothing set: nothing to clear
    assert not ft.filters
    ft.set_system_filter("sched", b"prev_pid > 1")
    assert ft.filters.get("sched:sched_switch") == "prev_pid > 1"
    assert ft.filter_preds.get("sched:sched_switch") is not None
    ft.set_system_filter("sched", b"  0 \0junk")
    assert "sched:sched_switch" not in ft.filters
    assert "sched:sched_switch" not in ft.filter_preds


class _Injector:
    def __init__(self, kernel):
        self.kernel = kernel


@pytest.fixture(params=["linux-6.18", "debian-6.12"])
def watches(request):
    k = Kernel(profile=str(SHIPPED_PROFILES / request.param))
    w = Watches(_Injector(k), k.engine.nr_cpus)
    yield k, w
    w.close()


def test_listened_follows_enables(watches, request):
    k, w = watches
    ft = k.ftrace
    assert w.listened() is False
    assert w.listened() is False  # (kept)
    ft.set_event("sched:sched_process_fork", True)
    assert w.listened() is True
    ft.set_event("sched:sched_process_fork", False)
    assert w.listened() is False
    ft.enable_disable("sched:sched_process_exec", True, soft=True)  # a trigger's enable_event
    assert w.listened() is True
    ft.enable_disable("sched:sched_process_exec", False, soft=True)
    assert w.listened() is False
    # kmem:kmalloc is a side-band event only where the profile's symbol table
    # names the functions of a fork's kmallocs (sources/forkallocs.py): 6.12's
    # captured kallsyms does, the 6.18 profile (the fake's own table) does not
    # (sched_wakeup is one: a watched task switched in after a sleep wakes first)
    ft.set_event("kmem:kmalloc", True)
    assert w.listened() is (request.node.callspec.params["watches"] == "debian-6.12")


def test_listened_follows_a_uprobe_enable(watches):
    k, w = watches
    ft = k.ftrace
    dyn = dyn_events(ft, stat_path=os.stat)
    dyn.write(b"p:ugrp/uev /bin/sh:0x10\n")
    assert w.listened() is False
    ft.set_event("ugrp:uev", True)
    assert w.listened() is True
    ft.set_event("ugrp:uev", False)
    assert w.listened() is False
