"""The kmem workload's kmalloc/kfree events as trace-cmd shows them, and the
check that a recording is an exact window of them."""

from __future__ import annotations


KMEM = ("kmalloc", "kfree")
CACHES = ("names_cache", "filp", "dentry", "vm_area_struct", "kmalloc-64")


def random_kmem(rng, names) -> tuple:
    """``(pid, name, values)`` of one random kmem event for the batch
    tests: a task among a few (pid 0 and a negative one), one of *names*
    (``kmalloc`` or ``kmem:kmalloc`` ...), the tracepoint's arguments at
    the edges of their fields (GFP flags with and without ``__GFP_ACCOUNT``)."""
    pid = rng.choice((0, 1, 2001, 2002, 31999, -5))
    site = rng.choice((0xFFFFFFFF81000000, 0))
    ptr = rng.choice((0xFFFF888100000040, 0, 1))
    gfp = rng.choice((0xCC0, 0x400CC0, 0xFFFFFFFFFF))
    node = rng.choice((-1, 0, 1))
    name = rng.choice(names)
    short = name.rsplit(":", 1)[-1]
    if short == "kmalloc":
        values = (site, ptr, rng.randrange(1 << 20), rng.choice((8, 1 << 40)), gfp, node)
    elif short == "kmem_cache_alloc":
        values = (site, ptr, 192, 192, gfp, node, rng.choice(CACHES))
    elif short == "kmem_cache_free":
        values = (site, ptr, rng.choice(CACHES))
    elif short == "mm_page_alloc":
        values = (rng.randrange(1 << 30), rng.randrange(3), gfp, 1, site, ptr)
    elif short == "mm_page_free":
        values = (rng.randrange(1 << 30), rng.randrange(3), site, ptr)
    else:
        values = (site, ptr)
    return pid, name, values


def expected_events(cpus: int, seed: int, count: int, workload: str = "kmem") -> list[tuple]:
    """Every kmalloc/kfree the workload fires, as trace-cmd report -R -t shows
    them: (event, cpu, pid, ts_ns, {field: text})."""
    from fakedebugfs.engine.kernel import Kernel
    from fakedebugfs.sources.workloads import make_workload

    kernel = Kernel(cpus=cpus, clock="virtual", seed=seed)
    ks = kernel.engine.kallsyms
    out: list[tuple] = []

    def site(addr: int) -> str:
        found = ks.lookup(addr)
        return f"{found[0]}+0x{found[1]:x}" if found else f"0x{addr:x}"

    def probe(name):
        def fire(cpu, pid, ts, v):
            if name == "kmalloc":
                fields = {"call_site": site(v[0]), "ptr": f"0x{v[1]:x}", "bytes_req": str(v[2]),
                          "bytes_alloc": str(v[3]), "gfp_flags": f"0x{v[4]:x}", "node": str(v[5])}
            else:
                fields = {"call_site": site(v[0]), "ptr": f"0x{v[1]:x}"}
            out.append((name, cpu, pid, ts, fields))
        return fire

    for name in KMEM:
        kernel.engine.tracepoint(f"kmem:{name}").register(probe(name))
    wl = make_workload(workload, kernel, seed=seed, count=count)
    while not wl.done:
        wl.run(1000)
    return sorted(out, key=lambda e: e[3])


def assert_window(recorded, expected):
    """trace-cmd records a window of the run (the workload starts with the
    fake, before trace-cmd turns tracing on): it must be a non-empty, exact,
    gap-free run of the expected events that reaches the end of the workload."""
    assert recorded, "trace-cmd recorded no kmalloc/kfree events"
    assert recorded[0] in expected, f"first recorded event was never emitted: {recorded[0]}"
    start = expected.index(recorded[0])
    want = expected[start:]
    for i, (got, exp) in enumerate(zip(recorded, want)):
        assert got == exp, f"event {start + i}: recorded {got}, emitted {exp}"
    assert len(recorded) == len(want), \
        f"recorded {len(recorded)} events from #{start}, the workload emitted {len(want)}"
    assert len(recorded) >= len(expected) // 2
