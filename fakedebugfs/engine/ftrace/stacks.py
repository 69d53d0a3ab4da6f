"""``kernel_stack`` entries: what ``options/stacktrace`` and the
``stacktrace`` trigger record after an event (``__ftrace_trace_stack`` of
kernel/trace/trace.c), and how ``trace`` prints them (``trace_stack_print``
of trace_output.c: ``<stack trace>`` then `` => symbol`` a line).

The fake has no stack to walk: each event gets the call chain a 6.18
x86_64 kernel shows for it (the tracing frames skipped, innermost first,
at most ``FTRACE_STACK_ENTRIES`` = 8 as the format's ``caller[8]``), by
event, else by system, else the system-call path.  The functions are in
the fake kallsyms (:data:`STACK_FUNCTIONS` appended to it), so every view
symbolises them.
"""

from __future__ import annotations

FTRACE_STACK_ENTRIES = 8
ULONG_MAX = (1 << 64) - 1
FTRACE_TRAMPOLINE_MARKER = 0x7FFFFFFF  # (unsigned long) INT_MAX: a frame in an ftrace trampoline

_SYSCALL = ("do_syscall_64", "entry_SYSCALL_64_after_hwframe")
_TICK = ("__hrtimer_run_queues", "hrtimer_interrupt", "__sysvec_apic_timer_interrupt",
         "sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt")
_SOFTIRQ = ("handle_softirqs", "irq_exit_rcu", "sysvec_apic_timer_interrupt",
            "asm_sysvec_apic_timer_interrupt")
_WORKER = ("process_one_work", "worker_thread", "kthread", "ret_from_fork", "ret_from_fork_asm")

# innermost first, as trace_stack_print lists them
STACKS = {
    "sched:sched_switch": ("__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep",
                           "__x64_sys_clock_nanosleep", *_SYSCALL),
    "sched:sched_waking": ("try_to_wake_up", "hrtimer_wakeup", *_TICK),
    "sched:sched_wakeup": ("ttwu_do_activate", "try_to_wake_up", "hrtimer_wakeup", *_TICK),
    "sched:sched_wakeup_new": ("wake_up_new_task", "kernel_clone", "__do_sys_clone",
                               *_SYSCALL),
    "sched:sched_migrate_task": ("set_task_cpu", "try_to_wake_up", "hrtimer_wakeup", *_TICK),
    "sched:sched_stat_runtime": ("update_curr", "task_tick_fair", "sched_tick",
                                 "update_process_times", "tick_nohz_handler", *_TICK[:2]),
    "sched:sched_process_fork": ("copy_process", "kernel_clone", "__do_sys_clone", *_SYSCALL),
    "sched:sched_process_exec": ("bprm_execve", "do_execveat_common", "__x64_sys_execve",
                                 *_SYSCALL),
    "sched:sched_process_exit": ("do_exit", "do_group_exit", "__x64_sys_exit_group",
                                 *_SYSCALL),
    "sched:sched_process_free": ("delayed_put_task_struct", "rcu_core", "handle_softirqs",
                                 "irq_exit_rcu", "sysvec_apic_timer_interrupt"),
    "irq": ("__handle_irq_event_percpu", "handle_irq_event", "handle_edge_irq",
            "__common_interrupt", "common_interrupt", "asm_common_interrupt"),
    "irq:softirq_raise": ("__raise_softirq_irqoff", "sched_tick", "update_process_times",
                          "tick_nohz_handler", *_TICK[:2]),
    "irq:softirq_entry": _SOFTIRQ,
    "irq:softirq_exit": _SOFTIRQ,
    "timer": ("__hrtimer_run_queues", "hrtimer_interrupt", "__sysvec_apic_timer_interrupt",
              "sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt"),
    "timer:hrtimer_start": ("hrtimer_start_range_ns", "do_nanosleep", "hrtimer_nanosleep",
                            "__x64_sys_clock_nanosleep", *_SYSCALL),
    "signal": ("__send_signal_locked", "do_send_sig_info", "kill_pid_info",
               "__x64_sys_kill", *_SYSCALL),
    "signal:signal_deliver": ("get_signal", "arch_do_signal_or_restart",
                              "syscall_exit_to_user_mode", *_SYSCALL),
    "block": ("blk_mq_start_request", "virtio_queue_rq", "blk_mq_dispatch_rq_list",
              "__blk_mq_sched_dispatch_requests", "blk_mq_run_work_fn", *_WORKER[:3]),
    "block:block_rq_complete": ("blk_update_request", "blk_mq_end_request", "virtblk_done",
                                "vring_interrupt", "__handle_irq_event_percpu",
                                "handle_irq_event", "handle_edge_irq", "common_interrupt"),
    "workqueue": ("__queue_work", "queue_work_on", "tty_flip_buffer_push", "pty_write",
                  "n_tty_write", "file_tty_write", "vfs_write", "ksys_write"),
    "workqueue:workqueue_execute_start": _WORKER,
    "workqueue:workqueue_execute_end": _WORKER,
    "kmem": ("__kmalloc_noprof", "do_sys_openat2", "__x64_sys_openat", *_SYSCALL),
    "kmem:mm_page_alloc": ("__alloc_frozen_pages_noprof", "alloc_pages_mpol",
                           "vma_alloc_folio_noprof", "do_anonymous_page", "__handle_mm_fault",
                           "handle_mm_fault", "do_user_addr_fault", "exc_page_fault"),
    "raw_syscalls": ("syscall_trace_enter", *_SYSCALL),
    "syscalls": ("syscall_trace_enter", *_SYSCALL),
}
DEFAULT_STACK = ("trace_event_raw_event_fake", *_SYSCALL)

