"""The batch path under a profile whose kmem formats are not the fake's own.

Debian 6.12's ``kmem_cache_alloc`` has ``accounted`` and no ``name``, and
its kmem events' formats differ from the fake's: one by one, a value goes
to its field by name (the fake's own encoder, then the profile's fields
picked by name, a missing one 0); on the batch path the columns go the
same way (``format_text.by_name_columns``).  The same random kmem events
fired one by one and as batches into two Debian 6.12 kernels with every
kmem event enabled leave the same ring buffers, byte for byte, and the
batches really take the batch path.
"""

from __future__ import annotations

import random

import pytest

from fakedebugfs.engine.core.batch import from_pending
from fakedebugfs.engine.core.engine import Pending
from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES
from fakedebugfs.engine.kernel import Kernel
from support.kernel import ring_state
from support.kmem import random_kmem

PROFILE = SHIPPED_PROFILES / "debian-6.12"
KMEM = ("kmem:kmalloc", "kmem:kfree", "kmem:kmem_cache_alloc", "kmem:kmem_cache_free",
        "kmem:mm_page_alloc", "kmem:mm_page_free")


def kmem_events(kernel, rng, n: int, ts: int) -> list:
    """*n* random events of the six kmem tracepoints, 2 CPUs, a few tasks
    (pid 0 and a negative one among them), values at the edges of their
    fields (GFP flags with and without ``__GFP_ACCOUNT``)."""
    tps = kernel.engine.tracepoints
    last = [ts, ts]
    out = []
    for _ in range(n):
        cpu = rng.randrange(2)
        last[cpu] += rng.randint(200, 4000)
        pid, key, values = random_kmem(rng, KMEM)
        out.append(Pending(tps[key], cpu, pid, last[cpu], values))
    return out


def make_kernel() -> Kernel:
    k = Kernel(cpus=2, buffer_size=64 << 10, clock="virtual", seed=1, profile=PROFILE)
    for pid, comm in ((1, "init"), (2001, "bash"), (2002, "cc1"), (31999, "make")):
        k.engine.set_comm(pid, comm)
    for key in KMEM:
        k.ftrace.set_event(key, True)
    return k


@pytest.mark.parametrize("seed", [1, 2])
def test_kmem_batches_under_debian_6_12(seed):
    one, many = make_kernel(), make_kernel()
    rng = random.Random(seed)
    for _ in range(3):
        start = max(one.engine.last_ts) + 1  # each round after the last
        events = kmem_events(one, rng, 800, start)
        one.engine._fire_each(events)
        batch = from_pending([Pending(many.engine.tracepoints[f"{e.tp.system}:{e.tp.name}"],
                                      *e[1:]) for e in events])
        assert many.engine._batch_owners(batch) is not None  # the batch path, really
        many.engine.emit_batch(batch)
    assert [ring_state(b) for b in many.ftrace.buffers] == \
        [ring_state(b) for b in one.ftrace.buffers]
    assert many.ftrace.written == one.ftrace.written
    assert many.ftrace.cmdlines.show() == one.ftrace.cmdlines.show()
