"""A fake kernel symbol table (/proc/kallsyms) owned by the engine.

Call sites in generated events are addresses inside these functions, so
every view can symbolise them: ``%pS`` as ``name+0xoff/0xsize`` in tracefs
text, a bare name in the kmemtrace plugin's kmem_minimalistic table.
"""

from __future__ import annotations

import bisect

TEXT_BASE = 0xFFFFFFFF81000000
# the hidden file at a mount's root that serves proc_kallsyms() (``run``
# binds it over /proc/kallsyms); a name no debugfs root has
PROC_FILE = ".proc_kallsyms"
# x86-64's module area as a KASLR kernel places it (``MODULES_VADDR``
# shifted): module text at ffffffffc0xxxxxx, each module's from a page
# boundary (``module_alloc``/``execmem_alloc``).
MODULES_BASE = 0xFFFFFFFFC0000000
PAGE = 0x1000

# The text symbols a module declaring one tracepoint gets, per event
# (``DEFINE_EVENT``'s functions: the iterator the call site calls, the
# event's raw recorder and its output), and one per module (its exit
# function; ``init_module``'s text is freed once loaded, and its symbols
# with it).
MODULE_EVENT_FUNCTIONS = (("__traceiter_{}", 0x60), ("trace_event_raw_event_{}", 0xE0),
                          ("trace_raw_output_{}", 0x70))
MODULE_FUNCTIONS = (("cleanup_module", 0x30),)

# (function, size in bytes): the allocation call sites of the 2.6.29 kmemtrace plugin's sample
# and the usual slab hot spots of a 6.x kernel.
FUNCTIONS = (
    ("getname_flags", 0x1E0), ("putname", 0x70), ("d_alloc", 0x90),
    ("__d_alloc", 0x1F0), ("alloc_inode", 0xB0), ("alloc_pipe_info", 0x1A0),
    ("alloc_empty_file", 0xD0), ("file_free_rcu", 0x50), ("__fput", 0x290),
    ("reiserfs_alloc_inode", 0x60), ("kernfs_fop_open", 0x3A0),
    ("seq_open", 0xA0), ("seq_read_iter", 0x4C0), ("single_open", 0x80),
    ("load_elf_binary", 0x1720), ("bprm_execve", 0x6D0), ("alloc_bprm", 0x290),
    ("mm_alloc", 0x50), ("dup_mm", 0x5A0), ("copy_process", 0x1C80),
    ("__alloc_skb", 0x1B0), ("kfree_skb_reason", 0x130), ("skb_release_data", 0x1C0),
    ("sock_alloc_inode", 0x70), ("tcp_sendmsg_locked", 0xD20),
    ("ext4_alloc_inode", 0x100), ("ext4_find_extent", 0x3B0),
    ("jbd2__journal_start", 0x190), ("bio_alloc_bioset", 0x3D0),
    ("security_file_alloc", 0x70), ("security_inode_alloc", 0x80),
    ("proc_self_get_link", 0xA0), ("kvmalloc_node_noprof", 0x110),
    ("__do_sys_newfstatat", 0x80), ("do_sys_openat2", 0xF0),
    ("vm_area_alloc", 0x70), ("anon_vma_fork", 0x150), ("mmap_region", 0x9A0),
    ("do_anonymous_page", 0x4F0), ("__pte_alloc", 0xE0), ("pipe_write", 0x5E0),
    ("pipe_read", 0x3F0), ("free_pipe_info", 0xC0), ("schedule", 0xF0),
    ("do_exit", 0xB40), ("__x64_sys_exit_group", 0x20),
    # the free sides and a few more allocators (sources/workloads/slab.py)
    ("__d_free", 0x40), ("ext4_free_in_core_inode", 0x60), ("proc_alloc_inode", 0xA0),
    ("proc_free_inode", 0x40), ("sock_free_inode", 0x40), ("vm_area_free", 0x30),
    ("kfree_skbmem", 0xA0), ("kmalloc_reserve", 0x140), ("seq_release", 0x40),
    ("single_release", 0x50), ("free_bprm", 0xD0), ("kernfs_fop_release", 0xE0),
    ("kfree_link", 0x20), ("ext4_ext_map_blocks", 0x1C70), ("kvfree", 0x40),
    ("release_pages", 0x560), ("___pte_free_tlb", 0x80), ("pgd_alloc", 0x120),
    ("pgd_free", 0x90), ("anon_vma_clone", 0x1F0), ("unlink_anon_vmas", 0x1A0),
)


def module_functions(events) -> list[tuple[str, int]]:
    """The ``(name, size)`` text symbols of a module declaring tracepoints
    *events*, in link order."""
    return [(fmt.format(event), size) for event in events
            for fmt, size in MODULE_EVENT_FUNCTIONS] + list(MODULE_FUNCTIONS)


