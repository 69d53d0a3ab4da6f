"""``syscalls:sys_enter_<call>`` and ``sys_exit_<call>`` mirrored from the
kernel's ``raw_syscalls`` perf events, fanned out by the system call's number.

On the kernel both families hang on the same two tracepoints, ``sys_enter``
and ``sys_exit`` (kernel/trace/trace_syscalls.c, include/trace/events/
syscalls.h).  The raw events' probes store the number (``id``) and the six
argument registers (``syscall_get_arguments``), or the return value.  A
trace array with any syscalls event enabled registers one probe more on
the same tracepoint (``ftrace_syscall_enter``/``ftrace_syscall_exit``): it
looks the number up (``tr->enter_syscall_files[nr]``) and stores the same
number, the first ``nb_args`` of the same arguments as unsigned longs, or
the same return value, in the event of that number.  So one perf event per
CPU on ``raw_syscalls:sys_enter`` (and one on ``sys_exit``) carries the
entries of every syscalls event: a sample of number NR is an entry of the
syscalls event of NR when the fake has that event enabled, and one of
``raw_syscalls`` when it has that one enabled.  Opening each syscalls event
(``-e syscalls``: ~700 tracepoints, 1,400 perf events on two CPUs, each
one's release waiting for an RCU grace period) cost a ``run`` 20-40 s.

* Which event a number is: the profile's ``syscalls`` file (its kernel's
  ``syscall_nr_to_meta``, recorded in the oracle guest; the numbers are
  the architecture's ABI, the running kernel's too).  A profile without
  one, or a running kernel whose ``raw_syscalls`` lacks ``id``, ``args``
  or ``ret``, mirrors each syscalls event through perf events of its own,
  as any other event.  An event the running kernel lacks, or that
  ``check_event`` refuses, is not fanned out, as it was not opened.
* 32-bit system calls: the syscalls probes skip them on x86-64
  (``trace_get_syscall_nr``: ``arch_trace_is_compat_syscall``, that is
  ``in_32bit_syscall``); the raw events record them, numbered in the
  32-bit table.  The carriers' samples carry the task's user register ABI
  (``PERF_SAMPLE_REGS_USER``: ``PERF_SAMPLE_REGS_ABI_32`` for a task in
  32-bit code), and those are not fanned out; an x32 number has bit 30
  set, past every number of the table.  (An ``int $0x80`` from 64-bit
  code is a 32-bit system call that the ABI does not show: fanned out by
  its number as a 64-bit one.)
* Order: an array with both a raw event and syscalls events enabled gets
  two entries of one call, in the order their probes were registered on
  the tracepoint (``func_add`` puts a probe after those of its priority):
  the raw event's enable, or the array's first syscalls event's
  (``sys_refcount_enter`` 0 -> 1), whichever came first.  Where arrays
  differ, the first one's (the top level first) orders them all.
* A syscalls event enabled while the carrier already runs for others
  gets no sample from before its enable (nor does the raw event enabled
  while it carries others): each keeps the time of its enable, and the
  samples' times (``CLOCK_MONOTONIC``, the perf events' ``clockid``) from
  before it are not its entries.  (A disable drains the rings first, as
  for any event.)

A mixin of :class:`~fakedebugfs.sources.mirror.Mirror` (``opened``,
``decoders``, ``tracefs``, ``kernel``, ``_open_event``, ``_close_event``,
``sync``); :meth:`fan_out` is called by the drain's ``_emit``.
"""

from __future__ import annotations

import itertools
import time
from typing import Optional

from fakedebugfs.engine.core.lazynp import np

PERF_SAMPLE_REGS_USER = 1 << 12  # include/uapi/linux/perf_event.h
PERF_SAMPLE_REGS_ABI_32 = 1
REGS_USER_MASK = 1  # PERF_REG_X86_AX: one register, the least a sample may ask for
RAW = {"enter": "raw_syscalls:sys_enter", "exit": "raw_syscalls:sys_exit"}
PREFIX = {"enter": "syscalls:sys_enter_", "exit": "syscalls:sys_exit_"}


def direction_of(key: str) -> Optional[str]:
    for way, prefix in PREFIX.items():
        if key.startswith(prefix):
            return way
    return None


