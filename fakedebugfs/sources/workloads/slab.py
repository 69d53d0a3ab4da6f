"""The slab simulator: workloads ``kmem`` and ``kmem-faults``.

Kernel code paths (call sites) allocate and free memory the way SLUB on
this 6.18 machine serves them:

* ``kmalloc``: the request is rounded up to its kmalloc cache (kmalloc-8 ...
  kmalloc-8k, including kmalloc-96 and kmalloc-192); above 8 KiB
  (``KMALLOC_MAX_CACHE_SIZE``) ``kmalloc_large`` takes whole pages and
  ``bytes_alloc`` is ``PAGE_SIZE << get_order(size)``.
* named caches: ``bytes_req`` is the cache's ``object_size``, ``bytes_alloc``
  its ``size`` (values read from /sys/kernel/slab on this machine).
* pages: ``mm_page_alloc``/``mm_page_free`` of order 0-2.

Each object lives for a random number of steps around its site's mean
lifetime, then is freed by the site's free function, sometimes on another
CPU (RCU callbacks, network completions).  Freed objects go back to a
per-CPU LIFO freelist of their cache and are reused, as SLUB reuses them.
GFP flags are this kernel's values (``events/kmem/kmalloc/format``).

Every step fires exactly one kmem tracepoint, so ``--count N`` counts kmem
events; the engine clock advances 200-4000 ns per event.  A seed gives the
same events and, with the virtual clock, the same timestamps.  This module
steps the simulator one event at a time (``kmem-faults``); ``kmem`` is the
same kernel generated thousands of events at once (:mod:`.slab_batch`,
where lifetimes count allocations rather than events).

``kmem-faults`` is the same simulator with 1% of steps doing what
kmemtrace-report must catch: kfree() of cache memory, allocations with
bytes_alloc < bytes_req, frees of pointers never allocated, double frees.
"""

from __future__ import annotations

import functools
import heapq
import random
import zlib
from dataclasses import dataclass

from fakedebugfs.engine.core.gfp import (GFP_ATOMIC, GFP_HIGHUSER_MOVABLE, GFP_KERNEL,
    GFP_KERNEL_ACCOUNT, GFP_NOFS, GFP_PGTABLE_USER, __GFP_NOMEMALLOC, __GFP_NORETRY,
    __GFP_NOWARN, __GFP_ZERO)
from fakedebugfs.engine.core.slab import (CACHES, KMALLOC_MAX_CACHE_SIZE, PAGE_OFFSET,
    SLAB_BASE, get_order, kmalloc_size)

PRETRACE_BASE = 0xFFFF8880F0000000  # objects allocated before tracing began
FIRST_PFN = 0x110000

GFP_SKB_DATA = GFP_ATOMIC | __GFP_NOMEMALLOC | __GFP_NOWARN  # kmalloc_reserve's first try

MIGRATE_UNMOVABLE, MIGRATE_MOVABLE = 0, 1


def function_size(ks, fn: str) -> int:
    """The size of function *fn* in the symbol table *ks*."""
    found = ks.lookup(ks.address(fn))
    return found[2] if found is not None else 0x100


@dataclass(frozen=True)
class Site:
    """One allocation call site and how its objects are used and freed.

    ``sizes`` are requested bytes (kmalloc), unused (caches) or page orders
    (pages); ``lifetime`` the mean steps an object lives; ``cross`` the
    chance it is freed on another CPU; ``node`` what ``kmalloc_node`` was
    asked for (-1: ``NUMA_NO_NODE``)."""

    kind: str
    alloc_fn: str
    free_fn: str
    weight: int
    gfp: tuple
    sizes: tuple = ()
    cache: str = ""
    lifetime: int = 200
    cross: float = 0.05
    node: int = -1
    migratetype: int = MIGRATE_UNMOVABLE
    slot: int = 0  # tells apart two call sites in one function


