"""The data plane under stress: a ktrace reader stalled for seconds, bulk
``trace_pipe_raw`` reads, ``trace`` text made as it is read.

Real mounts, real clients (a C reader compiled here, os.read on the files).
Timing targets live in bench/, not here.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from conftest import build_c, read_chunks, wait_done

PAGE = 4096
KTRACE_BUF_GET_SIZE = (2 << 30) | (4 << 16) | (0xF5 << 8) | 0


def write(path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# --- ktrace: accounting exact however long a reader stalls -------------------------------

@pytest.fixture(scope="module")
def stall_reader(tmp_path_factory):
    return build_c("ktrace_stall_reader.c", tmp_path_factory.mktemp("bin"))


@pytest.mark.parametrize("gap_ms", [800, 5000])
def test_stalled_reader_accounting_is_exact(fake, stall_reader, tmp_path, gap_ms):
    """A reader sleeping 0.8 s or 5 s between GET_PRODUCED and GET_CONSUMED,
    10^6 events into 4-page buffers: no round ever sees consumed past
    produced, and events read + ``overflow`` == events emitted exactly."""
    n = 1_000_000
    mnt = fake("--workload", "kmem", "--count", n, "--rate", 0, "--enable-all",
               "--buffer-size", 16384, "--seed", 5)
    # ktrace traces every event from boot; tracing/'s copies only cost time
    write(Path(mnt) / "tracing" / "events" / "enable", "0")
    stop = tmp_path / f"stop{gap_ms}"
    proc = subprocess.Popen([str(stall_reader), str(mnt), str(gap_ms), str(stop)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        st = wait_done(mnt, timeout=600)
        stop.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    got = json.loads(out)
    assert st["emitted"] == n
    assert got["rounds"] > 0 and got["bad_rounds"] == 0, got
    assert got["read"] > 0 and got["overflow"] > 0, got
    assert got["read"] + got["overflow"] == n, got


def test_fionread_on_ktrace_files(fake):
    """FIONREAD is answered by the VFS for regular files (``i_size - f_pos``),
    before FUSE sees it: 0 for the size-0 files, as on debugfs; for
    ``buffers/cpuN``, whose size is its mapping, that size minus the
    position (a documented difference: debugfs's file has size 0)."""
    mnt = fake("--workload", "none")
    kt = Path(mnt) / "ktrace"
    for name in ("info", "enabled", "overflow"):
        fd = os.open(kt / name, os.O_RDONLY)
        try:
            assert struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0] == 0
        finally:
            os.close(fd)
    fd = os.open(kt / "buffers" / "cpu0", os.O_RDONLY)
    try:
        size = struct.unpack("<I", fcntl.ioctl(fd, KTRACE_BUF_GET_SIZE, b"\0" * 4))[0]
        assert os.fstat(fd).st_size == size
        assert struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0] == size
    finally:
        os.close(fd)


# --- trace_pipe_raw: as many pages as the read asks for ----------------------------------

def filled_mount(fake, *extra):
    mnt = fake("--workload", "kmem", "--count", 30000, "--rate", 0, "--enable-all",
               "--clock", "virtual", "--seed", 11, *extra)
    wait_done(mnt)
    write(Path(mnt) / "tracing" / "tracing_on", "0")
    return Path(mnt) / "tracing" / "per_cpu" / "cpu0" / "trace_pipe_raw"


def test_trace_pipe_raw_bulk_reads(fake):
    """A 64 KiB read gets up to 16 whole pages, a 4096-byte read exactly one;
    the pages are the ones one-page reads (``--raw-one-page``, the kernel's
    way) give from the same trace, byte for byte."""
    bulk = read_chunks(filled_mount(fake), 65536)
    one = read_chunks(filled_mount(fake, "--raw-one-page"), 65536)
    assert len(bulk[0]) == 65536 and all(len(c) % PAGE == 0 and len(c) <= 65536 for c in bulk)
    assert all(len(c) == PAGE for c in one)
    assert len(one) > 16
    assert b"".join(bulk) == b"".join(one)
    small = read_chunks(filled_mount(fake), PAGE)
    assert all(len(c) == PAGE for c in small) and b"".join(small) == b"".join(one)


def test_trace_pipe_raw_short_read_keeps_the_rest(fake):
    """A read smaller than a page gets the page's start, the next the rest
    (``tracing_buffers_read`` keeps the page between reads)."""
    chunks = read_chunks(filled_mount(fake), 1000)
    whole = b"".join(chunks)
    assert len(whole) % PAGE == 0 and len(whole) > PAGE
    assert {len(c) for c in chunks} <= {1000, PAGE % 1000}


# --- trace: made as it is read, the same text when read again ------------------------------

def _entries_in_buffer(trace) -> int:
    """The ``entries-in-buffer`` of ``trace``'s header (its first lines)."""
    with open(trace, "rb") as fp:
        head = fp.read(4096).decode(errors="replace")
    m = re.search(r"entries-in-buffer/entries-written: (\d+)/", head)
    return int(m[1]) if m else 0


def test_trace_reads_the_same_text_twice_while_tracing(fake):
    """``trace`` read to the end and again from offset 0 on the same open
    file gives the same text (``seq_file``), while the workload keeps
    writing; the events are in timestamp order."""
    mnt = fake("--workload", "kmem", "--rate", 20000, "--enable-all")
    trace = Path(mnt) / "tracing" / "trace"
    # until the buffer holds 2000 entries (the workload's first tick reads a
    # distro profile's 107,000 symbols for its call sites: a second or more
    # under load), then read while it keeps writing
    deadline = time.monotonic() + 60
    while _entries_in_buffer(trace) < 2000 and time.monotonic() < deadline:
        time.sleep(0.1)
    fd = os.open(trace, os.O_RDONLY)
    try:
        first = b"".join(iter(lambda: os.read(fd, 65536), b""))
        second, off = [], 0
        while True:
            data = os.pread(fd, 7000, off)
            if not data:
                break
            second.append(data)
            off += len(data)
    finally:
        os.close(fd)
    assert first == b"".join(second)
    lines = [ln for ln in first.decode().splitlines() if not ln.startswith("#")]
    assert len(lines) > 1000
    stamps = [float(ln.split(": ", 1)[0].split()[-1]) for ln in lines]
    assert stamps == sorted(stamps)
