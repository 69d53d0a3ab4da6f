"""What control-plane tools read first, served without the engine's work
(docs/cost.md): every event's ``format`` and ``id`` come from the profile's
text and id, not from an event built (parsed) for the purpose, and say the
same before and after the event is built (enabled, fired)."""

from __future__ import annotations

import os

from fakedebugfs.engine.ftrace.profile import Profile


def test_every_format_and_id_is_the_profiles_before_and_after_the_event_is_built(fake):
    tracing = fake("--workload", "none") / "tracing"
    prof = Profile()
    keys = prof.available_events()
    assert len(keys) > 1000  # the whole catalogue: 2,305 events of 6.18, 1,508 of Debian 6.12
    for key in keys:  # what trace-cmd stream and record read first
        edir = tracing / "events" / key.replace(":", "/")
        assert (edir / "format").read_text() == prof.formats[key], key
        assert int((edir / "id").read_text()) == prof.ids[key], key
    # an event enabled is built from its text: its files say the same
    some = (keys[0], keys[len(keys) // 2], keys[-1], "syscalls:sys_enter_openat", "irq:irq_handler_entry")
    (tracing / "set_event").write_text("\n".join(some) + "\n")
    assert sorted((tracing / "set_event").read_text().split()) == sorted(some)
    for key in some:
        edir = tracing / "events" / key.replace(":", "/")
        assert (edir / "format").read_text() == prof.formats[key], key
        assert int((edir / "id").read_text()) == prof.ids[key], key


def test_a_systems_link_count_and_entries_whichever_is_asked_first(fake):
    """eventfs makes a system's directory in stages (its ``enable`` and
    ``filter``, then its event directories: trace-cmd record writes every
    system's filter): whatever a tool asks first, ``stat`` of the system
    gives ``st_nlink`` 2 + its events, and every event is there."""
    import os

    tracing = fake("--workload", "none") / "tracing"
    prof = Profile()
    by_system: dict = {}
    for key in prof.available_events():
        by_system.setdefault(key.split(":")[0], []).append(key.split(":")[1])
    for system in ("syscalls", "sched", "kmem"):
        sdir = tracing / "events" / system
        if system == "syscalls":
            os.stat(sdir / "filter")  # the files only, first
            assert os.stat(sdir).st_nlink == 2 + len(by_system[system])
            assert os.stat(sdir / by_system[system][0] / "id").st_nlink == 1
        elif system == "sched":
            assert os.stat(sdir).st_nlink == 2 + len(by_system[system])  # before any entry
        else:
            (sdir / "filter").write_text("0\n")
        names = set(os.listdir(sdir))
        assert names == {"enable", "filter", *by_system[system]}, system
        assert os.stat(sdir).st_nlink == 2 + len(by_system[system]), system
        assert (sdir / by_system[system][-1] / "format").read_text() == \
            prof.formats[f"{system}:{by_system[system][-1]}"]


def test_every_ftrace_entry_format_and_id_read_without_building_it(fake):
    """``events/ftrace/<entry>/format`` and ``id`` (trace-cmd record reads
    every one at its start) come from the profile's text and id as an
    event's do: the profile kernel's text where it has the entry, else
    the text the built entry prints."""
    from fakedebugfs.engine.kernel import Kernel

    tracing = fake("--workload", "none") / "tracing"
    built = Kernel().ftrace.events
    prof = Profile()  # the default profile's own entries (6.12's function has no args[])
    names = sorted(os.listdir(tracing / "events" / "ftrace"))
    assert len(names) > 10
    for name in [n for n in names if (tracing / "events" / "ftrace" / n).is_dir()]:
        key = f"ftrace:{name}"
        edir = tracing / "events" / "ftrace" / name
        assert (edir / "format").read_text() == prof.formats.get(key, built[key].format()), key
        if (edir / "id").exists():
            assert int((edir / "id").read_text()) == built[key].id, key
