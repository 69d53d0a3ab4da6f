"""What ``trace-cmd stream``'s recorders still get once it stops (issue 35;
docs/cli.md, "trace-cmd's races, lost at the fake's pace").

On SIGINT the parent writes 0 to ``tracing_on`` and signals its recorders,
whose non-blocking reads of ``per_cpu/cpuN/trace_pipe_raw`` then take what
the CPU's ring still holds, until EAGAIN.  On the kernel that is exactly
the ``entries`` its ``per_cpu/cpuN/stats`` counted at the stop (bounded by
``buffer_size_kb``), and nothing comes after it.  That backlog is what a
recorder still pushes through its 64 KiB pipe after the signal; how large
it is during a stream, and whether trace-cmd ends, is measured in
``bench/bench_stream_sigint.py``, not here.

The same steps run in a scratch instance of the fake (default workload)
and, where there is one, of the real tracefs (the host's own context
switches).
"""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

from support import realtracefs

PAGE = 4096
# unread entries on the busiest CPU before the stop: more than a 64 KiB
# pipe holds (sched_switch takes 68 bytes a record)
AT_LEAST = 1100


def _events(page: bytes) -> int:
    """The data events of one ring-buffer page (header_page: u64 time
    stamp, u64 commit; then ring_buffer_event headers, as kbuffer reads
    them)."""
    size = struct.unpack_from("<Q", page, 8)[0] & ((1 << 27) - 1)
    off, n = 16, 0
    while off + 4 <= 16 + size:
        word = struct.unpack_from("<I", page, off)[0]
        type_len = word & 0x1F
        if type_len == 29:  # padding: its length follows, or the page's end
            if word >> 5 == 0:
                break
            off += 4 + struct.unpack_from("<I", page, off + 4)[0]
        elif type_len in (30, 31):  # time extend, time stamp
            off += 8
        elif type_len == 0:  # a long event: its length follows
            n += 1
            off += 4 + ((struct.unpack_from("<I", page, off + 4)[0] + 3) & ~3)
        else:
            n += 1
            off += 4 + type_len * 4
    return n


def _entries(inst: Path) -> list[int]:
    out = []
    for cpu in sorted(inst.glob("per_cpu/cpu*"), key=lambda p: int(p.name[3:])):
        lines = (cpu / "stats").read_text().splitlines()
        out.append(next(int(line.split()[1]) for line in lines if line.startswith("entries:")))
    return out


def _drain(raw: Path) -> tuple[int, int]:
    """(events, bytes) of non-blocking page reads until EAGAIN, as a
    stopped recorder's flush reads (tracefs_cpu_flush)."""
    fd = os.open(raw, os.O_RDONLY | os.O_NONBLOCK)
    events = size = 0
    try:
        while True:
            try:
                page = os.read(fd, PAGE)
            except BlockingIOError:
                return events, size
            assert page, f"{raw}: end of file instead of EAGAIN"
            events += _events(page)
            size += len(page)
    finally:
        os.close(fd)


def _eagain(raw: Path) -> bool:
    fd = os.open(raw, os.O_RDONLY | os.O_NONBLOCK)
    try:
        os.read(fd, PAGE)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def stop_and_drain(tracing: str, name: str) -> dict:
    """sched_switch in a scratch instance until a CPU holds ``AT_LEAST``
    unread entries; then the stop, and each CPU's drain."""
    inst = Path(tracing) / "instances" / name
    os.mkdir(inst)
    try:
        (inst / "events" / "sched" / "sched_switch" / "enable").write_text("1")
        deadline = time.monotonic() + 120  # a hang guard, not a figure
        while max(_entries(inst)) < AT_LEAST:
            assert time.monotonic() < deadline, f"entries {_entries(inst)} after 120 s"
            time.sleep(0.05)
        (inst / "tracing_on").write_text("0")
        at_stop = _entries(inst)
        drained = [_drain(inst / "per_cpu" / f"cpu{cpu}" / "trace_pipe_raw")
                   for cpu in range(len(at_stop))]
        time.sleep(0.3)  # (the workload goes on; a stopped ring takes none of it)
        return {"at_stop": at_stop, "drained": drained,
                "kb": int((inst / "buffer_size_kb").read_text().split()[0]),
                "after": _entries(inst),
                "then": [_eagain(inst / "per_cpu" / f"cpu{cpu}" / "trace_pipe_raw")
                         for cpu in range(len(at_stop))]}
    finally:
        (inst / "events" / "sched" / "sched_switch" / "enable").write_text("0")
        os.rmdir(inst)


def check(seen: dict) -> None:
    assert [events for events, _ in seen["drained"]] == seen["at_stop"], seen
    assert all(size <= seen["kb"] * 1024 for _, size in seen["drained"]), seen
    assert seen["after"] == [0] * len(seen["at_stop"]), seen
    assert all(seen["then"]), seen


def test_a_stopped_ring_hands_out_what_it_held(fake):
    """After ``tracing_on`` 0, under the default workload: each CPU's drain
    is the entries counted at the stop, then EAGAIN, and stays EAGAIN."""
    mnt = fake("--cpus", "2")
    check(stop_and_drain(str(mnt / "tracing"), "stop"))


@pytest.mark.skipif(not realtracefs.available(), reason="needs root and a kernel with tracefs")
def test_the_kernel_hands_out_the_same():
    """The same on the real tracefs (a scratch instance)."""
    check(realtracefs.call(stop_and_drain, f"fakedebugfs-stop-{os.getpid()}"))
