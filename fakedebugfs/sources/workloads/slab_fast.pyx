"""Compiled generation of the kmem workload's blocks (:mod:`.slab_batch`).

:class:`SlabGen` keeps what the simulated allocators keep between blocks
and makes a block's events in order with plain loops, where
:mod:`.slab_batch` (the reference) works on whole arrays:

* the objects not freed yet (``pending``), in allocation order;
* SLUB's per-CPU freelists (one per slab cache and CPU) and the buddy
  allocator's free lists (one per order) as stacks: ``kfree`` pushes the
  object on its CPU's freelist, the next ``kmalloc`` from that cache on that
  CPU takes it back (LIFO), an empty freelist takes a new object from a
  fresh slab page (``new_slab``) and an empty buddy list fresh pages;
* for each CPU the task it runs.

The random draws are made by the caller (numpy's PCG64, in the reference's
order and sizes); this module only does the sequential parts, so a seed
gives the same events on both paths.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memset

import numpy as np

cdef enum:
    NKINDS = 6  # slab_batch.KINDS: three allocations, then their frees


cdef class SlabGen:
    """The allocators' state of one kmem workload; see the module docstring."""

    # site tables (slab_batch.Sites), per site / per (site, size choice)
    cdef int64_t[::1] skind, ngfp, nsizes, node, migratetype, cache
    cdef int64_t[:, ::1] gfp, req, abytes, order, pool
    cdef unsigned char[:, ::1] is_page
    cdef double[::1] cross
    cdef uint64_t[::1] alloc_addr, free_addr, pool_size
    cdef int64_t nr, npools, base
    cdef uint64_t slab_base, page_offset
    # fresh memory: next object of each slab cache (0: no slab yet), next pfn
    cdef uint64_t *next_addr
    cdef int64_t nslabs
    cdef public uint64_t next_pfn
    # freelists: stack s holds top[s] values in items[s] (bottom first)
    cdef uint64_t **items
    cdef int64_t *top
    cdef int64_t *cap
    cdef int64_t nstreams
    # objects not freed yet, in allocation order (npend of them)
    cdef object p_site, p_pick, p_cpu, p_fcpu, p_gfp, p_tfree, p_value
    cdef public int64_t npend

    def __cinit__(self):
        self.next_addr = NULL
        self.items = NULL
        self.top = NULL
        self.cap = NULL
        self.nstreams = 0

    def __init__(self, sites, int nr_cpus, pool_size, uint64_t slab_base,
                 uint64_t page_offset, uint64_t first_pfn):
        """*sites*: a ``slab_batch.Sites``; *pool_size*: bytes of an object
        of each slab cache (``slab_batch.POOL_SIZE``)."""
        self.skind, self.ngfp, self.nsizes = sites.kind, sites.ngfp, sites.nsizes
        self.node, self.migratetype, self.cache = sites.node, sites.migratetype, sites.cache
        self.gfp, self.req, self.abytes = sites.gfp, sites.req, sites.abytes
        self.order, self.pool = sites.order, sites.pool
        self.is_page = np.ascontiguousarray(sites.is_page).view(np.uint8)
        self.cross = sites.cross
        self.alloc_addr, self.free_addr = sites.alloc_addr, sites.free_addr
        self.pool_size = np.ascontiguousarray(pool_size, np.uint64)
        self.nr, self.npools = nr_cpus, len(pool_size)
        self.base = self.npools * nr_cpus  # first buddy list: base + order
        self.slab_base, self.page_offset, self.next_pfn = slab_base, page_offset, first_pfn
        self.next_addr = <uint64_t *>malloc(self.npools * sizeof(uint64_t))
        if self.next_addr == NULL:
            raise MemoryError()
        memset(self.next_addr, 0, self.npools * sizeof(uint64_t))
        self.nslabs = 0
        self.nstreams = self.base + int(np.max(sites.order)) + 1
        self.items = <uint64_t **>malloc(self.nstreams * sizeof(uint64_t *))
        self.top = <int64_t *>malloc(self.nstreams * sizeof(int64_t))
        self.cap = <int64_t *>malloc(self.nstreams * sizeof(int64_t))
        if self.items == NULL or self.top == NULL or self.cap == NULL:
            raise MemoryError()
        for s in range(self.nstreams):
            self.items[s], self.top[s], self.cap[s] = NULL, 0, 0
        self.npend = 0
        self._grow(1 << 14)

    def __dealloc__(self):
        if self.items != NULL:
            for s in range(self.nstreams):
                free(self.items[s])
        free(self.items)
        free(self.top)
        free(self.cap)
        free(self.next_addr)

    def _grow(self, Py_ssize_t need):
        """Room for *need* pending objects (their columns reallocated)."""
        cur = 0 if self.p_site is None else len(self.p_site)
        if need <= cur:
            return
        size = max(need, 2 * cur)
        cols = []
        for old, dtype in ((self.p_site, np.int64), (self.p_pick, np.int64),
                           (self.p_cpu, np.int64), (self.p_fcpu, np.int64),
                           (self.p_gfp, np.int64), (self.p_tfree, np.int64),
                           (self.p_value, np.uint64)):
            new = np.zeros(size, dtype)
            if old is not None:
                new[:self.npend] = old[:self.npend]
            cols.append(new)
        (self.p_site, self.p_pick, self.p_cpu, self.p_fcpu, self.p_gfp, self.p_tfree,
         self.p_value) = cols

    def stacks(self) -> dict:
        """The freelists as ``{stream: values, bottom first}`` (non-empty ones)."""
        out = {}
        for s in range(self.nstreams):
            if self.top[s]:
                out[s] = np.array(<uint64_t[:self.top[s]]>self.items[s], np.uint64)
        return out

    def pending(self) -> dict:
        """The objects not freed yet (columns, allocation order)."""
        n = self.npend
        return {"site": self.p_site[:n].copy(), "cpu": self.p_cpu[:n].copy(),
                "fcpu": self.p_fcpu[:n].copy(), "gfp": self.p_gfp[:n].copy(),
                "tfree": self.p_tfree[:n].copy(), "value": self.p_value[:n].copy()}

    # --- a block's new objects -----------------------------------------------------

    def objects(self, int64_t tick0, const int64_t[::1] site, const int64_t[::1] cpu,
                const double[::1] r_gfp, const double[::1] r_pick, const double[::1] life,
                const double[::1] r_cross, const int64_t[::1] r_other):
        """Append ``len(site)`` allocations at ticks ``tick0, tick0 + 1, ...``
        from the block's draws (``slab_batch.SlabWorkload._new_objects``
        computes the same from the same draws)."""
        cdef Py_ssize_t m = site.shape[0], i, at
        self._grow(self.npend + m)
        cdef int64_t[::1] p_site = self.p_site, p_pick = self.p_pick, p_cpu = self.p_cpu
        cdef int64_t[::1] p_fcpu = self.p_fcpu, p_gfp = self.p_gfp, p_tfree = self.p_tfree
        cdef uint64_t[::1] p_value = self.p_value
        cdef int64_t s, c, lf
        with nogil:
            for i in range(m):
                s, c, at = site[i], cpu[i], self.npend + i
                p_site[at], p_cpu[at] = s, c
                p_gfp[at] = self.gfp[s, <int64_t>(r_gfp[i] * <double>self.ngfp[s])]
                p_pick[at] = <int64_t>(r_pick[i] * <double>self.nsizes[s])
                lf = <int64_t>life[i]
                p_tfree[at] = tick0 + i + (lf if lf > 1 else 1)
                # a cross-CPU free: another CPU frees it (its own otherwise)
                if r_cross[i] < self.cross[s] and self.nr > 1:
                    p_fcpu[at] = (c + 1 + r_other[i]) % self.nr
                else:
                    p_fcpu[at] = c
                p_value[at] = 0
        self.npend += m

    # --- a block's events ------------------------------------------------------------

    def events(self, int64_t end, Py_ssize_t m):
        """The events of the ticks ``end - m .. end - 1`` (the last *m*
        objects are their allocations): per tick the frees due then (in
        allocation order), then the tick's allocation, their addresses from
        the freelists.  Returns ``(kind, cpu, where, bounds, cols)``: per
        event its tracepoint kind and CPU; the positions of each kind's
        events (kind k's at ``where[bounds[k]:bounds[k + 1]]``); per kind
        its argument columns (a uint64 table, a row per argument)."""
        cdef Py_ssize_t total = self.npend, nold = total - m, o, e, j, ndue = 0
        cdef int64_t start = end - m, t
        cdef int64_t[::1] p_site = self.p_site, p_pick = self.p_pick, p_cpu = self.p_cpu
        cdef int64_t[::1] p_fcpu = self.p_fcpu, p_gfp = self.p_gfp, p_tfree = self.p_tfree
        cdef uint64_t[::1] p_value = self.p_value
        # counting sort by the tick an event happens at (stable: allocation order)
        slot_np = np.zeros(m + 1, np.int64)
        cdef int64_t[::1] slot = slot_np
        for o in range(total):
            t = p_tfree[o]
            if t < end:
                if t < start:
                    raise ValueError(f"object {o} was due at tick {t}, before {start}")
                slot[t - start + 1] += 1
                ndue += 1
        cdef Py_ssize_t n = m + ndue
        for j in range(m):  # frees of tick j come after j allocations and earlier frees
            slot[j + 1] += slot[j] + 1
        obj_np = np.empty(n, np.int64)
        cdef int64_t[::1] obj = obj_np
        for o in range(total):
            t = p_tfree[o]
            if t < end:
                obj[slot[t - start]] = o
                slot[t - start] += 1
        for j in range(m):  # slot[j]: right after tick j's frees
            obj[slot[j]] = ~(<int64_t>(nold + j))  # an allocation: ~obj
        kind_np = np.empty(n, np.int64)
        cpu_np = np.empty(n, np.int64)
        counts = self._kinds(obj, kind_np, cpu_np)
        where_all = np.empty(n, np.int64)  # each kind's positions, kind after kind
        bounds = tuple(np.cumsum([0] + counts).tolist())
        where = [where_all[bounds[k]:bounds[k + 1]] for k in range(NKINDS)]
        cols = [np.empty((w, c), np.uint64) for w, c in zip((6, 7, 6, 2, 3, 4), counts)]
        self._fill(obj, kind_np, where, cols)
        self._compact(end)
        return kind_np, cpu_np, where_all, bounds, cols

    cdef list _kinds(self, int64_t[::1] obj, int64_t[::1] kind, int64_t[::1] cpu):
        """Kind (kmalloc, kmem_cache_alloc, mm_page_alloc, then the frees)
        and CPU of each event; how many of each kind."""
        cdef int64_t counts[NKINDS]
        cdef Py_ssize_t e, o
        cdef int64_t k, s
        cdef int64_t[::1] p_site = self.p_site, p_cpu = self.p_cpu, p_fcpu = self.p_fcpu
        for k in range(NKINDS):
            counts[k] = 0
        with nogil:
            for e in range(obj.shape[0]):
                o = obj[e]
                if o < 0:
                    s = p_site[~o]
                    k = self.skind[s]
                    cpu[e] = p_cpu[~o]
                else:
                    s = p_site[o]
                    k = 3 + self.skind[s]
                    cpu[e] = p_fcpu[o]
                kind[e] = k
                counts[k] += 1
        return [counts[k] for k in range(NKINDS)]

    cdef inline uint64_t _fresh(self, int64_t stream) noexcept nogil:
        """A new object from a fresh slab page of the stream's cache (each
        cache's slabs in their own GiB, objects one after the other), or
        fresh buddy pages aligned to their order."""
        cdef int64_t order, p
        cdef uint64_t pfn, addr
        if stream >= self.base:
            order = stream - self.base
            pfn = (self.next_pfn + (1 << order) - 1) & ~((<uint64_t>1 << order) - 1)
            self.next_pfn = pfn + (1 << order)
            return pfn
        p = stream // self.nr
        if self.next_addr[p] == 0:
            self.next_addr[p] = self.slab_base + <uint64_t>self.nslabs * (1 << 30)
            self.nslabs += 1
        addr = self.next_addr[p]
        self.next_addr[p] = addr + self.pool_size[p]
        return addr

    cdef inline int _push(self, int64_t s, uint64_t v) except -1 nogil:
        """``kfree``: the object goes on top of its freelist."""
        cdef int64_t size
        cdef uint64_t *grown
        if self.top[s] == self.cap[s]:
            size = 2 * self.cap[s] if self.cap[s] else 64
            grown = <uint64_t *>realloc(self.items[s], size * sizeof(uint64_t))
            if grown == NULL:
                with gil:
                    raise MemoryError()
            self.items[s], self.cap[s] = grown, size
        self.items[s][self.top[s]] = v
        self.top[s] += 1
        return 0

    cdef inline uint64_t _pop(self, int64_t s) noexcept nogil:
        """An allocation: the last object freed to its freelist, else a fresh one."""
        if self.top[s]:
            self.top[s] -= 1
            return self.items[s][self.top[s]]
        return self._fresh(s)

    cdef _fill(self, int64_t[::1] obj, int64_t[::1] kind, list where, list cols):
        """Run the freelists over the events in order and write each event's
        arguments in its kind's columns."""
        cdef int64_t[::1] w0 = where[0], w1 = where[1], w2 = where[2]
        cdef int64_t[::1] w3 = where[3], w4 = where[4], w5 = where[5]
        cdef uint64_t[:, ::1] c0 = cols[0], c1 = cols[1], c2 = cols[2]
        cdef uint64_t[:, ::1] c3 = cols[3], c4 = cols[4], c5 = cols[5]
        cdef int64_t[::1] p_site = self.p_site, p_pick = self.p_pick, p_cpu = self.p_cpu
        cdef int64_t[::1] p_fcpu = self.p_fcpu, p_gfp = self.p_gfp
        cdef uint64_t[::1] p_value = self.p_value
        cdef int64_t r[NKINDS]
        cdef Py_ssize_t e, o, i
        cdef int64_t k, s, j, stream, c
        cdef uint64_t v, ptr
        cdef bint alloc, page
        for k in range(NKINDS):
            r[k] = 0
        with nogil:
            for e in range(obj.shape[0]):
                o = obj[e]
                alloc = o < 0
                if alloc:
                    o = ~o
                s, j = p_site[o], p_pick[o]
                page = self.is_page[s, j]
                c = p_cpu[o] if alloc else p_fcpu[o]
                # its freelist: the buddy list of its order, or its cache on its CPU
                stream = self.base + self.order[s, j] if page else self.pool[s, j] * self.nr + c
                if alloc:
                    v = self._pop(stream)
                    p_value[o] = v
                else:
                    v = p_value[o]
                    self._push(stream, v)
                ptr = self.page_offset + (v << 12) if page else v  # page_address()
                k = kind[e]
                i = r[k]
                r[k] += 1
                if k == 0:  # kmalloc: call_site, ptr, bytes_req, bytes_alloc, gfp_flags, node
                    w0[i] = e
                    c0[0, i] = self.alloc_addr[s]
                    c0[1, i] = ptr
                    c0[2, i] = self.req[s, j]
                    c0[3, i] = self.abytes[s, j]
                    c0[4, i] = p_gfp[o]
                    c0[5, i] = self.node[s]
                elif k == 1:  # kmem_cache_alloc: the same and the cache's name
                    w1[i] = e
                    c1[0, i] = self.alloc_addr[s]
                    c1[1, i] = ptr
                    c1[2, i] = self.req[s, j]
                    c1[3, i] = self.abytes[s, j]
                    c1[4, i] = p_gfp[o]
                    c1[5, i] = self.node[s]
                    c1[6, i] = self.cache[s]
                elif k == 2:  # mm_page_alloc: pfn, order, gfp_flags, migratetype, call_site, ptr
                    w2[i] = e
                    c2[0, i] = v
                    c2[1, i] = self.order[s, j]
                    c2[2, i] = p_gfp[o]
                    c2[3, i] = self.migratetype[s]
                    c2[4, i] = self.alloc_addr[s]
                    c2[5, i] = ptr
                elif k == 3:  # kfree: call_site, ptr
                    w3[i] = e
                    c3[0, i] = self.free_addr[s]
                    c3[1, i] = ptr
                elif k == 4:  # kmem_cache_free: call_site, ptr, name
                    w4[i] = e
                    c4[0, i] = self.free_addr[s]
                    c4[1, i] = ptr
                    c4[2, i] = self.cache[s]
                else:  # mm_page_free: pfn, order, call_site, ptr
                    w5[i] = e
                    c5[0, i] = v
                    c5[1, i] = self.order[s, j]
                    c5[2, i] = self.free_addr[s]
                    c5[3, i] = ptr

    cdef void _compact(self, int64_t end):
        """Keep the objects still alive at *end*, in allocation order."""
        cdef int64_t[::1] p_site = self.p_site, p_pick = self.p_pick, p_cpu = self.p_cpu
        cdef int64_t[::1] p_fcpu = self.p_fcpu, p_gfp = self.p_gfp, p_tfree = self.p_tfree
        cdef uint64_t[::1] p_value = self.p_value
        cdef Py_ssize_t o, at = 0
        with nogil:
            for o in range(self.npend):
                if p_tfree[o] >= end:
                    p_site[at], p_pick[at], p_cpu[at] = p_site[o], p_pick[o], p_cpu[o]
                    p_fcpu[at], p_gfp[at], p_tfree[at] = p_fcpu[o], p_gfp[o], p_tfree[o]
                    p_value[at] = p_value[o]
                    at += 1
        self.npend = at

    def tasks(self, const int64_t[::1] cpu, const int64_t[::1] spawn_at,
              const int64_t[::1] spawn_cpu, const int64_t[::1] spawn_pid, int64_t[::1] current):
        """The pid of each event: before event ``spawn_at[i]`` CPU ``spawn_cpu[i]``
        switches to task ``spawn_pid[i]``; *current* (each CPU's task) is
        updated."""
        n = cpu.shape[0]
        pid_np = np.empty(n, np.int64)
        cdef int64_t[::1] pid = pid_np
        cdef Py_ssize_t e, i = 0, k = spawn_at.shape[0]
        with nogil:
            for e in range(n):
                while i < k and spawn_at[i] == e:
                    current[spawn_cpu[i]] = spawn_pid[i]
                    i += 1
                pid[e] = current[cpu[e]]
        return pid_np

    def spread(self, int64_t last, int64_t now, Py_ssize_t m):
        """*m* timestamps spread evenly after *last* up to *now* (a real
        clock: a batch's events happened since the last one): ``last +
        (now - last) * i // m`` for i in 1..m (no division in the loop)."""
        if now < last or m <= 0:
            raise ValueError("spread: now before last, or no events")
        out_np = np.empty(m, np.int64)
        cdef int64_t[::1] out = out_np
        cdef int64_t span = now - last, q = 0, r = 0
        cdef int64_t dq = span // m, dr = span % m
        cdef Py_ssize_t i
        with nogil:
            for i in range(m):  # q, r: (span * (i + 1)) // m and % m
                q += dq
                r += dr
                if r >= m:
                    q += 1
                    r -= m
                out[i] = last + q
        return out_np

    def spans(self, const int64_t[::1] where, tuple bounds, int64_t a, int64_t b):
        """For each kind, which of its events (``lo, hi``) are among the
        block's events ``a:b``: *where* holds each kind's positions in
        order, kind k's at ``bounds[k]:bounds[k + 1]``."""
        cdef Py_ssize_t lo[NKINDS]
        cdef Py_ssize_t hi[NKINDS]
        self._spans(where, bounds, a, b, lo, hi)
        return [(lo[k] - <Py_ssize_t>bounds[k], hi[k] - <Py_ssize_t>bounds[k])
                for k in range(NKINDS)]

    def batch_index(self, const int64_t[::1] where, tuple bounds, int64_t a, int64_t b):
        """:meth:`spans`, and for each kind the positions of its events
        among ``a:b`` counted from a (views of one new array)."""
        cdef Py_ssize_t lo[NKINDS]
        cdef Py_ssize_t hi[NKINDS]
        cdef Py_ssize_t i, k, at = 0
        self._spans(where, bounds, a, b, lo, hi)
        total = 0
        for k in range(NKINDS):
            total += hi[k] - lo[k]
        out_np = np.empty(total, np.int64)
        cdef int64_t[::1] out = out_np
        spans, views = [], []
        for k in range(NKINDS):
            spans.append((lo[k] - <Py_ssize_t>bounds[k], hi[k] - <Py_ssize_t>bounds[k]))
            views.append(out_np[at:at + hi[k] - lo[k]])
            for i in range(lo[k], hi[k]):
                out[at] = where[i] - a
                at += 1
        return spans, views

    cdef void _spans(self, const int64_t[::1] where, tuple bounds, int64_t a, int64_t b,
                     Py_ssize_t *lo, Py_ssize_t *hi):
        cdef Py_ssize_t k, start, end
        for k in range(NKINDS):
            start, end = bounds[k], bounds[k + 1]
            lo[k] = _lower_bound(where, start, end, a)
            hi[k] = _lower_bound(where, lo[k], end, b)


cdef Py_ssize_t _lower_bound(const int64_t[::1] pos, Py_ssize_t lo, Py_ssize_t hi,
                             int64_t x) noexcept nogil:
    """The first index in ``lo:hi`` of the sorted *pos* whose value is not
    below *x*."""
    cdef Py_ssize_t mid
    while lo < hi:
        mid = (lo + hi) // 2
        if pos[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo
