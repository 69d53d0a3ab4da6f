"""A ``seq_file`` read returns what the kernel's ``seq_read_iter`` returns
(fs/seq_file.c): a large read stops at a record boundary, a record larger
than the page comes alone in a buffer grown to fit it (and the buffer stays
grown for that open file), and a read at another offset re-walks the
records (``traverse``).  Measured on 6.18: ``events/kmem/kmalloc/format``
read with 64 KiB reads gives 610, 4419 (the print fmt record), 0;
``available_events`` ~4,070 bytes a read whatever the buffer.

A C program built here read()s each file with a given buffer and prints
every return value; the expected sizes are computed from the records with
the kernel's algorithm (:func:`expected_reads`), and, where the host has a
tracefs with the same text, the same program's output on the real kernel
must be the fake's.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from support import realtracefs

READER = r"""
/* read(2) each file with a SIZE-byte buffer until EOF, printing each return value */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    size_t n = strtoul(argv[1], NULL, 10);
    char *buf = malloc(n);
    for (int i = 2; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY);
        if (fd < 0 || !buf) {
            perror(argv[i]);
            return 1;
        }
        for (;;) {
            ssize_t r = read(fd, buf, n);
            printf("%zd%c", r, r > 0 ? ' ' : '\n');
            if (r <= 0)
                break;
        }
        close(fd);
    }
    return 0;
}
"""

KMALLOC = "events/kmem/kmalloc/format"
SIZES = (1, 100, 4096, 8192, 65536)


def expected_reads(records: list[bytes], count: int) -> list[int]:
    """``seq_read_iter``'s return values for reads of *count* from the
    start to EOF: the leftover first, then a buffer (4096, doubled while
    one record does not fit it: a record fits when it leaves a byte free)
    filled with whole records until it holds *count* or the next would
    overflow it."""
    size, i, left, out = 4096, 0, b"", []
    while True:
        got, left = left[:count], left[count:]
        if not left:
            want, buf = count - len(got), b""
            while i < len(records):
                rec = records[i]
                if not buf:
                    while len(rec) >= size:
                        size *= 2
                elif len(buf) >= want or len(buf) + len(rec) >= size:
                    break
                buf += rec
                i += 1
            got, left = got + buf[:want], buf[want:]
        out.append(len(got))
        if not got:
            return out


def lines(data: bytes) -> list[bytes]:
    """One record per line (``available_events``' ``t_show``)."""
    return [line + b"\n" for line in data.split(b"\n")[:-1]]


def format_records(data: bytes) -> list[bytes]:
    """``f_show``'s records: the three header lines as one, one per field
    line and the separator, ``\\nprint fmt: ...\\n`` as one."""
    rows = lines(data)
    head, rest = b"".join(rows[:3]), rows[3:]
    assert head.endswith(b"format:\n") and rest[-1].startswith(b"print fmt:")
    return [head, *rest[:-2], b"\n" + rest[-1]]


@pytest.fixture
def reader(cc, tmp_path):
    src = tmp_path / "seqread.c"
    src.write_text(READER)
    return cc(src)


def run_reader(reader, size: int, *paths, real=False) -> list[list[int]]:
    cmd = [str(reader), str(size), *map(str, paths)]
    if real:
        proc = realtracefs.run(cmd, timeout=120)
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [list(map(int, line.split())) for line in proc.stdout.splitlines()]


def test_reads_stop_at_record_boundaries(fake, reader):
    tracing = fake() / "tracing"
    fmt = (tracing / KMALLOC).read_bytes()
    events = (tracing / "available_events").read_bytes()
    assert len(events) > 16384 and len(fmt) > 4096
    for size in SIZES:
        got_fmt, = run_reader(reader, size, tracing / KMALLOC)
        assert got_fmt == expected_reads(format_records(fmt), size), size
        if size > 1:  # (one byte a read: 60,000 reads, all of 1)
            got_events, = run_reader(reader, size, tracing / "available_events")
            assert got_events == expected_reads(lines(events), size), size
    # measured on 6.18 (its kmalloc format: 610 bytes of header and fields,
    # then a 4,419-byte print fmt)
    if len(fmt) == 5029:
        assert run_reader(reader, 65536, tracing / KMALLOC) == [[610, 4419, 0]]
        assert run_reader(reader, 4096, tracing / KMALLOC) == [[610, 4096, 323, 0]]
    got, = run_reader(reader, 8192, tracing / "available_events")
    assert all(4000 < n < 4096 for n in got[:-2]), got
    assert sum(got) == len(events)


def test_header_files_read_once(fake, reader):
    """``events/header_page`` and ``header_event`` are not seq files:
    ``show_header_page_file`` returns 0 at any offset but 0, so a small
    buffer gets the first part only."""
    events = fake() / "tracing" / "events"
    for name in ("header_page", "header_event"):
        whole = (events / name).read_bytes()
        assert len(whole) > 100
        assert run_reader(reader, 100, events / name) == [[100, 0]]
        assert run_reader(reader, 4096, events / name) == [[len(whole), 0]]
        fd = os.open(events / name, os.O_RDONLY)
        try:
            assert os.pread(fd, 100, 10) == b"" and os.pread(fd, 4096, 0) == whole
        finally:
            os.close(fd)


def test_pread_gives_the_same_bytes(fake):
    """A read at an offset other than the read position re-walks the
    records (``traverse``): the bytes are the file's; and a buffer grown
    for the print fmt stays grown (a read from 0 then gets all of it)."""
    path = fake() / "tracing" / KMALLOC
    whole = path.read_bytes()
    fd = os.open(path, os.O_RDONLY)
    try:
        first = os.read(fd, 65536)
        second = os.read(fd, 65536)
        assert first + second == whole and os.read(fd, 65536) == b""
        assert len(second) == len(format_records(whole)[-1])  # the print fmt, alone
        for off in (0, 1, 100, len(first) - 1, len(first), len(first) + 1, 4095, 4096,
                    len(whole) - 1, len(whole), len(whole) + 10):
            for size in (1, 100, 65536):
                assert os.pread(fd, size, off) == whole[off:off + size], (off, size)
        assert os.pread(fd, 65536, 0) == whole  # m->size stayed 8192
    finally:
        os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    try:  # reads after a pread go on from the read position
        assert os.pread(fd, 100, 200) == whole[200:300]
        assert b"".join(iter(lambda: os.read(fd, 700), b"")) == whole
    finally:
        os.close(fd)


def test_same_reads_as_the_kernel(fake, reader):
    """Where the host's tracefs has the same text, the read sizes are the
    kernel's (one read(2) per line of output)."""
    if not realtracefs.available():
        pytest.skip("no real tracefs here (root and tracefs needed)")
    tracing = fake() / "tracing"
    files = [KMALLOC, "available_events", "README", "events/sched/sched_switch/format",
             "events/header_page", "events/header_event"]
    real_text = realtracefs.call(lambda root: {f: open(os.path.join(root, f), "rb").read()
                                               for f in files})
    same = [f for f in files if real_text[f] == (tracing / f).read_bytes()]
    if KMALLOC not in same:
        pytest.skip("the host kernel's kmalloc format is not the profile's")
    for size in (100, 4096, 8192, 65536):
        real = run_reader(reader, size, *[os.path.join(realtracefs.POINT, f) for f in same],
                          real=True)
        assert run_reader(reader, size, *[tracing / f for f in same]) == real, (size, same)


def test_lines_read_from_the_text_as_from_records():
    """A long text of one-line records is read from the text itself
    (``SeqLinesState``: no list of records made at open, for the 7 MB of
    ``/proc/kallsyms``): every read, seek (``traverse``) and grown buffer
    gives what the walk over its records (``SeqFileState``) gives."""
    import random

    from fakedebugfs.fs.seq_file import SeqFileState, SeqLinesState, split_records

    rng = random.Random(37)
    for trial in range(600):
        lengths = [rng.choice((0, 1, 4094, 4095, 4096, 9000)) if rng.random() < 0.05
                   else rng.randrange(0, 200) for _ in range(rng.randrange(0, 300))]
        data = b"\n".join(b"x" * n for n in lengths) + (b"\n" if rng.random() < 0.7 else b"")
        walked, text = SeqFileState(split_records(data)), SeqLinesState(data)
        walked.flat = None  # (a short text's slice: both walk their records)
        pos = 0
        for _ in range(rng.randrange(1, 40)):
            if rng.random() < 0.2:
                pos = rng.randrange(0, len(data) + 20)
            want = rng.choice((0, 1, 100, 4095, 4096, 8192, 65536, rng.randrange(1, 10000)))
            got = text.read(pos, want)
            assert got == walked.read(pos, want), (trial, pos, want)
            assert text.size == walked.size and text.count == walked.count, (trial, pos, want)
            pos += len(got)
