"""Kernel allocator facts are one table (``engine/core/slab.py``,
``engine/core/gfp.py``) and every workload's kmem events agree with it.

The facts: SLUB's kmalloc classes (mm/slab_common.c's kmalloc_size_index
and kmalloc_large beyond two pages), the caches' object and slab sizes as
/sys/kernel/slab shows them, and GFP flags as include/linux/gfp_types.h
defines them and the kmem formats print them.
"""

from __future__ import annotations

import re

import pytest

from fakedebugfs.engine.core import gfp, slab
from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.sources.workloads import make_workload

FIELDS = re.compile(r"(\w+)=(\S+)")


@pytest.mark.parametrize("size,want", [
    (1, 8), (8, 8), (9, 16), (65, 96), (97, 128), (129, 192), (193, 256), (4096, 4096),
    (4097, 8192), (8192, 8192),
    (8193, 16384), (16385, 32768),  # kmalloc_large: whole pages, PAGE_SIZE << get_order
    (12288, 16384),
])
def test_kmalloc_size_classes(size, want):
    assert slab.kmalloc_size(size) == want


def test_gfp_values_are_what_the_format_prints():
    """The named GFP masks equal the masks the kmem formats' __print_flags
    table gives those names (the format text is the kernel's own)."""
    table = dict((name, mask) for mask, name in gfp.GFP_FLAGS)
    for name in ("GFP_KERNEL", "GFP_ATOMIC", "GFP_KERNEL_ACCOUNT", "GFP_NOFS",
                 "GFP_HIGHUSER_MOVABLE", "__GFP_ZERO", "__GFP_ACCOUNT", "__GFP_NOWARN"):
        assert table[name] == getattr(gfp, name), name


def kmem_events(workload: str, n: int = 6000, profile: str = "linux-6.18"):
    """The kmalloc and kmem_cache_alloc lines of *workload* under *profile*
    (linux-6.18's kmem_cache_alloc names the cache)."""
    kernel = Kernel(clock="virtual", seed=3, profile=str(SHIPPED_PROFILES / profile))
    ft = kernel.ftrace
    ft.resize(64 * 1024)
    for key in ("kmem:kmalloc", "kmem:kmem_cache_alloc"):
        ft.set_event(key, True)
    wl = make_workload(workload, kernel, seed=3, count=n)
    while not wl.done:
        wl.run(n)
    out = []
    for line in ft.trace_text():
        m = re.search(r" (kmalloc|kmem_cache_alloc): (.*)$", line)
        if m:
            out.append((m[1], dict(FIELDS.findall(m[2]))))
    return out


def test_a_profiles_own_kmem_cache_alloc_is_filled_by_name():
    """Debian 6.12's kmem_cache_alloc has ``accounted`` and no ``name``: the
    workload's batches of it go one by one, each field taken by name (in
    columns, by position, the cache names went into ``accounted``)."""
    events = kmem_events("kmem", 2000, profile="debian-6.12")
    caches = [f for kind, f in events if kind == "kmem_cache_alloc"]
    assert caches and {kind for kind, _ in events} == {"kmalloc", "kmem_cache_alloc"}
    for f in caches:
        assert "name" not in f and f["accounted"] == "false", f
        assert (int(f["bytes_req"]), int(f["bytes_alloc"])) in slab.CACHES.values(), f


@pytest.mark.parametrize("workload", ["default", "classic", "kmem"])
def test_every_workload_allocates_as_slub_does(workload):
    events = kmem_events(workload)
    kinds = {kind for kind, _ in events}
    assert kinds == {"kmalloc", "kmem_cache_alloc"}, f"{workload} fired {kinds}"
    for kind, f in events:
        req, alloc = int(f["bytes_req"]), int(f["bytes_alloc"])
        if kind == "kmalloc":
            assert alloc == slab.kmalloc_size(req), f
        else:
            assert (req, alloc) == slab.CACHES[f["name"]], f
