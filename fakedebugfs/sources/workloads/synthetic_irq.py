"""The default workload's interrupt-side activity: the scheduler tick and
hrtimers, timers, disk I/O completions in hard and soft irq, and
workqueue items."""

from __future__ import annotations

from fakedebugfs.engine.core.slab import SLAB_BASE
from fakedebugfs.sources.workloads.synthetic_sched import PRIO

HRTIMER_BASE = 0xFFFF88807DC1E000
NET_RX, TIMER, BLOCK, SCHED, RCU = 3, 1, 4, 7, 9  # softirq vectors
DISK_IRQ, DISK_NAME = 24, "virtio1-req.0"
DEV_VDA = (253 << 20) | 0  # MKDEV(253, 0)
WORK_FUNCS = ("vmstat_update", "flush_to_ldisc", "blk_mq_run_work_fn")


class IrqActivity:
    """The irq, timer, block and workqueue events of the default workload (a
    part of :class:`~fakedebugfs.sources.workloads.synthetic.SyntheticWorkload`)."""

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
