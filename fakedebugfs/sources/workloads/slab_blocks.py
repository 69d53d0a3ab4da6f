"""How the kmem workload makes its blocks of events: the draws for a block
(numpy PCG64), SLUB's per-CPU freelists and fresh slabs turned into
addresses, then the events of the block column by column; compiled
(slab_fast.pyx) when built, the Python path otherwise, the same bytes."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from fakedebugfs.engine.core.batch import group_positions
from fakedebugfs.engine.core.slab import CACHES, PAGE_OFFSET, SLAB_BASE
from fakedebugfs.sources.workloads.slab import TASKS

BLOCK_ALLOCS = 8192  # allocations (ticks) per generated block
SPAWN_P = 0.01
ADV_LO, ADV_HI = 200, 4000  # ns the clock moves after each event
KINDS = ("kmalloc", "kmem_cache_alloc", "mm_page_alloc", "kfree", "kmem_cache_free",
         "mm_page_free")
K_KMALLOC, K_CACHE_ALLOC, K_PAGE_ALLOC, K_KFREE, K_CACHE_FREE, K_PAGE_FREE = range(6)
ARGS = (("site_addr", "ptr", "req", "abytes", "gfp", "node"),
        ("site_addr", "ptr", "req", "abytes", "gfp", "node", "name"),
        ("pfn", "order", "gfp", "migratetype", "site_addr", "ptr"),
        ("site_addr", "ptr"),
        ("site_addr", "ptr", "name"),
        ("pfn", "order", "site_addr", "ptr"))
UNSIGNED = ("site_addr", "ptr")  # uint64 columns, the others int64
CACHE_NAMES = tuple(CACHES)
KMALLOC_POOLS = (8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192)
POOLS = CACHE_NAMES + tuple(f"kmalloc-{n}" for n in KMALLOC_POOLS)
POOL_SIZE = np.array([CACHES[c][1] for c in CACHE_NAMES] + list(KMALLOC_POOLS), np.int64)
def task_of(pid):
    """The program a task runs: a function of its pid, so that a pid drawn
    again names the same task (its comm never changes under a batch)."""
    return (pid * 2654435761 >> 11) % len(TASKS)
def _concat(parts: list) -> dict:
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
def _take(objs: dict, idx) -> dict:
    return {key: col[idx] for key, col in objs.items()}
def segmented_depth(stream, delta):
    """Stack depth after and before each op (ops sorted by stream): pushes
    +1, pops -1, a pop on an empty stack leaves it empty."""
    n = len(stream)
    start = np.ones(n, bool)
    start[1:] = stream[1:] != stream[:-1]
    seg = np.cumsum(start) - 1
    s = np.cumsum(delta)
    base = (s - delta)[start]
    s = s - base[seg]
    big = 4 * (n + 1)
    runmin = np.minimum.accumulate(s - seg * big) + seg * big
    after = s - np.minimum(runmin, 0)
    before = np.empty(n, np.int64)
    before[0] = 0
    before[1:] = after[:-1]
    before[start] = 0
    return seg, after, before
def _stable_order(key) -> np.ndarray:
    """``argsort(key, kind="stable")``, as a radix sort when the keys fit
    16 bits."""
    if len(key) and 0 <= int(key.min()) and int(key.max()) < (1 << 15):
        key = key.astype(np.int16)
    return np.argsort(key, kind="stable")
def lifo_match(stream, is_push):
    """Match each pop with the push it takes from its stream's stack.

    The ops are given in order (*stream*: which stack; *is_push*).  Returns
    ``(match, fresh)``: for each op the index of the push a pop takes (-1
    for pushes and for pops that find the stack empty), and the mask of
    those pops.  A pop takes the latest push not yet taken (LIFO): with the
    ops of one stream sorted by the stack depth they leave (pushes) or find
    (pops), in order, each pop comes right after the push it takes."""
    n = len(stream)
    order = _stable_order(stream)  # by stream, in order
    push = is_push[order]
    delta = np.where(push, 1, -1)
    seg, after, before = segmented_depth(stream[order], delta)
    level = np.where(push, after, before)
    paired = push | (before > 0)
    cand = np.flatnonzero(paired)
    by_level = cand[_stable_order(level[cand])]  # by depth, then (stably) by stream
    by_level = by_level[_stable_order(seg[by_level])]
    pops = np.flatnonzero(~push[by_level])
    match = np.full(n, -1, np.int64)
    match[order[by_level[pops]]] = order[by_level[pops - 1]]
    fresh = np.zeros(n, bool)
    fresh[order[~paired]] = True
    return match, fresh
def _spawns(at, pids) -> list:
    """``(event, pid, comm)`` of each switch to a new task."""
    return [(i, p, TASKS[c]) for i, p, c in zip(at.tolist(), pids.tolist(),
                                                 task_of(pids).tolist())]
def _cumulative(adv) -> np.ndarray:
    """``out[i]``: how far the clock moved before event i (``sum(adv[:i])``)."""
    out = np.zeros(len(adv) + 1, np.int64)
    np.cumsum(adv, out=out[1:])
    return out


class BlockGenerator:
    """Block generation of the kmem workload (a part of
    :class:`~fakedebugfs.sources.workloads.slab_batch.SlabWorkload`)."""

    def _new_objects(self, m: int) -> dict:
        """*m* allocations at the next ticks: site, CPU, sizes, flags, lifetime."""
        st, nr = self.sites, self.nr_cpus
        site, cpu, r_gfp, r_pick, life, r_cross, r_other = self._draws(m)
        gfp = st.gfp[site, (r_gfp * st.ngfp[site]).astype(np.int64)]
        pick = (r_pick * st.nsizes[site]).astype(np.int64)
        life = np.maximum(1, life.astype(np.int64))
        cross = r_cross < st.cross[site]
        other = (cpu + 1 + r_other) % nr
        fcpu = np.where(cross & (nr > 1), other, cpu)
        tick = self.tick + np.arange(m, dtype=np.int64)
        self.tick += m
        return {"site": site, "cpu": cpu, "fcpu": fcpu, "gfp": gfp, "req": st.req[site, pick],
                "abytes": st.abytes[site, pick], "is_page": st.is_page[site, pick],
                "order": st.order[site, pick], "pool": st.pool[site, pick],
                "tfree": tick + life, "tick": tick, "value": np.zeros(m, np.uint64)}

    def _generate(self) -> dict:
        """The events of the next :data:`BLOCK_ALLOCS` ticks (see module doc)."""
        for _ in self.block_steps():
            pass
        block, self.next_block = self.next_block, None
        return block

    def block_steps(self) -> Iterator[None]:
        """:meth:`_generate` in steps of a few milliseconds each; the block
        goes to ``next_block``."""
        if self.gen:
            yield from self._block_steps_fast()
            return
        end = self.tick + BLOCK_ALLOCS
        new = self._new_objects(BLOCK_ALLOCS)
        yield
        nold = 0 if self.pending is None else len(self.pending["tick"])
        pool = new if self.pending is None else _concat([self.pending, new])
        due = pool["tfree"] < end
        # events: allocations of the new objects, frees of the due ones, by tick
        obj = np.concatenate([nold + np.arange(BLOCK_ALLOCS), np.flatnonzero(due)])
        is_alloc = np.zeros(len(obj), bool)
        is_alloc[:BLOCK_ALLOCS] = True
        time = np.where(is_alloc, pool["tick"][obj], pool["tfree"][obj])
        # frees before the tick's allocation, frees of one tick in allocation
        # order (as obj has them): a radix sort on 15 bits
        order = np.argsort(((time - (end - BLOCK_ALLOCS)) * 2 + is_alloc).astype(np.int16),
                           kind="stable")
        obj, is_alloc = obj[order], is_alloc[order]
        yield
        self._addresses(pool, obj, is_alloc)
        yield
        self.pending = _take(pool, ~due)  # alive: they keep their addresses
        self.next_block = self._events(pool, obj, is_alloc)

    def _block_steps_fast(self) -> Iterator[None]:
        """:meth:`block_steps` with the sequential parts compiled
        (:mod:`.slab_fast`): the same draws, the same events."""
        m, gen = BLOCK_ALLOCS, self.gen
        end = self.tick + m
        gen.objects(self.tick, *self._draws(m))
        self.tick = end
        yield
        kind, cpu, where_all, bounds, table = gen.events(end, m)
        where = [where_all[bounds[k]:bounds[k + 1]] for k in range(len(KINDS))]
        yield
        spawn_at, spawn_cpu, spawn_pid = self._spawn_draws(len(kind))
        current = np.array(self.current, np.int64)
        pid = gen.tasks(cpu, spawn_at, spawn_cpu, spawn_pid, current)
        self.current = current.tolist()
        # each column a row of its kind's uint64 table (int64 ones seen as such)
        cols = [tuple(row if arg in UNSIGNED else row.view(np.int64)
                      for arg, row in zip(args, t)) for args, t in zip(ARGS, table)]
        spawns = _spawns(spawn_at, spawn_pid)
        adv = self.rng.integers(ADV_LO, ADV_HI + 1, size=len(kind))
        self.next_block = {"n": len(kind), "kind": kind, "cpu": cpu, "pid": pid,
                           "spawns": spawns, "spawn_at": spawn_at.tolist(), "rows": {},
                           "where": where, "where_all": where_all, "bounds": bounds,
                           "cols": cols, "adv": adv, "cum": _cumulative(adv)}

    def _draws(self, m: int) -> tuple:
        """The draws for *m* new objects, in order: site, CPU, then uniform
        draws for the flags and size, the lifetime, whether another CPU
        frees it and which (both paths make them: the same events)."""
        rng, st, nr = self.rng, self.sites, self.nr_cpus
        site = st.by_weight[rng.integers(len(st.by_weight), size=m)]
        cpu = rng.integers(nr, size=m)
        r_gfp, r_pick = rng.random(m), rng.random(m)
        life = rng.exponential(st.lifetime[site])
        return site, cpu, r_gfp, r_pick, life, rng.random(m), rng.integers(max(1, nr - 1), size=m)

    def _spawn_draws(self, n: int) -> tuple:
        """The draws for the tasks of *n* events: before which events a CPU
        switches to a new task, which CPU, the task's pid."""
        rng = self.rng
        at = np.flatnonzero(rng.random(n) < SPAWN_P)
        cpu = rng.integers(self.nr_cpus, size=len(at))
        return at, cpu, 2000 + rng.integers(30000, size=len(at))

    def _stream(self, pool: dict, obj, cpu) -> np.ndarray:
        """The freelist an object comes from or goes back to: its cache on
        *cpu*, or the buddy list of its order."""
        base = len(POOLS) * self.nr_cpus
        return np.where(pool["is_page"][obj], base + pool["order"][obj],
                        pool["pool"][obj] * self.nr_cpus + cpu)

    def _addresses(self, pool: dict, obj, is_alloc) -> None:
        """Fill ``value`` (address, or pfn for pages) of the block's new
        objects as the freelists hand them out in event order."""
        stream = self._stream(pool, obj, np.where(is_alloc, pool["cpu"][obj], pool["fcpu"][obj]))
        # the top of each stack, as deep as the block's allocations can reach
        counts = np.bincount(stream[is_alloc])
        pops = np.flatnonzero(counts)
        pre_stream, pre_value = [], []
        for s, c in zip(pops.tolist(), counts[pops].tolist()):
            stack = self.stacks.get(s)
            if stack is not None and len(stack):
                top = stack[-c:] if c < len(stack) else stack
                self.stacks[s] = stack[:len(stack) - len(top)]
                pre_stream.append(np.full(len(top), s, np.int64))
                pre_value.append(top)
        npre = sum(len(v) for v in pre_value)
        nobj = len(pool["tick"])
        # ops: the stack items (pushed before the block), then the block's events
        op_stream = np.concatenate(pre_stream + [stream])
        op_push = np.concatenate([np.ones(npre, bool), ~is_alloc])
        op_obj = np.concatenate([nobj + np.arange(npre), obj])
        match, fresh = lifo_match(op_stream, op_push)
        value = np.concatenate([pool["value"], *pre_value])
        for i in np.flatnonzero(fresh).tolist():
            value[op_obj[i]] = self._fresh(int(op_stream[i]))
        parent = np.arange(len(value))
        popped = np.flatnonzero(match >= 0)
        parent[op_obj[popped]] = op_obj[match[popped]]
        while True:  # an address passes from object to object: follow to its source
            up = parent[parent]
            if (up == parent).all():
                break
            parent = up
        value = value[parent]
        pool["value"] = value[:nobj]
        # what was pushed and not taken stays on the stacks, oldest first
        taken = np.zeros(len(op_stream), bool)
        taken[match[popped]] = True
        left = np.flatnonzero(op_push & ~taken)
        if len(left):
            left = left[np.argsort(op_stream[left], kind="stable")]
            ls = op_stream[left]
            for chunk in np.split(left, np.flatnonzero(np.diff(ls)) + 1):
                s = int(op_stream[chunk[0]])
                old = self.stacks.get(s)
                vals = value[op_obj[chunk]]
                self.stacks[s] = vals if old is None or not len(old) else np.concatenate([old, vals])

    def _fresh(self, stream: int) -> int:
        """A new object from a fresh slab page, or fresh buddy pages."""
        base = len(POOLS) * self.nr_cpus
        if stream >= base:
            order = stream - base
            pfn = (self.next_pfn + (1 << order) - 1) & ~((1 << order) - 1)
            self.next_pfn = pfn + (1 << order)
            return pfn
        p = stream // self.nr_cpus
        addr = self.next_addr.setdefault(p, SLAB_BASE + len(self.next_addr) * (1 << 30))
        self.next_addr[p] = addr + int(POOL_SIZE[p])
        return addr

    def _events(self, pool: dict, obj, is_alloc) -> dict:
        """The block's events in order: which object each is about, kind,
        CPU, task and clock step (argument values: :meth:`_columns`)."""
        rng, st, nr = self.rng, self.sites, self.nr_cpus
        n = len(obj)
        skind = st.kind[pool["site"][obj]]
        kind = np.where(is_alloc, np.array([K_KMALLOC, K_CACHE_ALLOC, K_PAGE_ALLOC])[skind],
                        np.array([K_KFREE, K_CACHE_FREE, K_PAGE_FREE])[skind])
        cpu = np.where(is_alloc, pool["cpu"][obj], pool["fcpu"][obj])
        # tasks: before each event, sometimes, a CPU switches to a new one
        idx, cpus, pids = self._spawn_draws(n)
        spawn = np.zeros(n, bool)
        spawn[idx] = True
        scpu = np.zeros(n, np.int64)
        spid = np.zeros(n, np.int64)
        scpu[idx], spid[idx] = cpus, pids
        pid = np.empty(n, np.int64)
        spawns = _spawns(idx, pids)
        at = np.arange(n)
        for c in range(nr):
            last = np.maximum.accumulate(np.where(spawn & (scpu == c), at, -1))
            mine = cpu == c
            pid[mine] = np.where(last[mine] >= 0, spid[np.maximum(last[mine], 0)], self.current[c])
            if last[-1] >= 0:
                self.current[c] = int(spid[last[-1]])
        # each kind's events and their arguments, in columns
        where = group_positions(kind, len(KINDS))
        values = self._columns(pool, obj, kind)
        cols = [tuple(values[arg][pos] for arg in args) for args, pos in zip(ARGS, where)]
        adv = rng.integers(ADV_LO, ADV_HI + 1, size=n)
        return {"n": n, "kind": kind, "cpu": cpu, "pid": pid, "spawns": spawns,
                "spawn_at": [sp[0] for sp in spawns], "rows": {}, "where": where, "cols": cols,
                "adv": adv, "cum": _cumulative(adv)}

    def _columns(self, pool: dict, o, kind) -> dict:
        """The argument values of the events about objects *o* of *kind*, by
        name (each event has every name)."""
        st = self.sites
        site = pool["site"][o]
        value = pool["value"][o]
        # kmalloc_large memory and buddy pages: the page's address
        ptr = np.where(pool["is_page"][o], np.uint64(PAGE_OFFSET) + (value << np.uint64(12)),
                       value)
        return {"site_addr": np.where(kind < K_KFREE, st.alloc_addr[site], st.free_addr[site]),
                "pfn": value.astype(np.int64), "order": pool["order"][o], "ptr": ptr,
                "gfp": pool["gfp"][o], "req": pool["req"][o], "abytes": pool["abytes"][o],
                "node": st.node[site], "name": st.cache[site],
                "migratetype": st.migratetype[site]}
