"""Text output of the ftrace buffers (kernel/trace/trace.c, trace_output.c).

What ``trace`` and ``trace_pipe`` print around each event: the context
(``trace_print_context``: comm-pid, CPU, latency flags, timestamp), the
header of ``trace`` (``print_trace_header``/``print_func_help_header_irq``)
and the ``%p``/``%pS``/``%ps`` renderings.
"""

from __future__ import annotations

import hashlib
from typing import Optional

# trace_flag_type (include/linux/trace_events.h)
TRACE_FLAG_IRQS_OFF = 0x01
TRACE_FLAG_NEED_RESCHED = 0x04
TRACE_FLAG_HARDIRQ = 0x08
TRACE_FLAG_SOFTIRQ = 0x10
MAX_ERR_PTR = (1 << 64) - 4096  # above: ERR_PTR(-errno), MAX_ERRNO 4095

IRQ_HELP_HEADER = (
    "#                                _-----=> irqs-off/BH-disabled\n"
    "#                               / _----=> need-resched\n"
    "#                              | / _---=> hardirq/softirq\n"
    "#                              || / _--=> preempt-depth\n"
    "#                              ||| / _-=> migrate-disable\n"
    "#                              |||| /     delay\n"
    "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n"
    "#              | |         |   |||||     |         |\n"
)
# the same with record-tgid (print_func_help_header_irq's prec 12, not 2)
IRQ_HELP_HEADER_TGID = "".join(
    line.replace("#" + " " * 28 + "  ", "#" + " " * 40, 1) if "=>" in line or "delay" in line
    else line for line in IRQ_HELP_HEADER.splitlines(True)).replace(
    "#           TASK-PID     CPU#", "#           TASK-PID       TGID    CPU#").replace(
    "#              | |         |   ", "#              | |           |       |   ")
FUNC_HELP_HEADER_TGID = (
    "#           TASK-PID       TGID    CPU#     TIMESTAMP  FUNCTION\n"
    "#              | |           |       |         |         |\n"
)
FUNC_HELP_HEADER = (
    "#           TASK-PID     CPU#     TIMESTAMP  FUNCTION\n"
    "#              | |         |         |         |\n"
)


class OutputContext:
    """Symbol and pointer printing under the current trace options.

    Every rendering is a function of the address and of the symbol table
    (or the ``ptr_key``), so each is kept once made: ``trace`` of a full
    buffer prints the same few call sites and reused slab objects tens of
    thousands of times.  The symbol texts are dropped whenever the table
    changes (:meth:`_symbols`)."""

    CACHE_MAX = 1 << 16  # texts kept per kind; all dropped past it
    TEXTS_MAX = 1 << 15  # event texts kept (of every event); all dropped past it

    def __init__(self, kallsyms, options: dict, seed: int = 0):
        self.kallsyms = kallsyms
        self.options = options
        self._key = hashlib.sha256(f"ptr_key:{seed}".encode()).digest()[:16]
        self._hashed: dict = {}  # addr -> hashed %p text
        self._table = None  # what the symbol texts were made from
        self._sym: dict = {}
        self._sym_offset: dict = {}
        self._held = False  # the table checked once for a run of lines (hold)
        self._texts: dict = {}  # id(EventType) -> (it, {payload after trace_entry: text})
        self._kept = 0
        self._texts_hashed = None  # the hash-ptr option the texts were made under

    def hold(self) -> None:
        """The symbol table will not change until :meth:`release` (one
        step of a reader: nothing else runs meanwhile): check it once now
        instead of at every symbol; the kept event texts go if the table or
        ``hash-ptr`` changed."""
        self._symbols()
        hashed = bool(self.options.get("hash-ptr", True))
        if hashed != self._texts_hashed:
            self._texts, self._kept, self._texts_hashed = {}, 0, hashed
        self._held = True

    def texts(self, etype, pure) -> Optional[dict]:
        """The texts kept of *etype*'s entries (what follows the context),
        by the payload after ``struct trace_entry``, between :meth:`hold`
        and :meth:`release`; None for an event whose text depends on more
        than that (``pure(etype)`` false, asked once per event)."""
        kept = self._texts.get(id(etype))
        if kept is None:  # the event held beside them: its id stays its own
            kept = self._texts[id(etype)] = (etype, {} if pure(etype) else None)
        return kept[1]

    def keep_text(self, texts: dict, key: bytes, text: str) -> None:
        """Keep *text* in *texts* (from :meth:`texts`); all go past
        ``TEXTS_MAX``."""
        if self._kept >= self.TEXTS_MAX:
            self._texts, self._kept = {}, 0
            return
        texts[key] = text
        self._kept += 1

    def release(self) -> None:
        self._held = False

    def _symbols(self) -> tuple:
        """``(sym, sym_offset)`` caches, emptied if the symbol table changed
        since they were filled.  The table's lists and module dict are held
        (so none can be freed and another take its identity) and compared by
        identity and length: ``extend`` grows the lists, ``load_text``
        replaces them, loading a module replaces the dict, unloading one
        shrinks it."""
        ks = self.kallsyms
        addrs, modules = getattr(ks, "addrs", None), getattr(ks, "modules", None)
        t = self._table
        if (t is None or t[0] is not ks or t[1] is not addrs or t[3] is not modules
                or (addrs is not None and len(addrs) != t[2])
                or (modules is not None and len(modules) != t[4])):
            self._table = (ks, addrs, len(addrs) if addrs is not None else 0, modules,
                           len(modules) if modules is not None else 0)
            self._sym, self._sym_offset = {}, {}
            self._texts, self._kept = {}, 0
        return self._sym, self._sym_offset

    def sym(self, addr: int) -> str:
        """``%ps``: the bare symbol name."""
        cache = self._sym if self._held else self._symbols()[0]
        text = cache.get(addr)
        return self._keep(cache, addr, self.kallsyms.sym) if text is None else text

    def sym_offset(self, addr: int) -> str:
        """``%pS``: ``name+0xoff/0xsize``."""
        cache = self._sym_offset if self._held else self._symbols()[1]
        text = cache.get(addr)
        return self._keep(cache, addr, self.kallsyms.sym_offset) if text is None else text

    def _keep(self, cache: dict, addr: int, show) -> str:
        """*show(addr)*, kept in *cache* (emptied when full)."""
        if len(cache) >= self.CACHE_MAX:
            cache.clear()
        text = cache[addr] = show(addr)
        return text

    def ptr(self, addr: int) -> str:
        """``%p``: hashed (``ptr_to_id``, 32 significant bits) while the
        ``hash-ptr`` option is set, else ``%px``; NULL and error pointers
        (``IS_ERR_OR_NULL``) print as they are, as ``ptr_to_id`` does
        (6.18's kfree of NULL: ``ptr=0000000000000000``)."""
        if not self.options.get("hash-ptr", True) or not addr or addr > MAX_ERR_PTR:
            return f"{addr:016x}"
        text = self._hashed.get(addr)
        if text is None:
            if len(self._hashed) >= self.CACHE_MAX:
                self._hashed.clear()
            digest = hashlib.blake2b(addr.to_bytes(8, "little"), key=self._key, digest_size=4)
            text = self._hashed[addr] = f"{int.from_bytes(digest.digest(), 'little'):016x}"
        return text


