"""Kernel data the fake knows, for kernel probes' ``@SYM`` fetches
(trace_probe.c's ``@SYM[+|-offs]``: the memory at a symbol's address, read
with ``copy_from_kernel_nofault``).

The fake has no kernel memory.  A profile's ``kallsyms`` lists its data
symbols (``D``, ``d``, ``R``, ``B`` ...: ``CONFIG_KALLSYMS_ALL``), so a
definition naming one is accepted as the kernel accepts it; the bytes
behind a symbol are known only for the constant strings the profile's
``kernel_data`` holds (recorded in the oracle guest:
:mod:`fakedebugfs.oracle.kernel_data`; the banners ``/proc/version`` is
printed from).  ``@linux_proc_banner:string`` then prints the banner's
format, ``:u64`` its first 8 bytes, ``+64`` further in; any other data
is unknown: a number 0, a string ``(fault)``, as elsewhere
(:mod:`.probe_fetch`).
"""

from __future__ import annotations

import re
from typing import Optional

_SYM = re.compile(r"@([A-Za-z_.][\w.:]*)(?:([+-])(0[xX][0-9a-fA-F]+|\d+))?$")


class KernelData:
    """The known objects of the kernel's data, by address, over the
    symbol table *ksyms* (``kallsyms_lookup_name``)."""

    def __init__(self, ksyms, blobs: dict):
        self.ksyms = ksyms
        self.objects: dict[int, bytes] = {}
        for sym, raw in blobs.items():
            addr = ksyms.kallsyms_lookup_name(sym) if ksyms is not None else 0
            if addr:
                self.objects[addr] = raw

    def address(self, fetch: str) -> Optional[int]:
        """The address ``@SYM[+|-offs]`` (or ``@ADDR``) reads at; None for
        a name the table lacks (the definition was refused then)."""
        if fetch[1:2].isdigit():
            try:
                return int(fetch[1:], 0)
            except ValueError:
                return None
        m = _SYM.match(fetch)
        if m is None or self.ksyms is None:
            return None
        base = self.ksyms.kallsyms_lookup_name(m[1])
        if not base:
            return None
        off = int(m[3], 0) if m[3] else 0
        return base - off if m[2] == "-" else base + off

    def symbol(self, value: int) -> str:
        """``sprint_symbol`` of *value*: ``name+0xoff/0xsize``, the hex
        value where no symbol holds it (a ``symstr`` fetch)."""
        if self.ksyms is None:
            return f"0x{value:x}"
        return self.ksyms.sym_offset(value)

    def read(self, addr: int, size: int) -> Optional[bytes]:
        """*size* bytes at *addr* inside a known object, else None."""
        for base, raw in self.objects.items():
            if base <= addr and addr + size <= base + len(raw):
                return raw[addr - base:addr - base + size]
        return None

    def string(self, addr: int) -> Optional[str]:
        """The NUL-terminated text at *addr* inside a known object, else None."""
        for base, raw in self.objects.items():
            if base <= addr < base + len(raw):
                return raw[addr - base:].split(b"\0", 1)[0].decode(errors="surrogateescape")
        return None


def kernel_data(top) -> KernelData:
    """*top*'s (an :class:`~.tracer.Ftrace`) kernel data, made once: the
    profile's ``kernel_data`` at the addresses of the kprobes' symbol table."""
    have = top.__dict__.get("kernel_data")
    if have is None:
        from fakedebugfs.engine.core.kprobes import kprobes_of

        prof = getattr(top, "profile", None)
        blobs = prof.kernel_data() if prof else {}
        ksyms = kprobes_of(top.engine, prof).ksyms
        have = top.kernel_data = KernelData(ksyms, blobs)
    return have


__all__ = ["KernelData", "kernel_data"]
