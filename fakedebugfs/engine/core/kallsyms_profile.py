"""The symbol table of a profiled kernel: its ``/proc/kallsyms``, captured
into the profile (``kallsyms``, as root: real addresses), read lazily.

A profile's kallsyms has ~120,000 lines (``CONFIG_KALLSYMS_ALL``: data
symbols too); it is read the first time something needs a symbol (a probe
definition, a read of ``/proc/kallsyms``, a ``%pS``), never at a mount's
start.  :class:`ProfileKallsyms` is then the engine's symbol table: the
same interface as the fake's own :class:`~.kallsyms.Kallsyms` (``%pS``,
``/proc/kallsyms`` with the modules a test loads), plus what kernel/kallsyms.c
and kernel/module/kallsyms.c answer to the probe code:

* :meth:`kallsyms_lookup_name` (``kallsyms_lookup_name``: ``SYM`` the
  first of that name, core kernel first; ``MOD:SYM`` that module's);
* :meth:`number_of_same_symbols` (trace_kprobe.c's count of a name: the
  core kernel's and every module's symbols, or one module's);
* :meth:`lookup_size_offset` (``kallsyms_lookup_size_offset``: a symbol
  ends where the next address starts);
* :meth:`core_kernel_text` and :meth:`module_text` (``core_kernel_text``
  between ``_stext`` and ``_etext``; a module's text symbols ``t``/``T``).
"""

from __future__ import annotations

import bisect
import re
from itertools import repeat
from operator import itemgetter

from fakedebugfs.engine.core.kallsyms import MODULES_BASE, Kallsyms
from fakedebugfs.engine.core.profile_files import profile_file, read_profile_file

# a line of /proc/kallsyms: address, type, name and, for a module's, [module]
_ROW = re.compile(r"^([0-9a-fA-F]+)[ \t]+(\S+)[ \t]+(\S+)(?:[ \t]+(\S*))?", re.M)
# the attributes read from the file on first use
_LAZY = frozenset(("names", "addrs", "sizes", "types", "mods", "text", "end", "by_name",
                   "module_names", "stext", "etext", "kend"))


