"""ftrace tracer plugins (``struct tracer``): ``nop`` and the 2.6.29
kmemtrace ftrace plugin's ``kmemtrace`` (kernel/trace/kmemtrace.c, Feb 2009;
docs/tracefs.md, "The kmemtrace tracer").

``kmemtrace`` attaches to the kmem tracepoints while it is the current
tracer and writes ``TRACE_KMEM_ALLOC``/``TRACE_KMEM_FREE`` entries
(``struct kmemtrace_alloc_entry``/``kmemtrace_free_entry``) into the ftrace
buffers; its ``print_line`` prints them in the original kmemtrace text or,
with the ``kmem_minimalistic`` tracer flag, as the compact table.

Decisions where the patch's sample output and its code disagree (the code
wins unless said otherwise):

* Headers: ``kmemtrace_headers`` returns early without
  ``kmem_minimalistic``, so the original output starts with only
  ``# tracer: kmemtrace`` and ``#`` (the sample shows the table header
  there too; it was pasted from the minimalistic run).  In minimalistic mode
  the header ends with ``# |`` and an empty line, as the ``seq_printf``
  calls write it.
* ``type_id`` of allocations: ``kmemtrace_mark_alloc_node`` never assigns
  ``entry->type_id``, so the kernel printed whatever the reserved buffer
  held (0, ``K``, in the sample even for cache allocations such as
  ``getname``).  We store the real type (0 kmalloc, 1 cache, 2 pages), the
  patch's evident intent (the free path sets it); the field is otherwise
  as the struct lays it out.
* ``%4d`` of ``bytes_req``/``bytes_alloc`` (``size_t`` printed as int),
  ``%08x`` of the flags, ``0x%tx`` of the pointer and ``seq_print_ip_sym(..,
  0)`` (the bare symbol name) are reproduced exactly.
"""

from __future__ import annotations

from fakedebugfs.engine.core.errors import einval
# its entries, by name: their numbers are 2.6.29's (TRACE_KMEM_ALLOC/FREE,
# 17 and 18) unless the profile's kernel numbers other entries so
# (.registry gives them free ones then)
KMEM_ALLOC, KMEM_FREE = "ftrace:kmem_alloc", "ftrace:kmem_free"

# enum kmemtrace_type_id
KMEMTRACE_TYPE_KMALLOC, KMEMTRACE_TYPE_CACHE, KMEMTRACE_TYPE_PAGES = 0, 1, 2
TRACE_KMEM_OPT_MINIMAL = "kmem_minimalistic"
PAGE_SHIFT = 12

# tracepoint -> (alloc?, type_id)
KMEM_TRACEPOINTS = {
    "kmem:kmalloc": (True, KMEMTRACE_TYPE_KMALLOC),
    "kmem:kmem_cache_alloc": (True, KMEMTRACE_TYPE_CACHE),
    "kmem:mm_page_alloc": (True, KMEMTRACE_TYPE_PAGES),
    "kmem:kfree": (False, KMEMTRACE_TYPE_KMALLOC),
    "kmem:kmem_cache_free": (False, KMEMTRACE_TYPE_CACHE),
    "kmem:mm_page_free": (False, KMEMTRACE_TYPE_PAGES),
}
TYPE_CHAR = {KMEMTRACE_TYPE_KMALLOC: "K", KMEMTRACE_TYPE_CACHE: "C", KMEMTRACE_TYPE_PAGES: "P"}


class NopTracer:
    """``nop_trace``: no entries of its own; its two test flags as 6.18 has
    them (``test_nop_refuse`` cannot be set)."""

    name = "nop"

    def __init__(self):
        self.flags = {"test_nop_accept": False, "test_nop_refuse": False}

    def init(self, ft) -> None:
        pass

    def reset(self, ft) -> None:
        pass

    def set_flag(self, name: str, on: bool) -> None:
        """``nop_set_flag``: accept one, refuse the other with EINVAL."""
        if name == "test_nop_refuse":
            raise einval(name)
        self.flags[name] = on

    def print_line(self, ft, etype, rec):
        return None

    def print_header(self, ft):
        return None


def kmem_values(key: str, values: tuple) -> tuple:
    """``(call_site, ptr, bytes_req, bytes_alloc, gfp_flags, node)`` of a kmem
    tracepoint's arguments (engine.core.catalogue order); pages are
    ``PAGE_SIZE << order`` bytes at the page's address."""
    if key in ("kmem:kmalloc", "kmem:kmem_cache_alloc"):
        return tuple(values[:6])
    if key == "kmem:mm_page_alloc":
        pfn, order, gfp, _mt, site, ptr = values
        size = (1 << PAGE_SHIFT) << order
        return site, ptr, size, size, gfp, -1
    if key == "kmem:mm_page_free":
        return values[2], values[3], 0, 0, 0, -1
    return values[0], values[1], 0, 0, 0, -1


