"""Kernel probes on the calls an instance's ``mkdir`` makes
(``fakedebugfs/engine/ftrace/instance_calls.py``): ``tracefs_create_dir``
with the instance's name, ``eventfs_create_events_dir("events")``, one
``eventfs_create_dir`` for each system and each event of the kernel's
event list in its order (the profile's ``ftrace_events``, the events
defined since first), then ``options``, ``per_cpu`` and each ``cpuN``,
compared with the Debian 6.12 guest.
"""

from __future__ import annotations

from support import kprobe_guest
from support.kprobe_guest import FIXTURES, needs_kallsyms

pytestmark = needs_kallsyms


def run(script: str) -> str:
    # the guest's 4 CPUs: a cpuN directory each
    return kprobe_guest.run(script, options=("--cpus", "4"))


def test_instance_mkdir_calls_as_the_guest():
    """fixtures/kprobes/instance-mkdir.sh: kprobes on ``eventfs_create_dir``,
    ``tracefs_create_dir`` and ``eventfs_create_events_dir`` fetching the
    name (``+0(%di):string``) and size (``%cx``) see, for ``mkdir
    instances/mk``, the guest's 1,649 hits in the guest's order (the
    instance's name only as ``tracefs_create_dir``'s), all in the mkdir
    task; ``kprobe_profile`` counts them; the function tracer shows the
    guest's callers."""
    got = run((FIXTURES / "instance-mkdir.sh").read_text())
    guest = (FIXTURES / "instance-mkdir.debian-6.12.out").read_text()
    assert guest.startswith("1641\ntcd s=\"mk\"\neced s=\"events\" sz=0x3\n")
    assert "<-trace_array_create_dir+0x17/0xb0" in guest
    assert got == guest


def test_only_enabled_probes_hit():
    """With the probe on ``eventfs_create_dir`` defined but disabled a
    mkdir hits nothing there, while an enabled one on ``tracefs_create_dir``
    beside it counts the instance's 7 directories (the instance, options,
    per_cpu, 4 CPUs')."""
    out = run("cd /sys/kernel/tracing\n"
              "echo 'p:ecd eventfs_create_dir +0(%di):string' > kprobe_events\n"
              "echo 'p:tcd tracefs_create_dir +0(%di):string' >> kprobe_events\n"
              "mkdir instances/a\n"
              "echo 1 > events/kprobes/tcd/enable\n"
              "mkdir instances/b\n"
              "echo 0 > events/kprobes/tcd/enable\n"
              "rmdir instances/a instances/b\n"
              "cat kprobe_profile\n"
              "echo > kprobe_events\n")
    counts = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert counts == {"ecd": ["0", "0"], "tcd": ["7", "0"]}