SITES = (
    Site("cache", "getname_flags", "putname", 14, (GFP_KERNEL,), cache="names_cache", lifetime=8),
    Site("cache", "alloc_empty_file", "file_free_rcu", 8, (GFP_KERNEL | __GFP_ZERO,),
         cache="filp", lifetime=400, cross=0.3),
    Site("cache", "__d_alloc", "__d_free", 6, (GFP_KERNEL,), cache="dentry", lifetime=3000, cross=0.2),
    Site("cache", "ext4_alloc_inode", "ext4_free_in_core_inode", 2, (GFP_NOFS, GFP_KERNEL),
         cache="ext4_inode_cache", lifetime=6000, cross=0.2),
    Site("cache", "proc_alloc_inode", "proc_free_inode", 2, (GFP_KERNEL,),
         cache="proc_inode_cache", lifetime=1500, cross=0.2),
    Site("cache", "sock_alloc_inode", "sock_free_inode", 1, (GFP_KERNEL,),
         cache="sock_inode_cache", lifetime=800, cross=0.2),
    Site("cache", "vm_area_alloc", "vm_area_free", 6, (GFP_KERNEL,), cache="vm_area_struct",
         lifetime=900),
    Site("cache", "anon_vma_clone", "unlink_anon_vmas", 4, (GFP_KERNEL,), cache="anon_vma_chain",
         lifetime=900),
    Site("cache", "__alloc_skb", "kfree_skbmem", 5, (GFP_ATOMIC, GFP_KERNEL),
         cache="skbuff_head_cache", lifetime=60, cross=0.35, node=0),
    Site("kmalloc", "kmalloc_reserve", "skb_release_data", 5, (GFP_SKB_DATA, GFP_KERNEL),
         sizes=(512, 704, 960, 1728, 2368), lifetime=60, cross=0.35, node=0),
    Site("kmalloc", "seq_read_iter", "seq_release", 4, (GFP_KERNEL_ACCOUNT,), sizes=(4096,),
         lifetime=30),
    Site("kmalloc", "single_open", "single_release", 3, (GFP_KERNEL_ACCOUNT,), sizes=(32,),
         lifetime=30),
    Site("kmalloc", "kernfs_fop_open", "kernfs_fop_release", 3, (GFP_KERNEL | __GFP_ZERO,),
         sizes=(152,), lifetime=40),
    Site("kmalloc", "alloc_pipe_info", "free_pipe_info", 2, (GFP_KERNEL_ACCOUNT | __GFP_ZERO,),
         sizes=(176,), lifetime=300),
    Site("kmalloc", "alloc_pipe_info", "free_pipe_info", 2, (GFP_KERNEL_ACCOUNT | __GFP_ZERO,),
         sizes=(640,), lifetime=300, slot=1),
    Site("kmalloc", "load_elf_binary", "load_elf_binary", 2, (GFP_KERNEL,),
         sizes=(504, 616, 728, 784), lifetime=12),
    Site("kmalloc", "load_elf_binary", "load_elf_binary", 1, (GFP_KERNEL,),
         sizes=(28,), lifetime=12, slot=1),
    Site("kmalloc", "alloc_bprm", "free_bprm", 2, (GFP_KERNEL | __GFP_ZERO,), sizes=(432,),
         lifetime=25),
    Site("kmalloc", "proc_self_get_link", "kfree_link", 3, (GFP_KERNEL,), sizes=(5, 6, 8, 12),
         lifetime=6),
    Site("kmalloc", "ext4_find_extent", "ext4_ext_map_blocks", 4, (GFP_NOFS | __GFP_ZERO,),
         sizes=(96, 144, 192), lifetime=10),
    Site("kmalloc", "kvmalloc_node_noprof", "kvfree", 1, (GFP_KERNEL | __GFP_NOWARN | __GFP_NORETRY,),
         sizes=(6144, 8192, 12288, 16384, 32768), lifetime=150),
    Site("pages", "do_anonymous_page", "release_pages", 6, (GFP_HIGHUSER_MOVABLE | __GFP_ZERO,),
         sizes=(0,), lifetime=1200, migratetype=MIGRATE_MOVABLE),
    Site("pages", "__pte_alloc", "___pte_free_tlb", 2, (GFP_PGTABLE_USER,), sizes=(0,),
         lifetime=1500),
    Site("pages", "pgd_alloc", "pgd_free", 1, (GFP_PGTABLE_USER,), sizes=(1,), lifetime=2500),
)



def sites_of(ks) -> tuple[Site, ...]:
    """The :data:`SITES` whose allocating and freeing functions the symbol
    table *ks* names.  A profile's kernel lacks some (Debian builds ext4 as
    a module, not loaded when the profile was captured; 6.12 calls
    ``__kvmalloc_node_noprof`` and inlines ``file_free``): a call site is
    drawn only where that kernel has the function, so that every
    ``call_site`` a tool resolves through ``/proc/kallsyms`` is there."""
    return tuple(s for s in SITES if ks.has(s.alloc_fn) and ks.has(s.free_fn))


TASKS = ("bash", "find", "cc1", "sshd", "systemd-journal", "kworker/0:1", "python3", "make")


@dataclass
class Obj:
    """A live allocation: where it came from and how it must be freed."""

    site: Site
    ptr: int
    cpu: int
    pool: str  # slab cache it came from, "" for pages
    pfn: int = 0
    order: int = 0
    dead: bool = False  # freed out of turn (fault injection)


