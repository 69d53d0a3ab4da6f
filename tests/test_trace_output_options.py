"""The trace output options ``raw``, ``hex``, ``bin``, ``fields`` and
``latency-format`` (issue 32), as ``cat trace`` and ``trace_pipe`` show
them under the nop, ``function`` and ``function_graph`` tracers, beside
the Debian 6.12 guest.

One shell script (fixtures/trace-options/capture.sh) sets each option and
prints the files; it ran in the guest (fixtures/trace-options/debian-6.12.txt)
and runs here on a fake of the debian-6.12 profile, whose events come from
``fakedebugfs emit``.  The values differ (another machine, other tasks and
times); the tests hold both outputs to the kernel's formats, line by line,
and compare byte for byte what the same input gives: the headers, a
marker's text, the function record's address.

Recapture (boots the guest): ``python tests/test_trace_output_options.py``.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS, Mounter

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "fixtures" / "trace-options"
SCRIPT = HERE / "capture.sh"
GUEST = HERE / "debian-6.12.txt"

LAT_FLAGS = r"[.dDbX][.Nnp][.hHsZz][.0-9a-f][.0-9a-f]"
MARKS = ((1000000000, "$"), (100000000, "@"), (10000000, "*"), (1000000, "#"),
         (100000, "!"), (10000, "+"))
# trace_print_lat_context: "%8.8s-%-7d %3d", the flags, " %4lldus%c: "
LAT_LINE = re.compile(r"(.{8})-(\d+ *) (.{3})(" + LAT_FLAGS + r") +(\d+)us(.): (.*)")
# the same under verbose: "%16s %7d %3d %d %08x %08lx " "[%08llx] %ld.%03ldms (+%ld.%03ldms): "
LAT_VERBOSE = re.compile(r"(.{16}) (.{7}) (.{3}) (\d+) ([0-9a-f]{8}) ([0-9a-f]{8}) "
                         r"\[([0-9a-f]{8,})\] (\d+)\.(\d{3})ms \(\+(\d+)\.(\d{3})ms\): (.*)")
# trace_print_context: "%16s-%-7d [%03d] <flags> %5lu.%06lu: "
CONTEXT = re.compile(r"(.{16})-(\d+ *) \[(\d{3})\] (" + LAT_FLAGS + r") +(\d+\.\d{6}): (.*)")
HEX_CONTEXT = r"[0-9a-f]{8} [0-9a-f]{8} [0-9a-f]{16} "  # pid, cpu, ts: SEQ_PUT_HEX_FIELD
GRAPH_LAT = re.compile(r" (\d)\)  (" + LAT_FLAGS + r") \| (.*)")  # print_graph_lat_fmt
GRAPH_LINE = re.compile(r" \d\) (?:[ +!#*@$] +[\d.]+ us +|              )\|  +\S.*")


def sections(text: str) -> dict:
    out: dict = {}
    name = None
    for line in text.splitlines():
        if line.startswith("=== "):
            name = line[4:]
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return out


def body(lines) -> list:
    return [ln for ln in lines if not ln.startswith("#")]


def header(lines) -> list:
    """The ``#`` lines with the numbers a kernel fills in made neutral
    (entries, CPUs, the CPU that set the tracer)."""
    out = []
    for ln in lines:
        if not ln.startswith("#"):
            break
        ln = re.sub(r"#\d+/\d+, CPU#\d+", "#N/N, CPU#N", ln)
        ln = re.sub(r"entries-written: \d+/\d+", "entries-written: N/N", ln)
        out.append(re.sub(r"#P:\d+", "#P:N", ln))
    return out


def mark(delay_ns: int) -> str:
    return next((sym for val, sym in MARKS if delay_ns > val), " ")


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """``(guest, fake)``: the script's sections on each."""
    mounter = Mounter(tmp_path_factory.mktemp("options"))
    try:
        mnt = mounter("--workload", "none", "--clock", "virtual", "--cpus", "2",
                      "--profile", "debian-6.12")
        env = dict(os.environ, PATH=f"{Path(FAKEDEBUGFS).parent}:{os.environ['PATH']}")
        done = subprocess.run(["bash", str(SCRIPT), str(mnt / "tracing"), str(mnt)], env=env,
                              capture_output=True, text=True, timeout=120,
                              errors="surrogateescape")
        assert done.returncode == 0, done.stderr
        fake = sections(done.stdout)
    finally:
        mounter.unmount_all()
    guest = sections(GUEST.read_text())
    assert set(fake) == set(guest)
    return guest, fake


