"""The default workload: a deterministic, realistic mix of what a running
kernel fires, on the tracepoints tools use most.

Tasks run on the CPUs and do what a busy machine does; each activity is a
short sequence of events in the order the kernel fires them:

* system calls: ``raw_syscalls:sys_enter``, ``syscalls:sys_enter_<call>``
  (the same number and arguments), the allocations the call makes
  (kmalloc, named caches, pages), ``syscalls:sys_exit_<call>`` and
  ``raw_syscalls:sys_exit`` (the same return value);
* the scheduler: a task waking another (``sched_waking``, possibly
  ``sched_migrate_task``, ``sched_wakeup`` on the target CPU), then the
  switch to it there; blocking (``prev_state`` S or D) and preemption
  (R); ``sched_stat_runtime`` from the tick; a task is switched in only
  after its wakeup, and switched out only on the CPU it runs on;
* processes: ``sched_process_fork`` + ``sched_wakeup_new``, ``exec``
  (the comm becomes the basename of the program's path, as
  ``__set_task_comm(kbasename(filename))``), ``exit`` (+ SIGCHLD to the
  parent, switch out as a zombie, ``sched_process_free`` later);
* interrupts: the timer tick (``hrtimer_expire_entry``/``exit``,
  ``softirq_raise``/``entry``/``exit``, ``hrtimer_start``), a disk
  interrupt completing a block request (``irq_handler_entry``/``exit``,
  ``block_rq_complete``, the BLOCK softirq), timer-wheel timers;
* block I/O (``block_rq_insert``/``issue`` from a task or a kworker),
  workqueues (``queue_work``/``activate_work`` in a task, then the kworker
  woken, switched in, ``execute_start``/``end``), signals (``signal_generate``
  and ``signal_deliver``).

Pids, comms and CPUs are consistent across all of them (kernel threads keep
names such as ``kworker/u4:2`` whole; only exec'd programs take a path's
basename).  Every step fires exactly one tracepoint, so ``--count N``
means N events.  User events (``ktrace.<module>:<name>``) get values
generated from their format strings.  The same seed gives the same
sequence and, with the virtual clock, the same timestamps.
"""

from __future__ import annotations

import collections
import random

from fakedebugfs.engine.core.gfp import GFP_ATOMIC, GFP_KERNEL, GFP_KERNEL_ACCOUNT
from fakedebugfs.engine.core.kallsyms import FUNCTIONS
from fakedebugfs.engine.core.slab import CACHES, PAGE_OFFSET, SLAB_BASE, kmalloc_size
from fakedebugfs.engine.ktrace.format import parse_format

HRTIMER_BASE = 0xFFFF88807DC1E000
# the slab caches it allocates from, with the function that does (call sites)
CACHE_SITES = (("names_cache", "getname_flags"), ("filp", "alloc_empty_file"),
               ("dentry", "__d_alloc"), ("vm_area_struct", "vm_area_alloc"),
               ("skbuff_head_cache", "__alloc_skb"))
# programs tasks exec (comm: the path's basename) and kernel threads (names kept whole)
PROGRAMS = ("/usr/bin/bash", "/usr/sbin/sshd", "/usr/bin/find", "/usr/lib/gcc/cc1",
            "/usr/bin/python3", "/usr/bin/sleep", "/usr/bin/cat", "/usr/bin/make")
KTHREADS = ("kworker/u4:2", "kworker/0:1", "kworker/1:0", "ksoftirqd/0", "rcu_preempt")
COMMS = tuple(p.rsplit("/", 1)[1] for p in PROGRAMS) + KTHREADS  # every comm it uses
# x86_64 system calls: (nr, name)
SYSCALLS = ((0, "read"), (1, "write"), (3, "close"), (9, "mmap"), (12, "brk"),
            (202, "futex"), (228, "clock_gettime"), (257, "openat"), (262, "newfstatat"),
            (39, "getpid"), (232, "epoll_wait"))
SIGCHLD, SIGALRM = 17, 14
NET_RX, TIMER, BLOCK, SCHED, RCU = 3, 1, 4, 7, 9  # softirq vectors
DISK_IRQ, DISK_NAME = 24, "virtio1-req.0"
DEV_VDA = (253 << 20) | 0  # MKDEV(253, 0)
WORK_FUNCS = ("vmstat_update", "flush_to_ldisc", "blk_mq_run_work_fn")
PRIO = 120
LIVE_MAX = 4096  # allocations alive at once (all CPUs)




