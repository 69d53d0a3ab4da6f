"""The text of ``trace`` made a run of lines at a time
(:meth:`~fakedebugfs.engine.ftrace.trace_output.TraceOutput.format_lines`,
with the event types, comms, latency flags, symbols and hashed pointers
looked up once per run or kept) is byte for byte the text of the plain
per-event ``print_trace_line`` (kernel/trace/trace.c): each event decoded,
the context columns made by :func:`~fakedebugfs.engine.ftrace.output.context`,
the event's print fmt rendered with nothing kept.

The buffer holds a mix: the kmem workload's events, sched and irq events
through their compiled print fmts, syscall events (no event name),
``trace_marker`` entries (``ftrace:print``), a defined event, tasks
without a saved comm and pid 0; it is printed under the trace options
that change a line (``context-info``, ``irq-info``, ``hash-ptr``) and
under the kmemtrace tracer (its own ``print_line``).  Then ``cat trace``
of a mounted fake filled the same way is checked line by line for the
context and event name the reference prints.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from fakedebugfs.engine.ftrace.output import OutputContext, context
from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.sources.inject import Injector
from fakedebugfs.sources.workloads import make_workload

OWN_TABLE = str(SHIPPED_PROFILES / "linux-6.18")  # a profile without kallsyms

INJECTED = (
    ("sched:sched_switch", {"prev_comm": "bash", "prev_pid": 10, "prev_prio": 120,
                            "prev_state": 1, "next_comm": "swapper/0", "next_pid": 0,
                            "next_prio": 120}),
    ("sched:sched_wakeup", {"comm": "kworker/0:1", "pid": 33, "prio": 120, "target_cpu": 1}),
    ("irq:irq_handler_entry", {"irq": 24, "name": "eth0"}),
    ("irq:softirq_entry", {"vec": 3}),
    ("syscalls:sys_enter_openat", {"dfd": (1 << 64) - 100, "filename": 0x7FFD1234, "flags": 0x80000,
                                   "mode": 0}),
    ("syscalls:sys_exit_openat", {"ret": 3}),
    ("ftrace:print", {"buf": "hello from the marker\n"}),
    ("kmem:kmalloc", {"call_site": 0xFFFFFFFF81000010, "ptr": 0xFFFF888003A1B000,
                      "bytes_req": 100, "bytes_alloc": 128, "gfp_flags": 0xCC0, "node": -1}),
    ("kmem:kfree", {"call_site": 0xFFFFFFFF81000010, "ptr": 0}),
    ("test:mixed", {"id": 7, "label": "seven", "delta": -3}),
)


def _kernel() -> Kernel:
    """A kernel with every tracing/ event on, a defined event, injected
    events of many kinds on both CPUs and the kmem workload's."""
    k = Kernel(cpus=2, clock="virtual", enable=("tracing",))
    k.define_event("test", "mixed", ["int id", "char label[12]", "long delta"],
                   '"id=%d label=%s delta=%ld", REC->id, REC->label, REC->delta')
    k.ftrace.set_event("test:mixed", True)
    inj = Injector(k)
    batch = []
    for i in range(40):
        for j, (key, fields) in enumerate(INJECTED):
            pid = (0, 10, 33, 4242)[(i + j) % 4]  # 4242: no saved comm
            comm = {10: "bash", 33: "kworker/0:1"}.get(pid)
            batch.append(inj.prepare(key, cpu=(i + j) % 2, pid=pid, comm=comm, fields=fields))
    inj.fire(batch)
    wl = make_workload("kmem", k, seed=3, count=3000)
    while wl.run(1000):
        pass
    inj.fire([inj.prepare(key, cpu=1, pid=10, comm="bash", fields=fields)
              for key, fields in INJECTED])
    return k


def reference_line(ft, cpu: int, ts: int, payload: bytes) -> str:
    """``print_trace_line`` one event at a time, nothing kept between lines."""
    etype = ft.by_id.get(int.from_bytes(payload[:2], "little"))
    if etype is None:
        return ""
    rec = etype.decode(payload)
    line = ft.tracer.print_line(ft, etype, rec)
    if line is not None:
        return line
    head = ""
    if ft.options["context-info"]:
        head = context(ft.top.cmdlines, cpu, ts, rec["common_pid"], rec["common_flags"],
                       rec["common_preempt_count"], ft.options["irq-info"])
    out = OutputContext(ft.out.kallsyms, ft.options, ft.engine.seed)
    if etype.system == "ftrace" or etype.bare:
        return head + etype.show(rec, _Uncached(ft, out)) + "\n"
    return f"{head}{etype.name}: {etype.show(rec, out)}\n"


class _Uncached:
    """What ``ftrace`` entries print with (the trace array's ``sym``,
    ``sym_offset``, ``ptr``), through a fresh OutputContext."""

    def __init__(self, ft, out):
        self.ft, self.out = ft, out

    def sym(self, addr):
        return "tracing_mark_write" if addr == 0 else self.out.sym(addr)

    def sym_offset(self, addr):
        return self.out.sym_offset(addr)

    def ptr(self, addr):
        return self.out.ptr(addr)


def _events(ft) -> list:
    return [(ev.ts, cpu, ev.payload) for cpu, ev in ft.iter_events()]