class Slabs:
    """Slab caches: per-CPU LIFO freelists of objects, fresh slabs when empty."""

    def __init__(self, nr_cpus: int):
        self.freelists: dict[str, list[list[int]]] = {}
        self.next_addr: dict[str, int] = {}
        self.nr_cpus = nr_cpus

    def alloc(self, pool: str, size: int, cpu: int) -> int:
        lists = self.freelists.setdefault(pool, [[] for _ in range(self.nr_cpus)])
        if lists[cpu]:
            return lists[cpu].pop()
        base = self.next_addr.setdefault(pool, SLAB_BASE + len(self.next_addr) * (1 << 30))
        self.next_addr[pool] = base + size
        return base

    def free(self, pool: str, ptr: int, cpu: int) -> None:
        self.freelists[pool][cpu].append(ptr)


class Pages:
    """The buddy allocator, coarsely: per-order free lists of pfns."""

    def __init__(self):
        self.free_lists: dict[int, list[int]] = {}
        self.next_pfn = FIRST_PFN

    def alloc(self, order: int) -> int:
        lst = self.free_lists.get(order)
        if lst:
            return lst.pop()
        pfn = (self.next_pfn + (1 << order) - 1) & ~((1 << order) - 1)
        self.next_pfn = pfn + (1 << order)
        return pfn

    def free(self, pfn: int, order: int) -> None:
        self.free_lists.setdefault(order, []).append(pfn)


