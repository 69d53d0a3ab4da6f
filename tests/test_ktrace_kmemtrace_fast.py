"""The compiled batch paths of ktrace and kmemtrace write what the Python
paths write.

``engine/ktrace/ktrace_fast.pyx`` packs ktrace's records (written by the
compiled ring buffer writer, ``rb_fast``) and
``engine/kmemtrace/kmemtrace_fast.pyx`` writes kmemtrace's relay records;
the Python batch paths (``fill_records``, ``Kmemtrace.write_batch``'s numpy
code) and the per-event probes are the reference.  The same batches go to
kernels that differ only in the path taken, and every byte of the ktrace
ring buffers and of the relay channel, and every counter (ktrace
``overflow``, produced/consumed, overrun/missed, the relay's offsets,
padding, sub-buffers produced, ``total_overruns``, sequence numbers), must
be equal: batches from 1 to 5000 events, 1 to 4 CPUs, buffers that wrap and
relay channels that fill, time gaps that need ``TIME_EXTEND``, readers
between batches (a ktrace reader pinning its pages), faults, events
enabled and disabled on the way, both relay ABIs, and columns of every
integer type, shared values and broadcast columns.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

import numpy as np
import pytest

from fakedebugfs.engine.core.batch import EventBatch, Strings
from fakedebugfs.engine.kmemtrace import tracer as kmem_tracer
from fakedebugfs.engine.ktrace import tracer as ktrace_tracer
from fakedebugfs.engine.ktrace.tracer import KTRACE_BUF_GET_PRODUCED, KTRACE_BUF_PUT_CONSUMED
from fakedebugfs.engine.kernel import Kernel
from support.kernel import faults_of

pytestmark = pytest.mark.skipif(
    ktrace_tracer._fast is None or kmem_tracer._fast is None,
    reason="compiled fast paths not built, or FAKEDEBUGFS_PURE=1")

KINDS = ("kmem:kmalloc", "kmem:kmem_cache_alloc", "kmem:kfree", "kmem:kmem_cache_free",
         "kmem:mm_page_alloc", "kmem:mm_page_free", "raw_syscalls:sys_exit",
         "sched:sched_switch", "sched:sched_process_exit", "sched:sched_process_fork")
STRING_ARGS = {"name", "prev_comm", "next_comm", "parent_comm", "child_comm", "comm"}
CACHES = ("names_cache", "filp", "dentry")


@contextlib.contextmanager
def python_path():
    """The Python batch paths: the compiled modules set aside."""
    saved = ktrace_tracer._fast, kmem_tracer._fast
    ktrace_tracer._fast = kmem_tracer._fast = None
    try:
        yield
    finally:
        ktrace_tracer._fast, kmem_tracer._fast = saved


class Taken:
    """Counts the batches the compiled code did (not left to Python)."""

    def __init__(self, monkeypatch):
        self.ktrace = self.kmemtrace = 0
        pack, write_batch = ktrace_tracer._fast.pack_batch, kmem_tracer._fast.write_batch

        def spy_pack(*args):
            out = pack(*args)
            self.ktrace += out is not None
            return out

        def spy_write_batch(*args):
            done = write_batch(*args)
            self.kmemtrace += bool(done)
            return done

        monkeypatch.setattr(ktrace_tracer._fast, "pack_batch", spy_pack)
        monkeypatch.setattr(kmem_tracer._fast, "write_batch", spy_write_batch)


def make_kernel(cpus, ring, subbufs, subbuf_events, abi):
    k = Kernel(cpus=cpus, buffer_size=ring, clock="virtual", seed=1,
               enable=("ktrace", "kmemtrace"), kmemtrace_abi=abi,
               kmemtrace_subbufs=subbufs, kmemtrace_subbuf_events=subbuf_events)
    return k


def column(rng, m, low, high, kinds=("i8",)):
    """*m* values in [low, high) as one of the column forms a batch has."""
    kind = kinds[int(rng.integers(0, len(kinds)))]
    values = rng.integers(low, high, m, dtype=np.int64, endpoint=False)
    if kind == "i8":
        return values
    if kind == "u8":
        return values.astype(np.uint64) * np.uint64(rng.choice((1, 0xFFFF_0000_0001)))
    if kind == "i4":
        return values.astype(np.int32)
    if kind == "u2":
        return values.astype(np.uint16)
    if kind == "bool":
        return values % 2 == 0
    if kind == "scalar":
        shared = (0, 1, -1, 7, (1 << 64) - 1, 1 << 40, -(1 << 31))
        return shared[int(rng.integers(0, len(shared)))]
    if kind == "broadcast":
        return np.broadcast_to(np.int64(values[0] if m else 3), (m,))
    raise AssertionError(kind)


def random_batch(kernel, rng, n, ts, gaps, forms):
    """A batch of *n* events of KINDS on random CPUs, with columns in the
    forms *forms* (natural values with ``("i8",)``)."""
    tps = [kernel.engine.tracepoints[key] for key in KINDS]
    nr = kernel.engine.nr_cpus
    kind = rng.integers(0, len(tps), n)
    cpu = rng.integers(0, nr, n)
    step = (rng.choice([200, 4000, 1 << 27, (1 << 27) + 9, 1 << 33], n) if gaps
            else rng.integers(200, 4000, n))
    stamp = np.empty(n, np.int64)
    for c in range(nr):  # per CPU the clock never goes back
        on = np.flatnonzero(cpu == c)
        stamp[on] = ts + np.cumsum(step[on])
    cols = []
    for k, tp in enumerate(tps):
        m = int((kind == k).sum())
        row = []
        for arg in tp.args:
            if arg in STRING_ARGS:
                row.append(Strings(rng.integers(0, len(CACHES), m), CACHES))
            elif arg == "order":
                row.append(column(rng, m, 0, 4, ("i8", "i4", "u2")))
            elif arg == "node" and forms == ("i8",):  # an s32 the per-event path packs as it is
                row.append(column(rng, m, -1, 2))
            elif arg == "ptr":  # NULL pointers too (2008-07 does not trace them)
                row.append(column(rng, m, 0, 3, forms) if rng.random() < 0.3
                           else column(rng, m, 1 << 40, 1 << 47, forms))
            else:
                row.append(column(rng, m, -(1 << 62) if forms != ("i8",) else 0, 1 << 62, forms))
        cols.append(tuple(row))
    batch = EventBatch(tps, kind.astype(np.int64), cpu.astype(np.int64),
                       rng.integers(1, 5000, n).astype(np.int64), stamp, cols)
    return batch, int(stamp.max())


def same_batch(batch, kernel):
    """*batch* for *kernel* (its tracepoints; fresh caches)."""
    return EventBatch([kernel.engine.tracepoints[tp.key] for tp in batch.tps], batch.kind,
                      batch.cpu, batch.pid, batch.ts, batch.cols)


def state(k: Kernel) -> dict:
    kt, km = k.ktrace, k.kmemtrace
    return {
        "ktrace": [(bytes(b.mem), tuple(b.page_entries), tuple(b.page_real_end), b.produced,
                    b.consumed, b.tail, b.tail_entries, b.last_ts, b.entries, b.overrun,
                    b.dropped, b.missed, b.read, b.read_entries) for b in kt.buffers],
        "ktrace.overflow": kt.overflow(),
        "relay": [(bytes(b.start[:]), b.offset, b.data, b.subbufs_produced, b.subbufs_consumed,
                   b.bytes_consumed, tuple(b.padding), b.prev_padding, b.wakeup_pending)
                  for b in km.chan.bufs],
        "kmemtrace": (km.seq_num, km.buf_overruns, km.records, tuple(km.lose_next),
                      km.chan.last_toobig),
        "emitted": k.engine.emitted,
    }


def readers(k: Kernel, rng) -> None:
    """Readers take some of what was written (ktrace pages, relay bytes)."""
    for buf in k.ktrace.buffers:
        for _ in range(int(rng.integers(0, 3))):
            buf.read_page()
    for buf in k.kmemtrace.chan.bufs:
        buf.read(int(rng.integers(0, 3000)))


def switch(k: Kernel, r: int, rng) -> None:
    """Events enabled and disabled along the way: a ktrace event off for a
    while, ktrace and kmemtrace off for a round."""
    names = [e.name for e in k.ktrace.order]
    if r % 3 == 1:
        k.ktrace.set_event_enabled(names[r % len(names)], False)
    if r % 3 == 2:
        for name in names:
            k.ktrace.set_event_enabled(name, True)
    k.ktrace.set_enabled(r % 5 != 3)
    k.kmemtrace.set_enabled(r % 7 != 4)


def run(cpus, ring, subbufs, subbuf_events, abi, seed, rounds, sizes, gaps=False,
        forms=("i8",), per_event=False, faults=False, read=False, pin=False, flip=False):
    """The same batches through the compiled path and the Python batch
    path (and, with *per_event*, event by event), compared after each."""
    kernels = [make_kernel(cpus, ring, subbufs, subbuf_events, abi)
               for _ in range(3 if per_event else 2)]
    rng = np.random.default_rng(seed)
    ts = 10 ** 9
    for r in range(rounds):
        batch, ts = random_batch(kernels[0], rng, int(rng.choice(sizes)), ts, gaps, forms)
        action = int(rng.integers(0, 1 << 30))
        for i, k in enumerate(kernels):
            act = np.random.default_rng(action)
            if flip:
                switch(k, r, act)
            if faults and r % 2:
                cpu, count = int(act.integers(0, cpus)), int(act.choice((1, 5, 300)))
                faults_of(k).add({"kind": "overrun", "cpu": cpu, "events": count, "tracer": "all"})
            if pin and r == 1:
                k.ktrace.ioctl(0, KTRACE_BUF_GET_PRODUCED, None, reader="r")
            if pin and r == rounds - 2:
                k.ktrace.ioctl(0, KTRACE_BUF_PUT_CONSUMED, k.ktrace.buffers[0].produced,
                               reader="r")
            mine = same_batch(batch, k)
            if i == 2:  # one by one (Tracepoint.fire)
                k.engine._fire_each(mine.events())
            elif i == 1:
                with python_path():
                    k.engine.emit_batch(mine)
            else:
                k.engine.emit_batch(mine)
            if read:
                readers(k, act)
        first = state(kernels[0])
        for k in kernels[1:]:
            assert state(k) == first, f"round {r} differs"
    return kernels[0]


@pytest.mark.parametrize("cpus,ring,subbufs,subbuf_events", [
    (1, 2 * 4096, 3, 8),  # both wrap at once: overwrite, refused switches
    (2, 3 * 4096, 3, 64),
    (4, 16 * 4096, 5, 512),
    (2, 1 << 20, 20, 8192),  # nothing wraps
])
@pytest.mark.parametrize("abi", ["2008-08", "2008-07"])
def test_same_as_python_and_per_event(monkeypatch, cpus, ring, subbufs, subbuf_events, abi):
    taken = Taken(monkeypatch)
    k = run(cpus, ring, subbufs, subbuf_events, abi, seed=cpus * 31 + subbuf_events,
            rounds=6, sizes=(1, 64, 1000, 5000), per_event=True)
    assert taken.ktrace and taken.kmemtrace, "the compiled paths were not taken"
    assert k.kmemtrace.records > 0 and k.ktrace.buffers[0].entries > 0


@pytest.mark.parametrize("abi", ["2008-08", "2008-07"])
def test_full_relay_refuses_then_reader_frees(monkeypatch, abi):
    """A full channel refuses every record (each counted once in
    ``total_overruns``) until a reader takes sub-buffers."""
    taken = Taken(monkeypatch)
    k = run(2, 2 * 4096, 2, 16, abi, seed=5, rounds=10, sizes=(300, 1000), read=True,
            per_event=True)
    assert taken.kmemtrace
    assert k.kmemtrace.buf_overruns > 0 and k.ktrace.overflow() > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_column_forms(monkeypatch, seed):
    """Columns of every integer type, shared values, broadcast columns and
    values beyond their members' range (truncated as C truncates)."""
    taken = Taken(monkeypatch)
    forms = ("i8", "u8", "i4", "u2", "bool", "scalar", "broadcast")
    for abi in ("2008-08", "2008-07"):
        run(2, 4 * 4096, 3, 32, abi, seed=seed, rounds=6, sizes=(64, 700, 3000), forms=forms)
    assert taken.ktrace and taken.kmemtrace


