"""A bare simulated kernel, for engine-level tests: its fault table, and
its whole state (every ring buffer and counter) to compare two kernels."""

from __future__ import annotations

import weakref

from fakedebugfs.engine.core.ringbuffer import CpuBuffer
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.instrument.faults import FaultTable

_TABLES: "weakref.WeakKeyDictionary[Kernel, FaultTable]" = weakref.WeakKeyDictionary()


def faults_of(kernel: Kernel) -> FaultTable:
    """The fault table of *kernel* (made on first use, one per kernel), as the
    server keeps one for the kernel it serves."""
    table = _TABLES.get(kernel)
    if table is None:
        table = _TABLES[kernel] = FaultTable(kernel)
    return table


def ring_state(buf: CpuBuffer) -> tuple:
    return (bytes(buf.mem), tuple(buf.page_entries), tuple(buf.page_real_end), buf.produced,
            buf.consumed, buf.tail, buf.tail_entries, buf.last_ts, buf.entries, buf.overrun,
            buf.dropped, buf.missed, [tuple(g) for g in buf.gaps], buf.lose_next,
            buf.consumed_events)


def state(k: Kernel) -> dict:
    ft, kt, km = k.ftrace, k.ktrace, k.kmemtrace
    return {
        "ftrace": [ring_state(b) for b in ft.buffers],
        "ftrace.written": ft.written,
        "saved_cmdlines": (ft.cmdlines.show(), ft.cmdlines.idx),
        "ktrace": [ring_state(b) for b in kt.buffers],
        "kmemtrace": [(bytes(b.start[:]), b.offset, b.data, b.subbufs_produced,
                       tuple(b.padding)) for b in km.chan.bufs],
        "kmemtrace.counters": (km.seq_num, km.buf_overruns, km.records, tuple(km.lose_next)),
        "emitted": k.engine.emitted,
        "last_ts": tuple(k.engine.last_ts),
    }
