"""A trace array's ring buffers (kernel/trace/trace.c's side of them, 6.18).

:class:`TraceBuffers`, mixed into :class:`~.trace.TraceArray`: one
overwrite-mode :class:`CpuBuffer` per CPU, written one entry at a time
(``trace_buffer_unlock_commit``, :meth:`TraceBuffers.commit`) or a batch
at once (:meth:`TraceBuffers.write_batch`), sized by ``buffer_size_kb``
(``tracing_resize_ring_buffer``) and ``buffer_subbuf_size_kb``, reset,
freed (``free_buffer``) and counted (``per_cpu/cpuN/stats``).  Each entry
written records its task's comm in ``saved_cmdlines`` (``record-cmd``).
"""

from __future__ import annotations

import errno
from typing import Optional

from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.batch import split_per_cpu
from fakedebugfs.engine.core.errors import einval
from fakedebugfs.engine.core.layouts import BUF_PAGE_HDR_SIZE
from fakedebugfs.engine.core.lazynp import np
from fakedebugfs.engine.core.ringbuffer import MAX_BUFFER_BYTES, CpuBuffer, event_length
from fakedebugfs.engine.ftrace import hist_batch
from fakedebugfs.engine.ftrace.control import (PAGE_SIZE, buffer_kb_shown, buffer_pages,
    subbuf_pages)
from fakedebugfs.engine.ftrace.output import timestamp


