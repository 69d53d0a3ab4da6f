"""Scripted faults (``fakedebugfs.instrument.faults``), each exactly accounted.

Engine faults are checked in process against a twin: the same seeded
workload on the virtual clock run on a second, unfaulted Kernel gives the
events the faulted one must show, minus exactly the lost ones, and the
kernel's counters (``stats`` overrun, ktrace ``overflow``, kmemtrace
``total_overruns``) must count them exactly.  The same faults are then
driven through real mounts and real readers: trace-cmd (its report must
print the dropped line with the count), the reference ktrace reader, relay
reads; file faults with cat, os.read, poll and ioctl.

The missed-events flags are written out from include/linux/ring_buffer.h,
not taken from the code under test.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import threading
import time

import pytest

from conftest import FAKEDEBUGFS, read_chunks, wait_done
from fakedebugfs.engine.core.ringbuffer_read import decode_page_events
from fakedebugfs.instrument.faults import FaultTable, parse_fault
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.sources.workloads import make_workload
from support.kernel import faults_of

RB_MISSED_EVENTS = 1 << 31  # include/linux/ring_buffer.h
RB_MISSED_STORED = 1 << 30
COMMIT_MASK = (1 << 27) - 1  # the flags live above the commit's bits
HDR = 16  # struct buffer_data_page: u64 time_stamp, local_t commit
N = 4000
SEED = 5


# --- in process: a faulted kernel against its unfaulted twin ------------------------

def kmem_kernel(fault=None, at: int = N // 3, drain_first: bool = False, seed: int = SEED):
    """A 2-CPU kernel after *N* events of the kmem workload with everything
    enabled; *fault* is added after *at* events (after the readers took all
    there was, tail page included, with *drain_first*).  Returns (kernel,
    pages drained before the fault by tracer)."""
    k = Kernel(cpus=2, clock="virtual", seed=seed, enable_all=True, buffer_size=1 << 20)
    wl = make_workload("kmem", k, seed=seed, count=N)
    wl.run(at)
    early = {"ftrace": [], "ktrace": []}
    if drain_first:
        for name in early:
            early[name] = drain(getattr(k, name).buffers[0])
    if fault is not None:
        faults_of(k).add(fault)
    while not wl.done:
        wl.run(500)
    return k, early


def drain(buf) -> list[bytes]:
    """Every page a trace_pipe_raw reader gets, the tail page's rest included."""
    pages = []
    while (page := buf.read_page()) is not None:
        pages.append(page)
    return pages


def page_events(page: bytes) -> list[tuple[int, bytes]]:
    ts, commit = struct.unpack_from("<QQ", page)
    return [(when, payload) for kind, when, _, _, payload
            in decode_page_events(memoryview(page)[HDR:], commit & COMMIT_MASK, ts)
            if kind == "data"]


def missed(page: bytes):
    """(flagged, stored count or None) of a page's commit word."""
    commit = struct.unpack_from("<Q", page, 8)[0]
    if not commit & RB_MISSED_EVENTS:
        return False, None
    if not commit & RB_MISSED_STORED:
        return True, None
    return True, struct.unpack_from("<Q", page, HDR + (commit & COMMIT_MASK))[0]


def assert_missed(page: bytes, lost: int) -> None:
    """The page says *lost* events were missed before it: the count is
    stored after the data unless fewer than 8 bytes are left there."""
    flag, count = missed(page)
    assert flag, "no RB_MISSED_EVENTS"
    if count is None:
        commit = struct.unpack_from("<Q", page, 8)[0] & COMMIT_MASK
        assert commit > 4080 - 8, "count not stored though it fits"
    else:
        assert count == lost


def stats(text: str) -> dict:
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines())}


def assert_gap(pages: list[bytes], base: list, lost: int) -> None:
    """*pages* hold the events of *base* but for *lost* consecutive ones,
    and the first page after the gap (only it) carries the stored count."""
    events, flagged = [], []
    for page in pages:
        if missed(page)[0]:
            assert_missed(page, lost)
            flagged.append(len(events))
        events += page_events(page)
    assert len(flagged) == 1, f"{len(flagged)} pages flagged, want one"
    gap_at = flagged[0]
    assert events == base[:gap_at] + base[gap_at + lost:]
    assert len(events) + lost == len(base)