class Task:
    """``struct task_struct`` as the workload tracks it."""

    __slots__ = ("pid", "comm", "cpu", "state", "parent", "kthread")

    def __init__(self, pid, comm, cpu, parent=0, kthread=False):
        self.pid, self.comm, self.cpu, self.parent = pid, comm, cpu, parent
        self.state = "R"  # R runnable/running, S sleeping, Z zombie
        self.kthread = kthread


class SyntheticWorkload:
    name = "default"
    # activity: weight
    ACTIVITIES = (("syscall", 34), ("tick", 10), ("wakeup", 16), ("block_switch", 10),
                  ("preempt", 5), ("kmem", 6), ("disk", 4), ("work", 4), ("timer", 3),
                  ("proc", 4), ("signal", 2), ("user", 2))
    MIN_TASKS, MAX_TASKS = 6, 24  # user tasks alive: fork below, exit above

    def __init__(self, kernel, seed: int = 0, count: int | None = None):
        self.engine = kernel.engine
        self.rng = random.Random(seed)
        self.remaining = count
        self.emitted = 0
        self.alloc_sites = len(FUNCTIONS)  # call sites: the allocating functions
        self.queue: collections.deque = collections.deque()
        self.tasks: dict[int, Task] = {}
        self.next_pid = 1000
        ncpu = self.engine.nr_cpus
        self.kworkers = [self._task(f"kworker/{c}:1", c, kthread=True) for c in range(ncpu)]
        self._task("kworker/u4:2", 0, kthread=True)
        self.current = [self._task(self.rng.choice(COMMS[:8]), c) for c in range(ncpu)]
        for i in range(self.MIN_TASKS):
            self.tasks[self._task(self.rng.choice(COMMS[:8]), i % ncpu)].state = "S"
        self.in_flight: list[tuple] = []  # block requests issued, not completed
        self.zombies: list[int] = []
        self.live: list[list[tuple]] = [[] for _ in range(ncpu)]
        self.next_ptr = SLAB_BASE
        self.next_pfn = 0x100000
        self.next_sector = 2048
        names, weights = zip(*self.ACTIVITIES)
        self.activities = [getattr(self, "_" + n) for n in names]
        self.weights = weights

    @property
    def done(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    # --- tasks ---------------------------------------------------------------

    def _task(self, comm: str, cpu: int, parent: int = 0, kthread: bool = False) -> int:
        pid = self.next_pid
        self.next_pid += 1
        self.tasks[pid] = Task(pid, comm, cpu, parent, kthread)
        self.engine.set_comm(pid, comm)
        return pid

    def _comm(self, pid: int) -> str:
        return self.tasks[pid].comm if pid in self.tasks else self.engine.comms.get(pid, "")

    # --- the queue: one event per step ----------------------------------------

    def run(self, budget: int) -> int:
        """Fire up to *budget* events; returns how many were fired."""
        if self.remaining is not None:
            budget = min(budget, self.remaining)
        rng, queue = self.rng, self.queue
        advance = self.engine.clock.advance
        tps = self.engine.tracepoints
        emit = self.engine.emit
        fired = 0
        while fired < budget:
            while not queue:
                cpu = rng.randrange(self.engine.nr_cpus)
                rng.choices(self.activities, self.weights)[0](cpu)
            cpu, pid, key, values = queue.popleft()
            if key is None:  # exec: the new comm, set before its event fires
                self.engine.set_comm(pid, values)
                continue
            emit(tps[key], cpu, pid, values)
            advance(rng.randint(200, 4000))
            fired += 1
        self.emitted += budget
        if self.remaining is not None:
            self.remaining -= budget
        return budget

    def _ev(self, cpu: int, pid: int, key: str, values) -> None:
        """Queue one event; *values* by name become the tracepoint's
        arguments in order (missing ones 0), as every probe expects them."""
        if isinstance(values, dict):
            args = self.engine.tracepoints[key].args
            values = tuple(values.get(a, 0) for a in args)
        self.queue.append((cpu, pid, key, values))

    # --- system calls ----------------------------------------------------------

    def _syscall(self, cpu):
        pid = self.current[cpu]
        if self.tasks[pid].kthread:  # a kernel thread makes no system call: it sleeps
            return self._block_switch(cpu)
        nr, name = self.rng.choice(SYSCALLS)
        args = self._args(name)
        self._ev(cpu, pid, "raw_syscalls:sys_enter", (nr, args))
        key = f"syscalls:sys_enter_{name}"
        nargs = len(self.engine.tracepoints[key].args) - 1  # after __syscall_nr
        self._ev(cpu, pid, key, (nr, *args[:nargs]))
        if name == "openat":
            self._cache(cpu, "names_cache")
            self._cache(cpu, "filp")
            self._free(cpu, "names_cache")
        elif name in ("mmap", "brk"):
            self._cache(cpu, "vm_area_struct")
        elif name == "read" and self.rng.random() < 0.3:
            self._kmalloc(cpu)
        elif name == "close":
            self._free(cpu, "filp")
        ret = self._ret(name, args)
        self._ev(cpu, pid, f"syscalls:sys_exit_{name}", {"__syscall_nr": nr, "ret": ret})
        self._ev(cpu, pid, "raw_syscalls:sys_exit", (nr, ret))

    def _args(self, name: str) -> tuple:
        r = self.rng
        user = 0x7FFD00000000 + r.randrange(0, 1 << 24, 8)
        if name in ("read", "write"):
            return (r.randrange(3, 12), user, r.choice((1, 8, 512, 4096, 65536)), 0, 0, 0)
        if name == "openat":
            return (0xFFFFFF9C, user, r.choice((0, 0x80000, 0x241)), r.choice((0, 0o644)), 0, 0)
        if name == "close":
            return (r.randrange(3, 12), 0, 0, 0, 0, 0)
        if name == "futex":
            return (user, 0x81, 1, 0, 0, 0)
        return tuple(r.getrandbits(16) for _ in range(6))

    def _ret(self, name: str, args: tuple) -> int:
        r = self.rng
        if name in ("read", "write"):
            return r.choice((args[2], args[2], 0, -11))
        if name == "openat":
            return r.choice((3, 4, 5, -2))
        if name in ("mmap", "brk"):
            return 0x7F0000000000 + r.randrange(0, 1 << 30, 4096)
        if name == "getpid":
            return 0
        return r.choice((0, 0, 1, -11))

    # --- memory ------------------------------------------------------------------

    def _ptr(self, size: int) -> int:
        ptr = self.next_ptr
        self.next_ptr += max(8, size)
        return ptr

    def _addr(self, name: str, offset: int = 0) -> int:
        """Address in function *name* (a replayed kallsyms may lack it:
        then the first symbol's)."""
        ks = self.engine.kallsyms
        try:
            return ks.address(name, offset)
        except ValueError:
            return ks.addrs[0] + offset if ks.addrs else 0

    def _call_site(self) -> int:
        ks = self.engine.kallsyms
        i = self.rng.randrange(min(self.alloc_sites, len(ks.names)))
        return ks.addrs[i] + self.rng.randrange(ks.sizes[i]) // 4 * 4

    def _kmem(self, cpu):
        r = self.rng.random()
        if sum(map(len, self.live)) > LIVE_MAX:  # memory comes back, as on a real machine
            r = 0.5
        if r < 0.4:
            self._kmalloc(cpu)
        elif r < 0.8:
            self._free(cpu, None)
        else:
            self._page(cpu)

    def _kmalloc(self, cpu):
        req = self.rng.choice((8, 24, 40, 64, 100, 192, 240, 272, 512, 768, 992, 1304, 4096))
        alloc = kmalloc_size(req)
        site, ptr = self._call_site(), self._ptr(alloc)
        gfp = self.rng.choice((GFP_KERNEL, GFP_KERNEL, GFP_ATOMIC, GFP_KERNEL_ACCOUNT))
        self.live[cpu].append(("kfree", site, ptr))
        self._ev(cpu, self.current[cpu], "kmem:kmalloc", (site, ptr, req, alloc, gfp, -1))

    def _cache(self, cpu, name=None):
        cache = next((c for c in CACHE_SITES if c[0] == name), None) or self.rng.choice(CACHE_SITES)
        name, fn = cache
        object_size, size = CACHES[name]
        site = self._addr(fn, self.rng.randrange(8, 64))
        ptr = self._ptr(size)
        self.live[cpu].append(("kmem_cache_free", site, ptr, name))
        self._ev(cpu, self.current[cpu], "kmem:kmem_cache_alloc",
                 (site, ptr, object_size, size, GFP_KERNEL, -1, name))

    def _page(self, cpu):
        order = self.rng.choice((0, 0, 0, 1, 2))
        pfn = self.next_pfn
        self.next_pfn += 1 << order
        site = self._addr("do_anonymous_page", 0x40)
        ptr = PAGE_OFFSET + (pfn << 12)
        self.live[cpu].append(("mm_page_free", pfn, order, site, ptr))
        self._ev(cpu, self.current[cpu], "kmem:mm_page_alloc", (pfn, order, GFP_KERNEL, 1, site, ptr))

    def _free(self, cpu, cache):
        """Free something this or another CPU allocated (of *cache* if given)."""
        live = self.live[self.rng.randrange(len(self.live))]
        start = max(0, len(live) - 64)  # among the recent ones
        idx = [i for i in range(start, len(live)) if cache is None or
               (live[i][0] == "kmem_cache_free" and live[i][3] == cache)]
        if not idx:
            return None if cache else self._kmalloc(cpu)
        item = live.pop(self.rng.choice(idx))
        pid = self.current[cpu]
        if item[0] == "kfree":
            self._ev(cpu, pid, "kmem:kfree", (self._call_site(), item[2]))
        elif item[0] == "kmem_cache_free":
            self._ev(cpu, pid, "kmem:kmem_cache_free", (self._call_site(), item[2], item[3]))
        else:
            self._ev(cpu, pid, "kmem:mm_page_free", item[1:])
        return None

    # --- the scheduler ------------------------------------------------------------

    def _switch(self, cpu, nxt: int, state: int) -> None:
        """``__schedule`` on *cpu*: the current task out (*state*: 0 R, 1 S,
        2 D, 0x20 Z), *nxt* (runnable) in."""
        prev = self.current[cpu]
        p, n = self.tasks[prev], self.tasks[nxt]
        self._ev(cpu, prev, "sched:sched_switch",
                 (p.comm, prev, PRIO, state, n.comm, nxt, PRIO))
        if state:
            p.state = "Z" if state == 0x20 else "S"
        n.cpu = cpu
        self.current[cpu] = nxt

    def _wake(self, cpu, pid: int, target: int, new: bool = False) -> None:
        """``try_to_wake_up`` from *cpu* of *pid*, placed on *target*."""
        t = self.tasks[pid]
        waker = self.current[cpu]
        vals = {"comm": t.comm, "pid": pid, "prio": PRIO, "target_cpu": target}
        if new:
            self._ev(cpu, waker, "sched:sched_wakeup_new", vals)
        else:
            self._ev(cpu, waker, "sched:sched_waking", vals)
            if t.cpu != target:
                self._ev(cpu, waker, "sched:sched_migrate_task",
                         {"comm": t.comm, "pid": pid, "prio": PRIO, "orig_cpu": t.cpu,
                          "dest_cpu": target})
            self._ev(cpu, waker, "sched:sched_wakeup", vals)
        t.state, t.cpu = "R", target

    def _runnable(self, cpu) -> list:
        running = set(self.current)
        return [t.pid for t in self.tasks.values()
                if t.state == "R" and t.pid not in running and t.cpu == cpu]

    def _sleepers(self) -> list:
        return [t.pid for t in self.tasks.values() if t.state == "S" and not t.kthread]

    def _wakeup(self, cpu):
        """A task wakes a sleeper (futex, pipe, timer); it runs next on its CPU."""
        sleepers = self._sleepers()
        if not sleepers:
            return self._block_switch(cpu)
        pid = self.rng.choice(sleepers)
        target = self.rng.randrange(self.engine.nr_cpus)
        self._wake(cpu, pid, target)
        if self.rng.random() < 0.7:
            self._switch(target, pid, self.rng.choice((0, 1)) if target == cpu else 0)
        return None

    def _block_switch(self, cpu):
        """The current task blocks (S, or D on I/O); a runnable one runs."""
        ready = self._runnable(cpu)
        if not ready:
            sleepers = self._sleepers()
            if not sleepers:  # nobody else to run here: the tick comes
                return self._tick(cpu)
            pid = self.rng.choice(sleepers)
            self._wake(cpu, pid, cpu)
            ready = [pid]
        self._switch(cpu, self.rng.choice(ready), self.rng.choice((1, 1, 1, 2)))
        return None

    def _preempt(self, cpu):
        ready = self._runnable(cpu)
        if not ready:
            return self._wakeup(cpu)
        self._switch(cpu, self.rng.choice(ready), 0)
        return None

    # --- interrupts ---------------------------------------------------------------

    def _hrtimer(self, cpu) -> int:
        return HRTIMER_BASE + (cpu << 18)

    def _tick(self, cpu):
        """The scheduler tick: hrtimer interrupt, runtime accounting, softirqs."""
        pid = self.current[cpu]
        now = self.engine.clock.now()
        timer, fn = self._hrtimer(cpu), self._addr("tick_nohz_handler")
        self._ev(cpu, pid, "timer:hrtimer_expire_entry",
                 {"hrtimer": timer, "now": now, "function": fn})
        if pid != 0:
            self._ev(cpu, pid, "sched:sched_stat_runtime",
                     {"comm": self._comm(pid), "pid": pid,
                      "runtime": self.rng.randrange(100_000, 4_000_000)})
        vec = self.rng.choice((SCHED, RCU, TIMER))
        self._ev(cpu, pid, "irq:softirq_raise", {"vec": vec})
        self._ev(cpu, pid, "timer:hrtimer_expire_exit", {"hrtimer": timer})
        self._ev(cpu, pid, "timer:hrtimer_start",
                 {"hrtimer": timer, "function": fn, "expires": now + 4_000_000,
                  "softexpires": now + 4_000_000, "mode": 10, "was_armed": 0})
        self._ev(cpu, pid, "irq:softirq_entry", {"vec": vec})
        if vec == RCU and self.zombies:
            dead = self.zombies.pop(0)
            self._ev(cpu, pid, "sched:sched_process_free",
                     {"comm": self._comm(dead), "pid": dead, "prio": PRIO})
            self.tasks.pop(dead, None)
        self._ev(cpu, pid, "irq:softirq_exit", {"vec": vec})

    def _timer(self, cpu):
        """A timer-wheel timer armed by the task, expiring in the softirq."""
        pid = self.current[cpu]
        timer = SLAB_BASE + 0x8000000 + self.rng.randrange(0, 1 << 20, 64)
        fn = self._addr(self.rng.choice(("process_timeout", "delayed_work_timer_fn")))
        jiffies = 4294892296 + self.engine.clock.now() // 4_000_000
        self._ev(cpu, pid, "timer:timer_start",
                 {"timer": timer, "function": fn, "expires": jiffies + 25,
                  "bucket_expiry": jiffies + 25, "now": jiffies, "flags": cpu})
        self._ev(cpu, pid, "irq:softirq_raise", {"vec": TIMER})
        self._ev(cpu, pid, "irq:softirq_entry", {"vec": TIMER})
        self._ev(cpu, pid, "timer:timer_expire_entry",
                 {"timer": timer, "now": jiffies + 25, "function": fn, "baseclk": jiffies + 25})
        self._ev(cpu, pid, "timer:timer_expire_exit", {"timer": timer})
        self._ev(cpu, pid, "irq:softirq_exit", {"vec": TIMER})

    def _disk(self, cpu):
        """The disk's interrupt completes the oldest request in flight."""
        if not self.in_flight:
            return self._io(cpu)
        pid = self.current[cpu]
        sector, nr, rwbs = self.in_flight.pop(0)
        self._ev(cpu, pid, "irq:irq_handler_entry", {"irq": DISK_IRQ, "name": DISK_NAME})
        self._ev(cpu, pid, "block:block_rq_complete",
                 {"dev": DEV_VDA, "sector": sector, "nr_sector": nr, "error": 0, "ioprio": 0,
                  "rwbs": rwbs, "cmd": ""})
        self._ev(cpu, pid, "irq:irq_handler_exit", {"irq": DISK_IRQ, "ret": 1})
        self._ev(cpu, pid, "irq:softirq_raise", {"vec": BLOCK})
        self._ev(cpu, pid, "irq:softirq_entry", {"vec": BLOCK})
        self._ev(cpu, pid, "irq:softirq_exit", {"vec": BLOCK})
        return None

    def _io(self, cpu):
        """The current task (or kworker) submits a request: insert, issue."""
        pid = self.current[cpu]
        comm = self._comm(pid)
        nr = self.rng.choice((8, 8, 16, 64, 256))
        sector = self.next_sector
        self.next_sector += nr
        rwbs = self.rng.choice(("R", "W", "WS", "RA"))
        vals = {"dev": DEV_VDA, "sector": sector, "nr_sector": nr, "bytes": nr * 512,
                "ioprio": 0, "rwbs": rwbs, "comm": comm, "cmd": ""}
        self._ev(cpu, pid, "block:block_rq_insert", vals)
        self._ev(cpu, pid, "block:block_rq_issue", vals)
        self.in_flight.append((sector, nr, rwbs))

    def _work(self, cpu):
        """Work queued by the current task runs in this CPU's kworker."""
        pid = self.current[cpu]
        kw = self.kworkers[cpu]
        fname = self.rng.choice(WORK_FUNCS)
        work = SLAB_BASE + 0x9000000 + self.rng.randrange(0, 1 << 16, 32)
        fn = self._addr(fname)
        self._ev(cpu, pid, "workqueue:workqueue_queue_work",
                 {"work": work, "function": fn, "workqueue": "events", "req_cpu": 8192,
                  "cpu": cpu})
        self._ev(cpu, pid, "workqueue:workqueue_activate_work", {"work": work, "function": fn})
        if pid == kw:
            return
        if self.tasks[kw].state != "R":
            self._wake(cpu, kw, cpu)
        self._switch(cpu, kw, 0)
        self._ev(cpu, kw, "workqueue:workqueue_execute_start", {"work": work, "function": fn})
        if fname == "blk_mq_run_work_fn":
            self._io(cpu)
        self._ev(cpu, kw, "workqueue:workqueue_execute_end", {"work": work, "function": fn})
        self._switch(cpu, pid, 0x80)  # the kworker idles (TASK_IDLE: "I")

    # --- processes ------------------------------------------------------------------

    def _proc(self, cpu):
        pid = self.current[cpu]
        t = self.tasks[pid]
        if t.kthread:
            return self._block_switch(cpu)
        alive = sum(1 for x in self.tasks.values() if not x.kthread and x.state != "Z")
        choice = 0 if alive < self.MIN_TASKS else 2 if alive > self.MAX_TASKS else \
            self.rng.randrange(3)
        if choice == 0:
            child = self._task(t.comm, cpu, parent=pid)
            self.tasks[child].state = "S"
            self._ev(cpu, pid, "sched:sched_process_fork",
                     (t.comm, pid, t.comm, child))
            target = self.rng.randrange(self.engine.nr_cpus)
            self._wake(cpu, child, target, new=True)
        elif choice == 1:
            path = self.rng.choice(PROGRAMS)
            t.comm = path.rsplit("/", 1)[1]  # __set_task_comm(kbasename(filename))
            self.queue.append((cpu, pid, None, t.comm))  # set when the exec happens
            self._ev(cpu, pid, "sched:sched_process_exec", (path, pid, pid))
        else:
            self._exit(cpu, pid)
        return None

    def _exit(self, cpu, pid):
        t = self.tasks[pid]
        ready = self._runnable(cpu) or [self.kworkers[cpu]]
        self._ev(cpu, pid, "sched:sched_process_exit", (t.comm, pid, PRIO))
        parent = self.tasks.get(t.parent)
        if parent is not None and parent.state != "Z":
            self._ev(cpu, pid, "signal:signal_generate",
                     {"sig": SIGCHLD, "errno": 0, "code": 1, "comm": parent.comm,
                      "pid": parent.pid, "group": 1, "result": 0})
        if self.tasks[ready[0]].state != "R":
            self._wake(cpu, ready[0], cpu)
        self._switch(cpu, ready[0], 0x20)
        self.zombies.append(pid)

    def _signal(self, cpu):
        """SIGALRM to the current task: generated, then delivered."""
        pid = self.current[cpu]
        t = self.tasks[pid]
        if t.kthread:
            return self._block_switch(cpu)
        self._ev(cpu, pid, "signal:signal_generate",
                 {"sig": SIGALRM, "errno": 0, "code": 0x80, "comm": t.comm, "pid": pid,
                  "group": 1, "result": 0})
        self._ev(cpu, pid, "signal:signal_deliver",
                 {"sig": SIGALRM, "errno": 0, "code": 0x80,
                  "sa_handler": 0x55D0C0DE1000, "sa_flags": 0x14000000})
        return None

    # --- user-declared events ---------------------------------------------------------

    def _user(self, cpu):
        users = list(self.engine.user_tracepoints.values())
        if not users:
            return self._syscall(cpu)
        tp = self.rng.choice(users)
        values = tuple(self._value(f) for f in parse_format(tp.format))
        self._ev(cpu, self.current[cpu], tp.key, values)
        return None

    def _value(self, field):
        if field.is_string:
            return self.rng.choice(COMMS)
        if field.conv == "c":
            return self.rng.randrange(32, 127)
        return self.rng.getrandbits(field.size * 8 - 1)
