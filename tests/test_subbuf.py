"""``buffer_subbuf_size_kb``: the ring buffer's sub-buffers (the pages
``trace_pipe_raw`` hands out) take the size written, as on the 6.18 kernel
(``buffer_subbuf_size_write``, ``ring_buffer_subbuf_order_set``).

The size is ``PAGE_SIZE << order`` for the smallest order that holds the
KiB written (4 to 512 KiB); the buffers are made anew (their content
dropped) with as many sub-buffers as hold what the old ones held;
``buffer_size_kb`` keeps showing the size set last; ``events/header_page``
shows the data size of the new sub-buffers; ``trace_pipe_raw`` hands out
pages of that size, and events larger than 4 KiB fit in them.  Where a
real tracefs is mounted, the same steps in a scratch instance of it must
give the same answers.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess

import pytest

import tracefs_fuzz as fuzz
from conftest import FAKEDEBUGFS, read_chunks, run_cli

DATA_SIZE = re.compile(rb"field: char data;\toffset:16;\tsize:(\d+);")


def _data_size(inst: str) -> int:
    return int(DATA_SIZE.search(fuzz._read(os.path.join(inst, "events/header_page"))).group(1))


def _subbuf_story(tracing: str) -> dict:
    """What a user sees changing the sub-buffer size of a fresh instance."""
    inst = os.path.join(tracing, "instances", f"sb{os.getpid()}")
    os.mkdir(inst)
    seen = {}

    def put(rel, data):
        return fuzz._write(os.path.join(inst, rel), data)

    def get(rel):
        return fuzz._read(os.path.join(inst, rel)).decode()

    try:
        seen["start"] = (get("buffer_subbuf_size_kb"), _data_size(inst))
        for kb in (b"8", b"16", b"5", b"64", b"512", b"1024", b"0", b"3", b"x"):
            seen[kb] = (put("buffer_subbuf_size_kb", kb), get("buffer_subbuf_size_kb"),
                        _data_size(inst), get("buffer_size_kb"), get("buffer_total_size_kb"),
                        get("per_cpu/cpu0/buffer_size_kb"))
        put("trace_marker", b"before")
        seen["kept at the same size"] = fuzz.trace_entries(fuzz._read(os.path.join(inst, "trace")))
        put("buffer_subbuf_size_kb", b"8")
        seen["dropped"] = fuzz.trace_entries(fuzz._read(os.path.join(inst, "trace")))
        put("buffer_size_kb", b"100")  # 13 sub-buffers of 8176 data bytes
        seen["100 KiB"] = get("buffer_size_kb")
        put("buffer_subbuf_size_kb", b"16")
        seen["after 16"] = get("buffer_size_kb")
        put("free_buffer", b"x")  # two sub-buffers
        seen["freed"] = get("buffer_size_kb")
        seen["marker"] = put("trace_marker", b"m" * 5000)  # not bigger with the sub-buffer
        seen["raw"] = (put("trace_marker_raw", b"\1\0\0\0" + b"r" * 4060),
                       put("trace_marker_raw", b"\1\0\0\0" + b"r" * 4061))
        put("buffer_subbuf_size_kb", b"4")
    finally:
        os.rmdir(inst)
    return seen


def _same_size_write(tracing: str) -> int:
    """A fresh instance's ``buffer_subbuf_size_kb`` written the size it
    has: ``buffer_subbuf_size_write`` answers that with the count before
    anything else, so an error comes from outside tracefs."""
    inst = os.path.join(tracing, "instances", f"sbw{os.getpid()}")
    os.mkdir(inst)
    try:
        return fuzz._write(os.path.join(inst, "buffer_subbuf_size_kb"), b"4")
    finally:
        os.rmdir(inst)


def on_real_subbuf(story):
    """*story* on the real tracefs (None where there is none); a skip when
    this host refuses every write to ``buffer_subbuf_size_kb`` before
    tracefs sees it (seen on one machine of this kind: EPERM even for the
    size the buffer has, from a security policy of the host's, not from
    the kernel's tracing code)."""
    res = fuzz.on_real_tracefs(_same_size_write)
    if res is not None and res < 0:
        pytest.skip(f"this host refuses writes to buffer_subbuf_size_kb before tracefs sees "
                    f"them (errno {-res} for the size it has): no real answer to compare")
    return fuzz.on_real_tracefs(story) if res is not None else None


def test_subbuf_size_as_the_kernel(fake):
    """As this machine's 6.18 answers (linux-6.18: a raw marker of 4064 bytes fits there)."""
    seen = _subbuf_story(str(fake("--profile", "linux-6.18", "--workload", "none") / "tracing"))
    assert seen["start"] == ("4\n", 4080)
    total = seen[b"8"][4]
    assert seen[b"8"] == (1, "8\n", 8176, "1410\n", total, "1410\n")
    assert seen[b"16"][:3] == (2, "16\n", 16368)
    assert seen[b"5"][:3] == (1, "8\n", 8176)  # rounded up to a power of two of pages
    assert seen[b"512"][:3] == (3, "512\n", 524272)
    assert seen[b"1024"][:3] == (-22, "512\n", 524272)
    assert seen[b"0"][:3] == (-22, "512\n", 524272)
    assert seen[b"3"][:3] == (1, "4\n", 4080)
    assert seen[b"x"][:3] == (-22, "4\n", 4080)
    assert seen["kept at the same size"] == b"tracing_mark_write: before"
    assert seen["dropped"] == b""
    assert (seen["100 KiB"], seen["after 16"], seen["freed"]) == ("103\n", "103\n", "31\n")
    assert seen["marker"] == 4054 and seen["raw"] == (4064, -22)
    real = on_real_subbuf(_subbuf_story)
    if real is not None:  # the kernel, where there is one, answers the same
        assert real == seen


# --- trace_pipe_raw ------------------------------------------------------------------

def decode_page(page: bytes) -> tuple[int, list[bytes]]:
    """(commit, payloads of the data events) of one ring-buffer page, as
    libtraceevent's kbuffer reads it (header_page, header_event)."""
    _, commit = struct.unpack_from("<QQ", page)
    size = commit & ((1 << 27) - 1)
    data, off, out = page[16:16 + size], 0, []
    while off + 4 <= size:
        word = struct.unpack_from("<I", data, off)[0]
        type_len = word & 0x1F
        if type_len == 29:  # padding
            if word >> 5 == 0:
                break
            off += 4 + struct.unpack_from("<I", data, off + 4)[0]
        elif type_len in (30, 31):  # time extend / stamp
            off += 8
        elif type_len == 0:
            length = struct.unpack_from("<I", data, off + 4)[0] - 4
            out.append(data[off + 8:off + 8 + length])
            off += 8 + ((length + 3) & ~3)
        else:
            out.append(data[off + 4:off + 4 + type_len * 4])
            off += 4 + type_len * 4
    return commit, out


def _record(mnt, small: int, big_name: str) -> None:
    """*small* ``sched_process_exec`` events on CPU 0, one with a file name
    of 6000 bytes (an entry of over 6 KiB), then *small* more."""
    for filename in ("/bin/true", big_name, "/bin/false"):
        repeat = small if len(filename) < 100 else 1
        run_cli("emit", mnt, "sched:sched_process_exec", f"filename={filename}", "pid=42",
                "old_pid=42", "--cpu", "0", "--pid", "42", "--comm", "true",
                "--repeat", repeat)


@pytest.mark.parametrize("kb", [8, 16])
def test_trace_pipe_raw_hands_out_subbuffers(fake, kb):
    psize = kb << 10
    mnt = fake("--workload", "none", "--cpus", "2")
    inst = mnt / "tracing" / "instances" / "big"
    inst.mkdir()
    (inst / "buffer_subbuf_size_kb").write_text(str(kb))
    (inst / "events/sched/sched_process_exec/enable").write_text("1")
    (mnt / "tracing/events/sched/sched_process_exec/enable").write_text("1")
    big_name = "/usr/bin/" + "x" * 6000
    _record(mnt, 300, big_name)
    # trace shows every event, the long one whole
    lines = [line for line in (inst / "trace").read_text().splitlines()
             if "sched_process_exec:" in line]
    assert len(lines) == 601
    assert lines[300].split("sched_process_exec: ")[1].startswith(f"filename={big_name} pid=42")
    # the top level's 4 KiB sub-buffers cannot hold it (the kernel does not record it)
    top = [line for line in (mnt / "tracing/trace").read_text().splitlines()
           if "sched_process_exec:" in line]
    assert len(top) == 600 and big_name not in "".join(top)
    stats = (mnt / "tracing/per_cpu/cpu0/stats").read_text()
    assert "entries: 600\n" in stats and "dropped events: 0\n" in stats  # not counted
    # a reader of whole sub-buffers gets pages of the new size
    chunks = read_chunks(str(inst / "per_cpu/cpu0/trace_pipe_raw"), psize)
    assert chunks and {len(c) for c in chunks} == {psize}
    pages = [decode_page(c) for c in chunks]
    assert all(commit <= psize - 16 for commit, _ in pages)
    assert max(commit for commit, _ in pages) > 4080  # more than a 4 KiB page holds
    payloads = [p for _, evs in pages for p in evs]
    assert len(payloads) == 601
    assert sum(big_name.encode() in p for p in payloads) == 1
    assert read_chunks(str(inst / "per_cpu/cpu1/trace_pipe_raw"), psize) == []


def test_trace_pipe_reads_larger_subbuffers(fake):
    """``trace_pipe`` consumes the events of 16 KiB sub-buffers as text,
    the entry of over 6 KiB whole; the buffer is empty after."""
    mnt = fake("--workload", "none", "--cpus", "2")
    inst = mnt / "tracing" / "instances" / "pipe"
    inst.mkdir()
    (inst / "buffer_subbuf_size_kb").write_text("16")
    (inst / "events/sched/sched_process_exec/enable").write_text("1")
    big_name = "/opt/" + "p" * 6200
    _record(mnt, 250, big_name)
    fd = os.open(inst / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
    text = b""
    try:
        while True:
            try:
                text += os.read(fd, 65536)
            except BlockingIOError:
                break
    finally:
        os.close(fd)
    lines = [line for line in text.decode().splitlines() if "sched_process_exec:" in line]
    assert len(lines) == 501
    assert [line.split("filename=")[1].split(" ")[0] for line in lines] == \
        ["/bin/true"] * 250 + [big_name] + ["/bin/false"] * 250
    assert "entries: 0\n" in (inst / "per_cpu/cpu0/stats").read_text()


def test_small_and_bulk_reads_of_larger_subbuffers(fake):
    """A reader of 4 KiB (one that assumes 4 KiB pages) gets, from 8 KiB
    sub-buffers, a page of the events that fit in 4 KiB, then 4 KiB of
    zeros, as the kernel's ``tracing_buffers_read`` hands out its spare
    page; a read of several sub-buffers gets them whole."""
    mnt = fake("--workload", "none", "--cpus", "2")
    inst = mnt / "tracing" / "instances" / "half"
    inst.mkdir()
    (inst / "buffer_subbuf_size_kb").write_text("8")
    (inst / "events/sched/sched_process_exec/enable").write_text("1")
    run_cli("emit", mnt, "sched:sched_process_exec", "filename=/bin/" + "y" * 60, "pid=7",
            "old_pid=7", "--cpu", "0", "--pid", "7", "--repeat", 400)
    raw = str(inst / "per_cpu/cpu0/trace_pipe_raw")
    halves = read_chunks(raw, 4096)
    assert {len(c) for c in halves} == {4096}
    firsts, seconds = halves[::2], halves[1::2]
    assert all(c == bytes(4096) for c in seconds)
    got = [decode_page(c) for c in firsts]
    assert all(0 < commit <= 4080 for commit, _ in got)
    assert sum(len(evs) for _, evs in got) == 400
    run_cli("emit", mnt, "sched:sched_process_exec", "filename=/bin/z", "pid=7",
            "old_pid=7", "--cpu", "0", "--pid", "7", "--repeat", 400)
    bulk = read_chunks(raw, 4 * 8192)
    assert bulk and all(len(c) % 8192 == 0 for c in bulk)
    pages = [decode_page(c[k:k + 8192]) for c in bulk for k in range(0, len(c), 8192)]
    assert sum(len(evs) for _, evs in pages) == 400
    assert any(commit > 4080 for commit, _ in pages)


def _raw_reads(tracing: str) -> list:
    """What a reader of an 8 KiB-sub-buffer instance's ``trace_pipe_raw``
    gets from reads of several sizes (length, and commit word of the page
    each read starts), after 300 markers written from one CPU."""
    inst = os.path.join(tracing, "instances", f"rr{os.getpid()}")
    os.mkdir(inst)
    cpus = os.sched_getaffinity(0)
    try:
        fuzz._write(os.path.join(inst, "buffer_subbuf_size_kb"), b"8")
        os.sched_setaffinity(0, {min(cpus)})  # the kernel's markers go to the writer's CPU
        fd = os.open(os.path.join(inst, "trace_marker"), os.O_WRONLY)
        try:
            for i in range(300):
                os.write(fd, b"marker %05d " % i + b"y" * 60)
        finally:
            os.close(fd)
        os.sched_setaffinity(0, cpus)
        seen = []
        for cpu in range(len(os.listdir(os.path.join(inst, "per_cpu")))):
            fd = os.open(os.path.join(inst, f"per_cpu/cpu{cpu}/trace_pipe_raw"),
                         os.O_RDONLY | os.O_NONBLOCK)
            got = []
            try:
                for size in (10, 16, 60, 200, *[4096] * 8, 8192):
                    try:
                        data = os.read(fd, size)
                    except BlockingIOError:
                        got.append((size, "EAGAIN"))
                        continue
                    got.append((size, len(data), hex(struct.unpack_from("<Q", data, 8)[0])
                                if len(data) >= 16 else None))
            finally:
                os.close(fd)
            if any(len(g) == 3 and g[1] for g in got):
                seen.append(got)
    finally:
        os.sched_setaffinity(0, cpus)
        os.rmdir(inst)
    return seen


def test_reads_of_any_size_as_the_kernel(fake):
    """Reads under the page header's size and under an event's size return
    0; a read of 200 bytes takes the one event that fits in 184 and hands
    out the start of its 8 KiB page, the next reads the rest; then reads of
    4 KiB alternate pages of the events that fit in 4 KiB and zeros; a read
    of 8 KiB gets a whole sub-buffer."""
    seen = _raw_reads(str(fake("--workload", "none", "--cpus", str(os.cpu_count())) / "tracing"))
    assert len(seen) == 1
    got = seen[0]
    assert [g[1] for g in got] == [0, 0, 0, 200, 4096, 3896] + [4096] * 6 + [8192]
    halves = got[6:12]
    assert all(0 < int(h[2], 16) <= 4080 for h in halves[::2]) and \
        all(h[2] == "0x0" for h in halves[1::2])
    assert 4080 < int(got[12][2], 16) <= 8176
    real = on_real_subbuf(_raw_reads)
    if real is not None:  # the kernel, where there is one, answers the same
        assert real == seen


# --- trace-cmd ---------------------------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="fakedebugfs run needs root")
@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="trace-cmd is not installed")
def test_trace_cmd_records_8k_subbuffers(tmp_path):
    """trace-cmd record (3.1.6 sizes its reads from the top level's
    header_page, and the file's pages from each buffer's) then report, with
    8 KiB sub-buffers at the top level and in an instance (trace-cmd 3.1.6
    reads a compressed instance buffer of another page size than the top
    level's with an error: that one is recorded uncompressed)."""
    top, inst = tmp_path / "top.dat", tmp_path / "inst.dat"
    script = (
        "set -e; T=/sys/kernel/tracing; echo 8 > $T/buffer_subbuf_size_kb; "
        f"trace-cmd record -e sched:sched_switch -o {top} sleep 1; "
        "echo 4 > $T/buffer_subbuf_size_kb; "
        "mkdir $T/instances/big; echo 8 > $T/instances/big/buffer_subbuf_size_kb; "
        f"trace-cmd record --compression none -B big -e sched:sched_switch -o {inst} sleep 1; "
        f"trace-cmd dump --flyrecord -i {top}; trace-cmd dump --flyrecord -i {inst}")
    proc = subprocess.run([FAKEDEBUGFS, "run", "--workload", "default", "--rate", "3000", "--",
                           "sh", "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sizes = re.findall(r"(\d+) \[Page size, bytes\]", proc.stdout)
    assert sizes == ["8192", "4096", "8192"], proc.stdout  # top.dat; inst.dat: top, "big"
    for dat, prefix in ((top, ""), (inst, "big: ")):
        rep = subprocess.run(["trace-cmd", "report", "-i", str(dat)], capture_output=True,
                             text=True, timeout=120)
        assert rep.returncode == 0 and rep.stderr == "", rep.stderr
        switches = [line for line in rep.stdout.splitlines() if "sched_switch:" in line]
        assert len(switches) > 500
        assert all(line.startswith(prefix) for line in switches)
        assert all("==>" in line for line in switches)
