"""Where a kprobe may go (kernel/kprobes.c, x86_64, 6.12): the answers of
``register_kprobe``/``register_kretprobe`` from the kernel's symbol table
(:class:`~.kallsyms_profile.ProfileKallsyms`) alone; no code is patched.

* :meth:`Kprobes.kprobe_addr` is ``_kprobe_addr`` with x86's
  ``arch_adjust_kprobe_addr``: ``SYM+OFFS`` (or an address) made an
  address inside a symbol, and whether it is the function's entry: offset
  0, or 4 after an ``endbr64``, where the probe then sits.  The fake has
  no text to read the ``endbr64`` from: a function has one where the
  profile's ``available_filter_functions_addrs`` puts its ftrace site at
  +4 (the oracle guest's CPU has no IBT, so no ``endbr64`` is sealed:
  ``kernel_clone``, ``getname`` are probed at +0x4, the static
  ``do_sys_openat2`` at +0x0).
* :meth:`Kprobes.blacklisted` is ``within_kprobe_blacklist``: the
  ``__kprobes`` text, the ``noinstr`` text and x86's entry text (three
  ranges of ``_stext``.. bounded by their ``__*_text_start``/``_end``
  symbols), every ``NOKPROBE_SYMBOL(fn)`` (its ``_kbl_addr_fn`` variable
  in the ``_kprobe_blacklist`` section, visible in a ``KALLSYMS_ALL``
  kallsyms), a ``.cold``/``.isra.N`` part of one of those; and the
  ``__cfi_``/``__pfx_`` preambles (``is_cfi_preamble_symbol``).  A
  profile's ``kprobes_blacklist`` file (debugfs ``kprobes/blacklist``:
  ``0xSTART-0xEND<TAB>sym``) replaces the derivation when present.
* :meth:`Kprobes.notrace` is trace_kprobe.c's ``within_notrace_func``
  (without ``CONFIG_KPROBE_EVENTS_ON_NOTRACE``): a function with no ftrace
  site, i.e. not in the profile's ``available_filter_functions``.
* :meth:`Kprobes.register` is ``register_kprobe``'s errno: ENOENT (no such
  symbol or address), EINVAL (not text, blacklisted, a preamble, not the
  entry for a return probe), EILSEQ (x86's ``can_probe``: not an
  instruction boundary, or an exception instruction, by the profile's
  ``text_insns`` table, :mod:`.text_insns`; not checked where the profile
  has none), 0.
"""

from __future__ import annotations

import bisect
import errno

from fakedebugfs.engine.core.profile_files import profile_file, read_profile_file

AREAS = (("__kprobes_text_start", "__kprobes_text_end"),
         ("__noinstr_text_start", "__noinstr_text_end"),
         ("__entry_text_start", "__entry_text_end"))
BLACKLIST_VAR = "_kbl_addr_"


