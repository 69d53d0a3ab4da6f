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

from fakedebugfs.engine.core.kallsyms import FUNCTIONS
from fakedebugfs.engine.core.slab import SLAB_BASE
from fakedebugfs.engine.ktrace.format import parse_format
from fakedebugfs.sources.workloads.synthetic_kmem import KmemActivity
from fakedebugfs.sources.workloads.synthetic_sched import SchedActivity, PROGRAMS
from fakedebugfs.sources.workloads.synthetic_irq import IrqActivity

# the slab caches it allocates from, with the function that does (call sites)
# programs tasks exec (comm: the path's basename) and kernel threads (names kept whole)
KTHREADS = ("kworker/u4:2", "kworker/0:1", "kworker/1:0", "ksoftirqd/0", "rcu_preempt")
COMMS = tuple(p.rsplit("/", 1)[1] for p in PROGRAMS) + KTHREADS  # every comm it uses
# The pids its tasks take, in turn (a freed one is taken again after a
# wrap, as the kernel's pid allocator does): four digits, never a pid a
# process of `run` or of a Fake's commands gets (theirs start at 10000:
# sandbox/cmdinit.py FIRST_PID), nor one that contains one of theirs
# (ftracetest's event-no-pid.tc finds its pid by substring)
TASK_PIDS = (1000, 9999)
# x86_64 system calls: (nr, name)
SYSCALLS = ((0, "read"), (1, "write"), (3, "close"), (9, "mmap"), (12, "brk"),
            (202, "futex"), (228, "clock_gettime"), (257, "openat"), (262, "newfstatat"),
            (39, "getpid"), (232, "epoll_wait"))


class Task:
    """``struct task_struct`` as the workload tracks it."""

    __slots__ = ("pid", "comm", "cpu", "state", "parent", "kthread")

    def __init__(self, pid, comm, cpu, parent=0, kthread=False):
        self.pid, self.comm, self.cpu, self.parent = pid, comm, cpu, parent
        self.state = "R"  # R runnable/running, S sleeping, Z zombie
        self.kthread = kthread


class SyntheticWorkload(IrqActivity, SchedActivity, KmemActivity):
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
        self.next_pid = TASK_PIDS[0]
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
        first, last = TASK_PIDS
        pid = self.next_pid
        for _ in range(last - first + 1):  # the next free one (alloc_pid's cyclic idr)
            if pid not in self.tasks:
                break
            pid = pid + 1 if pid < last else first
        self.next_pid = pid + 1 if pid < last else first
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

    # memory, the scheduler and processes, interrupts: KmemActivity,
    # SchedActivity and IrqActivity (synthetic_kmem/_sched/_irq.py)

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