def test_raw_prints_numbers(both):
    """``raw``: ``pid cpu ts`` then the entry's numbers: a function's
    addresses (vfs_read's record, the same on both), a marker's address and
    text, ``type: N`` for a trace event (sched_switch: 310 on both)."""
    for side in both:
        nop = body(side["nop raw"])
        assert re.fullmatch(r"\d+ \d+ \d+ # [0-9a-f]+ hello-marker", nop[0])
        assert all(re.fullmatch(r"\d+ \d+ \d+ type: 310", ln) for ln in nop[1:]) and nop[1:]
        fn = body(side["function raw"])
        assert fn and all(re.fullmatch(r"\d+ \d \d+ ffffffff81454da4 [0-9a-f]{16}", ln)
                          for ln in fn)
        assert body(side["function nocontext-info raw"]) == [ln.split(" ", 3)[3] for ln in fn[:2]]
    guest, fake = both
    assert header(guest["nop raw"]) == header(fake["nop raw"])
    assert [ln.split()[:2] for ln in body(fake["function raw"])] == [["42", "1"], ["43", "0"]]
    # the marker's ip: tracing_mark_write's _THIS_IP_ (the profile's marker_ip)
    assert body(fake["nop raw"])[0].split(" ", 3)[3] == body(guest["nop raw"])[0].split(" ", 3)[3] \
        == "# ffffffff8123600f hello-marker"


def test_the_time_is_rounded_to_the_microsecond(both):
    """The context's time is ``ns2usecs`` of the entry's: rounded, as the
    raw nanoseconds of the same entries show."""
    for side in both:
        raw = body(side["function raw"]) + body(side["nop raw"])
        text = body(side["function none"]) + body(side["nop fields"])
        assert len(raw) == len(text) >= 4
        for r, t in zip(raw, text):
            usecs = (int(r.split()[2]) + 500) // 1000
            assert CONTEXT.fullmatch(t)[5] == f"{usecs // 1000000}.{usecs % 1000000:06d}"


def test_hex_prints_fields_as_hex_groups(both):
    """``hex``: each number in hex, its width the field's, a space after
    each; a line ends with a newline of its own (after ``type: N``'s)."""
    for side in both:
        nop = body(side["nop hex"])
        assert re.fullmatch(HEX_CONTEXT + "type: 5", nop[0]) and nop[1] == ""
        assert re.fullmatch(HEX_CONTEXT + "type: 310", nop[2])
        fn = body(side["function hex"])
        assert fn and all(re.fullmatch(HEX_CONTEXT + "ffffffff81454da4 [0-9a-f]{16} ", ln)
                          for ln in fn)
        raw = body(side["function raw"])
        for h, r in zip(fn, raw):  # the same entries: pid, cpu and time agree
            pid, cpu, ts = (int(w, 16) for w in h.split()[:3])
            assert r.split()[:3] == [str(pid), str(cpu), str(ts)]
        assert body(side["function nocontext-info hex"]) == [ln[35:] for ln in fn[:2]]