@pytest.mark.parametrize("tracer", ["ftrace", "ktrace"])
@pytest.mark.parametrize("drain_first", [False, True])
def test_overrun_events_ring_buffer_exact(tracer, drain_first):
    """``overrun`` of M events: the next M events of CPU 0 are gone, counted
    as overrun (stats: overrun M, entries M fewer; ktrace: overflow M), and
    the page after the gap carries RB_MISSED_EVENTS with M stored.  Also
    when a reader had just taken the start of the tail page."""
    m = 137
    twin, twin_early = kmem_kernel(drain_first=drain_first)
    k, early = kmem_kernel({"kind": "overrun", "cpu": 0, "events": m, "tracer": tracer},
                           drain_first=drain_first)
    buf, twin_buf = getattr(k, tracer).buffers[0], getattr(twin, tracer).buffers[0]
    assert early[tracer] == twin_early[tracer]
    if tracer == "ftrace":
        got, want = stats(k.ftrace.stats(0)), stats(twin.ftrace.stats(0))
        assert int(got["overrun"]) == int(want["overrun"]) + m == m
        assert int(got["entries"]) == int(want["entries"]) - m  # what the buffer holds
    else:
        assert k.ktrace.overflow() == twin.ktrace.overflow() + m == m
    base = [e for p in drain(twin_buf) for e in page_events(p)]
    assert_gap(drain(buf), base, m)
    # the other CPU and the other tracers lost nothing
    other = "ktrace" if tracer == "ftrace" else "ftrace"
    assert drain(getattr(k, other).buffers[0]) == drain(getattr(twin, other).buffers[0])
    assert drain(getattr(k, tracer).buffers[1]) == drain(getattr(twin, tracer).buffers[1])
    assert k.kmemtrace.buf_overruns == 0
    assert faults_of(k).list() == []


def relay_records(kernel) -> list[bytes]:
    """Every record of the kmemtrace channel (2008-08 layout: u16 size at 2)."""
    out = []
    for buf in kernel.kmemtrace.chan.bufs:
        data = b""
        while chunk := buf.read(1 << 20):
            data += chunk
        off = 0
        while off < len(data):
            size = struct.unpack_from("<H", data, off + 2)[0]
            out.append(data[off:off + size])
            off += size
    return out


def test_overrun_events_kmemtrace_exact():
    """kmemtrace: M records of CPU 0 dropped as a full channel drops them:
    total_overruns = M, records read + M = records of the twin, and the
    sequence numbers stay gap-free (dropped records take none)."""
    m = 211
    twin, _ = kmem_kernel()
    k, _ = kmem_kernel({"kind": "overrun", "cpu": 0, "events": m, "tracer": "kmemtrace"})
    got, want = relay_records(k), relay_records(twin)
    assert k.kmemtrace.buf_overruns == m
    assert len(got) + m == len(want)
    seqs = sorted(struct.unpack_from("<i", r, 4)[0] for r in got)
    assert seqs == list(range(1, len(got) + 1))
    assert drain(k.ftrace.buffers[0]) == drain(twin.ftrace.buffers[0])


def test_overrun_all_tracers_each_lose_m():
    m = 50
    twin, _ = kmem_kernel()
    k, _ = kmem_kernel({"kind": "overrun", "cpu": 1, "events": m, "tracer": "all"})
    assert k.ftrace.buffers[1].overrun == k.ktrace.overflow() == k.kmemtrace.buf_overruns == m
    for tracer in ("ftrace", "ktrace"):
        base = [e for p in drain(getattr(twin, tracer).buffers[1]) for e in page_events(p)]
        assert_gap(drain(getattr(k, tracer).buffers[1]), base, m)
    assert len(relay_records(k)) + m == len(relay_records(twin))


@pytest.mark.parametrize("tracer", ["ftrace", "ktrace"])
def test_overrun_pages_drops_oldest_exact(tracer):
    """``pages`` K: the K oldest unread pages go now, their events counted
    as overrun, and the next page a reader gets carries their count."""
    twin, _ = kmem_kernel(at=N)
    k, _ = kmem_kernel(at=N)
    twin_pages = drain(getattr(twin, tracer).buffers[0])
    lost = len(page_events(twin_pages[0])) + len(page_events(twin_pages[1]))
    added = faults_of(k).add({"kind": "overrun", "cpu": 0, "pages": 2, "tracer": tracer})
    assert added["lost"] == {tracer: lost}
    pages = drain(getattr(k, tracer).buffers[0])
    assert_missed(pages[0], lost)
    assert [page_events(p) for p in pages] == [page_events(p) for p in twin_pages[2:]]
    if tracer == "ftrace":
        assert int(stats(k.ftrace.stats(0))["overrun"]) == lost
    else:
        assert k.ktrace.overflow() == lost


