"""Kernel allocator facts every workload uses (SLUB on x86_64, 6.18):
kmalloc's size classes, page orders, the slab caches' sizes and where
the direct map puts objects.  GFP flag values are in :mod:`.gfp`.

One place, so the ``kmem`` simulator and the synthetic workloads cannot
give ``kmalloc(size)`` two different ``bytes_alloc``.
"""

from __future__ import annotations

PAGE_SIZE = 4096
# mm/slab_common.c: SLUB serves kmalloc from caches up to two pages; larger
# requests go to the page allocator (kmalloc_large: whole pages)
KMALLOC_MAX_CACHE_SIZE = 2 * PAGE_SIZE
# kmalloc_size_index's small classes; powers of two follow up to the maximum
KMALLOC_SMALL_CLASSES = (8, 16, 32, 64, 96, 128, 192)

# x86_64's direct map (page_offset_base) and where slab objects live in it
PAGE_OFFSET = 0xFFFF888000000000
SLAB_BASE = 0xFFFF888100000000

# name -> (object_size, size): /sys/kernel/slab/<name>/{object_size,slab_size}
CACHES = {
    "names_cache": (4096, 4096), "filp": (184, 192), "dentry": (192, 192),
    "ext4_inode_cache": (1120, 1128), "proc_inode_cache": (688, 696),
    "sock_inode_cache": (768, 832), "vm_area_struct": (192, 192),
    "skbuff_head_cache": (224, 256), "anon_vma_chain": (64, 64),
}


def get_order(size: int) -> int:
    """``get_order``: the page order holding *size* bytes."""
    return max(0, (size - 1) // PAGE_SIZE).bit_length()


def kmalloc_size(size: int) -> int:
    """Bytes SLUB gives ``kmalloc(size)`` (the event's ``bytes_alloc``):
    the small classes up to 192, powers of two up to
    ``KMALLOC_MAX_CACHE_SIZE``, whole pages (``PAGE_SIZE << get_order``)
    beyond."""
    for cls in KMALLOC_SMALL_CLASSES:
        if size <= cls:
            return cls
    if size <= KMALLOC_MAX_CACHE_SIZE:
        return 1 << (size - 1).bit_length()
    return PAGE_SIZE << get_order(size)


__all__ = ["CACHES", "KMALLOC_MAX_CACHE_SIZE", "KMALLOC_SMALL_CLASSES", "PAGE_OFFSET",
           "PAGE_SIZE", "SLAB_BASE", "get_order", "kmalloc_size"]
