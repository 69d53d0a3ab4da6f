"""The kmem workload's kmalloc/kfree events as trace-cmd shows them, and the
check that a recording is an exact window of them."""

from __future__ import annotations


KMEM = ("kmalloc", "kfree")


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