class MirrorSyscalls:
    """The fan-out of the ``raw_syscalls`` carriers (module docstring)."""

    def syscalls_setup(self) -> None:
        self.fanned: dict[str, set] = {"enter": set(), "exit": set()}  # keys fanned out
        self.carrier_only: set = set()  # raw keys open for the fan-out alone
        self._nr_of: Optional[dict] = None  # fannable key -> its number (lazy)
        self._raw_fields: dict = {}  # raw key -> (id offset, args or ret offset)
        self._probe_at: dict = {}  # (array id, raw key or "enter"/"exit") -> registered when
        self._sys_refs: dict = {}  # (array id, "enter"/"exit") -> syscalls events enabled
        self._stamps = itertools.count()
        self._since: dict = {}  # key -> CLOCK_MONOTONIC ns of its enable (fanned, raw)

    # --- which events ------------------------------------------------------------

    def _syscall_numbers(self) -> dict:
        """Fannable key -> number: the profile's table, when the running
        kernel's raw events have the fields the fan-out reads."""
        if self._nr_of is None:
            self._nr_of = {}
            for way, raw in RAW.items():
                host = self.tracefs.parsed(raw)
                nr = host and host.field("id")
                val = host and host.field("args" if way == "enter" else "ret")
                if nr is None or val is None or nr.size != 8 or val.size not in (8, 48):
                    return self._nr_of
                self._raw_fields[raw] = (nr.offset, val.offset)
            prof = getattr(self.kernel.ftrace, "profile", None)
            names = prof.syscall_names() if prof is not None else {}
            for nr, name in names.items():
                if name.startswith("sys_"):
                    self._nr_of[f"syscalls:sys_enter_{name[4:]}"] = nr
                    self._nr_of[f"syscalls:sys_exit_{name[4:]}"] = nr
        return self._nr_of

    def carrier_of(self, key: str) -> Optional[str]:
        """The raw key whose perf events carry *key*'s entries, or None
        (not a syscalls event of a number the profile names)."""
        way = direction_of(key)
        if way is None or key not in self._syscall_numbers():
            return None
        return RAW[way]

    def sample_type_extra(self, key: str) -> tuple[int, int]:
        """``(sample_type bits, sample_regs_user)`` a carrier's perf events
        add: the task's register ABI (32-bit calls are not fanned out)."""
        if key in RAW.values() and self._syscall_numbers():
            return PERF_SAMPLE_REGS_USER, REGS_USER_MASK
        return 0, 0

    # --- open and close ------------------------------------------------------------

    def open_carried(self, key: str) -> bool:
        """``_open_event``'s part: *key* fanned out of its carrier (opened
        if it is not), or a raw key open as a carrier alone now enabled
        for itself; False for any other event (opened as ever)."""
        if key in self.carrier_only:  # the raw event itself: from now on
            self._since[key] = time.monotonic_ns()
            self.carrier_only.discard(key)
            return True
        raw = self.carrier_of(key)
        if raw is None:
            return False
        if key in self.opened or not self.tracefs.has(key):
            return True  # (the kernel lacks it: enabled, never fired, as before)
        self._since[key] = time.monotonic_ns()  # (the samples before: not its entries)
        if raw not in self.opened:
            self._open_event(raw)
            if raw not in self.opened:  # refused: said once by _open_event
                return True
            self.carrier_only.add(raw)
        self.fanned[direction_of(key)].add(key)
        self.opened[key] = []  # (no perf event of its own)
        return True

    def close_carried(self, key: str) -> bool:
        """``_close_event``'s part: *key* no longer fanned out (its carrier
        parked when nothing else needs it), or a raw key kept open as the
        carrier of others; False for any other event."""
        way = direction_of(key)
        if way is not None and key in self.fanned[way]:
            self.fanned[way].discard(key)
            self.opened.pop(key, None)
            raw = RAW[way]
            if not self.fanned[way] and raw in self.carrier_only:
                self.carrier_only.discard(raw)
                self._close_event(raw)
            return True
        for way, raw in RAW.items():
            if key == raw and self.fanned[way] and raw in self.opened:
                self.carrier_only.add(raw)
                return True
        return False

    def close_carriers(self) -> None:
        """Everything closed (the mirror's ``close``)."""
        for keys in self.fanned.values():
            keys.clear()
        self.carrier_only.clear()
        self._since.clear()

    # --- the probes' order ----------------------------------------------------------

    def probe_order(self, tr, key: str, on: bool) -> None:
        """``on_enabled``: when each array's raw probe and its syscalls
        probe were registered (the latter with the array's first syscalls
        event of that direction, gone with its last)."""
        way = direction_of(key)
        if way is None:
            if key in RAW.values():
                if on:
                    self._probe_at[(id(tr), key)] = next(self._stamps)
                else:
                    self._probe_at.pop((id(tr), key), None)
            return
        refs = self._sys_refs.get((id(tr), way), 0) + (1 if on else -1)
        self._sys_refs[(id(tr), way)] = max(0, refs)
        if on and refs == 1:
            self._probe_at[(id(tr), way)] = next(self._stamps)
        elif refs <= 0:
            self._probe_at.pop((id(tr), way), None)

    def raw_first(self, way: str) -> bool:
        """An array with both probes on *way*'s tracepoint records the raw
        entry first (the first such array's order; True if none)."""
        for tr in self.kernel.ftrace.arrays():
            raw = self._probe_at.get((id(tr), RAW[way]))
            sys_ = self._probe_at.get((id(tr), way))
            if raw is not None and sys_ is not None:
                return raw < sys_
        return True

    # --- the drain -----------------------------------------------------------------

    def fan_out(self, data, u8, u32, idents, kind, cpu, pid, ts, raw, cols, tps, entries_of):
        """Samples of a drain (*kind*: each one's index in *idents*, the
        real event ids; *cols*, *tps*: each kind's columns and tracepoint,
        None for a carrier's) -> ``(tps, kind, cpu, pid, ts, cols)`` of the
        events to fire: a carrier's sample gives its raw event's entry
        (when the fake has it enabled) and its number's syscalls event's
        (when fanned out), in the order of the probes
        (:meth:`raw_first`); kinds without events left out."""
        engine = self.kernel.engine
        n = len(kind)
        first = kind.copy()  # per sample: up to two events, as kinds of the output
        second = np.full(n, -1, np.int64)
        tps, cols = list(tps), list(cols)
        extra = []  # per new kind: (tracepoint, columns)
        for k, ident in enumerate(idents.tolist()):
            if tps[k] is not None:
                continue
            dec = self.decoders[ident]
            key = dec.tp.key
            way = "enter" if key == RAW["enter"] else "exit"
            rows = np.flatnonzero(kind == k)
            at = raw[rows]
            # each sample's time: its PERF_SAMPLE_TIME, before the raw data's u32 size
            when = (u32[(at - 12) >> 2].astype(np.int64)
                    | u32[(at - 8) >> 2].astype(np.int64) << 32)
            own = np.ones(len(rows), bool) if key not in self.carrier_only else \
                np.zeros(len(rows), bool)
            if key in self._since:
                own &= when >= self._since[key]
            first[rows[~own]] = -1
            if own.any():
                tps[k], cols[k] = dec.tp, dec.columns(entries_of(at[own]))
            entries = entries_of(at)
            id_off, val_off = self._raw_fields[key]
            nr = entries.integers(id_off, np.dtype("<i8"))
            # the register ABI after the raw data (u32 size, then the data)
            abi = u32[(at + u32[(at >> 2) - 1].astype(np.int64)) >> 2]
            table = {self._nr_of[x]: x for x in self.fanned[way]}
            known = np.fromiter(table, np.int64, len(table))
            fan = np.isin(nr, known) & (abi != PERF_SAMPLE_REGS_ABI_32)
            if not fan.any():
                continue
            if way == "enter":
                args = [entries.integers(val_off + 8 * i, np.dtype("<u8")) for i in range(6)]
            else:
                args = [entries.integers(val_off, np.dtype("<i8"))]
            nrs = nr[fan]
            for x in sorted(set(nrs.tolist())):
                sel = fan.copy()
                sel[fan] = nrs == x
                sel &= when >= self._since.get(table[x], 0)  # (from its enable on)
                if not sel.any():
                    continue
                tp = engine.tracepoints[table[x]]
                width = len(tp.args) - 1  # after __syscall_nr
                second[rows[sel]] = len(tps) + len(extra)
                extra.append((tp, (nr[sel], *(a[sel] for a in args[:width]))))
            if not self.raw_first(way):
                swap = (second[rows] >= 0) & (first[rows] >= 0)
                r = rows[swap]
                first[r], second[r] = second[r], first[r]
        for tp, columns in extra:
            tps.append(tp)
            cols.append(columns)
        pairs = np.stack([first, second], 1).ravel()
        take = pairs >= 0
        src = np.repeat(np.arange(n), 2)[take]
        out = pairs[take]
        used = np.unique(out)
        remap = np.full(len(tps), -1, np.int64)
        remap[used] = np.arange(len(used))
        return ([tps[u] for u in used.tolist()], remap[out], cpu[src], pid[src], ts[src],
                [cols[u] for u in used.tolist()])


__all__ = ["MirrorSyscalls", "PERF_SAMPLE_REGS_USER", "direction_of"]
