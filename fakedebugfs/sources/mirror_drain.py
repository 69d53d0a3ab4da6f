"""How the mirror takes what the kernel wrote: the per-CPU perf rings drained
(PERF_RECORD_SAMPLE's raw tracepoint entries, PERF_RECORD_LOST, the side
band of comms and forks), each event's samples decoded column-wise and
fired through the engine's batch path at the fake's time, lost samples
counted as the ring buffer's overrun."""

from __future__ import annotations

import logging
import time
from typing import Optional

from fakedebugfs.engine.core.batch import EventBatch, Strings, run_heads
from fakedebugfs.engine.core.lazynp import np
from fakedebugfs.engine.core.layouts import packer
from fakedebugfs.sources.mirror_pids import MirrorPids
from fakedebugfs.sources.mirror_slices import COST_FROM, COST_TIME, DrainSlices
from fakedebugfs.sources.procevents import (PERF_RECORD_COMM, PERF_RECORD_FORK, comm_of,
    perf_event_header, perf_record_comm_head, perf_record_task)

log = logging.getLogger(__name__)
PERF_RECORD_LOST = 2
PERF_RECORD_SAMPLE = 9
SAMPLE_TID, SAMPLE_TIME, SAMPLE_RAW = 8, 16, 28
_HEADER, _COMM_HEAD, _TASK = (packer(perf_event_header), packer(perf_record_comm_head),
                              packer(perf_record_task))
