"""Kernel probes that read memory at a hit the fake's own tracefs code
makes: adding an event calls ``eventfs_create_dir(name, ...)`` for its
directory (and its system's, when new) in every trace array, and a kprobe
there reads the name through ``+0(%di)`` as ``char``, ``char[4]``,
``string``, numbers and bitfields (``fakedebugfs/engine/ftrace/eventfs_calls.py``,
``probe_fetch.read_memory``), compared with the Debian 6.12 guest.
"""

from __future__ import annotations

from support.kprobe_guest import FIXTURES, needs_kallsyms, run

pytestmark = needs_kallsyms


def test_eventfs_create_dir_arguments_as_the_guest():
    """fixtures/kprobes/eventfs-args.sh: a probe on ``eventfs_create_dir``
    fetching its name as ``char``, ``char[4]`` (the NULs after a short name
    included), ``string`` at +0 and +1, ``u32``, ``x16``, ``s8``, a
    bitfield, and its ``size`` (``%cx``: 6 files for an event, 2 for a
    system); then an event in an existing group, one in a new group and a
    long name, with an instance beside the top level: the same hits, in the
    same order, as the guest's; the function tracer (``sym-offset``) sees
    the same calls with the guest's callers (``event_create_dir+0x1c4``
    for a system, ``+0xc4`` for an event)."""
    got = run((FIXTURES / "eventfs-args.sh").read_text())
    guest = (FIXTURES / "eventfs-args.debian-6.12.out").read_text()
    assert "s=\"ng\" s1=\"g\" sz=0x2" in guest
    assert "<-event_create_dir+0x1c4/0x3d0" in guest
    assert got == guest


def test_the_writer_makes_the_call():
    """The hit is the writer's (the kernel runs the write in its task):
    ``bash-PID`` of the shell whose ``echo`` defined the event; with the
    probe disabled, a definition hits nothing."""
    out = run("cd /sys/kernel/tracing\n"
              "echo 'p:testprobe eventfs_create_dir +0(%di):string' > kprobe_events\n"
              "echo 'p:quiet kernel_clone' >> kprobe_events\n"
              "echo 1 > events/kprobes/testprobe/enable\n"
              "echo 'p:loud kernel_clone' >> kprobe_events\n"
              "echo 0 > events/kprobes/testprobe/enable\n"
              "echo \"me=bash-$$\"\n"
              "grep testprobe: trace\n"
              "echo > kprobe_events\n")
    me = out.splitlines()[0].partition("=")[2]
    hits = [ln for ln in out.splitlines()[1:] if "testprobe:" in ln]
    assert len(hits) == 1, out
    assert hits[0].split()[0] == me
    assert hits[0].endswith('(eventfs_create_dir+0x4/0x160) arg1="loud"'), hits