def test_bin_writes_the_fields_bytes(both):
    """``bin``: the header as text, then per entry ``pid``, ``cpu`` and
    ``ts`` as they are in memory and the function's two addresses (no
    newline); an event without binary output writes ``type: N\\n``."""
    for side in both:
        text_header = "\n".join(side["function raw"][:12]) + "\n"
        data = bytes.fromhex(side["function bin"][0])
        assert data.startswith(text_header.encode())
        recs = data[len(text_header):]
        n = len(recs) // 32
        assert n >= 2
        for k in range(n):
            pid, cpu, ts, ip, parent = struct.unpack_from("<iiQQQ", recs, 32 * k)
            assert ip == 0xffffffff81454da4 and parent >> 32 == 0xffffffff
        raw = body(side["function raw"])
        first = struct.unpack_from("<iiQ", recs)
        assert " ".join(map(str, first)) == " ".join(raw[0].split()[:3])
        nop = bytes.fromhex(side["nop bin"][0])
        nop = nop[nop.index(b"|         |\n") + 12:]
        assert struct.unpack_from("<i", nop)[0] == int(body(side["nop raw"])[0].split()[0])
        assert nop[16:24] == b"type: 5\n" and nop[40:50] == b"type: 310\n"
        assert bytes.fromhex(side["function nocontext-info bin"][0])[21:29] == \
            (0xffffffff81454da4).to_bytes(8, "little")


def test_fields_prints_each_field_by_type(both):
    """``fields``: ``event: name=value`` in the format's order, numbers as
    ``0x.. (..)``, strings as they are; the tracer's own entries (marker,
    function) are ``UNKNOWN TYPE N`` on 6.12."""
    guest, fake = both
    for side in both:
        nop = body(side["nop fields"])
        assert CONTEXT.fullmatch(nop[0])[6] == "UNKNOWN TYPE 5"
        switch = CONTEXT.fullmatch(nop[1])[6]
        assert switch.startswith("sched_switch: ")
        pairs = re.findall(r" (\w+)=(\S+(?: \(-?\d+\))?)", switch)
        assert [k for k, _ in pairs] == ["prev_comm", "prev_pid", "prev_prio", "prev_state",
                                         "next_comm", "next_pid", "next_prio"]
        for key, value in pairs:
            if "comm" not in key:
                m = re.fullmatch(r"0x([0-9a-f]+) \((-?\d+)\)", value)
                assert m and int(m[1], 16) == int(m[2]) % (1 << 64)
        fn = body(side["function fields"])
        assert fn and all(CONTEXT.fullmatch(ln)[6] == "UNKNOWN TYPE 1" for ln in fn)
        assert body(side["function nocontext-info fields"]) == ["UNKNOWN TYPE 1"] * 2
    assert header(guest["nop fields"]) == header(fake["nop fields"])


def _lat_lines(lines, pipe: bool) -> list:
    """Each latency line parsed and checked against the kernel's widths;
    the mark is that of the delay to the next line (none in trace_pipe)."""
    got = [LAT_LINE.fullmatch(ln) for ln in lines]
    assert got and all(got), lines
    for m in got:
        assert len(m[2]) >= 7 and re.fullmatch(r" *\d+", m[3])
    for m, nxt in zip(got, got[1:] + [None]):
        if pipe:
            assert m[6] == " "
        elif nxt is not None:  # (each time rounded to the microsecond: one either way)
            delay = int(nxt[5]) - int(m[5])
            assert m[6] in {mark(d * 1000) for d in (delay - 1, delay, delay + 1)}
    return got


