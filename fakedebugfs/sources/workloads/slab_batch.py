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

import numpy as np

from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.batch import EventBatch, Strings
from fakedebugfs.engine.core.slab import (CACHES, KMALLOC_MAX_CACHE_SIZE, PAGE_OFFSET, SLAB_BASE,
    get_order, kmalloc_size)
from fakedebugfs.sources.workloads.slab import FIRST_PFN, TASKS, function_size, sites_of
from fakedebugfs.sources.workloads.slab_blocks import (ADV_HI, ARGS, BLOCK_ALLOCS, CACHE_NAMES,
    K_CACHE_ALLOC, K_CACHE_FREE, KINDS, KMALLOC_POOLS, POOL_SIZE, BlockGenerator, lifo_match,
    task_of)

# the compiled generation (slab_fast.pyx), None for the Python path (the reference)
slab_fast = fast.load("fakedebugfs.sources.workloads.slab_fast")

# run() slices below this many events fire one by one: the break-even with
# every tracer on (one by one ~20 us an event; a batch ~0.25 ms plus ~0.6 us
# an event compiled, ~1.5 ms plus ~2 us on the Python paths)
BATCH_MIN = 16 if slab_fast is not None else 256
BATCH_HINT = 16384  # events per run() for the batch path; more gains little
ROW_CHUNK = 256  # events made Python tuples at a time for the per-event path

# each kmem tracepoint's arguments (engine.core.catalogue order)
NAME_COL = {K_CACHE_ALLOC: 6, K_CACHE_FREE: 2}  # where the cache's name is (const char *)
SITE_KIND = {"kmalloc": 0, "cache": 1, "pages": 2}


class Sites:
    """:data:`.slab.SITES` the symbol table names (:func:`.slab.sites_of`)
    as arrays indexed by site number."""

    def __init__(self, kallsyms):
        self.list = sites = sites_of(kallsyms)
        n = len(sites)
        # site i appears weight_i times: a uniform draw from it is weighted
        self.by_weight = np.repeat(np.arange(n), [s.weight for s in sites])
        self.kind = np.array([SITE_KIND[s.kind] for s in sites], np.int64)
        self.ngfp = np.array([len(s.gfp) for s in sites], np.int64)
        self.gfp = np.zeros((n, self.ngfp.max()), np.int64)
        sizes = [s.sizes or (0,) for s in sites]
        self.nsizes = np.array([len(z) for z in sizes], np.int64)
        self.sizes = np.zeros((n, self.nsizes.max()), np.int64)
        for i, s in enumerate(sites):
            self.gfp[i, :len(s.gfp)] = s.gfp
            self.sizes[i, :len(sizes[i])] = sizes[i]
        self.lifetime = np.array([s.lifetime for s in sites], float)
        self.cross = np.array([s.cross for s in sites], float)
        self.node = np.array([s.node for s in sites], np.int64)
        self.migratetype = np.array([s.migratetype for s in sites], np.int64)
        self.cache = np.array([CACHE_NAMES.index(s.cache) if s.cache else 0 for s in sites],
                              np.int64)
        self._per_pick()
        self.alloc_addr = np.array([site_addr(kallsyms, s.alloc_fn, s.slot) for s in sites],
                                   np.uint64)
        self.free_addr = np.array([site_addr(kallsyms, s.free_fn, s.slot) for s in sites],
                                  np.uint64)

    def _per_pick(self) -> None:
        """What an allocation of site i with size choice j is: ``req[i, j]``,
        ``abytes``, ``is_page`` (buddy pages, also kmalloc_large),
        ``order`` and ``pool`` (its slab cache)."""
        shape = self.sizes.shape
        self.req, self.abytes = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
        self.order, self.pool = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
        self.is_page = np.zeros(shape, bool)
        for i, site in enumerate(self.list):
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
    """A fixed call instruction inside *fn* (as :mod:`.slab` places it).
    A function a profile's kernel lacks (ext4's in a module there) is where
    that table places names it does not hold (``address`` of any name)."""
    size = function_size(ks, fn)
    off = 5 + zlib.crc32(f"{fn}/{slot}".encode()) % max(1, size - 8)
    return ks.address(fn, off)


class SlabWorkload(BlockGenerator):
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


__all__ = ["ARGS", "BLOCK_ALLOCS", "KINDS", "SlabWorkload", "lifo_match"]