@pytest.mark.parametrize("seed", [4, 5])
def test_time_extend_faults_readers(monkeypatch, seed):
    """Gaps over 2^27 ns (``TIME_EXTEND``), overrun faults in the middle of
    batches, readers between them."""
    taken = Taken(monkeypatch)
    run(2, 8 * 4096, 3, 128, "2008-08", seed=seed, rounds=8, sizes=(70, 400, 3000), gaps=True,
        faults=True, read=True, per_event=True)
    assert taken.ktrace and taken.kmemtrace


def test_pinned_reader_and_switches(monkeypatch):
    """A ktrace reader between GET_PRODUCED and PUT_CONSUMED pins its pages
    (events that find no free page are lost, counted in ``overflow``);
    events and tracers switched on and off between batches."""
    taken = Taken(monkeypatch)
    k = run(2, 4 * 4096, 3, 64, "2008-08", seed=9, rounds=10, sizes=(500, 1500), pin=True,
            flip=True, per_event=True)
    assert taken.ktrace and taken.kmemtrace
    assert k.ktrace.overflow() > 0


def test_columns_that_are_not_integers_go_to_python(monkeypatch):
    """A float column is left to the Python path by both (the same bytes)."""
    one, two = (make_kernel(2, 4 * 4096, 3, 64, "2008-08") for _ in range(2))
    rng = np.random.default_rng(3)
    batch, _ = random_batch(one, rng, 500, 10 ** 9, False, ("i8",))
    cols = [list(c) for c in batch.cols]
    cols[0][2] = cols[0][2].astype(np.float64)  # kmalloc's bytes_req
    cols[6][1] = cols[6][1].astype(np.float64)  # sys_exit's ret
    batch.cols = [tuple(c) for c in cols]
    taken = Taken(monkeypatch)
    one.engine.emit_batch(same_batch(batch, one))
    with python_path():
        two.engine.emit_batch(same_batch(batch, two))
    assert state(one) == state(two)
    assert taken.kmemtrace == 0 and taken.ktrace == 0