def test_latency_format_header_and_columns(both):
    """``latency-format``: the kernel's header (tracer, release, entries,
    preemption model, the saved task) and legend, then per line the task,
    CPU, flags, microseconds since the buffer's start and the delay's
    mark; ``trace_pipe`` marks nothing; an empty buffer prints no header."""
    guest, fake = both
    for name in ("nop latency-format", "function latency-format",
                 "nop latency-format verbose", "function latency-format verbose"):
        assert header(guest[name]) == header(fake[name]), name
    assert "# nop latency trace v1.1.5 on 6.12.113+deb12-amd64" in fake["nop latency-format"]
    for side in both:
        nop = _lat_lines(body(side["nop latency-format"]), pipe=False)
        assert nop[0][7] == "tracing_mark_write: hello-marker"
        assert nop[1][7].startswith("sched_switch: prev_comm=")
        fn = _lat_lines(body(side["function latency-format"]), pipe=False)
        assert all(m[7].startswith("vfs_read <-") for m in fn)
        pipe = _lat_lines(side["nop latency-format trace_pipe"], pipe=True)
        assert [m[7] for m in pipe] == [m[7] for m in nop[:3]]
        sym = _lat_lines(side["function latency-format sym-offset"], pipe=False)
        assert all(m[7].startswith("vfs_read+0x4/0x370 <-") for m in sym)
        for name in ("nop latency-format verbose", "function latency-format verbose"):
            lines = [LAT_VERBOSE.fullmatch(ln) for ln in body(side[name])]
            assert lines and all(lines), name
            assert [int(m[6], 16) for m in lines] == list(range(len(lines)))  # iter->idx
        assert side["nop latency-format empty"] == ["# tracer: nop", "#"]
        assert side["function_graph latency-format empty"] == ["# tracer: function_graph", "#"]


def test_verbose_and_context_info_headers(both):
    """``verbose`` drops the column legend; without ``context-info`` the
    header is the tracer's name alone and a marker is its text."""
    guest, fake = both
    for side in both:
        assert side["nop verbose"][:2] == ["# tracer: nop", "#"]
        assert CONTEXT.fullmatch(side["nop verbose"][2])
    assert guest["nop nocontext-info"] == fake["nop nocontext-info"] == \
        ["# tracer: nop", "#", "tracing_mark_write: hello-marker"]


def test_function_graph_prints_its_own_lines(both):
    """function_graph: ``raw``, ``hex``, ``bin`` and ``fields`` leave its
    lines as they are; ``latency-format`` adds the kernel's header, the
    flags' legend and column (an entry's preempt depth is 1: its callback
    runs unpreemptible), in ``trace`` and ``trace_pipe``."""
    guest, fake = both
    for name in ("function_graph latency-format", "function_graph latency-format proc abstime"):
        assert header(guest[name]) == header(fake[name]), name
    for side in both:
        for opt in ("raw", "hex", "bin", "fields"):
            lines = side[f"function_graph {opt}"]
            assert lines[:4] == guest[f"function_graph {opt}"][:4]
            assert all(GRAPH_LINE.fullmatch(ln) for ln in body(lines)), lines
        for name in ("function_graph latency-format", "function_graph latency-format trace_pipe"):
            lines = [GRAPH_LAT.fullmatch(ln) for ln in body(side[name])]
            assert lines and all(lines), name
            assert all(GRAPH_LINE.fullmatch(f" {m[1]}) {m[3]}") for m in lines)
            first = lines[0]
            assert first[3].endswith("|  do_sys_openat2() {") and first[2] == "...1."
        abstime = body(side["function_graph latency-format proc abstime"])
        assert abstime and all(re.fullmatch(r" +\d+\.\d{6} \|   \d\) .{14} \|  " + LAT_FLAGS
                                            + r" \| .*", ln) for ln in abstime)


def _capture() -> None:
    """Run the script in the Debian 6.12 guest, write its output."""
    cmd = f"bash {SCRIPT} /sys/kernel/tracing guest"
    done = subprocess.run([sys.executable, "-m", "fakedebugfs.oracle", "--guest", "options",
                           "run", cmd], capture_output=True, text=True, cwd=ROOT,
                          errors="surrogateescape")
    if done.returncode:
        sys.exit(done.stderr)
    GUEST.write_text(done.stdout)
    subprocess.run([sys.executable, "-m", "fakedebugfs.oracle", "--guest", "options", "stop"],
                   cwd=ROOT)


if __name__ == "__main__":
    _capture()
