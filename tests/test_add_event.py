"""``Ftrace.add_event`` (the kernel's ``trace_add_event_call``): an event
type added while mounted (a replay's recording, ``define``) appears in the
top-level ``events/`` and in every instance's, those made before it and
those made after, and can be enabled and recorded there.

Real FUSE mounts (:class:`fakedebugfs.Fake`) read with plain file I/O."""

from __future__ import annotations

import dataclasses
import errno
import os
import re
from pathlib import Path

import pytest

from fakedebugfs import Fake
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.sources.replay import read_tracedat

FIXTURES = Path(__file__).parent.parent / "fixtures" / "replay"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="FUSE mounts need root")
SYSTEM, NAME = "fdtest", "kfree_copy"  # kmem:kfree under a name no kernel has


def renamed_capture(dat: Path, dest: Path) -> int:
    """The top buffer of *dat* as a raw capture directory (``cpuN`` pages,
    ``events/`` formats, ``saved_cmdlines``) in which ``kmem/kfree`` is
    ``fdtest/kfree_copy``: an event the fake does not have, with the
    recording's ids, so its pages hold events of it.  Returns how many."""
    rec = read_tracedat(dat)
    (dest / "events").mkdir(parents=True)
    (dest / "events" / "header_page").write_text(rec.header_page)
    (dest / "events" / "header_event").write_text(rec.header_event)
    for fmt in rec.formats.values():
        system, name, text = fmt.system, fmt.name, fmt.text
        if fmt.key == "kmem:kfree":
            system, name = SYSTEM, NAME
            text = re.sub(r"^name: kfree$", f"name: {NAME}", text, count=1, flags=re.M)
        d = dest / "events" / system / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "format").write_text(text)
    buf = rec.buffer("")
    for cpu, cd in buf.cpus.items():
        (dest / f"cpu{cpu}").write_bytes(bytes(cd.data))
    (dest / "saved_cmdlines").write_text("".join(f"{p} {c}\n" for p, c in rec.cmdlines.items()))
    return sum(1 for cpu in buf.cpus for e in buf.cpu_events(cpu)
               if not e.lost and e.key == "kmem:kfree")


def event_lines(trace: Path) -> list[str]:
    return [ln for ln in trace.read_text().splitlines() if not ln.startswith("#")]


@needs_root
def test_replay_adds_its_new_events_to_an_existing_instance(tmp_path):
    """A fake with ``instances/x`` (its ``events/`` already looked at), then a
    replay of a recording with an event the fake lacks: the event is in
    ``instances/x/events/`` too, enabled there it records the replay (``--into
    x``) and the top level does not; an instance made afterwards has it."""
    cap = tmp_path / "cap"
    count = renamed_capture(FIXTURES / "default-v7-zstd.dat", cap)
    assert count > 0
    with Fake(cpus=2, clock="virtual", workload="none") as fk:
        inst = fk.tracing / "instances" / "x"
        inst.mkdir()
        assert SYSTEM not in os.listdir(inst / "events")  # its events/ made before the replay
        st = fk.replay(cap, into="x")
        assert f"{SYSTEM}:{NAME}" in st["created"] and st["committed"] == 0  # nothing enabled
        edir = inst / "events" / SYSTEM / NAME
        assert SYSTEM in os.listdir(inst / "events") and NAME in os.listdir(inst / "events" / SYSTEM)
        assert sorted(os.listdir(edir)) == sorted(
            os.listdir(fk.tracing / "events" / SYSTEM / NAME))
        assert (edir / "format").read_text() == \
            (fk.tracing / "events" / SYSTEM / NAME / "format").read_text()
        assert f"{SYSTEM}:{NAME}\n" in (fk.tracing / "available_events").read_text()
        (edir / "enable").write_text("1")
        assert (edir / "enable").read_text() == "1\n"
        assert (fk.tracing / "events" / SYSTEM / NAME / "enable").read_text() == "0\n"
        st = fk.replay(cap, into="x")
        lines = event_lines(inst / "trace")
        assert st["committed"] == len(lines) == count
        assert all(f" {NAME}: " in ln for ln in lines)
        assert event_lines(fk.tracing / "trace") == []
        later = fk.tracing / "instances" / "y"
        later.mkdir()
        assert NAME in os.listdir(later / "events" / SYSTEM)
        later.rmdir()
        inst.rmdir()


@needs_root
def test_define_adds_the_event_to_every_instance(tmp_path):
    """``define`` with an instance: the event is in its ``events/`` too and,
    enabled there, records an injected event into that instance only."""
    with Fake(cpus=2, clock="virtual", workload="none") as fk:
        inst = fk.tracing / "instances" / "x"
        inst.mkdir()
        assert "demo" not in os.listdir(inst / "events")
        fk.define("demo", "ping", ["int n", "__string msg"])
        (inst / "events" / "demo" / "ping" / "enable").write_text("1")
        fk.emit("demo:ping", n=7, msg="hi", cpu=1, pid=42, comm="app")
        lines = event_lines(inst / "trace")
        assert len(lines) == 1 and re.search(r"ping: n=7 msg=hi$", lines[0]), lines
        assert event_lines(fk.tracing / "trace") == []
        inst.rmdir()


def test_add_event_refuses_a_taken_name_or_id():
    """EEXIST for a name or an id already registered, EINVAL for the
    tracer's own ``ftrace`` system; nothing is changed by a refusal."""
    ft = Kernel(cpus=1).ftrace
    ev = ft.define_event("demo", "one", ["int a"])
    taken = ft.events["sched:sched_switch"]
    for bad, code in ((taken, errno.EEXIST), (ev, errno.EEXIST)):
        with pytest.raises(OSError) as err:
            ft.add_event(bad)
        assert err.value.errno == code
    with pytest.raises(OSError) as err:
        ft.add_event(dataclasses.replace(ev, name="two"))  # a free name, a taken id
    assert err.value.errno == errno.EEXIST
    assert "demo:two" not in ft.events
    from fakedebugfs.engine.ftrace.trigger import KERNEL_STACK

    with pytest.raises(OSError) as err:
        ft.add_event(KERNEL_STACK)
    assert err.value.errno == errno.EINVAL


def test_remove_event_leaves_every_trace_array():
    """``Ftrace.remove_event`` (``trace_remove_event_call``): EBUSY while an
    instance has the event enabled, nothing changed; once disabled the event
    leaves the registry, every array's probes and filters and the engine,
    and each array's ``on_event_removed`` is told; ENOENT after."""
    ft = Kernel(cpus=1).ftrace
    inst = ft.new_instance("x")
    ev = ft.define_event("demo", "gone", ["int a"])
    told = []
    for tr in ft.arrays():
        tr.on_event_removed.append(lambda key, tr=tr: told.append((tr.name, key)))
    inst.set_filter([ev.key], "a > 1")
    inst.set_event(ev.key, True)
    with pytest.raises(OSError) as err:
        ft.remove_event(ev.key)
    assert err.value.errno == errno.EBUSY and ev.key in ft.events and told == []
    inst.set_event(ev.key, False)
    ft.remove_event(ev.key)
    assert ev.key not in ft.events and ev.id not in ft.by_id
    assert ev.key not in ft.engine.tracepoints and ev.key not in ft.event_keys()
    assert ev.key not in inst.probes and ev.key not in inst.filters
    assert sorted(told) == [("", ev.key), ("x", ev.key)]
    with pytest.raises(OSError) as err:
        ft.remove_event(ev.key)
    assert err.value.errno == errno.ENOENT
    again = ft.define_event("demo", "gone", ["long a"])  # the name is free again
    assert again.key in inst.probes
