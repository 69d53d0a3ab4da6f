"""The default workload's memory activity: kmalloc, slab caches and pages
allocated from the kernel's call sites and freed later, as SLUB and the
page allocator do (sizes from engine/core/slab.py)."""

from __future__ import annotations

from fakedebugfs.engine.core.kallsyms import FUNCTIONS
from fakedebugfs.engine.core.gfp import GFP_ATOMIC, GFP_KERNEL, GFP_KERNEL_ACCOUNT
from fakedebugfs.engine.core.slab import CACHES, PAGE_OFFSET, kmalloc_size

# (cache, the function allocating from it, the ones freeing to it): a cache's
# kmem_cache_free comes from its own free path (putname, file_free_rcu...),
# as on the kernel, so a call site seen once is seen again; of several
# freeing functions, the first the symbol table names (6.12 inlines
# file_free into __fput)
CACHE_SITES = (("names_cache", "getname_flags", ("putname",)),
               ("filp", "alloc_empty_file", ("file_free_rcu", "__fput")),
               ("dentry", "__d_alloc", ("__d_free",)),
               ("vm_area_struct", "vm_area_alloc", ("vm_area_free",)),
               ("skbuff_head_cache", "__alloc_skb", ("kfree_skbmem",)))
LIVE_MAX = 4096  # allocations alive at once (all CPUs)


class KmemActivity:
    """The kmem events of the default workload (a part of
    :class:`~fakedebugfs.sources.workloads.synthetic.SyntheticWorkload`)."""

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
        """An instruction in one of the allocating functions
        (kallsyms.FUNCTIONS), where the kernel's symbol table has them."""
        sites = self._sites()
        addr, size = sites[self.rng.randrange(len(sites))]
        return addr + self.rng.randrange(size) // 4 * 4

    def _caches(self) -> dict:
        """``{cache: (allocating function, freeing function)}`` of the
        :data:`CACHE_SITES` whose functions the symbol table names."""
        ks = self.engine.kallsyms
        cached = self.__dict__.get("_cache_table")
        if cached is not None and cached[0] is ks:
            return cached[1]
        caches = {}
        for cache, alloc, frees in CACHE_SITES:
            free = next((f for f in frees if ks.has(f)), None)
            if ks.has(alloc) and free is not None:
                caches[cache] = (alloc, free)
        self._cache_table = (ks, caches)
        return caches

    def _sites(self) -> list:
        """``(address, size)`` of each of the first ``alloc_sites``
        functions of kallsyms.FUNCTIONS the symbol table has, made again
        when the table changes (a replay's).  The fake's own table starts
        with them; a profile's (a kernel's ``/proc/kallsyms``, in address
        order) has them by name, and lacks some (a module's, one renamed):
        those are left out (taking its first symbols instead made kmalloc's
        call sites early boot code, ``startup_64_setup_gdt_idt``)."""
        ks = self.engine.kallsyms
        cached = self.__dict__.get("_site_table")
        if cached is not None and cached[0] is ks.addrs:
            return cached[1]
        names, addrs, sizes = ks.names, ks.addrs, ks.sizes
        n = min(self.alloc_sites, len(names))
        wanted = [name for name, _ in FUNCTIONS[:n]]
        if names[:n] == wanted:  # the fake's own table
            sites = [(addrs[i], sizes[i]) for i in range(n)]
        else:
            by_name = getattr(ks, "by_name", None)  # a profile's table: name -> positions
            if by_name is not None:
                types = ks.types  # its text symbol, where a name has several
                pos = {w: next((p for p in by_name[w] if types[p] in "tT"), by_name[w][0])
                       for w in wanted if by_name.get(w)}
            else:
                pos, want = {}, set(wanted)
                for i, name in enumerate(names):
                    if name in want and name not in pos:
                        pos[name] = i
            sites = [(addrs[pos[w]], max(sizes[pos[w]], 4)) for w in wanted if w in pos] \
                or [(addrs[i], max(sizes[i], 4)) for i in range(n)]
        self._site_table = (ks.addrs, sites)
        return sites

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
        caches = self._caches()
        if name not in caches:  # the kernel of the profile lacks its functions
            if not caches:
                return self._kmalloc(cpu)
            name = self.rng.choice(list(caches))  # in CACHE_SITES order
        fn = caches[name][0]
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
            free = self._caches().get(item[3], (None, "kfree"))[1]
            site = self._addr(free, self.rng.randrange(2, 12) * 4)
            self._ev(cpu, pid, "kmem:kmem_cache_free", (site, item[2], item[3]))
        else:
            self._ev(cpu, pid, "kmem:mm_page_free", item[1:])
        return None
