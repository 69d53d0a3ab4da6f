"""The kmallocs a fork makes in its parent, for the forks of the commands
``fakedebugfs run`` watches (:mod:`fakedebugfs.sources.procevents`).

On the kernel, ``kernel_clone()`` fires ``sched_process_fork`` after
``copy_process()`` has allocated the child's state in the parent's
context, so a ``kmem:kmalloc`` recording or hist trigger sees the parent's
allocations beside each fork (ftracetest's trigger-hist.tc counts on it:
it forks ten subshells and expects ``kmalloc``'s hist to hold a call
site).  The kmallocs among them, in copy_process's order, as a fork of
bash showed them in the Debian 6.12 guest (``call_site`` offsets of that
build; another kernel's function is used where its symbol table has it,
the offset kept inside the function):

* ``copy_creds`` -> ``prepare_creds`` -> ``security_prepare_creds``: the
  LSM cred blob (``lsm_blob_alloc``, 16 bytes, GFP_KERNEL_ACCOUNT, zeroed);
  not for a thread (CLONE_THREAD shares the creds);
* ``security_task_alloc`` -> ``lsm_task_alloc``: the LSM task blob (72
  bytes, GFP_KERNEL, zeroed);
* ``copy_files`` -> ``dup_fd`` -> ``alloc_fdtable``, when the parent's
  highest open fd is past the 64 slots a ``files_struct`` embeds (bash's
  fd 255: 256 slots; read from /proc when the fork is drained): the
  ``struct fdtable`` (56 bytes), the fd array (8 bytes a slot) and the two
  bitmaps with the full-words bitmap; not for a thread (CLONE_FILES shares
  the table).

Their frees (RCU callbacks after the task is reaped) are not shown.
"""

from __future__ import annotations

import os

from fakedebugfs.engine.core.gfp import GFP_KERNEL, GFP_KERNEL_ACCOUNT, __GFP_ZERO
from fakedebugfs.engine.core.kallsyms_profile import ProfileKallsyms
from fakedebugfs.engine.core.slab import SLAB_BASE, kmalloc_size

EVENT = "kmem:kmalloc"
NR_OPEN_DEFAULT = 64  # BITS_PER_LONG: the slots of files_struct's own fdtab
NUMA_NO_NODE = -1
# kzalloc's flags (a module name: __GFP_ZERO in a class body would be mangled)
GFP_ZEROED, GFP_ZEROED_ACCOUNT = GFP_KERNEL | __GFP_ZERO, GFP_KERNEL_ACCOUNT | __GFP_ZERO
LSM_BLOB = ("lsm_blob_alloc", 0x2D)
CRED_BLOB, TASK_BLOB = 16, 72  # blob_sizes.lbs_cred, .lbs_task of the Debian 6.12 build
FDTABLE = (("alloc_fdtable", 0x55), ("alloc_fdtable", 0x7E), ("alloc_fdtable", 0xC3))
FDTABLE_SIZE = 56  # sizeof(struct fdtable)
L1_CACHE_BYTES = 64
# the command's allocations, apart from the workload's (which start at SLAB_BASE)
PTR_BASE = SLAB_BASE + 0x4000_0000


def fdtable_sizes(slots: int) -> tuple:
    """The bytes ``alloc_fdtable`` asks for a table of *slots* (a power of
    two): the struct, ``slots`` file pointers, then ``open_fds`` and
    ``close_on_exec`` (a bit each) with ``full_fds_bits`` (BITBIT_SIZE: a
    bit a word, in whole longs), at least L1_CACHE_BYTES."""
    bitbit = -(-(-(-slots // 64)) // 64) * 8
    return FDTABLE_SIZE, slots * 8, max(L1_CACHE_BYTES, 2 * slots // 8 + bitbit)


def fd_slots(pid: int, proc: str = "/proc") -> int:
    """The slots ``dup_fd`` gives the child of *pid*: ``sane_fdtable_size``
    (its highest open fd + 1, in whole longs of bits) rounded up to a power
    of two by ``alloc_fdtable``; NR_OPEN_DEFAULT when that fits in the
    embedded table or the parent is gone."""
    try:
        last = max(int(fd) for fd in os.listdir(f"{proc}/{pid}/fd"))
    except (OSError, ValueError):
        return NR_OPEN_DEFAULT
    wanted = -(-(last + 1) // 64) * 64
    return NR_OPEN_DEFAULT if wanted <= NR_OPEN_DEFAULT else 1 << (wanted - 1).bit_length()


def shown(kallsyms) -> bool:
    """A fork's kmallocs are shown with this symbol table: the profile's
    captured one names the functions (:meth:`ForkAllocs.site`)."""
    return ForkAllocs(kallsyms).site(LSM_BLOB[0], 0) is not None


class ForkAllocs:
    """Makes the kmallocs of each watched fork (:meth:`events`)."""

    def __init__(self, kallsyms, proc: str = "/proc"):
        self.kallsyms = kallsyms
        self.proc = proc
        self.next_ptr = PTR_BASE

    def site(self, name: str, offset: int):
        """The call site's address where the profile's captured symbol
        table (a kernel's ``/proc/kallsyms``, or a replay's in its place)
        has the function; else None: no allocation is shown (the fake's own
        table, as the default profile has, names no such function)."""
        ks = self.kallsyms
        if not isinstance(ks, ProfileKallsyms) or ks.path is None or not ks.by_name.get(name):
            return None
        return ks.address(name, offset)

    def _kmalloc(self, where, req: int, gfp: int, cpu: int, pid: int, comm: str):
        site = self.site(*where)
        if site is None:
            return None
        alloc = kmalloc_size(req)
        ptr, self.next_ptr = self.next_ptr, self.next_ptr + alloc
        return {"event": EVENT, "cpu": cpu, "pid": pid, "comm": comm,
                "fields": {"call_site": site, "ptr": ptr, "bytes_req": req,
                           "bytes_alloc": alloc, "gfp_flags": gfp, "node": NUMA_NO_NODE}}

    def events(self, fork: dict) -> list[dict]:
        """The kmallocs before the ``sched_process_fork`` event *fork*
        (its ``thread``: a CLONE_THREAD child), in the parent's context."""
        cpu, pid, comm = fork["cpu"], fork["pid"], fork.get("comm") or ""
        thread = fork.get("thread", False)
        wanted = []
        if not thread:
            wanted.append((LSM_BLOB, CRED_BLOB, GFP_ZEROED_ACCOUNT))
        wanted.append((LSM_BLOB, TASK_BLOB, GFP_ZEROED))
        if not thread:
            slots = fd_slots(pid, self.proc)
            if slots > NR_OPEN_DEFAULT:
                wanted += [(where, size, GFP_KERNEL_ACCOUNT)
                           for where, size in zip(FDTABLE, fdtable_sizes(slots))]
        out = [self._kmalloc(where, req, gfp, cpu, pid, comm) for where, req, gfp in wanted]
        return [ev for ev in out if ev is not None]


__all__ = ["ForkAllocs", "fdtable_sizes", "fd_slots", "shown"]