def _both(ft) -> tuple[str, str]:
    events = _events(ft)
    fast = "".join(ft.text_chunks(iter(events), lines=7))  # runs that cut mid-way
    ref = "".join(reference_line(ft, cpu, ts, p) for ts, cpu, p in events)
    return fast, ref


@pytest.fixture(scope="module")
def kernel():
    return _kernel()


@pytest.mark.parametrize("options", [{}, {"context-info": False}, {"irq-info": False},
                                     {"hash-ptr": False}])
def test_the_fast_text_is_the_per_event_text(kernel, options):
    ft = kernel.ftrace
    saved = dict(ft.options)
    ft.options.update(options)
    try:
        fast, ref = _both(ft)
    finally:
        ft.options.update(saved)
    assert fast.count("\n") > 3000
    kinds = ["sched_switch: prev_comm=bash", "openat(", "hello from the marker",
             "mixed: id=7 label=seven delta=-3", "kmem_cache_alloc: ",
             "irq_handler_entry: irq=24 name=eth0"]
    if options.get("context-info", True):
        kinds += ["<...>-4242", "<idle>-0", "bash-10"]
    for kind in kinds:
        assert kind in fast, kind
    assert fast == ref
    # the same through format_line, one event at a time (trace_pipe's path)
    events = _events(ft)[:500]
    assert "".join(ft.format_line(c, _Ev(ts, p)) for ts, c, p in events) == \
        "".join(reference_line(ft, c, ts, p) for ts, c, p in events)


class _Ev:
    def __init__(self, ts, payload):
        self.ts, self.payload = ts, payload


def test_the_kmemtrace_tracers_lines():
    """A tracer's own ``print_line`` (kmemtrace) goes through the runs too."""
    k = Kernel(cpus=2, clock="virtual", kmemtrace_tracer=True)
    k.ftrace.set_tracer("kmemtrace")
    k.ftrace.tracing_on = True
    wl = make_workload("kmem", k, seed=5, count=2000)
    while wl.run(1000):
        pass
    fast, ref = _both(k.ftrace)
    assert fast.count("\n") > 1000
    assert fast == ref


def test_symbols_printed_after_the_table_changes():
    """Kept symbol texts go when kallsyms changes: an address past the last
    function prints as hex, then as the function ``extend`` lays there (the
    fake's own table, linux-6.18's: a profile's kallsyms keeps the fake's
    functions aside)."""
    k = Kernel(cpus=1, profile=OWN_TABLE)
    out, ks = k.ftrace.out, k.engine.kallsyms
    addr = ks.end + 0x10
    assert out.sym_offset(addr) == f"0x{addr:x}"
    out.hold()
    try:
        assert out.sym_offset(addr) == f"0x{addr:x}"
    finally:
        out.release()
    ks.extend([("h5_new_function", 0x40)])
    assert out.sym_offset(addr) == "h5_new_function+0x10/0x40"
    assert out.sym(addr) == "h5_new_function"


def test_kept_texts_follow_the_symbols():
    """An event's text is kept by its payload after ``struct trace_entry``;
    a change of kallsyms drops the kept texts: the same entry, read again,
    prints the function laid out since at its call site (the fake's own
    table, as above)."""
    k = Kernel(cpus=1, clock="virtual", enable=("tracing",), profile=OWN_TABLE)
    ks, inj = k.engine.kallsyms, Injector(k)
    site = ks.end + 0x10
    inj.fire([inj.prepare("kmem:kfree", pid=5, comm="a", fields={"call_site": site, "ptr": 0})])
    assert f"call_site=0x{site:x} ptr=" in "".join(k.ftrace.trace_text())
    ks.extend([("h5_new_function", 0x40)])
    assert "call_site=h5_new_function+0x10/0x40 ptr=" in "".join(k.ftrace.trace_text())


def test_cat_trace_prints_each_line_as_the_reference(fakedebugfs):
    """``cat trace`` of a mounted fake: the injected mix reads back with the
    context columns and names the per-event path gives (the fake's
    comms, CPUs and timestamps), in timestamp order."""
    for key in ("sched/sched_switch", "irq/irq_handler_entry", "syscalls/sys_enter_openat"):
        (fakedebugfs.tracing / "events" / key / "enable").write_text("1")
    fakedebugfs.emit_many([{"event": key, "cpu": i % 2, "pid": 10 + i, "comm": f"task{i}",
                     "fields": fields}
                    for i, (key, fields) in enumerate(INJECTED[:5] * 20)
                    if not key.startswith(("sched:sched_wakeup", "irq:softirq"))])
    text = subprocess.run(["cat", str(fakedebugfs.tracing / "trace")], capture_output=True,
                          text=True, check=True).stdout
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert len(lines) == 60
    stamps = []
    for line in lines:
        m = re.match(r"^\s*task(\d+)-(\d+)\s+\[00(\d)\] \.{5}\s+(\d+\.\d{6}): (.*)$", line)
        assert m, line
        i = int(m[1])
        assert int(m[2]) == 10 + i and int(m[3]) == i % 2
        stamps.append(float(m[4]))
        assert m[5].startswith(("sched_switch: prev_comm=bash", "irq_handler_entry: irq=24",
                                "sys_openat(dfd: ")), line
    assert stamps == sorted(stamps)
