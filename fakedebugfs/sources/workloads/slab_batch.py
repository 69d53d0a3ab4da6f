"""Workload ``kmem``: the slab simulator of :mod:`.slab`, generated in
blocks with numpy and fired through the engine's batch path.

The kernel it simulates is :mod:`.slab`'s: the same call sites, caches,
kmalloc size classes, page orders, GFP flags, lifetimes and cross-CPU
frees, and SLUB's per-CPU LIFO freelists (a freed object is the next one
its CPU's cache hands out; the buddy allocator's lists per order likewise).
What differs is how time is counted, so that thousands of events can be
drawn at once:

* Allocations come one per *tick*; an object allocated at tick t with a
  lifetime of L ticks (exponential around its site's mean, at least 1) is
  freed at tick t + L, before that tick's allocation.  Frees are therefore
  about as many as allocations and an object lives for about L
  allocations (2 L events), where the stepped simulator counted events.
* A block is every event of :data:`BLOCK_ALLOCS` ticks, sorted by tick
  (frees first, then in allocation order): nothing drawn later can come
  before it.  Its addresses are the freelists' answers in that order,
  found for the whole block at once (:func:`lifo_match`: each allocation
  takes the latest free of its list not yet taken, as a stack does).
* Before each event, with probability 1 %, a CPU switches to a new task
  (pid drawn as the stepped simulator draws it, its comm a function of the
  pid); the virtual clock moves 200-4000 ns after each event.

Everything is drawn from one ``numpy.random.Generator`` (PCG64) seeded with
the workload's seed, block by block, so the events do not depend on how
``run(budget)`` slices them: the same seed gives the same events in
process and in a mount.  ``run`` fires slices of :data:`BATCH_MIN` events or
more as one :class:`~fakedebugfs.engine.core.batch.EventBatch`, smaller ones
one by one (the same events, stamped the same way).

A block keeps its events' arguments per tracepoint in columns (``where``:
the positions of each kind's events, ``cols``: its arguments), so that
events ``a:b`` are slices of them.  The sequential parts of making a block (the
freelists, fresh slab pages and pfns, which task each CPU runs) run in
compiled code when :mod:`.slab_fast` is built, on the same draws, giving
the same events; ``FAKEDEBUGFS_PURE=1`` keeps the numpy path above (the
reference).
"""

from __future__ import annotations

import bisect
import zlib
from typing import Iterator

import numpy as np

from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.batch import EventBatch, Strings, group_positions
from fakedebugfs.engine.core.slab import (CACHES, KMALLOC_MAX_CACHE_SIZE, PAGE_OFFSET, SLAB_BASE,
    get_order, kmalloc_size)
from fakedebugfs.sources.workloads.slab import FIRST_PFN, SITES, TASKS

# the compiled generation (slab_fast.pyx), None for the Python path (the reference)
slab_fast = fast.load("fakedebugfs.sources.workloads.slab_fast")

BLOCK_ALLOCS = 8192  # allocations (ticks) per generated block
# run() slices below this many events fire one by one: the break-even with
# every tracer on (one by one ~20 us an event; a batch ~0.25 ms plus ~0.6 us
# an event compiled, ~1.5 ms plus ~2 us on the Python paths)
BATCH_MIN = 16 if slab_fast is not None else 256
BATCH_HINT = 16384  # events per run() for the batch path; more gains little
ROW_CHUNK = 256  # events made Python tuples at a time for the per-event path
SPAWN_P = 0.01
ADV_LO, ADV_HI = 200, 4000  # ns the clock moves after each event

KINDS = ("kmalloc", "kmem_cache_alloc", "mm_page_alloc", "kfree", "kmem_cache_free",
         "mm_page_free")
K_KMALLOC, K_CACHE_ALLOC, K_PAGE_ALLOC, K_KFREE, K_CACHE_FREE, K_PAGE_FREE = range(6)
# each kmem tracepoint's arguments (engine.core.catalogue order)
ARGS = (("site_addr", "ptr", "req", "abytes", "gfp", "node"),
        ("site_addr", "ptr", "req", "abytes", "gfp", "node", "name"),
        ("pfn", "order", "gfp", "migratetype", "site_addr", "ptr"),
        ("site_addr", "ptr"),
        ("site_addr", "ptr", "name"),
        ("pfn", "order", "site_addr", "ptr"))