class Kprobes:
    """The kprobe rules over one symbol table *ksyms* (read when first asked)."""

    def __init__(self, ksyms, filter_functions_path=None, blacklist_path=None,
                 text_insns_path=None):
        self.ksyms = ksyms
        self.filter_functions_path = filter_functions_path
        self.blacklist_path = blacklist_path
        self.text_insns_path = text_insns_path
        self._insns = None  # the TextInsns table (read when a probe is first placed)
        self._ranges = None  # sorted (start, end) of the blacklist
        self._traceable = None  # names with an ftrace site
        self._sites = None  # the ftrace sites' addresses (available_filter_functions_addrs)

    # --- the blacklist ---------------------------------------------------------------

    def ranges(self) -> list:
        if self._ranges is None:
            merged = []
            for a, b in (self._read_blacklist() if self.blacklist_path else self._derive()):
                if merged and a <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
                else:
                    merged.append((a, b))
            self._ranges = merged
            self._starts = [r[0] for r in merged]
        return self._ranges

    def _read_blacklist(self) -> list:
        out = []
        with open(self.blacklist_path) as fp:
            for line in fp:
                span = line.split()[0] if line.split() else ""
                if "-" in span:
                    a, b = span.split("-", 1)
                    try:
                        out.append((int(a, 16), int(b, 16)))
                    except ValueError:
                        continue
        return sorted(out)

    def _derive(self) -> list:
        ks = self.ksyms
        out = []
        for start, end in AREAS:
            a, b = ks.kallsyms_lookup_name(start), ks.kallsyms_lookup_name(end)
            if a and b > a:
                out.append((a, b))
        for name in ks.by_name:
            if name.startswith(BLACKLIST_VAR):
                fn = name[len(BLACKLIST_VAR):]
                for addr, kind, _ in ks.symbols_named(fn):
                    if kind in "tT":
                        size_off = ks.lookup_size_offset(addr)
                        if size_off:
                            out.append((addr, addr + size_off[0]))
        return sorted(out)

    def _in_ranges(self, addr: int) -> bool:
        ranges = self.ranges()
        i = bisect.bisect_right(self._starts, addr) - 1
        return i >= 0 and addr < ranges[i][1]

    def blacklisted(self, addr: int) -> bool:
        """``within_kprobe_blacklist``, suffixed symbols by their base name."""
        if self._in_ranges(addr):
            return True
        name = self.ksyms.lookup_symbol_name(addr)
        if name and "." in name:
            base = self.ksyms.kallsyms_lookup_name(name.split(".", 1)[0])
            if base:
                return self._in_ranges(base)
        return False

    # --- ftrace sites --------------------------------------------------------------

    def traceable(self):
        """Names in ``available_filter_functions`` (None: not captured)."""
        if self._traceable is None and self.filter_functions_path:
            names = set()
            with open(self.filter_functions_path) as fp:
                for line in fp:
                    parts = line.split()
                    if parts:
                        names.add(parts[0])
            self._traceable = names
        return self._traceable

    def endbr(self, func: int) -> bool:
        """The function at *func* starts with an ``endbr64`` (``is_endbr``):
        its ftrace site is 4 bytes in."""
        if self._sites is None:
            self._sites = set()
            path = self.filter_functions_path
            addrs = profile_file(path.parent, "available_filter_functions_addrs") if path else None
            text = read_profile_file(addrs).decode(errors="replace") if addrs is not None else ""
            for line in text.splitlines():
                word = line.split(None, 1)[0] if line.strip() else ""
                try:
                    self._sites.add(int(word, 16))
                except ValueError:
                    continue
        return func + 4 in self._sites

    def notrace(self, addr: int) -> bool:
        """``within_notrace_func``: *addr* is in a function without an ftrace site."""
        names = self.traceable()
        if names is None or not addr:
            return False
        name = self.ksyms.lookup_symbol_name(addr)
        if name is None or name in names:
            return False
        if "." in name:
            return name.split(".", 1)[0] not in names
        return True

    # --- registration ---------------------------------------------------------------

    def kprobe_addr(self, symbol, offset: int, addr: int = 0):
        """``_kprobe_addr``: ``(address, on_func_entry)``; OSError ENOENT."""
        ks = self.ksyms
        if symbol:
            addr = ks.kallsyms_lookup_name(symbol)
            if not addr:
                raise OSError(errno.ENOENT, symbol)
        found = ks.lookup_size_offset(addr + offset)
        if found is None:
            raise OSError(errno.ENOENT, hex(addr + offset))
        func = addr + offset - found[1]
        if self.endbr(func):  # arch_adjust_kprobe_addr
            if found[1] in (0, 4):
                return func + 4, True
            return addr + offset, False
        return addr + offset, found[1] == 0

    def on_func_entry(self, symbol, offset: int, addr: int = 0) -> int:
        """``kprobe_on_func_entry``: 0, -EINVAL or -ENOENT (as errnos)."""
        try:
            _, entry = self.kprobe_addr(symbol, offset, addr)
        except OSError as err:
            return err.errno
        return 0 if entry else errno.EINVAL

    def address_safe(self, addr: int) -> int:
        """``check_kprobe_address_safe``: 0 or EINVAL."""
        ks = self.ksyms
        if not ks.core_kernel_text(addr) and ks.module_text(addr) is None:
            return errno.EINVAL
        name = ks.lookup_symbol_name(addr) or ""
        if self.blacklisted(addr) or name.startswith(("__cfi_", "__pfx_")):
            return errno.EINVAL
        if self.probe_point(addr) == "bug":  # find_bug: a BUG()/WARN() site's ud2
            return errno.EINVAL
        return 0

    def probe_point(self, addr: int):
        """What the profile's ``text_insns`` says is at *addr*
        (:meth:`.text_insns.TextInsns.probe_point`), None where it does not tell."""
        if self.text_insns_path is None:
            return None
        if self._insns is None:
            from fakedebugfs.engine.core.text_insns import TextInsns

            self._insns = TextInsns(read_profile_file(self.text_insns_path))
        found = self.ksyms.lookup_size_offset(addr)
        return None if found is None else self._insns.probe_point(addr - found[1], addr)

    def can_probe(self, addr: int) -> bool:
        """x86's ``can_probe`` (``arch_prepare_kprobe``'s EILSEQ): *addr*
        is an instruction boundary of its function, and not an exception
        instruction; True where the profile's table does not tell."""
        return self.probe_point(addr) in (None, "boundary", "bug")

    def register(self, symbol, offset: int, addr: int = 0, is_return: bool = False) -> int:
        """``register_kprobe``/``register_kretprobe``: 0 or the errno."""
        if is_return:
            ret = self.on_func_entry(symbol, offset, addr)
            if ret:
                return ret
        try:
            where, _ = self.kprobe_addr(symbol, offset, addr)
        except OSError as err:
            return err.errno
        ret = self.address_safe(where)
        if ret == 0 and not self.can_probe(where):  # prepare_kprobe
            return errno.EILSEQ
        return ret


def kprobes_of(engine, profile):
    """The :class:`Kprobes` of *engine*'s symbols and *profile*'s files (made once)."""
    kp = engine.__dict__.get("kprobes")
    ks = engine.kallsyms
    if not hasattr(ks, "kallsyms_lookup_name"):  # the fake's own table
        from fakedebugfs.engine.core.kallsyms_profile import ProfileKallsyms

        ks = engine.__dict__.get("_ksyms_view")
        if ks is None or ks.source is not engine.kallsyms:
            ks = ProfileKallsyms.of_table(engine.kallsyms)
            engine.__dict__["_ksyms_view"] = ks
    if kp is None or kp.ksyms is not ks:
        path = getattr(profile, "path", None)
        aff = path / "available_filter_functions" if path is not None else None
        bl = path / "kprobes_blacklist" if path is not None else None
        kp = Kprobes(ks, aff if aff is not None and aff.is_file() else None,
                     bl if bl is not None and bl.is_file() else None,
                     profile_file(path, "text_insns"))
        engine.__dict__["kprobes"] = kp
    return kp


__all__ = ["Kprobes", "kprobes_of"]