class SteppedSlabWorkload:
    """The simulator one event at a time (``kmem-faults``; ``kmem`` is
    :class:`.slab_batch.SlabWorkload`, the same kernel generated in blocks)."""

    def __init__(self, kernel, seed: int = 0, count: int | None = None, faults: float = 0.0,
                 name: str = "kmem"):
        self.name = name
        self.engine = kernel.engine
        self.rng = random.Random(seed)
        self.remaining = count
        self.emitted = 0
        self.faults = faults
        self.nr_cpus = self.engine.nr_cpus
        self.tp = {key.split(":")[1]: tp for key, tp in self.engine.tracepoints.items()
                   if key.startswith("kmem:")}
        self.slabs, self.pages = Slabs(self.nr_cpus), Pages()
        self.live: list[tuple[int, int, Obj]] = []  # heap of (expiry step, serial, obj)
        self.steps = 0
        self.serial = 0
        self.last_kfree: tuple[str, int, int] | None = None  # (pool, cpu, ptr)
        self.next_pretrace = PRETRACE_BASE
        self.sites = sites_of(self.engine.kallsyms)
        self.weights = [s.weight for s in self.sites]
        self.current = [self._spawn(cpu) for cpu in range(self.nr_cpus)]

    @property
    def done(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def _spawn(self, cpu: int) -> int:
        pid = 2000 + self.rng.randrange(30000)
        self.engine.set_comm(pid, self.rng.choice(TASKS))
        return pid

    def run(self, budget: int) -> int:
        """Fire up to *budget* kmem events; returns how many were fired."""
        if self.remaining is not None:
            budget = min(budget, self.remaining)
        for _ in range(budget):
            self.step()
            self.engine.clock.advance(self.rng.randint(200, 4000))
        self.emitted += budget
        if self.remaining is not None:
            self.remaining -= budget
        return budget

    def step(self) -> None:
        """One kmem event: an injected fault, a due free, or an allocation."""
        self.steps += 1
        if self.rng.random() < 0.01:
            cpu = self.rng.randrange(self.nr_cpus)
            self.current[cpu] = self._spawn(cpu)
        if self.faults and self.rng.random() < self.faults and self._fault():
            return
        while self.live and self.live[0][2].dead:
            heapq.heappop(self.live)
        if self.live and self.live[0][0] <= self.steps:
            self._free(heapq.heappop(self.live)[2])
        else:
            self._alloc(self.rng.choices(self.sites, self.weights)[0],
                        self.rng.randrange(self.nr_cpus))

    # --- addresses --------------------------------------------------------------

    def _site_addr(self, fn: str, slot: int) -> int:
        """A fixed call instruction inside *fn* (the return address)."""
        ks = self.engine.kallsyms
        size = function_size(ks, fn)
        off = 5 + zlib.crc32(f"{fn}/{slot}".encode()) % max(1, size - 8)
        return ks.address(fn, off)

    def _fire(self, name: str, cpu: int, values: tuple) -> None:
        self.engine.emit(self.tp[name], cpu, self.current[cpu], values)

    # --- allocations ------------------------------------------------------------

    def _alloc(self, site: Site, cpu: int, req: int | None = None, alloc: int | None = None) -> Obj:
        rng = self.rng
        gfp = rng.choice(site.gfp)
        call_site = self._site_addr(site.alloc_fn, site.slot)
        if site.kind == "cache":
            req, alloc = CACHES[site.cache]
            obj = Obj(site, self.slabs.alloc(site.cache, alloc, cpu), cpu, site.cache)
            self._fire("kmem_cache_alloc", cpu,
                       (call_site, obj.ptr, req, alloc, gfp, site.node, site.cache))
        elif site.kind == "pages":
            order = rng.choice(site.sizes)
            pfn = self.pages.alloc(order)
            obj = Obj(site, PAGE_OFFSET + (pfn << 12), cpu, "", pfn, order)
            self._fire("mm_page_alloc", cpu, (pfn, order, gfp, site.migratetype, call_site, obj.ptr))
        else:
            req = req or rng.choice(site.sizes)
            alloc = alloc or kmalloc_size(req)
            if alloc > KMALLOC_MAX_CACHE_SIZE:  # kmalloc_large: whole pages
                order = get_order(alloc)
                pfn = self.pages.alloc(order)
                obj = Obj(site, PAGE_OFFSET + (pfn << 12), cpu, "", pfn, order)
            else:
                pool = f"kmalloc-{alloc}"
                obj = Obj(site, self.slabs.alloc(pool, alloc, cpu), cpu, pool)
            self._fire("kmalloc", cpu, (call_site, obj.ptr, req, alloc, gfp, site.node))
        self._keep(obj)
        return obj

    def _keep(self, obj: Obj) -> None:
        life = max(1, int(self.rng.expovariate(1.0 / obj.site.lifetime)))
        self.serial += 1
        heapq.heappush(self.live, (self.steps + life, self.serial, obj))

    # --- frees ------------------------------------------------------------------

    def _free_cpu(self, obj: Obj) -> int:
        if self.nr_cpus > 1 and self.rng.random() < obj.site.cross:
            return (obj.cpu + 1 + self.rng.randrange(self.nr_cpus - 1)) % self.nr_cpus
        return obj.cpu

    def _free(self, obj: Obj, as_kfree: bool = False) -> None:
        cpu = self._free_cpu(obj)
        call_site = self._site_addr(obj.site.free_fn, obj.site.slot)
        if obj.site.kind == "pages":
            self.pages.free(obj.pfn, obj.order)
            self._fire("mm_page_free", cpu, (obj.pfn, obj.order, call_site, obj.ptr))
            return
        if obj.site.kind == "cache" and not as_kfree:
            self.slabs.free(obj.pool, obj.ptr, cpu)
            self._fire("kmem_cache_free", cpu, (call_site, obj.ptr, obj.site.cache))
            return
        if obj.pool:
            self.slabs.free(obj.pool, obj.ptr, cpu)
            self.last_kfree = (obj.pool, cpu, obj.ptr)
        else:
            self.pages.free(obj.pfn, obj.order)
        self._fire("kfree", cpu, (call_site, obj.ptr))

    # --- deliberate mistakes (kmem-faults) -----------------------------------

    def _fault(self) -> bool:
        """One inconsistent event, or False when none is possible now."""
        kind = self.rng.randrange(4)
        if kind == 0:  # kfree() of kmem_cache_alloc() memory
            for _, _, obj in self.live:
                if obj.site.kind == "cache" and not obj.dead:
                    obj.dead = True
                    self._free(obj, as_kfree=True)
                    return True
            return False
        if kind == 1:  # bytes_alloc < bytes_req
            site = next((s for s in self.sites if s.alloc_fn == "kernfs_fop_open"), None)
            if site is None:
                return False
            self._alloc(site, self.rng.randrange(self.nr_cpus), req=200, alloc=192)
            return True
        cpu = self.rng.randrange(self.nr_cpus)
        site = self._site_addr("kfree_link", 0)
        if kind == 2:  # a pointer that was never allocated while tracing
            self.next_pretrace += 64
            self._fire("kfree", cpu, (site, self.next_pretrace))
            return True
        if self.last_kfree is None:  # double free of the last kfree()d object
            return False
        pool, free_cpu, ptr = self.last_kfree
        freelist = self.slabs.freelists[pool][free_cpu]
        if ptr not in freelist:  # reused meanwhile: not a double free any more
            return False
        freelist.remove(ptr)  # a corrupted freelist never hands it out again
        self.last_kfree = None
        self._fire("kfree", cpu, (site, ptr))
        return True


SlabFaultsWorkload = functools.partial(SteppedSlabWorkload, faults=0.01, name="kmem-faults")