class ProfileKallsyms(Kallsyms):
    """The profile's ``kallsyms`` file at *path*, parsed on first use."""

    def __init__(self, path):
        self.path = path
        self.modules: dict = {}  # modules a test loads (Kallsyms.add_module)
        self.module_end = MODULES_BASE
        self.extra: dict[str, tuple[int, int]] = {}  # names the fake needs that the kernel lacks

    @classmethod
    def of_table(cls, table: Kallsyms) -> "ProfileKallsyms":
        """A view of the fake's own table (no profile kallsyms) for the probe code."""
        view = cls(None)
        view.source = table
        view.load_text(table.proc_kallsyms() + "ffffffff81000000 T _stext\n"
                       f"{table.end:016x} T _etext\n")
        return view

    def __getattr__(self, name):
        if name in _LAZY:
            self._load()
            return self.__dict__[name]
        raise AttributeError(name)

    @property
    def loaded(self) -> bool:
        return "addrs" in self.__dict__

    def _load(self) -> None:
        # (a regex over the whole text and C-level sorts: 163,000 lines in
        # ~0.3 s, where a loop of splits and a bisect per symbol took 0.55)
        text = read_profile_file(self.path).decode("utf-8", errors="surrogateescape")
        rows = _ROW.findall(text)
        raw = list(map(int, (r[0] for r in rows), repeat(16, len(rows))))
        n = len(raw)
        order = sorted(range(n), key=raw.__getitem__)  # stable: kallsyms order kept
        pick = itemgetter(*order) if n > 1 else (lambda seq: tuple(seq[i] for i in order))
        d = self.__dict__
        d["text"] = text
        d["addrs"] = addrs = list(pick(raw))
        d["names"] = list(pick([r[2] for r in rows]))
        d["types"] = list(pick([r[1] for r in rows]))
        d["mods"] = list(pick([r[3][1:-1] if r[3].startswith("[") else None for r in rows]))
        # the sorted index of each row, for by_name's entries (kallsyms
        # order: core first)
        where = [0] * n
        for pos, i in enumerate(order):
            where[i] = pos
        by_name: dict[str, list[int]] = {}
        get = by_name.get
        for r, pos in zip(rows, where):
            have = get(r[2])
            if have is None:
                by_name[r[2]] = [pos]
            else:
                have.append(pos)
        d["by_name"] = by_name
        # a symbol ends where the next higher address starts
        sizes = [b - a for a, b in zip(addrs, addrs[1:])] + [0x100] if n else []
        for pos in range(n - 2, -1, -1):
            if not sizes[pos]:  # the same address as the next: its end
                sizes[pos] = sizes[pos + 1] + addrs[pos + 1] - addrs[pos]
        d["sizes"] = sizes
        d["end"] = (addrs[-1] + 0x100) if addrs else MODULES_BASE
        d["module_names"] = {m for m in d["mods"] if m}
        d["stext"] = self._first("_stext")
        d["etext"] = self._first("_etext")
        d["kend"] = self._first("_end")  # 0 for a table of text symbols only

    def _first(self, name: str) -> int:
        idx = self.__dict__["by_name"].get(name)
        return self.__dict__["addrs"][idx[0]] if idx else 0

    # --- the Kallsyms interface ---------------------------------------------------

    def extend(self, functions) -> None:
        """The fake's own frames: kept aside (the kernel's table is as captured)."""
        for name, size in functions:
            self._extra(name, size)

    def _extra(self, name: str, size: int = 0x100):
        if name not in self.extra:
            base = 0xFFFFFFFFBF000000 + sum((s + 15) & ~15 for _, s in self.extra.values())
            self.extra[name] = (base, size)
        return self.extra[name]

    def load_text(self, text: str) -> int:
        """A replay's recording brings its own table: it replaces the profile's."""
        fresh = Kallsyms(())
        n = fresh.load_text(text)
        if n:
            d = self.__dict__
            for key in ("names", "addrs", "sizes", "text", "end"):
                d[key] = getattr(fresh, key)
            d["types"] = ["T"] * len(fresh.addrs)
            d["mods"] = [None] * len(fresh.addrs)
            d["by_name"] = {}
            for pos, name in enumerate(fresh.names):
                d["by_name"].setdefault(name, []).append(pos)
            d["module_names"] = set()
            d["stext"], d["etext"] = self._first("_stext"), self._first("_etext")
            d["kend"] = 0
        return n

    def has(self, name: str) -> bool:
        """The kernel's table names *name* (not one of the fake's
        :attr:`extra` names, which ``/proc/kallsyms`` does not list)."""
        return bool(self.by_name.get(name)) or any(
            n == name for syms in self.modules.values() for _, n, _ in syms)

    def address(self, name: str, offset: int = 0) -> int:
        idx = self.by_name.get(name)
        if idx:
            pos = next((p for p in idx if self.types[p] in "tT"), idx[0])
            return self.addrs[pos] + min(offset, max(self.sizes[pos] - 1, 0))
        base, size = self._extra(name)
        return base + min(offset, size - 1)

    def lookup(self, addr: int):
        found = self.lookup_module(addr)
        if found is not None:
            return found[:3]
        pos = self._pos(addr)
        if pos is not None:
            return self.names[pos], addr - self.addrs[pos], self.sizes[pos]
        for name, (base, size) in self.extra.items():
            if base <= addr < base + size:
                return name, addr - base, size
        return None

    def _pos(self, addr: int):
        """The sorted index of the symbol holding *addr*, or None.  With the
        kernel's data symbols listed (``_end``), an address of the core
        kernel outside ``_stext`` .. ``_end`` has none (``is_ksym_addr``:
        the per-CPU offsets, ``A`` symbols near 0, name no address)."""
        addrs = self.addrs
        pos = bisect.bisect_right(addrs, addr) - 1
        if pos < 0 or addr >= addrs[pos] + self.sizes[pos] or not addrs[pos]:
            return None
        if self.mods[pos] is None and self.kend and not self.stext <= addr < self.kend:
            return None
        return pos

    def sym_offset(self, addr: int) -> str:
        """``%pS``: ``name+0xoff/0xsize``, `` [module]`` for a module's."""
        text = super().sym_offset(addr)
        if self.lookup_module(addr) is None:
            pos = self._pos(addr)
            if pos is not None and self.mods[pos]:
                text += f" [{self.mods[pos]}]"
        return text

    def proc_kallsyms(self) -> str:
        """The profile's text as captured, then the modules a test loaded."""
        if not self.modules:
            return self.text
        return self.text + "".join(f"{a:016x} t {n}\t[{module}]\n"
                                   for module, syms in self.modules.items() for a, n, _ in syms)

    # --- what kernel/kallsyms.c answers the probe code ---------------------------

    def kallsyms_lookup_name(self, name: str) -> int:
        """``kallsyms_lookup_name``: the address of *name* (``MOD:SYM``: in
        that module), 0 when there is none."""
        mod = None
        if ":" in name:
            mod, name = name.split(":", 1)
        for module, syms in self.modules.items():
            if mod in (None, module):
                for a, n, _ in syms:
                    if n == name:
                        return a
        for pos in self.by_name.get(name, ()):
            if mod is None or self.mods[pos] == mod:
                return self.addrs[pos]
        return 0

    def number_of_same_symbols(self, mod, name: str) -> int:
        """trace_kprobe.c's ``number_of_same_symbols``: the core kernel's
        symbols of that name (when *mod* is None) and the modules'."""
        count = sum(1 for pos in self.by_name.get(name, ())
                    if (self.mods[pos] is None and mod is None)
                    or (self.mods[pos] is not None and mod in (None, self.mods[pos])))
        count += sum(1 for module, syms in self.modules.items() if mod in (None, module)
                     for _, n, _ in syms if n == name)
        return count

    def module_loaded(self, mod: str) -> bool:
        return mod in self.module_names or mod in self.modules

    def lookup_size_offset(self, addr: int):
        """``kallsyms_lookup_size_offset``: ``(size, offset)`` or None."""
        found = self.lookup(addr)
        return None if found is None else (found[2], found[1])

    def lookup_symbol_name(self, addr: int):
        found = self.lookup(addr)
        return None if found is None else found[0]

    def core_kernel_text(self, addr: int) -> bool:
        return bool(self.stext) and self.stext <= addr < self.etext

    def module_text(self, addr: int):
        """``__module_text_address``: the module whose text holds *addr*, or None."""
        found = self.lookup_module(addr)
        if found is not None:
            return found[3]
        pos = self._pos(addr)
        if pos is not None and self.mods[pos] and self.types[pos] in "tT":
            return self.mods[pos]
        return None

    def symbols_named(self, name: str) -> list:
        """``(addr, type, module)`` of every symbol *name*, in address order."""
        return [(self.addrs[p], self.types[p], self.mods[p]) for p in self.by_name.get(name, ())]


def profile_kallsyms(profile):
    """The :class:`ProfileKallsyms` of *profile* when it has a ``kallsyms``
    file, else None."""
    if profile is None:
        return None
    path = profile_file(profile.path, "kallsyms")  # or kallsyms.xz
    return ProfileKallsyms(path) if path is not None else None


def use_profile_kallsyms(engine, profile) -> None:
    """The engine's symbol table becomes *profile*'s when it has one."""
    ks = profile_kallsyms(profile)
    if ks is not None:
        engine.kallsyms = ks


__all__ = ["ProfileKallsyms", "profile_kallsyms", "use_profile_kallsyms"]
