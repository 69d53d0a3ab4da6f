"""Ring-buffer memory on transparent huge pages.

The kernel's ring-buffer pages are reached through its direct map, which is
mapped with huge pages: copying a sub-buffer out (``tracing_buffers_read``,
``ring_buffer_read_page``) costs the copy and little else.  Our buffers are
a ``bytearray`` in 4 KiB pages, and every bulk ``trace_pipe_raw`` reply
makes the kernel pin and walk each of those pages (FUSE copies the reply
from our memory with ``iov_iter_get_pages``), so a 64 KiB read spent about
as long on page walks and TLB misses as on the copy.  :func:`advise` asks
the kernel to back a buffer with 2 MiB pages (``MADV_HUGEPAGE``, then
``MADV_COLLAPSE`` for memory already touched), which makes that walk one
entry per 2 MiB.

Best effort, like the kernel's own THP: a buffer smaller than a huge page,
a kernel without ``MADV_COLLAPSE`` (before 6.1) or THP set to ``never``
leaves the memory as it was, and nothing else changes: the bytes, offsets
and the object are the same.

libc's ``madvise`` is called through ctypes: Python's own is a method of
``mmap`` objects only, and the buffers stay ``bytearray`` (the compiled
writer, ``rb_fast``, writes into them as such).
"""

from __future__ import annotations

import ctypes
import functools
import mmap

HPAGE_SIZE = 2 << 20  # HPAGE_PMD_SIZE on x86-64 and arm64 with 4 KiB pages
MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)
MADV_COLLAPSE = 25  # include/uapi/asm-generic/mman-common.h (Linux 6.1)


MMAP_ALWAYS = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: mmap'd, fresh from the kernel


def zeroed(size: int) -> bytearray:
    """A bytearray of *size* zero bytes.  ``bytearray(size)`` writes every
    zero itself (touching all of it: 0.1 s and more per 100 MiB, with the
    server's loop waiting); one this large is allocated by glibc with a
    fresh ``mmap``, whose pages the kernel gives zeroed when first touched,
    so it is only resized (``PyByteArray_Resize``: no zeroing) and costs
    nothing now."""
    if size < MMAP_ALWAYS:
        return bytearray(size)
    mem = bytearray()
    if _resize(ctypes.py_object(mem), size) != 0:
        raise MemoryError(size)
    return mem


def clear(mem: bytearray) -> None:
    """Zero *mem* in place.  Its whole pages are given back to the kernel
    (``MADV_DONTNEED``: private anonymous memory reads as zeros after it,
    had again when touched) and only the partial pages at its ends are
    written: a large buffer emptied costs neither time nor memory."""
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    size = len(mem)
    madvise = _madvise()
    start = -(-addr // PAGE) * PAGE
    end = (addr + size) // PAGE * PAGE
    if madvise is None or size < CLEAR_BY_MADVISE or end <= start \
            or madvise(start, end - start, MADV_DONTNEED):
        ctypes.memset(addr, 0, size)
        return
    ctypes.memset(addr, 0, start - addr)
    ctypes.memset(end, 0, addr + size - end)


PAGE = mmap.PAGESIZE
MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)
CLEAR_BY_MADVISE = 1 << 20  # smaller buffers are written with zeros

_resize = ctypes.pythonapi.PyByteArray_Resize
_resize.argtypes = (ctypes.py_object, ctypes.c_ssize_t)
_resize.restype = ctypes.c_int


@functools.cache
def _madvise():
    """libc's ``madvise``, or None where it cannot be had."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def advise(mem: bytearray, collapse: bool = True) -> bool:
    """Back the whole 2 MiB pages inside *mem* with huge pages; True when
    the kernel took the advice for at least one.  Without *collapse*, only
    ``MADV_HUGEPAGE`` (khugepaged collapses later: no wait now)."""
    madvise = _madvise()
    if madvise is None or len(mem) < HPAGE_SIZE:
        return False
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    start = -(-addr // HPAGE_SIZE) * HPAGE_SIZE
    length = (addr + len(mem) - start) // HPAGE_SIZE * HPAGE_SIZE
    if length <= 0 or madvise(start, length, MADV_HUGEPAGE):
        return False
    return not collapse or madvise(start, length, MADV_COLLAPSE) == 0
