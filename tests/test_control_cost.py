"""What control-plane tools read first, served without the engine's work
(docs/cost.md): every event's ``format`` and ``id`` come from the profile's
text and id, not from an event built (parsed) for the purpose, and say the
same before and after the event is built (enabled, fired)."""

from __future__ import annotations

from fakedebugfs.engine.ftrace.profile import Profile


def test_every_format_and_id_is_the_profiles_before_and_after_the_event_is_built(fake):
    tracing = fake("--workload", "none") / "tracing"
    prof = Profile()
    keys = prof.available_events()
    assert len(keys) > 2000
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
