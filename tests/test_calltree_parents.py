"""The recorder's parents (python -m fakedebugfs.oracle.calltrees, issue
32): the trees' fifth words come from the ``function`` tracer that ran
beside ``function_graph`` in the Debian 6.12 guest.  The texts below are
excerpts of one such recording, as the guest printed them."""

from __future__ import annotations

from fakedebugfs.engine.ftrace.calltree import calltrees_from_graph, parse_calltrees
from fakedebugfs.oracle.calltree_parents import Parent, graph_parents

# getpid: x64_sys_call jumps to __x64_sys_getpid (not hooked), which jumps
# to __do_sys_getpid: with the graph tracer on, that call's return address
# is return_to_handler
GETPID_GRAPH = """\
  197.674316 |   1)    rec-1472    |               |  /* sys_enter: NR 39 (7fff7b8cef01, 7fff7b8cd0f0, 432c99, 0, 0, 0) */
  197.674317 |   1)    rec-1472    |   2.544 us    |  }
  197.674318 |   1)    rec-1472    |               |  x64_sys_call() {
  197.674321 |   1)    rec-1472    |               |    __do_sys_getpid() {
  197.674324 |   1)    rec-1472    |               |      __task_pid_nr_ns() {
  197.674327 |   1)    rec-1472    |   1.712 us    |        __rcu_read_lock();
  197.674332 |   1)    rec-1472    |   1.832 us    |        __rcu_read_unlock();
  197.674334 |   1)    rec-1472    | + 10.295 us   |      }
  197.674336 |   1)    rec-1472    | + 14.762 us   |    }
  197.674336 |   1)    rec-1472    | + 19.028 us   |  }
  197.674337 |   1)    rec-1472    |               |  syscall_exit_to_user_mode_prepare() {
  197.674339 |   1)    rec-1472    |               |  /* sys_exit: NR 39 = 1472 */
"""
GETPID_FUNCTIONS = """\
             rec-1472    [001] d..1.   197.674312: fpregs_assert_state_consistent+0x4/0x50 <-arch_exit_to_user_mode_prepare.constprop.0+0x16/0xa0
             rec-1472    [001] ...1.   197.674315: syscall_trace_enter+0x4/0x190 <-do_syscall_64+0x14a/0x1b0
             rec-1472    [001] ...1.   197.674319: x64_sys_call+0x4/0x16a0 <-do_syscall_64+0x87/0x1b0
             rec-1472    [001] ...1.   197.674322: __do_sys_getpid+0x4/0x30 <-return_to_handler+0x0/0x50
             rec-1472    [001] ...1.   197.674325: __task_pid_nr_ns+0x4/0xc0 <-__do_sys_getpid+0x1d/0x30
             rec-1472    [001] ...1.   197.674328: __rcu_read_lock+0x4/0x30 <-__task_pid_nr_ns+0x1b/0xc0
             rec-1472    [001] ...1.   197.674333: __rcu_read_unlock+0x4/0x30 <-__task_pid_nr_ns+0x5a/0xc0
             rec-1472    [001] ...1.   197.674339: syscall_exit_to_user_mode_prepare+0x0/0x170 <-syscall_exit_to_user_mode+0x10/0x1b0
"""

# a timer interrupt: the graph leaves out the hard interrupt's calls
# (funcgraph-irqs off), the function tracer prints them with 'h'; the
# softirq's tmigr_handle_remote is a tail call; the last graph call has no
# function line in this excerpt
IRQ_GRAPH = """\
  197.638857 |   1)    rec-1472    |   2.564 us    |        irq_enter_rcu();
  197.640581 |   1)    rec-1472    |               |        handle_softirqs() {
  197.640587 |   1)    rec-1472    |               |          run_timer_softirq() {
  197.640593 |   1)    rec-1472    |               |            tmigr_handle_remote() {
  197.640596 |   1)    rec-1472    |   2.213 us    |              get_jiffies_update();
  197.640603 |   1)    rec-1472    |   1.833 us    |              _raw_spin_lock_irq();
"""
IRQ_FUNCTIONS = """\
             rec-1472    [001] d..2.   197.638858: irq_enter_rcu+0x4/0x70 <-sysvec_apic_timer_interrupt+0x64/0x90
             rec-1472    [001] d.h2.   197.638862: __sysvec_apic_timer_interrupt+0x4/0x120 <-sysvec_apic_timer_interrupt+0x6c/0x90
             rec-1472    [001] d.h2.   197.638868: hrtimer_interrupt+0x4/0x230 <-__sysvec_apic_timer_interrupt+0x58/0x120
             rec-1472    [001] d.h2.   197.638870: _raw_spin_lock_irqsave+0x4/0x50 <-hrtimer_interrupt+0x5a/0x230
             rec-1472    [001] d.h2.   197.639997: lapic_next_event+0x4/0x20 <-clockevents_program_event+0x9a/0x100
             rec-1472    [001] d.h2.   197.640575: irq_exit_rcu+0x4/0x10 <-sysvec_apic_timer_interrupt+0x71/0x90
             rec-1472    [001] d..2.   197.640584: handle_softirqs+0x0/0x2c0 <-__irq_exit_rcu+0x91/0xb0
             rec-1472    [001] ..s2.   197.640590: run_timer_softirq+0x4/0xf0 <-handle_softirqs+0xd0/0x2c0
             rec-1472    [001] ..s2.   197.640594: tmigr_handle_remote+0x4/0x470 <-return_to_handler+0x0/0x50
             rec-1472    [001] ..s2.   197.640597: get_jiffies_update+0x4/0x40 <-tmigr_handle_remote+0xa6/0x470
"""


def test_a_system_calls_tree_with_its_callers_and_tail_call():
    parents, paired, calls = graph_parents(GETPID_GRAPH, GETPID_FUNCTIONS)
    assert (paired, calls) == (6, 6)
    text = calltrees_from_graph(GETPID_GRAPH, parents)
    assert text == ("### raw_syscalls:sys_enter id=39\n"
                    "0 2000 19028 x64_sys_call do_syscall_64+0x87\n"
                    "1 5000 14762 __do_sys_getpid ^\n"
                    "2 8000 10295 __task_pid_nr_ns\n"
                    "3 11000 1712 __rcu_read_lock\n"
                    "3 16000 1832 __rcu_read_unlock\n"
                    "0 21000 0 syscall_exit_to_user_mode_prepare "
                    "syscall_exit_to_user_mode+0x10\n")
    (sel, tree), = parse_calltrees(text)["raw_syscalls:sys_enter"]
    assert tree.callers == {0: "do_syscall_64+0x87", 1: "^",
                            5: "syscall_exit_to_user_mode+0x10"}
    # without the function text the trees are as before: no fifth word
    assert calltrees_from_graph(GETPID_GRAPH).splitlines()[1] == "0 2000 19028 x64_sys_call"


def test_hard_interrupts_are_left_out_and_a_tail_calls_parent_is_its_callers():
    parents, paired, calls = graph_parents(IRQ_GRAPH, IRQ_FUNCTIONS)
    assert (paired, calls) == (5, 6)
    assert [parents.get(i) for i in range(6)] == [
        Parent("sysvec_apic_timer_interrupt+0x64", False),
        Parent("__irq_exit_rcu+0x91", False),
        Parent("handle_softirqs+0xd0", False),
        Parent("handle_softirqs+0xd0", True),  # run_timer_softirq's own
        Parent("tmigr_handle_remote+0xa6", False),
        None]