def lat_flags(flags: int, preempt: int) -> str:
    """``trace_print_lat_fmt``: irqs-off, need-resched, hard/softirq,
    preempt-depth, migrate-disable."""
    text = _LAT.get((flags, preempt))
    if text is None:
        irqs = "d" if flags & TRACE_FLAG_IRQS_OFF else "."
        resched = "N" if flags & TRACE_FLAG_NEED_RESCHED else "."
        hard, soft = flags & TRACE_FLAG_HARDIRQ, flags & TRACE_FLAG_SOFTIRQ
        irq = "H" if hard and soft else "h" if hard else "s" if soft else "."
        depth = f"{preempt & 0xF:x}" if preempt & 0xF else "."
        migrate = f"{(preempt >> 4) & 0xF:x}" if (preempt >> 4) & 0xF else "."
        text = irqs + resched + irq + depth + migrate
        if 0 <= flags < 256 and 0 <= preempt < 256:  # the u8 fields of trace_entry
            _LAT[(flags, preempt)] = text
    return text


_LAT: dict = {}  # (flags, preempt_count) -> lat_flags text


def timestamp(ns: int) -> str:
    """``trace_print_time``: ``%5llu.%06lu`` of ``ns2usecs``, which rounds
    to the nearest microsecond (the guest prints 6725665536 ns as
    ``6.725666``)."""
    usecs = (ns + 500) // 1000
    return f"{usecs // 1000000:5d}.{usecs % 1000000:06d}"


def comm_of(comms: dict, pid: int) -> str:
    """``trace_find_cmdline``: ``<idle>`` for 0, ``<...>`` when unknown."""
    if pid == 0:
        return "<idle>"
    return comms.get(pid, "<...>")


def context(comms: dict, cpu: int, ts: int, pid: int, flags: int, preempt: int,
            irq_info: bool = True) -> str:
    """``trace_print_context``: ``%16s-%-7d [%03d] <flags> %5llu.%06lu: ``."""
    return context_head(comms, cpu, pid, flags, preempt, irq_info) + timestamp(ts) + ": "


def context_head(comms: dict, cpu: int, pid: int, flags: int, preempt: int,
                 irq_info: bool = True, tgid=None) -> str:
    """``trace_print_context`` up to the timestamp (the same for every
    entry of a task on a CPU with the same flags); *tgid*: the task's
    saved tgid under ``record-tgid`` (0: none saved), None without it."""
    text = f"{comm_of(comms, pid):>16}-{pid:<7d} "
    if tgid is not None:
        text += f"({tgid:7d}) " if tgid else "(-------) "
    text += f"[{cpu:03d}] "
    if irq_info:
        text += lat_flags(flags, preempt) + " "
    return text


def trace_header(tracer: str, entries: int, written: int, nr_cpus: int,
                 irq_info: bool = True, tgid: bool = False) -> str:
    """``print_trace_header`` + ``print_func_help_header_irq`` for ``trace``
    (with its TGID column under ``record-tgid``)."""
    head = (f"# tracer: {tracer}\n#\n"
            f"# entries-in-buffer/entries-written: {entries}/{written}   #P:{nr_cpus}\n#\n")
    if tgid:
        return head + (IRQ_HELP_HEADER_TGID if irq_info else FUNC_HELP_HEADER_TGID)
    return head + (IRQ_HELP_HEADER if irq_info else FUNC_HELP_HEADER)
