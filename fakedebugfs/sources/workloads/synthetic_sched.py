"""The default workload's scheduling and process life: context switches,
wakeups, blocking, preemption, fork/exec/exit and signals, with the
sched events' pids, comms and CPUs consistent across them."""

from __future__ import annotations

PROGRAMS = ("/usr/bin/bash", "/usr/sbin/sshd", "/usr/bin/find", "/usr/lib/gcc/cc1",
            "/usr/bin/python3", "/usr/bin/sleep", "/usr/bin/cat", "/usr/bin/make")
SIGCHLD, SIGALRM = 17, 14
PRIO = 120


class SchedActivity:
    """The sched and process events of the default workload (a part of
    :class:`~fakedebugfs.sources.workloads.synthetic.SyntheticWorkload`)."""

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