def test_pages_wait_for_a_pinned_ktrace_reader():
    """A ktrace reader between GET_PRODUCED and PUT_CONSUMED keeps its
    pages: the drop happens when it lets go, and is counted then."""
    k, _ = kmem_kernel(at=N)
    buf = k.ktrace.buffers[0]
    buf.pin(5)
    consumed = buf.consumed
    faults_of(k).add({"kind": "overrun", "cpu": 0, "pages": 1, "tracer": "ktrace"})
    assert (buf.consumed, k.ktrace.overflow()) == (consumed, 0)
    first = buf.page_entries[buf.slot(buf.consumed)]
    buf.unpin()
    assert k.ktrace.overflow() == first > 0


def test_remaining_and_clear():
    """Pending losses are used up oldest fault first; clearing one takes
    back what it had not done."""
    k = Kernel(cpus=1, clock="virtual", enable_all=True)
    a = faults_of(k).add({"kind": "overrun", "cpu": 0, "events": 5})
    b = faults_of(k).add({"kind": "overrun", "cpu": 0, "events": 3})
    for i in range(2):
        k.ftrace.marker(1, b"x")
    left = {f["id"]: f["remaining"] for f in faults_of(k).list()}
    assert left == {a["id"]: 3, b["id"]: 3}
    faults_of(k).clear(a["id"])
    assert [(f["id"], f["remaining"]) for f in faults_of(k).list()] == [(b["id"], 3)]
    for i in range(4):
        k.ftrace.marker(1, b"x")
    assert faults_of(k).list() == []
    assert k.ftrace.buffers[0].overrun == 5  # 2 + 3: the cleared 3 never happened
    assert k.ftrace.entries(0) == 1
    with pytest.raises(ValueError, match="no active fault with id"):
        faults_of(k).clear(a["id"])


@pytest.mark.parametrize("spec,word", [
    ({"kind": "flood"}, "'kind'"),
    ({"kind": "overrun", "cpu": 0}, "'events' and 'pages'"),
    ({"kind": "overrun", "cpu": -1, "events": 1}, "'cpu'"),
    ({"kind": "overrun", "cpu": 0, "events": 0}, "'events'"),
    ({"kind": "overrun", "cpu": 0, "events": 1, "tracer": "perf"}, "'tracer'"),
    ({"kind": "overrun", "cpu": 0, "pages": 1, "tracer": "kmemtrace"}, "'pages'"),
    ({"kind": "errno", "path": "tracing/trace", "errno": "EWHAT"}, "'errno'"),
    ({"kind": "errno", "path": "tracing/trace", "errno": 4, "op": "mmap"}, "'op'"),
    ({"kind": "errno", "path": "", "errno": 4}, "'path'"),
    ({"kind": "errno", "path": "x", "errno": 4, "count": 0}, "'count'"),
    ({"kind": "errno", "path": "x", "errno": 4, "count": True}, "'count'"),
    ({"kind": "errno", "path": "x", "errno": "ENOSYS"}, "'errno'"),
    ({"kind": "stall", "path": "x"}, "'ms'"),
    ({"kind": "stall", "path": "x", "ms": -1}, "'ms'"),
    ({"kind": "short_read", "path": "x", "bytes": 0}, "'bytes'"),
    ({"kind": "poll_delay", "path": "x", "ms": 5, "op": "read"}, "'op'"),
    ({"kind": "stall", "path": "x", "ms": 5, "colour": "red"}, "'colour'"),
])
def test_bad_specs_name_the_key(spec, word):
    with pytest.raises(ValueError) as info:
        parse_fault(spec)
    message = str(info.value)
    assert word in message and "\n" not in message


def test_cpu_is_checked_against_the_kernel():
    table = faults_of(Kernel(cpus=2))
    with pytest.raises(ValueError, match="'cpu' 2"):
        table.add({"kind": "overrun", "cpu": 2, "events": 1})
    assert table.list() == []