UNSIGNED = ("site_addr", "ptr")  # uint64 columns, the others int64
NAME_COL = {K_CACHE_ALLOC: 6, K_CACHE_FREE: 2}  # where the cache's name is (const char *)
SITE_KIND = {"kmalloc": 0, "cache": 1, "pages": 2}
CACHE_NAMES = tuple(CACHES)
KMALLOC_POOLS = (8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192)
POOLS = CACHE_NAMES + tuple(f"kmalloc-{n}" for n in KMALLOC_POOLS)
POOL_SIZE = np.array([CACHES[c][1] for c in CACHE_NAMES] + list(KMALLOC_POOLS), np.int64)


class Sites:
    """:data:`.slab.SITES` as arrays indexed by site number."""

    def __init__(self, kallsyms):
        n = len(SITES)
        # site i appears weight_i times: a uniform draw from it is weighted
        self.by_weight = np.repeat(np.arange(n), [s.weight for s in SITES])
        self.kind = np.array([SITE_KIND[s.kind] for s in SITES], np.int64)
        self.ngfp = np.array([len(s.gfp) for s in SITES], np.int64)
        self.gfp = np.zeros((n, self.ngfp.max()), np.int64)
        sizes = [s.sizes or (0,) for s in SITES]
        self.nsizes = np.array([len(z) for z in sizes], np.int64)
        self.sizes = np.zeros((n, self.nsizes.max()), np.int64)
        for i, s in enumerate(SITES):
            self.gfp[i, :len(s.gfp)] = s.gfp
            self.sizes[i, :len(sizes[i])] = sizes[i]
        self.lifetime = np.array([s.lifetime for s in SITES], float)
        self.cross = np.array([s.cross for s in SITES], float)
        self.node = np.array([s.node for s in SITES], np.int64)
        self.migratetype = np.array([s.migratetype for s in SITES], np.int64)
        self.cache = np.array([CACHE_NAMES.index(s.cache) if s.cache else 0 for s in SITES],
                              np.int64)
        self._per_pick()
        self.alloc_addr = np.array([site_addr(kallsyms, s.alloc_fn, s.slot) for s in SITES],
                                   np.uint64)
        self.free_addr = np.array([site_addr(kallsyms, s.free_fn, s.slot) for s in SITES],
                                  np.uint64)

    def _per_pick(self) -> None:
        """What an allocation of site i with size choice j is: ``req[i, j]``,
        ``abytes``, ``is_page`` (buddy pages, also kmalloc_large),
        ``order`` and ``pool`` (its slab cache)."""
        shape = self.sizes.shape
        self.req, self.abytes = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
        self.order, self.pool = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
        self.is_page = np.zeros(shape, bool)
        for i, site in enumerate(SITES):
            for j, pick in enumerate(site.sizes or (0,)):
                if site.kind == "cache":
                    self.req[i, j], self.abytes[i, j] = CACHES[site.cache]
                    self.pool[i, j] = CACHE_NAMES.index(site.cache)
                elif site.kind == "pages":
                    self.is_page[i, j], self.order[i, j] = True, pick
                else:
                    given = kmalloc_size(pick)
                    self.req[i, j], self.abytes[i, j] = pick, given
                    if given > KMALLOC_MAX_CACHE_SIZE:  # kmalloc_large: whole pages
                        self.is_page[i, j], self.order[i, j] = True, get_order(given)
                    else:
                        self.pool[i, j] = len(CACHE_NAMES) + KMALLOC_POOLS.index(given)


def site_addr(ks, fn: str, slot: int) -> int:
    """A fixed call instruction inside *fn* (as :mod:`.slab` places it)."""
    size = ks.sizes[ks.names.index(fn)]
    off = 5 + zlib.crc32(f"{fn}/{slot}".encode()) % max(1, size - 8)
    return ks.address(fn, off)


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


