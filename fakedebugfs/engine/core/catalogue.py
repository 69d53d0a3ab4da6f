"""The tracepoints of the simulated kernel, with their arguments in order.

Names and argument names are the kernel's (include/trace/events/kmem.h,
sched.h, syscalls).  The page events also carry the call site and the page's
virtual address, which the 2008-2009 views (kmemtrace, ktrace's
``kmemtrace_alloc``) report and today's tracefs format leaves out.
"""

KMEM_ALLOC_ARGS = ("call_site", "ptr", "bytes_req", "bytes_alloc", "gfp_flags", "node")

TRACEPOINTS = (
    ("kmem", "kmalloc", KMEM_ALLOC_ARGS),
    ("kmem", "kmem_cache_alloc", KMEM_ALLOC_ARGS + ("name",)),
    ("kmem", "kfree", ("call_site", "ptr")),
    ("kmem", "kmem_cache_free", ("call_site", "ptr", "name")),
    ("kmem", "mm_page_alloc", ("pfn", "order", "gfp_flags", "migratetype", "call_site", "ptr")),
    ("kmem", "mm_page_free", ("pfn", "order", "call_site", "ptr")),
    ("raw_syscalls", "sys_enter", ("id", "args")),
    ("raw_syscalls", "sys_exit", ("id", "ret")),
    ("sched", "sched_switch",
     ("prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid", "next_prio")),
    ("sched", "sched_process_fork", ("parent_comm", "parent_pid", "child_comm", "child_pid")),
    ("sched", "sched_process_exit", ("comm", "pid", "prio")),
    ("sched", "sched_process_exec", ("filename", "pid", "old_pid")),
)