def test_take_matches_glob_op_and_counts():
    table = FaultTable()
    assert not table.active and table.take("tracing/trace", "read", "errno") is None
    table.add({"kind": "errno", "path": "/tracing/per_cpu/cpu*/trace_pipe_raw", "op": "read",
               "errno": "EIO", "count": 2})
    assert table.active
    assert table.take("tracing/per_cpu/cpu1/trace_pipe_raw", "open", "errno") is None
    assert table.take("tracing/trace", "read", "errno") is None
    f = table.take("tracing/per_cpu/cpu1/trace_pipe_raw", "read", "errno")
    assert f.errno == errno.EIO and f.remaining == 1
    assert table.list()[0]["remaining"] == 1
    assert table.take("tracing/per_cpu/cpu0/trace_pipe_raw", "read", "errno") is not None
    assert not table.active and table.list() == []


# --- through real mounts ---------------------------------------------------------------

def control(mnt, cmd: str, **args) -> dict:
    """One request on the mount's control socket (protocol version 1)."""
    import socket

    from fakedebugfs.control import runstate

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    try:
        sock.connect(runstate.read_state(str(mnt))["sock"])
        sock.sendall(json.dumps({"v": 1, "cmd": cmd, **args}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            assert chunk, "control socket closed"
            data += chunk
    finally:
        sock.close()
    reply = json.loads(data)
    assert reply["ok"], reply
    return reply


def fault(mnt, **spec) -> dict:
    return control(mnt, "fault", spec=spec)["fault"]


def twin_ftrace_events(seed: int, count: int, cpu: int, system: str = "") -> list:
    """The ftrace events *cpu* records for the seeded kmem workload (only
    those of *system* if given), from an in-process twin."""
    k = Kernel(cpus=2, clock="virtual", seed=seed, enable_all=True)
    wl = make_workload("kmem", k, seed=seed, count=count)
    while not wl.done:
        wl.run(1000)
    ids = {ev.id for key, ev in k.ftrace.events.items() if key.startswith(system + ":")}
    events = [e for p in drain(k.ftrace.buffers[cpu]) for e in page_events(p)]
    if system:
        events = [e for e in events if struct.unpack_from("<H", e[1])[0] in ids]
    return events


KMEM_RUN = ("--workload", "kmem", "--enable-all", "--clock", "virtual")


def test_overrun_on_a_mount_stats_and_trace_pipe_raw(fake):
    """An injected overrun of M events on CPU 0 while the workload runs:
    ``per_cpu/cpu0/stats`` says overrun M, trace_pipe_raw's pages hold every
    other event of CPU 0 and the page after the gap carries M."""
    n, m, seed = 6000, 250, 11
    mnt = fake(*KMEM_RUN, "--count", n, "--rate", 3000, "--seed", seed)
    added = fault(mnt, kind="overrun", cpu=0, events=m)
    assert added["remaining"] == m
    wait_done(mnt)
    assert control(mnt, "faults")["faults"] == []  # all M used up
    text = (mnt / "tracing/per_cpu/cpu0/stats").read_text()
    assert re.search(r"^overrun: (\d+)$", text, re.M).group(1) == str(m)
    data = b"".join(read_chunks(mnt / "tracing/per_cpu/cpu0/trace_pipe_raw", 65536))
    assert len(data) % 4096 == 0
    pages = [data[i:i + 4096] for i in range(0, len(data), 4096)]
    assert_gap(pages, twin_ftrace_events(seed, n, 0), m)
    assert "overrun: 0" in (mnt / "tracing/per_cpu/cpu1/stats").read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="fakedebugfs run needs root")
@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="trace-cmd is not installed")
def test_tracecmd_reports_injected_overrun(tmp_path):
    """The Must-show: 50 kmalloc events on CPU 0, an overrun of M, 40 more:
    trace-cmd extract + report prints ``CPU:0 [M EVENTS DROPPED]`` once,
    right before the first of the 40, and reports the 90 others; stats says
    overrun M.  (The 40 leave room on their page for the count: 68 of these
    60-byte events would fill a page exactly, and then, as on the kernel,
    the page says events were dropped without saying how many.)  Everything goes through the CLI inside ``run`` (the
    run's own processes add sched events: they are turned off first, so that
    the lost events are the injected ones)."""
    m = 300
    dat, stats_file = tmp_path / "trace.dat", tmp_path / "stats"
    emit = f'"{FAKEDEBUGFS}" emit "$FAKEDEBUGFS_MOUNT" kmem:kmalloc'
    task = "--cpu 0 --pid 42 --comm inj"
    script = " && ".join([
        "echo 0 > /sys/kernel/tracing/events/sched/enable",
        f"{emit} call_site=0x10 ptr=0x1000 bytes_req=8 bytes_alloc=8 gfp_flags=0xcc0 node=-1"
        f" {task} --repeat 50",
        f'"{FAKEDEBUGFS}" fault "$FAKEDEBUGFS_MOUNT" overrun cpu=0 events={m}',
        f"{emit} call_site=0x10 ptr=0x2000 bytes_req=16 bytes_alloc=16 gfp_flags=0xcc0 node=-1"
        f" {task} --repeat {m}",
        f"{emit} call_site=0x10 ptr=0x3000 bytes_req=32 bytes_alloc=32 gfp_flags=0xcc0 node=-1"
        f" {task} --repeat 40",
        f"cat /sys/kernel/tracing/per_cpu/cpu0/stats > {stats_file}",
        f"trace-cmd extract -o {dat} >/dev/null 2>&1",
    ])
    proc = subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", "--enable-all", "--clock",
                           "virtual", "--", "sh", "-c", script],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^overrun: (\d+)$", stats_file.read_text(), re.M).group(1) == str(m)
    report = subprocess.run(["trace-cmd", "report", "-i", str(dat)], capture_output=True,
                            text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    dropped = [i for i, line in enumerate(lines) if "EVENTS DROPPED" in line]
    assert len(dropped) == 1 and lines[dropped[0]] == f"CPU:0 [{m} EVENTS DROPPED]"
    ptrs = re.findall(r"^\s*inj-42\s+\[000\].*: kmalloc: .*ptr=(0x\w+)", report.stdout, re.M)
    assert ptrs == ["0x1000"] * 50 + ["0x3000"] * 40
    assert "ptr=0x3000" in lines[dropped[0] + 1]


def test_ktrace_overflow_counts_injected_overrun(fake):
    """ktrace: M events of CPU 0 lost; the reference reader (mmap + ioctl)
    reads the rest, ``overflow`` says M: read + overflow = emitted."""
    from fakedebugfs.clients.ktrace_reader import read_all as ktrace_read

    n, m = 6000, 333
    mnt = fake("--workload", "classic", "--count", n, "--rate", 3000, "--enable-all",
               "--buffer-size", "1M", "--seed", 4)
    fault(mnt, kind="overrun", cpu=0, events=m, tracer="ktrace")
    st = wait_done(mnt)
    records = list(ktrace_read(str(mnt), disable=True))
    assert (mnt / "ktrace/overflow").read_text() == f"{m}\n"
    assert len(records) + m == st["emitted"] == n


def test_kmemtrace_total_overruns_counts_injected_overrun(fake):
    """kmemtrace: M records of CPU 0 dropped; ``total_overruns`` says M and
    the records read from the relay files + M = the records of the twin."""
    n, m, seed = 6000, 123, 8
    mnt = fake(*KMEM_RUN, "--count", n, "--rate", 3000, "--seed", seed)
    fault(mnt, kind="overrun", cpu=0, events=m, tracer="kmemtrace")
    wait_done(mnt)
    got = 0
    for cpu in (0, 1):
        data = b"".join(read_chunks(mnt / f"kmemtrace/cpu{cpu}", 65536))
        off = 0
        while off < len(data):
            off += struct.unpack_from("<H", data, off + 2)[0]
            got += 1
    assert (mnt / "kmemtrace/total_overruns").read_text() == f"{m}\n"
    k = Kernel(cpus=2, clock="virtual", seed=seed, enable_all=True)
    wl = make_workload("kmem", k, seed=seed, count=n)
    while not wl.done:
        wl.run(1000)
    assert got + m == len(relay_records(k))


# --- file faults ------------------------------------------------------------------------

def cat(path) -> subprocess.CompletedProcess:
    return subprocess.run(["cat", str(path)], capture_output=True, text=True, timeout=30)


def test_errno_on_open_and_read_hits_cat_exactly_k_times(fake):
    """``errno`` EINTR on open (then EIO on read) of ``tracing/trace``: cat
    fails with that error exactly K times, then reads the file as before."""
    mnt = fake("--workload", "none")
    path = mnt / "tracing/trace"
    want = cat(path).stdout
    assert want.startswith("# tracer: nop")
    fault(mnt, kind="errno", path="/tracing/trace", op="open", errno="EINTR", count=2)
    fault(mnt, kind="errno", path="tracing/tr*", op="read", errno=errno.EIO, count=1)
    runs = [cat(path) for _ in range(4)]
    assert [r.returncode for r in runs] == [1, 1, 1, 0]
    assert os.strerror(errno.EINTR) in runs[0].stderr and os.strerror(errno.EINTR) in runs[1].stderr
    assert os.strerror(errno.EIO) in runs[2].stderr
    assert runs[3].stdout == want
    assert control(mnt, "faults")["faults"] == []


def test_errno_on_write_poll_ioctl(fake):
    """Write: the failed marker writes record nothing; poll: the kernel shows
    an errored poll as POLLERR; ioctl: the caller gets the errno.  Each
    exactly K times, then the operation works."""
    mnt = fake("--workload", "none", "--cpus", 1)
    tracing = mnt / "tracing"
    fault(mnt, kind="errno", path="tracing/trace_marker", op="write", errno="ENOSPC", count=2)
    fd = os.open(tracing / "trace_marker", os.O_WRONLY)
    try:
        results = []
        for i in range(4):
            try:
                results.append(os.write(fd, f"mark{i}".encode()))
            except OSError as err:
                results.append(err.errno)
    finally:
        os.close(fd)
    assert results == [errno.ENOSPC, errno.ENOSPC, 5, 5]
    text = (tracing / "trace").read_text()
    assert re.findall(r"tracing_mark_write: (mark\d)", text) == ["mark2", "mark3"]

    fault(mnt, kind="errno", path="tracing/trace_pipe", op="poll", errno="EIO", count=1)
    fd = os.open(tracing / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        assert p.poll(0) == [(fd, select.POLLERR)]
        assert p.poll(0) == [(fd, select.POLLIN)]  # the marks wait to be read
    finally:
        os.close(fd)

    fault(mnt, kind="errno", path="tracing/per_cpu/cpu0/trace_pipe_raw", op="ioctl",
          errno="EBUSY", count=2)
    fd = os.open(tracing / "per_cpu/cpu0/trace_pipe_raw", os.O_RDONLY | os.O_NONBLOCK)
    try:
        got = []
        for _ in range(3):
            try:
                got.append(fcntl.ioctl(fd, 0))
            except OSError as err:
                got.append(err.errno)
        assert got == [errno.EBUSY, errno.EBUSY, 0]
    finally:
        os.close(fd)
    assert control(mnt, "faults")["faults"] == []


def test_stall_delays_then_serves(fake):
    """``stall``: the next read waits at least T ms, then gets its data."""
    mnt = fake("--workload", "none")
    path = mnt / "kmemtrace/abi_version"
    fault(mnt, kind="stall", path="kmemtrace/abi_version", op="read", ms=400)
    start = time.monotonic()
    assert path.read_text() == "1\n"
    assert time.monotonic() - start >= 0.4
    fault(mnt, kind="stall", path="ktrace/info", op="open", ms=300)
    start = time.monotonic()
    assert path.parent.parent.joinpath("ktrace/info").read_text().startswith("version 1.0.0")
    assert time.monotonic() - start >= 0.3


def test_stalled_read_ends_with_a_signal(fake):
    """A signal interrupts a stalled read (FUSE_INTERRUPT): the read is
    retried after the handler and served, long before the stall's end."""
    mnt = fake("--workload", "none")
    fault(mnt, kind="stall", path="kmemtrace/abi_version", op="read", ms=60000)
    fired = []
    old = signal.signal(signal.SIGUSR1, lambda *a: fired.append(1))
    try:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        start = time.monotonic()
        fd = os.open(mnt / "kmemtrace/abi_version", os.O_RDONLY)
        try:
            data = os.read(fd, 100)  # EINTR, then retried by Python (PEP 475)
        finally:
            os.close(fd)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert fired and data == b"1\n"
    assert time.monotonic() - start < 30


def test_unmount_ends_a_stalled_read(fake, tmp_path):
    """Unmounting while a read is stalled: the reader gets an error at once
    and the unmount completes, the stall not waited for."""
    mnt = fake("--workload", "none")
    fault(mnt, kind="stall", path="kmemtrace/abi_version", op="read", ms=120000)
    reader = subprocess.Popen(["cat", str(mnt / "kmemtrace/abi_version")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    start = time.monotonic()
    subprocess.run([FAKEDEBUGFS, "umount", str(mnt)], check=True, timeout=60,
                   capture_output=True)
    out, err = reader.communicate(timeout=30)
    assert reader.returncode != 0 and out == ""
    assert time.monotonic() - start < 30


def identical_mounts(fake, n=3000):
    """Two fakes with the same seeded workload on the virtual clock: byte-
    identical buffers once both are done."""
    opts = (*KMEM_RUN, "--count", n, "--rate", 0, "--seed", 21)
    a, b = fake(*opts), fake(*opts)
    wait_done(a)
    wait_done(b)
    return a, b


@pytest.mark.parametrize("rel", ["tracing/per_cpu/cpu0/trace_pipe_raw", "tracing/trace_pipe",
                                 "tracing/trace", "kmemtrace/cpu1"])
def test_short_reads_lose_nothing(fake, rel):
    """``short_read`` B bytes for K reads: those reads return at most B
    bytes, and all the reads together give exactly what an unfaulted twin
    gives, for consuming files (pages, text lines, relay) too."""
    a, b = identical_mounts(fake)
    k, size = 5, 100
    fault(b, kind="short_read", path=rel, bytes=size, count=k)
    want = read_chunks(a / rel, 65536)
    got = read_chunks(b / rel, 65536)
    assert all(0 < len(c) <= size for c in got[:k])  # trace_pipe: whole lines when they fit
    assert len(got[k]) > size
    assert len(b"".join(want)) > k * size
    if rel.endswith("trace_pipe_raw"):  # a read under a page takes the events that fit in
        # it (ring_buffer_read_page's len), the rest comes in later pages: the same events
        def events(chunks):
            data = b"".join(chunks)
            return [e for at in range(0, len(data), 4096) for e in page_events(data[at:at + 4096])]
        assert events(got) == events(want)
    else:
        assert b"".join(got) == b"".join(want)
    assert control(b, "faults")["faults"] == []


def test_poll_delay_holds_back_the_wakeup(fake):
    """``poll_delay`` T ms: a poller blocked on trace_pipe wakes at least T ms
    after the event that makes it readable."""
    mnt = fake("--workload", "none")
    tracing = mnt / "tracing"
    fault(mnt, kind="poll_delay", path="tracing/trace_pipe", ms=500)
    fd = os.open(tracing / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
    woke = []

    def wait():
        p = select.poll()
        p.register(fd, select.POLLIN)
        woke.append((p.poll(20000), time.monotonic()))

    try:
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.3)
        assert not woke
        written = time.monotonic()
        (tracing / "trace_marker").write_text("wake up")
        t.join(30)
    finally:
        os.close(fd)
    (events, at), = woke
    assert events and events[0][1] & select.POLLIN
    assert at - written >= 0.5
    assert control(mnt, "faults")["faults"] == []


def test_lost_events_finish_the_page_for_a_blocked_reader(fake):
    """Losing events finishes the tail page (the gap falls between pages):
    a reader blocked in trace_pipe_raw for a whole page gets the three
    marks written before the loss, and the next page says 2 were missed."""
    mnt = fake("--workload", "none", "--cpus", 1)
    tracing = mnt / "tracing"
    fd = os.open(tracing / "per_cpu/cpu0/trace_pipe_raw", os.O_RDONLY)
    got = []
    reader = threading.Thread(target=lambda: got.append(os.read(fd, 4096)))
    try:
        with open(tracing / "trace_marker", "w") as marker:
            for text in ("a1", "a2", "a3"):
                marker.write(text)
                marker.flush()
            reader.start()
            time.sleep(0.3)
            assert not got  # no whole page yet
            fault(mnt, kind="overrun", cpu=0, events=2)
            for text in ("lost1", "lost2"):
                marker.write(text)
                marker.flush()
            reader.join(10)
            woken = not reader.is_alive()
            marker.write("b1")
        reader.join(10)
        assert woken, "the blocked reader was not woken by the finished page"
        page, = got
        assert re.findall(rb"a\d", page) == [b"a1", b"a2", b"a3"] and not missed(page)[0]
        rest = b"".join(read_chunks(tracing / "per_cpu/cpu0/trace_pipe_raw", 65536))
        assert_missed(rest[:4096], 2)
        assert b"b1" in rest and b"lost" not in rest
    finally:
        os.close(fd)
    stats_text = (tracing / "per_cpu/cpu0/stats").read_text()
    assert "overrun: 2\n" in stats_text and "read events: 4\n" in stats_text