_WALK = []  # the compiled walk (native/perf_records.c), once loaded; [None] if not
def record_offsets(blob: bytes):
    """The offsets of the perf records in *blob* (int64 array): each
    header's size leads to the next one."""
    if not _WALK:
        try:
            import ctypes

            from fakedebugfs.native import build

            lib = ctypes.CDLL(str(build("perf_records")))
            fn = lib.perf_record_offsets
            fn.restype = ctypes.c_size_t
            fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
            _WALK.append(fn)
        except (OSError, ImportError, subprocess_error()) as err:
            log.info("mirror: no compiled walk (%s): records walked in Python", err)
            _WALK.append(None)
    walk = _WALK[0]
    if walk is not None:
        out = np.empty(len(blob) // 8 + 1, np.int64)
        n = walk(blob, len(blob), out.ctypes.data, len(out))
        return out[:n]
    offs, pos, end = [], 0, len(blob)
    while pos + 8 <= end:
        size = blob[pos + 6] | blob[pos + 7] << 8
        if size < 8:
            break
        offs.append(pos)
        pos += size
    return np.array(offs, np.int64)
def subprocess_error():
    import subprocess

    return subprocess.CalledProcessError
def _distinct(col) -> set:
    """The values of *col* (runs of one value are the rule: cheaper than a sort)."""
    return set(run_heads(col).tolist())
def _distinct_rows(rows):
    """Rows of bytes (m, width) as :class:`Strings` of their text up to
    the first NUL."""
    m, width = rows.shape
    if not m:
        return Strings(np.zeros(0, np.int64), ())
    keys = np.ascontiguousarray(rows).view(f"S{width}").ravel()
    uniq, codes = np.unique(keys, return_inverse=True)
    table = tuple(bytes(u).split(b"\0", 1)[0].decode(errors="replace") for u in uniq.tolist())
    return Strings(codes.astype(np.int64).ravel(), table)


class Entries:
    """Raw entries at offsets *at* of *data* (4-byte aligned: a sample's
    raw data follows its u32 size), read column-wise."""

    def __init__(self, data: bytes, u8, u32, at):
        self.data, self.u8, self.u32, self.at = data, u8, u32, at

    def integers(self, off: int, dtype):
        """The field of *dtype* at *off* of every entry, as int64 (uint64
        for an unsigned 8-byte one): 4- and 8-byte fields from 32-bit words
        when aligned on 4, else byte by byte."""
        pos = self.at + off
        size = dtype.itemsize
        if size in (4, 8) and off % 4 == 0:
            lo = self.u32[pos >> 2]
            if size == 4:
                return lo.view(np.int32).astype(np.int64) if dtype.kind == "i" \
                    else lo.astype(np.int64)
            value = lo.astype(np.uint64) | self.u32[(pos >> 2) + 1].astype(np.uint64) << 32
            return value.view(np.int64) if dtype.kind == "i" else value
        raw = np.zeros(len(pos), np.uint64)
        for i in range(size):
            raw |= self.u8[pos + i].astype(np.uint64) << (8 * i)
        if dtype.kind == "i" and size < 8:
            sign = np.uint64(1 << (8 * size - 1))
            return (raw.astype(np.int64) ^ int(sign)) - int(sign)
        return raw.view(np.int64) if dtype.kind == "i" else \
            (raw.astype(np.int64) if size < 8 else raw)

    def chars(self, off: int, size: int):
        """A ``char name[size]`` field of every entry as :class:`Strings`
        (cut at the first NUL): the rows gathered at once, each distinct
        one decoded once."""
        return _distinct_rows(self.u8[(self.at + off)[:, None] + np.arange(size)])

    def loc_strings(self, off: int, longest: int = 256):
        """A ``__data_loc char[]`` field (u32: length << 16 | offset from
        the entry) of every entry as :class:`Strings`, or None when one is
        longer than *longest* (then read entry by entry)."""
        loc = self.integers(off, np.dtype("<u4"))
        length = loc >> 16
        width = int(length.max()) if len(loc) else 0
        if width > longest:
            return None
        rows = self.u8[(self.at + (loc & 0xFFFF))[:, None] + np.arange(max(width, 1))]
        rows[np.arange(max(width, 1)) >= length[:, None]] = 0
        return _distinct_rows(rows)

    def raws(self) -> list:
        """Each whole entry (its size: the u32 before it)."""
        sizes = self.u32[(self.at >> 2) - 1].tolist()
        view = memoryview(self.data)
        return [view[a:a + z] for a, z in zip(self.at.tolist(), sizes)]


class MirrorDrain(DrainSlices, MirrorPids):
    """The draining side of
    :class:`~fakedebugfs.sources.mirror.Mirror` (which sets ``proc``: the
    proc of the command's PID namespace)."""

    def drain(self, most: Optional[int] = None) -> int:
        """Fire the samples the rings hold, at most *most* bytes of records
        per ring (default: ``slice_bytes()``; what is left waits for the
        next drain; a ring the kernel finds full reports the samples it
        lost); returns how many.

        The records are walked once for their offsets (a record says its
        size); everything else is read column-wise with numpy: kinds,
        tasks, times, each event type's fields."""
        if not self.rings:
            return 0
        if self.before_drain is not None:
            self.before_drain()
        if most is None:
            most = self.slice_bytes()
        self.drained_at = started = time.monotonic()
        blobs, cpus = [], []
        parts, counts = [], []
        for cpu, ring in self.rings.items():
            blob = ring.read_upto(most)
            if not blob:
                continue
            first = blob[6] | blob[7] << 8 if len(blob) >= 8 else 0
            if first > len(blob):  # a record longer than *most*: that one, whole
                blob = ring.read_upto(first)
            part = record_offsets(blob)
            if len(part):  # the last record may be cut: whole ones only
                last = int(part[-1])
                size = blob[last + 6] | blob[last + 7] << 8
                if last + size > len(blob):
                    part = part[:-1]
                    blob = blob[:last]
                else:
                    blob = blob[:last + size]
            ring.release(len(blob))
            if not len(part):
                continue
            blobs.append(blob)
            cpus.append(cpu)
            parts.append(part)
            counts.append(len(part))
        if not blobs:
            self.release_exits()
            return 0
        starts = np.cumsum([0] + [len(b) for b in blobs[:-1]])
        off = np.concatenate([p + b for p, b in zip(parts, starts.tolist())])
        cpu = np.repeat(np.array(cpus, np.int64) % self.kernel.engine.nr_cpus, counts)
        data = b"".join(blobs) + bytes(8 * 64 + 4096)  # room for gathers past the end
        u32 = np.frombuffer(data, "<u4", len(data) // 4)
        u64 = np.frombuffer(data, "<u8", len(data) // 8)
        kind = u32[off >> 2]
        side = off[(kind == PERF_RECORD_COMM) | (kind == PERF_RECORD_FORK)]
        if len(side):  # in time order across the rings (each record's sample_id time)
            ends = side + (u32[(side >> 2) + 1] >> 16).astype(np.int64)
            at = np.argsort(u64[(ends >> 3) - 1], kind="stable")
            for o in side[at].tolist():
                self._side_record(data, o)
        lost = kind == PERF_RECORD_LOST
        if lost.any():
            for c, n in zip(cpu[lost].tolist(), u64[(off[lost] >> 3) + 2].tolist()):
                self._lose(c, n)
        sample = kind == PERF_RECORD_SAMPLE
        fired = self._fire(data, off[sample], cpu[sample], u32, u64)
        if fired and self.on_fire is not None:
            self.on_fire()
        self.release_exits()
        taken = sum(len(b) for b in blobs)
        took = time.monotonic() - started
        # (a drain's fixed cost, up to 1 ms, would be all of a small, cheap one's)
        if taken >= COST_FROM or took >= COST_TIME:
            self.cost = took / taken if not self.cost else (self.cost + took / taken) / 2
        return fired

    def _side_record(self, data: bytes, o: int) -> None:
        """PERF_RECORD_COMM and PERF_RECORD_FORK: the tasks' names (and
        the tree's new tasks)."""
        kind, _, size = _HEADER.unpack_from(data, o)
        engine = self.kernel.engine
        if kind == PERF_RECORD_COMM:
            _, tid = _COMM_HEAD.unpack_from(data, o + 8)
            at = o + 8 + _COMM_HEAD.size
            name = data[at:o + size].split(b"\0", 1)[0]
            when = int.from_bytes(data[o + size - 8:o + size], "little")
            engine.set_comm(tid, name.decode(errors="replace"))
            named = self._named_at
            if len(named) > 1 << 16:  # (tasks long gone)
                named.clear()
            named[tid] = when
            self._late_comm(tid, when)
            return
        _, _, tid, ptid, when = _TASK.unpack_from(data, o + 8)
        if self.members is not None:
            self.members.add(tid)
        if self._named_at.get(tid, -1) < when:  # (not after the child's exec read first)
            engine.set_comm(tid, engine.comms.get(ptid) or comm_of(tid, self.proc))

    def _late_comm(self, tid: int, when: int) -> None:
        """A task's new name (exec, prctl) read after samples of it that
        came later (*when*: the record's perf time, its ``sample_id``'s
        last field).  The rings are read one after the other, so a record
        on one CPU can arrive a drain after the samples its task made on
        another.  On the kernel those events were recorded with the new
        name (``tracing_record_cmdline`` at each), so its slot in
        ``saved_cmdlines`` takes it now."""
        top = self.kernel.ftrace
        if self._last_sample.get(tid, -1) > when and tid in top.cmdlines.map \
                and top.options["record-cmd"]:
            top.cmdlines.record(tid)

    def _fire(self, data: bytes, off, cpu, u32, u64) -> int:
        """The samples at offsets *off* of *data* (sample_type TID | TIME |
        RAW), each on its fake CPU, into the engine's batch path."""
        if not len(off):
            return 0
        engine = self.kernel.engine
        tgid, tid = u32[(off >> 2) + 2].astype(np.int64), u32[(off >> 2) + 3].astype(np.int64)
        ts = u64[(off >> 3) + 2].astype(np.int64)
        raw = off + SAMPLE_RAW  # the entry: struct trace_entry, then the fields
        u8 = np.frombuffer(data, np.uint8)
        ident = u8[raw].astype(np.int64) | u8[raw + 1].astype(np.int64) << 8
        common_pid = (u8[raw + 4].astype(np.int64) | u8[raw + 5].astype(np.int64) << 8
                      | u8[raw + 6].astype(np.int64) << 16 | u8[raw + 7].astype(np.int64) << 24)
        # the task as this process sees it (run's PID namespace), else (not
        # in it: 0; exiting: -1) the kernel's common_pid
        pid = np.where((tid > 0) & (tid < 1 << 22), tid, common_pid)
        self.learn_pids(common_pid, tid)
        keep = np.isin(ident, np.fromiter(self.decoders, np.int64, len(self.decoders)))
        keep &= (pid >= 0) & (pid < 1 << 22)
        if self.skip_pid:
            keep &= tgid != self.skip_pid
        if self.members is not None:
            keep &= np.isin(tid, np.fromiter(self.members, np.int64, len(self.members)))
        traced = self._traced_pids()
        if traced is not None:  # what set_event_pid would drop, dropped here at once
            paired = np.fromiter((i for i, d in self.decoders.items() if d.paired), np.int64)
            keep &= np.isin(pid, np.fromiter(traced, np.int64, len(traced))) \
                | np.isin(ident, paired)
        if not keep.all():
            ident, cpu, pid, ts, raw = ident[keep], cpu[keep], pid[keep], ts[keep], raw[keep]
        n = len(ident)
        if not n:
            return 0
        last = self._last_sample
        if len(last) > 1 << 16:  # (tasks long gone)
            last.clear()
        tasks = _distinct(pid)
        for p in tasks:
            if p not in engine.comms:
                engine.set_comm(p, comm_of(p, self.proc) or "<...>")
        if len(tasks) == 1:
            last[next(iter(tasks))] = int(ts.max())
        else:
            uniq, where = np.unique(pid, return_inverse=True)
            latest = np.full(len(uniq), -1, np.int64)
            np.maximum.at(latest, where, ts)
            last.update(zip(uniq.tolist(), latest.tolist()))
        ts = self._fake_time(ts)
        # emission order: per CPU by time (rings of CPUs folded together are merged)
        order = np.lexsort((ts, cpu))
        ident, cpu, pid, ts, raw = ident[order], cpu[order], pid[order], ts[order], raw[order]
        for c in _distinct(cpu):  # the trace clock never goes back on a CPU
            at = np.flatnonzero(cpu == c)
            ts[at] = np.maximum.accumulate(np.maximum(ts[at], engine.last_ts[c]))
        fired = 0
        cut = self._new_tasks_end(pid)
        for part in ((slice(0, cut), slice(cut, n)) if cut else (slice(0, n),)):
            fired += self._emit(data, u8, u32, ident[part], cpu[part], pid[part], ts[part],
                                raw[part])
        self.mirrored += fired
        return fired

    def _new_tasks_end(self, pid) -> int:
        """With instances, where the events end that bring tasks not in
        ``saved_cmdlines`` yet (0: none): the engine fires a batch of such
        tasks one by one (the arrays' records interleave), so they go
        first as a batch of their own and the rest, often nearly all, at
        once."""
        ft = self.kernel.ftrace
        if not ft.instances:
            return 0
        new = [p for p in _distinct(pid) if not ft.cmdlines.saved((p,))]
        if not new:
            return 0
        return max(int(np.argmax(pid == p)) for p in new) + 1

    def _emit(self, data, u8, u32, ident, cpu, pid, ts, raw) -> int:
        """One batch of decoded samples into the engine."""
        if not len(ident):
            return 0
        idents = np.array(sorted(_distinct(ident)), np.int64)
        kind = np.searchsorted(idents, ident)
        tps, cols = [], []
        carriers = False
        for k, i in enumerate(idents.tolist()):
            dec = self.decoders[i]
            if self.sample_type_extra(dec.tp.key)[0]:  # raw_syscalls: fan_out decodes it
                tps.append(None)
                cols.append(None)
                carriers = True
                continue
            at = raw[kind == k]
            columns = dec.columns(Entries(data, u8, u32, at))
            if dec.pid_args:
                columns = tuple(self.ns_pids(c) if i in dec.pid_args else c
                                for i, c in enumerate(columns))
            cols.append(columns)
            tps.append(dec.tp)
        if carriers:  # raw_syscalls' samples: their events and their numbers' syscalls events
            tps, kind, cpu, pid, ts, cols = self.fan_out(
                data, u8, u32, idents, kind, cpu, pid, ts, raw, cols, tps,
                lambda at: Entries(data, u8, u32, at))
            if not len(kind):
                return 0
        batch = EventBatch(tps, kind, cpu, pid, ts, cols)
        return self.kernel.engine.emit_batch(batch)

    def _traced_pids(self):
        """The tasks whose mirrored events some trace array may record, or
        None for any.  Each array recording a mirrored event with a
        ``set_event_pid`` list (and no ``event-fork``, whose new tasks
        join as they fork) records the events of those tasks only
        (``sched_switch`` and wake-ups apart: their other task counts
        too): the rest, a tool's own system calls behind its
        ``set_event_pid``, never reach the per-event path.  The lists are
        the ones of the events' time: a write to a tracefs file first
        drains every event before it.  Events no array records were
        opened for the function tracers' call trees (which follow the
        function pid lists instead): all of them go on."""
        opened = self.opened.keys()
        traced = set()
        recording = False
        for tr in self.kernel.ftrace.arrays():
            if tr.enabled.isdisjoint(opened):
                continue
            recording = True
            if not tr.event_pids or tr.options.get("event-fork"):
                return None
            traced |= tr.event_pids
        return traced if recording else None

    def _fake_time(self, ts):
        """Sample times (CLOCK_MONOTONIC) on the fake's trace clock: the
        same with ``--clock monotonic``; the virtual clock is moved along."""
        clock = self.kernel.engine.clock
        if not getattr(clock, "deterministic", False):
            return ts
        if self._clock_base is None:
            self._clock_base = (int(ts.min()), clock.now())
        out = ts - self._clock_base[0] + self._clock_base[1]
        top = int(out.max())
        if top > clock.now():
            clock.advance(top - clock.now())
        return out

    def _lose(self, cpu: int, count: int) -> None:
        """*count* samples the kernel could not write on *cpu*: every trace
        array recording a mirrored event loses them there, as a ring buffer
        that overran (``overrun``; the next page's missed-events count)."""
        self.lost += count
        opened = set(self.opened)
        for tr in self.kernel.ftrace.arrays():
            if tr.enabled & opened:
                tr.buffers[cpu].lose_now(count)
        self.kernel.engine.emitted += count