class Kallsyms:
    """Functions laid out from ``TEXT_BASE``, 16-byte aligned, in order."""

    def __init__(self, functions=FUNCTIONS, base: int = TEXT_BASE):
        self.names: list[str] = []
        self.addrs: list[int] = []
        self.sizes: list[int] = []
        addr = base
        for name, size in functions:
            self.names.append(name)
            self.addrs.append(addr)
            self.sizes.append(size)
            addr += (size + 15) & ~15
        self.end = addr
        self.text: str | None = None  # a recording's /proc/kallsyms, kept as it was
        # module -> [(addr, name, size)], the last loaded first (the kernel's
        # module list takes a new module at its head)
        self.modules: dict[str, list[tuple[int, str, int]]] = {}
        self.module_end = MODULES_BASE

    def extend(self, functions) -> None:
        """More ``(name, size)`` functions laid out after the last one (the
        stack frames of ``kernel_stack`` entries); names present are kept."""
        have = set(self.names)
        addr = self.end
        for name, size in functions:
            if name in have or self.text is not None:
                continue
            self.names.append(name)
            self.addrs.append(addr)
            self.sizes.append(size)
            addr += (size + 15) & ~15
        self.end = addr

    def load_text(self, text: str) -> int:
        """Take the symbols of a ``/proc/kallsyms`` text (a replayed
        recording's): ``addr type name [module]`` lines; each symbol's size
        is the distance to the next address (the kernel's kallsyms keeps no
        sizes either).  :meth:`proc_kallsyms` then gives *text* back as it
        was.  Returns the number of symbols."""
        syms = set()
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 3:
                try:
                    addr = int(parts[0], 16)
                except ValueError:
                    continue
                if addr:
                    syms.add((addr, parts[2]))
        if not syms:
            return 0
        ordered = sorted(syms)
        addrs = [a for a, _ in ordered]
        self.addrs, self.names = addrs, [n for _, n in ordered]
        self.sizes = [max(1, b - a) for a, b in zip(addrs, addrs[1:])] + [0x100]
        self.end = addrs[-1] + 0x100
        self.text = text
        return len(addrs)

    def add_module(self, module: str, functions) -> list[tuple[int, str, int]]:
        """Load *module*'s text symbols ``(name, size)`` at the next free
        pages of the module area (``load_module`` -> ``add_kallsyms``);
        they show in :meth:`proc_kallsyms` at once, before the modules
        loaded earlier."""
        if module in self.modules:
            raise ValueError(f"module {module!r} is already loaded")
        syms, addr = [], self.module_end
        for name, size in functions:
            syms.append((addr, name, size))
            addr += (size + 15) & ~15
        self.module_end = (addr + PAGE - 1) & ~(PAGE - 1)
        self.modules = {module: syms, **self.modules}
        return syms

    def remove_module(self, module: str) -> None:
        """Unload *module*'s symbols (``free_module``): gone from the next
        read of /proc/kallsyms.  Its pages are not given to the next module
        (addresses stay unique, as a tool holding an old one expects)."""
        self.modules.pop(module, None)

    def has(self, name: str) -> bool:
        """The table names function *name* (a call site placed in it is
        one ``/proc/kallsyms`` resolves)."""
        return name in self.names

    def address(self, name: str, offset: int = 0) -> int:
        """Address *offset* bytes into function *name*."""
        i = self.names.index(name)
        return self.addrs[i] + min(offset, self.sizes[i] - 1)

    def lookup(self, addr: int):
        """``(name, offset, size)`` of the function holding *addr*, or None."""
        found = self.lookup_module(addr)
        if found is not None:
            return found[:3]
        i = bisect.bisect_right(self.addrs, addr) - 1
        if i < 0 or addr >= self.addrs[i] + self.sizes[i]:
            return None
        return self.names[i], addr - self.addrs[i], self.sizes[i]

    def lookup_module(self, addr: int):
        """``(name, offset, size, module)`` of a loaded module's function
        holding *addr*, or None."""
        if addr < MODULES_BASE:
            return None
        for module, syms in self.modules.items():
            for start, name, size in syms:
                if start <= addr < start + size:
                    return name, addr - start, size, module
        return None

    def sym(self, addr: int) -> str:
        """The bare name (``seq_print_ip_sym`` without offsets)."""
        found = self.lookup(addr)
        return found[0] if found else f"0x{addr:x}"

    def sym_offset(self, addr: int) -> str:
        """``%pS``: ``name+0xoff/0xsize``, with `` [module]`` for a module's
        function (``__sprint_symbol``), or the hex address when unknown."""
        in_module = self.lookup_module(addr)
        if in_module is not None:
            name, off, size, module = in_module
            return f"{name}+0x{off:x}/0x{size:x} [{module}]"
        found = self.lookup(addr)
        if not found:
            return f"0x{addr:x}"
        name, off, size = found
        return f"{name}+0x{off:x}/0x{size:x}"

    def proc_kallsyms(self) -> str:
        """The table as /proc/kallsyms prints it (``ffffffff81000000 T name``),
        then the loaded modules' symbols as ``s_show`` prints a module's:
        ``%px %c %s\t[%s]``, the type lower case for a symbol the module does
        not export (all of a module's here)."""
        core = self.text if self.text is not None else \
            "".join(f"{a:016x} T {n}\n" for a, n in zip(self.addrs, self.names))
        if not self.modules:
            return core
        return core + "".join(f"{a:016x} t {n}\t[{module}]\n"
                              for module, syms in self.modules.items() for a, n, _ in syms)
