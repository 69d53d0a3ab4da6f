"""Several probes on one function (``fakedebugfs/engine/ftrace/kprobe_ftrace.py``):
kprobes at one address run newest first (``add_new_kprobe`` adds each at
the head of the address's list), fprobes after them; the kretprobes'
returns come back oldest first, and each but the newest took its return
address after a newer one had put the trampoline there, printed
``[unknown/kretprobe'd]`` (trace_output.c's ``kretprobed``); compared with
the Debian 6.12 guest.
"""

from __future__ import annotations

import re

from support.kprobe_guest import FIXTURES, needs_kallsyms, run

pytestmark = needs_kallsyms


def test_probes_on_one_function_as_the_guest():
    """fixtures/kprobes/same-address.sh: ``p:a``, ``r:c``, ``p:b``, ``r:d``,
    ``r:e`` and ``f:f`` on ``kernel_clone``, one fork: b, a, f, then c and
    d with the trampoline as return address, then e: the guest's lines;
    then with ``sym-addr`` each address after its symbol (the trampoline's
    too), the text not kept from the first read."""
    out = run((FIXTURES / "same-address.sh").read_text())
    guest = (FIXTURES / "same-address.debian-6.12.out").read_text()
    assert "b: (kernel_clone+0x4/0x430)\na: (kernel_clone" in guest
    assert "c: ([unknown/kretprobe'd] <- kernel_clone)" in guest
    assert "a: (kernel_clone+0x4/0x430 <ffffffff810c7c44>)" in guest
    assert out == guest


def test_kernel_clone_returns_the_child_pid():
    """``r kernel_clone $retval`` at a fork is the child's pid, as the
    fork's ``sched_process_fork`` shows it (the guest: ``arg1=23006`` beside
    ``child_pid=23006``)."""
    script = ("cd /sys/kernel/tracing\n"
              "echo 'r:kc kernel_clone $retval' > kprobe_events\n"
              "echo 1 > events/kprobes/enable\n"
              "echo 1 > events/sched/sched_process_fork/enable\n"
              "(echo forked)\n"
              "echo 0 > events/kprobes/enable\n"
              "echo 0 > events/sched/sched_process_fork/enable\n"
              "cat trace\n"
              "echo > kprobe_events\n")
    out = run(script)
    rets = re.findall(r" kc: \(.* <- kernel_clone\) arg1=(\d+)", out)
    children = re.findall(r" sched_process_fork: .* child_pid=(\d+)", out)
    assert rets and rets == children, out


def test_the_newest_definition_is_listed_first():
    """fixtures/kprobes/event-list.sh: ``available_events`` and the top
    level's ``set_event`` list the synthetic event, then ``k2``, then
    ``k1`` (each definition at the head of the list), before the boot's
    events; an instance made between ``k1`` and ``k2`` lists what came
    after it first, then the boot's events in the kernel list's reverse
    (``sched_switch`` before the module's ``9p`` event, which the top level
    lists first), and ``k1`` last: the guest's lines."""
    out = run((FIXTURES / "event-list.sh").read_text())
    guest = (FIXTURES / "event-list.debian-6.12.out").read_text()
    assert guest.startswith("1:synthetic:mysynth\n2:kprobes:k2\n3:kprobes:k1\n")
    assert guest.endswith("sched:sched_wakeup\n9p:9p_client_req\nkprobes:k1\n")
    assert out == guest
