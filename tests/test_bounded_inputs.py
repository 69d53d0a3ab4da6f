"""Every file the command line reads is bounded and streamed: ``insmod``'s
events file, ``kmemtrace-check``'s relay files, ``replay``'s recording and
``emit --file``'s scenario, given ``/dev/zero`` or a pipe whose writer
never stops, end in seconds with a nonzero exit and one line on stderr
(no traceback), the command staying under 200 MB (measured by
``/usr/bin/time``, as a user would).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fakedebugfs import Fake

from conftest import FAKEDEBUGFS

TIME = "/usr/bin/time"
MAX_RSS_KB = 200 * 1024
# a writer that never stops: valid 2008-08 kmemtrace free records, numbered
RECORDS = ("import itertools, struct, sys\n"
           "w = sys.stdout.buffer\n"
           "for i in itertools.count():\n"
           "    w.write(b''.join(struct.pack('<BBHiQQ', 1, 0, 24, (i * 1000 + j) % 2**31,\n"
           "                                 0x10, 0x20) for j in range(1000)))\n")


def run_bounded(tmp_path: Path, argv: list[str], producer: list[str] | None = None,
                timeout: float = 60) -> tuple[subprocess.CompletedProcess, int]:
    """Run *argv* under /usr/bin/time (fed by *producer*'s stdout, if
    given); its result and its maximum RSS in KiB."""
    report = tmp_path / "time.txt"
    feed = None
    if producer is not None:
        feed = subprocess.Popen(producer, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        p = subprocess.run([TIME, "-v", "-o", str(report), *argv], stdin=feed and feed.stdout,
                           capture_output=True, text=True, timeout=timeout)
    finally:
        if feed is not None:
            feed.stdout.close()
            feed.kill()
            feed.wait()
    rss = [int(line.split(":")[1]) for line in report.read_text().splitlines()
           if "Maximum resident set size" in line]
    return p, rss[0]


def one_line(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    return lines[0]


@pytest.fixture(scope="module")
def fk():
    with Fake() as fake:
        yield fake


@pytest.mark.skipif(not Path(TIME).exists(), reason="needs /usr/bin/time")
@pytest.mark.parametrize("source", ["/dev/zero", "pipe"])
@pytest.mark.parametrize("command", ["insmod", "replay", "scenario"])
def test_endless_input_ends_with_one_line(fk, tmp_path, command, source):
    """/dev/zero and ``yes`` (endless): a nonzero exit, one line naming the
    file, bounded memory, no change to the fake."""
    path = "/dev/zero" if source == "/dev/zero" else "/dev/stdin"
    producer = None if source == "/dev/zero" else ["yes"]
    argv = {"insmod": ["insmod", str(fk.root), "endless", path],
            "replay": ["replay", str(fk.root), path, "-q"],
            "scenario": ["emit", str(fk.root), "--file", path]}[command]
    before = fk.status()
    p, rss = run_bounded(tmp_path, [FAKEDEBUGFS, *argv], producer)
    line = one_line(p)
    assert p.returncode != 0
    assert line.startswith(f"fakedebugfs {argv[0]}: {path}: "), line
    assert rss < MAX_RSS_KB, f"{rss} KiB"
    after = fk.status()
    assert (after["injected"], after["replayed"]) == (before["injected"], before["replayed"])
    assert not (fk.root / "ktrace" / "events" / "endless").exists()


@pytest.mark.skipif(not Path(TIME).exists(), reason="needs /usr/bin/time")
def test_kmemtrace_check_of_dev_zero_stops_at_its_first_bytes(tmp_path):
    """kmemtrace-check reads /dev/zero only up to its first record: one
    line, zero bytes where a record should start, exit 1, in a moment."""
    p, rss = run_bounded(tmp_path, [FAKEDEBUGFS, "kmemtrace-check", "/dev/zero"], timeout=30)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stdout.splitlines() == [
        "/dev/zero: 0 records (2008-08), 1 error: offset 0: zero bytes where a record should "
        "start (relay padding?)"]
    assert rss < MAX_RSS_KB, f"{rss} KiB"


@pytest.mark.skipif(not Path(TIME).exists(), reason="needs /usr/bin/time")
def test_kmemtrace_check_of_an_endless_pipe_of_records_ends_at_its_limit(tmp_path):
    """Valid records that never end are checked as they come (memory flat)
    and refused past the limit (made 64 MiB here) with one line."""
    check = ("import sys\n"
             "import fakedebugfs.clients.kmemtrace_check as check\n"
             "check.MAX_CHECKED = 64 << 20\n"
             "from fakedebugfs.cli import main\n"
             "sys.exit(main(['kmemtrace-check', '/dev/stdin']))\n")
    p, rss = run_bounded(tmp_path, [sys.executable, "-c", check],
                         [sys.executable, "-c", RECORDS], timeout=120)
    assert p.returncode == 1
    assert one_line(p) == f"/dev/stdin: longer than {64 << 20} bytes (the limit of a checked file)"
    assert rss < MAX_RSS_KB, f"{rss} KiB"


def test_kmemtrace_check_streams_a_file_with_records_across_chunks(tmp_path):
    """A file of many chunks is checked whole (a record crossing the end of
    a read is joined with the next), and its errors counted everywhere."""
    import struct

    good = b"".join(struct.pack("<BBHiQQ", 1, 0, 24, i, 0x10, 0x20) for i in range(100_000))
    bad = bytearray(good)
    bad[24 * 60_000 + 1] = 9  # one invalid type id, past the first MiB
    for name, data in (("cpu0.out", good), ("cpu1.out", bytes(bad))):
        (tmp_path / name).write_bytes(data)
    p = subprocess.run([FAKEDEBUGFS, "kmemtrace-check", tmp_path / "cpu0.out",
                        tmp_path / "cpu1.out"], capture_output=True, text=True, timeout=60)
    assert p.stdout.splitlines() == [
        f"{tmp_path}/cpu0.out: 100000 records (2008-08), OK",
        f"{tmp_path}/cpu1.out: 100000 records (2008-08), 1 error: offset {24 * 60_000}: "
        f"invalid type id 9"], p.stdout
    assert p.returncode == 1