class SlabWorkload:
    """Workload ``kmem``: see the module docstring."""

    # events per run() for the batch path: what a driver should ask for at a time
    batch_hint = BATCH_HINT
    batch_min = BATCH_MIN  # runs below this many go one by one: a driver should gather more

    def __init__(self, kernel, seed: int = 0, count: int | None = None, name: str = "kmem"):
        self.name = name
        self.engine = kernel.engine
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.remaining = count
        self.emitted = 0
        self.nr_cpus = self.engine.nr_cpus
        self.tps = [self.engine.tracepoints[f"kmem:{k}"] for k in KINDS]
        self.sites = Sites(self.engine.kallsyms)
        self.tick = 0
        self.pending = None  # objects allocated, not freed yet (dict of arrays)
        self.stacks: dict[int, np.ndarray] = {}  # stream -> values, bottom first
        self.next_addr: dict[int, int] = {}  # pool -> next fresh address
        self.next_pfn = FIRST_PFN
        # the compiled path keeps the objects and freelists (the ones above: the Python path)
        self.gen = slab_fast and slab_fast.SlabGen(self.sites, self.nr_cpus, POOL_SIZE,
                                                   SLAB_BASE, PAGE_OFFSET, FIRST_PFN)
        self.current = []
        for cpu in range(self.nr_cpus):
            pid, comm = self._draw_task()
            self.engine.set_comm(pid, comm)
            self.current.append(pid)
        self.block = None
        self.at = 0
        self.next_block = None  # made ahead (block_steps)
        self.prefetch = False  # blocks made by block_steps only (the server's slicer turns)

    @property
    def done(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def _draw_task(self) -> tuple[int, str]:
        pid = 2000 + int(self.rng.integers(30000))
        return pid, TASKS[task_of(pid)]

    # --- firing -------------------------------------------------------------------

    def start_prefetch(self) -> None:
        """From now on blocks are made ahead by :meth:`block_steps` alone
        (the server runs its steps in slicer turns between requests: making
        a block at once takes 7-40 ms, which FUSE requests would wait for);
        :meth:`run` stops at the end of a block until the next is made."""
        self.prefetch = True

    def wants_block(self) -> bool:
        """No block is made ahead yet."""
        return self.next_block is None and not self.done

    def exhausted(self) -> bool:
        """Every event of the block being fired is fired (or none is made)."""
        return self.block is None or self.at >= self.block["n"]

    def run(self, budget: int) -> int:
        """Fire up to *budget* kmem events; returns how many were fired
        (fewer when prefetching and the next block is not made yet)."""
        if self.remaining is not None:
            budget = min(budget, self.remaining)
        fired = 0
        while fired < budget:
            if self.exhausted():
                if self.next_block is not None:
                    self.block, self.next_block = self.next_block, None
                elif self.prefetch:
                    break
                else:
                    self.block = self._generate()
                self.at = 0
            take = min(budget - fired, self.block["n"] - self.at)
            self._fire(self.at, self.at + take)
            self.at += take
            fired += take
        self.emitted += fired
        if self.remaining is not None:
            self.remaining -= fired
        return fired

    def _fire(self, a: int, b: int) -> None:
        blk = self.block
        lo, hi = bisect.bisect_left(blk["spawn_at"], a), bisect.bisect_left(blk["spawn_at"], b)
        spawns = blk["spawns"][lo:hi]
        if b - a < BATCH_MIN:
            self._fire_each(a, b, spawns)
            return
        comms, named = self.engine.comms, {}
        for i, pid, comm in spawns:
            cur = named.get(pid, comms.get(pid))
            if cur == comm:  # the task is known by that name already
                continue
            if cur is not None and i > a:
                self._fire(a, i)  # a task's comm changes: what came before sees the old one
                self._fire(i, b)
                return
            named[pid] = comm
        for pid, comm in named.items():
            self.engine.set_comm(pid, comm)
        self.engine.emit_batch(self._batch(a, b))

    def _fire_each(self, a: int, b: int, spawns) -> None:
        emit, advance, set_comm = self.engine.emit, self.engine.clock.advance, self.engine.set_comm
        tps = self.tps
        nxt = spawns[0][0] if spawns else b
        k = 0
        for i in range(a, b):
            while i == nxt:
                set_comm(spawns[k][1], spawns[k][2])
                k += 1
                nxt = spawns[k][0] if k < len(spawns) else b
            kind, cpu, pid, adv, values = self._row(i)
            emit(tps[kind], cpu, pid, values)
            advance(adv)

    def _row(self, i: int) -> tuple:
        """Event *i* of the block as Python values (the per-event path),
        made :data:`ROW_CHUNK` events at a time."""
        rows = self.block["rows"]
        chunk = rows.get(i // ROW_CHUNK)
        if chunk is None:
            chunk = rows[i // ROW_CHUNK] = self._rows(i - i % ROW_CHUNK, ROW_CHUNK)
        return chunk[i % ROW_CHUNK]

    def _rows(self, a: int, size: int) -> list:
        blk = self.block
        b = min(a + size, blk["n"])
        per_kind = []
        for k, (lo, hi) in enumerate(self._spans(a, b)):
            cols = [c[lo:hi].tolist() for c in blk["cols"][k]]
            if k in NAME_COL:
                cols[NAME_COL[k]] = [CACHE_NAMES[c] for c in cols[NAME_COL[k]]]
            per_kind.append(zip(*cols))
        return [(kind, cpu, pid, adv, next(per_kind[kind])) for kind, cpu, pid, adv in
                zip(*(blk[key][a:b].tolist() for key in ("kind", "cpu", "pid", "adv")))]

    def _spans(self, a: int, b: int) -> list:
        """Per kind, which of its events (``lo:hi``) are the block's events
        ``a:b``."""
        blk = self.block
        if self.gen:
            return self.gen.spans(blk["where_all"], blk["bounds"], a, b)
        return [(int(pos.searchsorted(a)), int(pos.searchsorted(b))) for pos in blk["where"]]

    def _batch(self, a: int, b: int) -> EventBatch:
        """Events ``a:b`` of the block as one batch: each kind's columns are
        slices of the block's (made once per block)."""
        blk = self.block
        clock = self.engine.clock
        now = clock.now()
        if clock.deterministic:  # the clock moves each event's step after it
            cum = blk["cum"]
            start = int(cum[a])
            ts = cum[a:b] + (now - start)
            clock.advance(int(cum[b]) - start)
        else:  # a real clock: spread from the last stamp to now
            last = min(max(self.engine.last_ts), now)
            if not last:  # the first events: as if made at the virtual clock's slowest
                last = max(0, now - (b - a) * ADV_HI)
            if self.gen:
                ts = self.gen.spread(last, now, b - a)
            else:
                ts = last + (now - last) * np.arange(1, b - a + 1, dtype=np.int64) // (b - a)
        if self.gen:
            spans, where = self.gen.batch_index(blk["where_all"], blk["bounds"], a, b)
        else:
            spans = self._spans(a, b)
            where = [blk["where"][k][lo:hi] - a for k, (lo, hi) in enumerate(spans)]
        cols = []
        for k, (lo, hi) in enumerate(spans):
            c = [col[lo:hi] for col in blk["cols"][k]]
            if k in NAME_COL:
                c[NAME_COL[k]] = Strings(c[NAME_COL[k]], CACHE_NAMES)
            cols.append(tuple(c))
        return EventBatch(self.tps, blk["kind"][a:b], blk["cpu"][a:b], blk["pid"][a:b], ts,
                          cols, dict(enumerate(where)))

    # --- generating a block -----------------------------------------------------------

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


def _spawns(at, pids) -> list:
    """``(event, pid, comm)`` of each switch to a new task."""
    return [(i, p, TASKS[c]) for i, p, c in zip(at.tolist(), pids.tolist(),
                                                 task_of(pids).tolist())]


def _cumulative(adv) -> np.ndarray:
    """``out[i]``: how far the clock moved before event i (``sum(adv[:i])``)."""
    out = np.zeros(len(adv) + 1, np.int64)
    np.cumsum(adv, out=out[1:])
    return out


__all__ = ["SlabWorkload", "lifo_match"]
