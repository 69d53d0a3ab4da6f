"""The ``classic`` workload: the default mix before kernel profiles (issue
11), kept for tests and tools that want every event to be one the ktrace
and kmemtrace trees also show: system calls (raw_syscalls), kmalloc, named
caches and pages, sched_switch, fork, exec and exit, and user events.
Every step fires exactly one tracepoint, so ``--count N`` means N events;
the same seed gives the same sequence.  (Exec'd programs take the
basename of their path as comm; kernel-thread names are never exec'd.)
"""

from __future__ import annotations

import bisect
import itertools
import random

from fakedebugfs.engine.core.kallsyms import FUNCTIONS
from fakedebugfs.engine.ktrace.format import parse_format
from fakedebugfs.engine.core.gfp import GFP_ATOMIC, GFP_KERNEL, GFP_KERNEL_ACCOUNT
from fakedebugfs.engine.core.slab import CACHES, PAGE_OFFSET, SLAB_BASE, kmalloc_size
from fakedebugfs.sources.workloads.synthetic_kmem import CACHE_SITES
SYSCALLS = (0, 1, 3, 9, 11, 202, 228, 257, 262)
COMMS = ("bash", "sshd", "systemd", "find", "cc1", "kworker/u4:2", "python3", "sleep")


class ClassicWorkload:
    name = "classic"
    kinds = ("syscall", "kmalloc", "kfree", "cache", "page", "switch", "proc", "user")
    weights = (40, 16, 14, 10, 4, 10, 2, 4)

    def __init__(self, kernel, seed: int = 0, count: int | None = None):
        self.engine = kernel.engine
        self.rng = random.Random(seed)
        self.remaining = count
        self.emitted = 0
        tps = self.engine.tracepoints
        self.tp = {key.split(":")[1]: tp for key, tp in tps.items()}
        ncpu = self.engine.nr_cpus
        self.cum_weights = list(itertools.accumulate(self.weights))
        self.next_pid = 1000
        self.pids: list[int] = []
        self.current = [self._spawn(self.rng.choice(COMMS)) for _ in range(ncpu)]
        self.in_syscall: dict[int, int] = {}
        self.live: list[list[tuple]] = [[] for _ in range(ncpu)]
        self.next_ptr = SLAB_BASE
        self.next_pfn = 0x100000

    @property
    def done(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def _spawn(self, comm: str) -> int:
        pid = self.next_pid
        self.next_pid += 1
        self.engine.set_comm(pid, comm)
        self.pids.append(pid)
        return pid

    def run(self, budget: int) -> int:
        """Fire up to *budget* events; returns how many were fired."""
        if self.remaining is not None:
            budget = min(budget, self.remaining)
        rng, nr = self.rng, self.engine.nr_cpus
        steps = [getattr(self, "_" + kind) for kind in self.kinds]
        cum, total = self.cum_weights, self.cum_weights[-1]
        advance = self.engine.clock.advance
        for _ in range(budget):
            cpu = rng.randrange(nr)
            steps[bisect.bisect(cum, rng.random() * total)](cpu)
            advance(rng.randint(200, 4000))
        self.emitted += budget
        if self.remaining is not None:
            self.remaining -= budget
        return budget

    def _fire(self, name: str, cpu: int, values: tuple) -> None:
        self.engine.emit(self.tp[name], cpu, self.current[cpu], values)

    # --- one event each ---------------------------------------------------

    def _syscall(self, cpu):
        pid = self.current[cpu]
        nr = self.in_syscall.pop(pid, None)
        if nr is None:
            nr = self.rng.choice(SYSCALLS)
            self.in_syscall[pid] = nr
            args = tuple(self.rng.getrandbits(32) for _ in range(6))
            self._fire("sys_enter", cpu, (nr, args))
        else:
            self._fire("sys_exit", cpu, (nr, self.rng.choice((0, 0, 1, 8, 4096, -2, -11))))

    def _ptr(self, size: int) -> int:
        ptr = self.next_ptr
        self.next_ptr += max(8, size)
        return ptr

    def _call_site(self) -> int:
        ks = self.engine.kallsyms
        i = self.rng.randrange(min(len(FUNCTIONS), len(ks.names)))  # the allocators
        return ks.addrs[i] + self.rng.randrange(ks.sizes[i]) // 4 * 4

    def _kmalloc(self, cpu):
        req = self.rng.choice((8, 24, 40, 64, 100, 192, 240, 272, 512, 768, 992, 1304, 4096))
        alloc = kmalloc_size(req)
        site, ptr = self._call_site(), self._ptr(alloc)
        gfp = self.rng.choice((GFP_KERNEL, GFP_KERNEL, GFP_ATOMIC, GFP_KERNEL_ACCOUNT))
        self.live[cpu].append(("kfree", site, ptr))
        self._fire("kmalloc", cpu, (site, ptr, req, alloc, gfp, -1))

    def _cache(self, cpu):
        name, fn, _ = self.rng.choice(CACHE_SITES)
        object_size, size = CACHES[name]
        site = self.engine.kallsyms.address(fn, self.rng.randrange(8, 64))
        ptr = self._ptr(size)
        self.live[cpu].append(("kmem_cache_free", site, ptr, name))
        self._fire("kmem_cache_alloc", cpu, (site, ptr, object_size, size, GFP_KERNEL, -1, name))

    def _page(self, cpu):
        order = self.rng.choice((0, 0, 0, 1, 2))
        pfn = self.next_pfn
        self.next_pfn += 1 << order
        site = self.engine.kallsyms.address("do_anonymous_page", 0x40)
        ptr = PAGE_OFFSET + (pfn << 12)
        self.live[cpu].append(("mm_page_free", pfn, order, site, ptr))
        self._fire("mm_page_alloc", cpu, (pfn, order, GFP_KERNEL, 1, site, ptr))

    def _kfree(self, cpu):
        live = self.live[self.rng.randrange(len(self.live))]
        if not live:
            return self._kmalloc(cpu)
        item = live.pop(self.rng.randrange(len(live)))
        kind = item[0]
        if kind == "kfree":
            self._fire("kfree", cpu, (self._call_site(), item[2]))
        elif kind == "kmem_cache_free":
            self._fire("kmem_cache_free", cpu, (self._call_site(), item[2], item[3]))
        else:
            self._fire("mm_page_free", cpu, item[1:])

    def _switch(self, cpu):
        prev = self.current[cpu]
        nxt = self._spawn(self.rng.choice(COMMS)) if self.rng.random() < 0.05 else \
            self.rng.choice(self.pids)
        comms = self.engine.comms
        state = self.rng.choice((0, 1, 2))
        self._fire("sched_switch", cpu, (comms[prev], prev, 120, state, comms[nxt], nxt, 120))
        self.current[cpu] = nxt

    def _proc(self, cpu):
        pid = self.current[cpu]
        comm = self.engine.comms[pid]
        choice = self.rng.randrange(3)
        if choice == 0:
            child = self._spawn(comm)
            self._fire("sched_process_fork", cpu, (comm, pid, comm, child))
        elif choice == 1:
            path = "/usr/bin/" + self.rng.choice([c for c in COMMS if "/" not in c])
            self.engine.set_comm(pid, path.rsplit("/", 1)[1])
            self._fire("sched_process_exec", cpu, (path, pid, pid))
        else:
            self._fire("sched_process_exit", cpu, (comm, pid, 120))

    def _user(self, cpu):
        users = list(self.engine.user_tracepoints.values())
        if not users:
            return self._syscall(cpu)
        tp = self.rng.choice(users)
        values = tuple(self._value(f) for f in parse_format(tp.format))
        self.engine.emit(tp, cpu, self.current[cpu], values)

    def _value(self, field):
        if field.is_string:
            return self.rng.choice(COMMS)
        if field.conv == "c":
            return self.rng.randrange(32, 127)
        return self.rng.getrandbits(field.size * 8 - 1)