class KmemTracer:
    """``kmem_tracer``: ``init`` resets the buffers and attaches the probes,
    ``reset`` detaches them."""

    name = "kmemtrace"

    def __init__(self):
        self.flags = {TRACE_KMEM_OPT_MINIMAL: False}
        self.probes = {}

    def set_flag(self, name: str, on: bool) -> None:
        self.flags[name] = on

    def init(self, ft) -> None:
        """``kmem_trace_init``: reset every CPU, start tracing allocations."""
        ft.reset()
        for key in KMEM_TRACEPOINTS:
            tp = ft.engine.tracepoints.get(key)
            if tp is not None:
                self.probes[key] = self._probe(ft, key)
                tp.register(self.probes[key])

    def reset(self, ft) -> None:
        """``kmem_trace_reset``: stop tracing allocations."""
        for key, probe in self.probes.items():
            tp = ft.engine.tracepoints.get(key)
            if tp is not None:
                tp.unregister(probe)
        self.probes = {}

    def _probe(self, ft, key: str):
        alloc, type_id = KMEM_TRACEPOINTS[key]
        etype = ft.events[KMEM_ALLOC if alloc else KMEM_FREE]

        def probe(cpu, pid, ts, values):
            """``kmemtrace_mark_alloc_node`` / ``kmemtrace_mark_free``."""
            site, ptr, req, given, gfp, node = kmem_values(key, values)
            rec = {"type_id": type_id, "call_site": site, "ptr": ptr}
            if alloc:
                rec.update(bytes_req=req, bytes_alloc=given, gfp_flags=gfp, node=node)
            ft.commit(cpu, ts, etype.pack(pid, rec))
        return probe

    # --- output --------------------------------------------------------------

    @property
    def minimal(self) -> bool:
        return self.flags[TRACE_KMEM_OPT_MINIMAL]

    def print_header(self, ft) -> str:
        """``kmemtrace_headers``."""
        if not self.minimal:
            return ""
        return ("#\n"
                "# ALLOC  TYPE  REQ   GIVEN  FLAGS           POINTER         NODE    CALLER\n"
                "# FREE   |      |     |       |              |   |            |        |\n"
                "# |\n\n")

    def print_line(self, ft, etype, rec):
        """``kmemtrace_print_line``: only this tracer's two entry types."""
        if etype.key == KMEM_ALLOC:
            return self._alloc_compress(ft, rec) if self.minimal else _alloc_original(rec)
        if etype.key == KMEM_FREE:
            return self._free_compress(ft, rec) if self.minimal else _free_original(rec)
        return None

    def _alloc_compress(self, ft, r) -> str:
        """``kmemtrace_print_alloc_compress``."""
        return ("  +      " + TYPE_CHAR.get(r["type_id"], "?") + "   "
                + f"{_int(r['bytes_req']):4d}   {_int(r['bytes_alloc']):4d}   "
                + f"{r['gfp_flags']:08x}   0x{r['ptr']:x}   {r['node']:4d}   "
                + ft.engine.kallsyms.sym(r["call_site"]) + "\n")

    def _free_compress(self, ft, r) -> str:
        """``kmemtrace_print_free_compress``."""
        return ("  -      " + TYPE_CHAR.get(r["type_id"], "?") + "     "
                + " " * 23 + f"0x{r['ptr']:x}   " + " " * 7
                + ft.engine.kallsyms.sym(r["call_site"]) + "\n")


def _int(v: int) -> int:
    """A ``size_t`` passed to ``%d``: its low 32 bits, signed."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _alloc_original(r) -> str:
    """``kmemtrace_print_alloc_original`` (the old linux/kmemtrace.h text)."""
    return (f"type_id {r['type_id']} call_site {r['call_site']} ptr {r['ptr']} "
            f"bytes_req {r['bytes_req']} bytes_alloc {r['bytes_alloc']} "
            f"gfp_flags {r['gfp_flags']} node {r['node']}\n")


def _free_original(r) -> str:
    """``kmemtrace_print_free_original``."""
    return f"type_id {r['type_id']} call_site {r['call_site']} ptr {r['ptr']}\n"