class TraceBuffers:
    """``tr->array_buffer`` and the files that size and count it.  Needs
    ``engine``, ``top`` (``saved_cmdlines``, ``instances``), ``options``
    and the event state (:class:`~.trace_events.TraceEvents`, the batch
    check) of the trace array it is part of."""

    buffers: list  # CpuBuffer per CPU
    buffer_kb: list  # per CPU, as buffer_size_kb shows them
    buffer_percent: int
    subbuf_order: int  # buffer_subbuf_size_kb: sub-buffers of PAGE_SIZE << order
    tracing_on: bool
    cpumask: int  # tracing_cpumask
    written: int  # entries offered to the buffers (wake-ups compare this)

    def _init_buffers(self, nr_cpus: int, buffer_kb: int) -> None:
        pages = buffer_pages(buffer_kb)
        # an event too big for a sub-buffer is not recorded, nor counted (ring_buffer_lock_reserve)
        self.buffers = [CpuBuffer(cpu, pages * PAGE_SIZE, overwrite=True, count_oversized=False,
                                  reader_pages=True)
                        for cpu in range(nr_cpus)]
        self.buffer_kb = [buffer_kb_shown(pages)] * nr_cpus
        self.buffer_percent = 50
        self.subbuf_order = 0
        self.tracing_on = True
        self.cpumask = (1 << nr_cpus) - 1
        self.written = 0

    def poll_ready(self, cpu: int) -> bool:
        """``trace_poll`` of a per-CPU ``trace_pipe_raw``: readable with the
        ``block`` option, else once the buffer is ``buffer_percent`` full
        (``ring_buffer_poll_wait``: any data for 0).  trace-cmd's recorders
        wait in select() for this."""
        return bool(self.options["block"]) or self.buffers[cpu].watermark_hit(self.buffer_percent)

    # --- writing ----------------------------------------------------------------------

    def commit(self, cpu: int, ts: int, payload: bytes) -> bool:
        """Write one entry into *cpu*'s buffer if tracing is on there."""
        if not self.tracing_on or not (self.cpumask >> cpu) & 1:
            return False
        # counted even when lost: losing an event to a fault finishes the
        # tail page, which a blocked trace_pipe_raw reader must be woken for
        self.written += 1
        ok = self.buffers[cpu].write(ts, payload)
        top = self.top
        if top.options["record-cmd"]:  # tracing_record_cmdline: the entry's task
            top.cmdlines.record(int.from_bytes(payload[4:8], "little", signed=True))
        if self.options.get("record-tgid"):  # tracing_record_taskinfo's TRACE_RECORD_TGID
            top.tgids.record(int.from_bytes(payload[4:8], "little", signed=True))
        return ok

    def batch_ok(self, batch, kinds) -> bool:
        """Can :meth:`write_batch` take these events at once?  Not when
        anything looks at events one by one: triggers, soft-disable, pid
        lists, filters, the stacktrace option, instances (they share
        ``saved_cmdlines``: unless every task of the batch is saved already,
        which none of their records changes), an event without a column
        encoder."""
        if self.options["stacktrace"] or self.options.get("record-tgid") or self.event_pids \
                or self.notrace_pids:
            return False
        if self.top.instances and not self.top.cmdlines.saved(batch.tasks()):
            return False  # one by one: the arrays' saved_cmdlines records interleave
        for k, probe in kinds:
            ev = probe.event
            key = ev.key
            trig = self.triggers.get(key)
            if trig is not None and trig.list:
                if not hist_batch.batchable(trig):  # hist triggers of the common cases only
                    return False
            elif key in self.soft_disabled:
                return False
            if key in self.filter_preds or ev.encode_columns is None:
                return False
            if getattr(ev.encode_columns, "positional", False) \
                    and tuple(batch.tps[k].args) != tuple(ev.names):
                # a profile kernel's format that is not the tracepoint's
                # arguments (Debian 6.12's kmem_cache_alloc: accounted, no
                # name): one by one, where values are matched by name
                return False
            for c in batch.cols[k]:
                if isinstance(c, np.ndarray) and c.dtype.kind == "O":
                    return False
        return True

    def write_batch(self, batch, kinds) -> None:
        """The probes of *kinds* for every event of the batch: payloads
        packed column-wise (:meth:`EventType.pack_columns`), each CPU's
        written with :meth:`CpuBuffer.write_batch`, ``saved_cmdlines``
        recorded for each entry, as :meth:`commit` of each in turn."""
        packed = self._batch_triggers(batch, kinds) if self.triggers else {}
        if not self.tracing_on:
            return
        groups = []
        mine = bytearray(len(batch.tps))
        for k, probe in kinds:
            pos = batch.where(k)
            if k in packed:
                if packed[k] is None:  # soft-disabled: its triggers only
                    continue
                made = packed[k]
            else:
                made = probe.event.pack_columns(batch.pid, batch.cols[k], pos=pos)
            mine[k] = 1
            for idx, words, length, rowsel in made:
                groups.append((pos if len(idx) == len(pos) else pos[idx], words, length,
                               rowsel))
        if kinds:
            self.firing = kinds[-1][1].event.key  # the last probe run, as one by one
        cpus = bytes((self.cpumask >> c) & 1 for c in range(len(self.buffers)))
        bf = fast.load("fakedebugfs.engine.core.batch_fast")
        if bf is not None and batch.kind.dtype == batch.cpu.dtype == batch.pid.dtype == np.int64:
            done = bf.select(batch.kind, batch.cpu, mine, cpus)
        else:
            bf = None
            done = np.flatnonzero(np.frombuffer(bytes(mine), bool)[batch.kind]
                                  & np.frombuffer(cpus, bool)[batch.cpu])
        if not len(done):
            return
        split_per_cpu(self.buffers, batch, groups, done)
        self.written += len(done)
        if self.top.options["record-cmd"]:  # tracing_record_cmdline of each entry
            cmdlines = self.top.cmdlines
            if bf is None:
                cmdlines.record_many(batch.pid[done].astype(np.int32))
                return
            runs = bf.pid_runs(batch.pid, done)
            cmdlines.record_many(runs, bf.first_seen(runs))

    def _batch_triggers(self, batch, kinds) -> dict:
        """The hist triggers of the batch's kinds that have some
        (:func:`.hist_batch.run_triggers`, whatever ``tracing_on`` says, as
        one by one): ``{kind: packed records}`` for :meth:`write_batch` to
        reuse, None for a soft-disabled event (not recorded)."""
        packed = {}
        for k, probe in kinds:
            ev = probe.event
            trig = self.triggers.get(ev.key)
            if trig is None or not trig.list:
                continue
            pos = batch.where(k)
            groups = ev.pack_columns(batch.pid, batch.cols[k], pos=pos)
            hist_batch.run_triggers(self, ev, trig, groups, len(pos), batch.cpu[pos],
                                    batch.pid[pos])
            packed[k] = None if ev.key in self.soft_disabled else groups
        return packed

    # --- sizes ------------------------------------------------------------------------

    def reset(self, cpus=None) -> None:
        """``tracing_reset_online_cpus`` (or one CPU: ``tracing_reset_cpu``,
        which leaves ``time_start``, the latency format's zero)."""
        if cpus is None:
            self.time_start = self.engine.clock.now()
        for cpu in self.cpu_list(cpus):
            self.buffers[cpu].reset()

    def resize(self, kb: int, cpu: Optional[int] = None) -> None:
        """``tracing_entries_write`` + ``tracing_resize_ring_buffer``: 0 is
        EINVAL; the size in sub-buffers (``val << 10`` wrapping at 64 bits,
        in their data bytes: 4080 for 4 KiB ones; at least two), shown back
        in KiB of those.  The content is dropped (the kernel keeps it; a
        deviation)."""
        if kb <= 0:
            raise einval("size")
        data = self.subbuf_data_size
        pages = buffer_pages(kb, data)
        for c in self.cpu_list(cpu):
            self.buffers[c].resize(pages * (data + BUF_PAGE_HDR_SIZE))  # ENOMEM: left as it was
            self.buffer_kb[c] = buffer_kb_shown(pages, data)

    def set_subbuf_order(self, order: int) -> None:
        """``buffer_subbuf_size_write`` + ``ring_buffer_subbuf_order_set``:
        every CPU's buffer is made anew of sub-buffers of ``PAGE_SIZE <<
        order`` bytes, as many as hold the data the old ones held (at
        least two); the content is dropped.  ``buffer_size_kb`` keeps
        showing the size set last (``trace_array_cpu.entries`` is not
        updated).  ENOMEM, from any CPU, leaves every buffer as it was."""
        if order == self.subbuf_order:
            return
        psize = PAGE_SIZE << order
        new = [subbuf_pages(b.nr_pages, b.data_size, psize - BUF_PAGE_HDR_SIZE)
               for b in self.buffers]
        if any(pages * psize > MAX_BUFFER_BYTES for pages in new):
            raise OSError(errno.ENOMEM, "ring buffer too large")
        for buf, pages in zip(self.buffers, new):
            buf.resize(pages * psize, psize)
        self.subbuf_order = order

    @property
    def subbuf_data_size(self) -> int:
        """``buffer->subbuf_size``: the data bytes of a sub-buffer
        (``events/header_page``'s ``data`` field)."""
        return (PAGE_SIZE << self.subbuf_order) - BUF_PAGE_HDR_SIZE

    def buffer_size_kb(self) -> str:
        sizes = set(self.buffer_kb)
        return f"{self.buffer_kb[0]}\n" if len(sizes) == 1 else "X\n"

    def free_buffer(self) -> None:
        """``tracing_free_buffer_release``: tracing off with the
        ``disable_on_free`` option, then ``tracing_resize_ring_buffer(tr, 0)``:
        every CPU's buffer shrinks to the minimum of two pages."""
        if self.options.get("disable_on_free"):
            self.tracing_on = False
        data = self.subbuf_data_size
        for c in range(len(self.buffers)):
            self.buffers[c].resize(2 * (data + BUF_PAGE_HDR_SIZE))
            self.buffer_kb[c] = buffer_kb_shown(2, data)

    # --- counts -----------------------------------------------------------------------

    def cpu_list(self, cpus) -> list[int]:
        """*cpus* (None: every CPU; one CPU; an iterable of them) as a list."""
        if cpus is None:
            return list(range(len(self.buffers)))
        return [cpus] if isinstance(cpus, int) else list(cpus)

    def entries(self, cpu: int) -> int:
        """Unread events in *cpu*'s buffer (``ring_buffer_entries_cpu``)."""
        buf = self.buffers[cpu]
        return max(0, buf.entries - buf.overrun - buf.consumed_events)

    def stats(self, cpu: int) -> str:
        """``tracing_stats_read``: ``per_cpu/cpuN/stats``."""
        buf = self.buffers[cpu]
        oldest = next(iter(buf.iter_unread()), None)
        nbytes = sum(event_length(len(e.payload)) for e in buf.iter_unread())
        return (f"entries: {self.entries(cpu)}\noverrun: {buf.overrun}\n"
                f"commit overrun: 0\nbytes: {nbytes}\n"
                f"oldest event ts: {timestamp(oldest.ts if oldest else 0)}\n"
                f"now ts: {timestamp(self.engine.clock.now())}\n"
                f"dropped events: {buf.dropped}\nread events: {buf.consumed_events}\n")


__all__ = ["TraceBuffers"]