def test_a_column_shorter_than_its_events_is_refused():
    """A column with fewer values than its kind has events in the batch is
    never read past its end: both compiled paths hand the batch back
    (the Python path then fails as numpy does), and nothing is written."""
    kinds, cpus, ts = np.zeros(5, np.int64), np.zeros(5, np.int64), np.arange(5, dtype=np.int64)
    scratch = [None, None, None]
    pack = ktrace_tracer._fast.pack_batch
    assert pack(kinds, [(7, (8, 4), (np.arange(5), np.arange(3)))], scratch) is None
    assert pack(kinds, [(7, (8, 4), (np.arange(5), np.arange(5)))], scratch) is not None
    km = make_kernel(1, 4 * 4096, 3, 64, "2008-08").kmemtrace
    write = kmem_tracer._fast.write_batch
    short = [(0, 1 | 1 << 16, 24, 0, (np.arange(5) + 1, np.arange(3) + 1))]  # a free
    assert write(km, kinds, cpus, ts, 1, short, False) is False
    assert km.records == 0 and km.chan.bufs[0].offset == 0
    whole = [(0, 1 | 1 << 16, 24, 0, (np.arange(5) + 1, np.arange(5) + 1))]
    assert write(km, kinds, cpus, ts, 1, whole, False) is True
    assert km.records == 5


def test_loading_the_compiled_modules_leaves_numpy_out():
    """A mount's start needs no numpy (engine/core/lazynp.py): the tracers
    load their compiled modules at import, which must not import it."""
    code = ("import sys; import fakedebugfs.engine.kernel; "
            "from fakedebugfs.engine.ktrace import tracer as a; "
            "from fakedebugfs.engine.kmemtrace import tracer as b; "
            "assert a._fast is not None and b._fast is not None; "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