# timer and work callbacks the default workload names (``%ps`` in their events)
CALLBACKS = ("tick_nohz_handler", "process_timeout", "delayed_work_timer_fn", "vmstat_update",
             "flush_to_ldisc", "blk_mq_run_work_fn")
# the functions above, for the fake kallsyms (name, size)
STACK_FUNCTIONS = tuple((name, 0x100 + 0x40 * (i % 7)) for i, name in enumerate(dict.fromkeys(
    f for chain in (*STACKS.values(), DEFAULT_STACK, CALLBACKS) for f in chain)))


def stack_for(key: str) -> tuple:
    """The call chain recorded after event *key* (``system:name``)."""
    chain = STACKS.get(key) or STACKS.get(key.split(":", 1)[0]) or DEFAULT_STACK
    return chain[:FTRACE_STACK_ENTRIES]


def stack_payload(ev, kallsyms, pid: int, key: str) -> bytes:
    """A ``struct stack_entry`` (*ev*: the ``ftrace:kernel_stack`` event) for
    *key*: ``size`` = the number of callers, the callers' return addresses
    (a few bytes into each function), the entry as long as its callers."""
    addrs = []
    for i, name in enumerate(stack_for(key)):
        try:
            addrs.append(kallsyms.address(name, 0x1B + 0x2C * (i % 5)))
        except ValueError:  # a replayed kallsyms without the function
            continue
    caller = b"".join(a.to_bytes(8, "little") for a in addrs)
    payload = ev.pack(pid, {"size": len(addrs), "caller": caller.ljust(64, b"\0")})
    return payload[:16 + 8 * len(addrs)]


def show_stack(rec, out) -> str:
    """``trace_stack_print``: ``<stack trace>`` and `` => func`` per caller,
    up to the end of the entry or a ``ULONG_MAX``."""
    raw = rec.get("caller") or b""
    if isinstance(raw, (list, tuple)):
        raw = b"".join(int(a).to_bytes(8, "little") for a in raw)
    n = min(int(rec.get("size") or 0), len(raw) // 8)
    lines = ["<stack trace>"]
    for i in range(n):
        addr = int.from_bytes(raw[8 * i:8 * i + 8], "little")
        if addr == ULONG_MAX:
            break
        if addr == FTRACE_TRAMPOLINE_MARKER:  # the function tracer's trampoline
            lines.append(" => [FTRACE TRAMPOLINE]")
            continue
        lines.append(f" => {out.sym(addr)}")
    return "\n".join(lines)


__all__ = ["STACKS", "STACK_FUNCTIONS", "show_stack", "stack_for", "stack_payload"]
