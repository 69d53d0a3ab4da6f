"""The recording readers of :mod:`fakedebugfs.sources.replay`, on recordings the tests make.

* trace.dat files written by unmodified trace-cmd (v7 zstd, v7 uncompressed,
  v6, and ``trace-cmd convert`` between them) under ``fakedebugfs run``:
  every event (CPU, time, pid, event, every field trace-cmd prints) must be
  what ``trace-cmd report -R -t`` says; the kmalloc/kfree events must be the
  ones the same deterministic workload fires in process.
* the same, when the machine has one, against the real kernel's tracefs
  (a scratch instance; the top level is checked unchanged afterwards).
* raw captures of ``trace_pipe_raw`` pages read from a fake mount (and from
  the real kernel, with a small buffer so pages carry missed-events flags).
* pages built here, big and little endian, 4- and 8-byte commit words,
  fields at other offsets, every ring-buffer event type.
* truncated and corrupted copies of each kind: one line naming the section
  and the offset, and no recording returned.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS, read_chunks, wait_done
from fakedebugfs.sources.replay import (LostEvents, ReplayFormatError, open_recording,
    read_rawcapture, read_tracedat)
from support import realtracefs
from support.tracedat import (FMT, KALLSYMS, PRINTK, DatWriter, Pages, built_pages, header_page)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "replay"
HAVE_TRACECMD = shutil.which("trace-cmd") is not None
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
needs_tracecmd = pytest.mark.skipif(not HAVE_TRACECMD, reason="trace-cmd is not installed")

LINE = re.compile(r"^\s*(?:(?P<buf>[\w.-]+):\s+)?(?P<comm>.*?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]"
                  r"\s+(?P<sec>\d+)\.(?P<frac>\d+):\s+(?P<name>\w+):\s+(?P<rest>.*)$")
# a line of tracefs's own `trace` file (irq-info flags column before the time)
TRACE_LINE = re.compile(r"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+"
                        r"(?P<sec>\d+)\.(?P<frac>\d+):\s+(?P<name>\w+):")
DROPPED = re.compile(r"^CPU:(?P<cpu>\d+) \[(?:(?P<count>\d+) )?EVENTS DROPPED\]$")
# ``sym+0xoff``, which trace-cmd 3.1.6 follows with `` (0xaddress)`` for some
# call sites (a local symbol such as ``getname_flags.part.0``)
SYM = re.compile(r"^(?P<sym>[\w.$]+)\+0x(?P<off>[0-9a-f]+)(?: \((?P<addr>0x[0-9a-f]+)\))?$")


# --- trace-cmd report as the oracle -------------------------------------------------------

def report(dat: Path) -> list:
    """``trace-cmd report -R -t``: re.Match per event, ("lost", cpu, count) per drop line."""
    proc = subprocess.run(["trace-cmd", "report", "-R", "-t", "-i", str(dat)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = []
    for line in proc.stdout.splitlines():
        m = LINE.match(line)
        if m:
            out.append(m)
            continue
        d = DROPPED.match(line.strip())
        if d:
            out.append(("lost", int(d["cpu"]), int(d["count"]) if d["count"] else None))
    return out


def same_value(rec, fld, value, payload, text: str) -> bool:
    """Does our decoded *value* print as trace-cmd's raw *text*?"""
    if text.startswith("ARRAY["):
        want = bytes(int(b, 16) for b in text[6:-1].split(", ") if b)
        return bytes(payload[fld.offset:fld.offset + fld.size]) == want
    if isinstance(value, str):
        return value == text
    if isinstance(value, int):
        if text == "(nil)":
            return value == 0
        m = SYM.match(text)
        if m:
            return rec.symbol(value) == (m["sym"], int(m["off"], 16)) and \
                (m["addr"] is None or int(m["addr"], 16) == value)
        if text.startswith("0x"):
            return int(text, 16) == value % (1 << (8 * fld.size))
        if re.fullmatch(r"[A-Za-z_][\w.$]*", text):  # a function pointer at its symbol
            return rec.symbol(value) == (text, 0)
        try:
            return int(text) == value
        except ValueError:
            return False
    return False


def printed_fields(rest: str, names) -> list[tuple[str, str]]:
    """``name=value`` pairs of a ``report -R`` line; values may hold spaces."""
    if not names:
        return []
    pat = re.compile(r"(?:^|(?<=\s))(" + "|".join(map(re.escape, names)) + r")=")
    found = list(pat.finditer(rest))
    ends = [m.start() - 1 for m in found[1:]] + [len(rest.rstrip())]
    return [(m[1], rest[m.end():end]) for m, end in zip(found, ends)]


def assert_matches_report(rec, dat: Path, buffer: str = "") -> int:
    """Every event and drop mark of *buffer* is trace-cmd report's, field by field."""
    want = [r for r in report(dat)
            if isinstance(r, tuple) or (r["buf"] or "") == buffer]
    got = list(rec.events(buffer))
    assert len(got) == len(want), f"{len(got)} events read, trace-cmd reports {len(want)}"
    for i, (ev, exp) in enumerate(zip(got, want)):
        if isinstance(exp, tuple):
            assert isinstance(ev, LostEvents), f"#{i}: trace-cmd reports a drop, we read {ev}"
            assert (ev.cpu, ev.count) == exp[1:], f"#{i}: {ev} != {exp}"
            continue
        ts = int(exp["sec"]) * 10**9 + int(exp["frac"].ljust(9, "0"))
        assert (ev.cpu, ev.ts, ev.pid, ev.key.split(":")[1]) == \
            (int(exp["cpu"]), ts, int(exp["pid"]), exp["name"]), f"#{i}: {ev} != {exp[0]}"
        fmt = rec.by_id[ev.id]
        values = rec.decode(ev)
        printed = printed_fields(exp["rest"], [f.name for f in fmt.fields])
        assert printed or not fmt.fields, f"#{i}: no fields in {exp[0]!r}"
        for name, text in printed:
            fld = fmt.field(name)
            assert fld is not None, f"#{i}: trace-cmd prints {name}, the format has no such field"
            assert same_value(rec, fld, values[name], ev.payload, text), \
                f"#{i} {fmt.key}: {name}={values[name]!r}, trace-cmd prints {text!r}"
    return len(got)


# --- recordings made with trace-cmd under `fakedebugfs run` -------------------------------

RUN_OPTS = ("--cpus", 2, "--clock", "virtual", "--seed", 7, "--rate", 3000, "--enable-all")
RECORD = "trace-cmd record -e kmem -e sched -e raw_syscalls"
VARIANTS = {  # name: (how, kind, compression)
    "v7-zstd": (f"{RECORD} --file-version 7 --compression zstd", "trace.dat v7", "zstd"),
    "v7-none": (f"{RECORD} --file-version 7 --compression none", "trace.dat v7", None),
    "v6": (f"{RECORD} --file-version 6", "trace.dat v6", None),
    "v6-from-v7": ("trace-cmd convert --file-version 6 -i v7-zstd.dat", "trace.dat v6", None),
    "v7-from-v6": ("trace-cmd convert --file-version 7 --compression none -i v6.dat",
                   "trace.dat v7", None),
}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """The three recordings trace-cmd wrote, each in a ``fakedebugfs run`` of
    its own (classic workload: kmem, sched and syscalls on every CPU), are
    committed (fixtures/replay/large/classic-*.dat, made by :data:`RECORDING_CMD`):
    made here, they depended on when trace-cmd started against a workload
    paced in real time, so a busy machine (another tracer, a parallel run)
    left them empty.  The two conversions are made here (trace-cmd convert
    reads a file: nothing depends on time)."""
    if not HAVE_TRACECMD:
        pytest.skip("needs trace-cmd")
    d = tmp_path_factory.mktemp("dat")
    for name, (how, _, _) in VARIANTS.items():
        if how.startswith(RECORD):
            shutil.copy(FIXTURES / "large" / f"classic-{name}.dat", d / f"{name}.dat")
            continue
        # (trace-cmd convert looks for a tracefs and mounts one if none is:
        # never on the host)
        p = subprocess.run(realtracefs.contained(["sh", "-c", f"{how} -o {name}.dat"]), cwd=d,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and (d / f"{name}.dat").exists(), f"{name}: {p.stderr}"
    return d


# How fixtures/replay/large/classic-NAME.dat were made (NAME and HOW from VARIANTS): the
# workload stops (--count) before trace-cmd saves saved_cmdlines, which it
# reads twice and refuses if it changed in between.
RECORDING_CMD = (f"{FAKEDEBUGFS} run --cpus 2 --clock virtual --seed 7 --rate 500 "
                 "--enable-all --workload classic --count 2500 -- "
                 "sh -c 'HOW -o classic-NAME.dat sleep 6'")


@needs_root
@needs_tracecmd
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_tracecmd_file_matches_report(recordings, variant):
    dat = recordings / f"{variant}.dat"
    rec = read_tracedat(dat)
    _, kind, compression = VARIANTS[variant]
    assert rec.kind == kind
    assert (rec.compression or (None,))[0] == compression
    assert (rec.endian, rec.long_size, rec.page_size, rec.cpus) == ("little", 8, 4096, 2)
    assert [b.name for b in rec.buffers] == [""]
    assert {"kmem:kmalloc", "sched:sched_switch", "raw_syscalls:sys_enter"} <= set(rec.formats)
    assert rec.formats["kmem:kmalloc"].text.startswith("name: kmalloc\nID: ")
    assert "putname" in rec.kallsyms and rec.cmdlines
    n = assert_matches_report(rec, dat)
    systems = {ev.key.split(":")[0] for ev in rec.events() if not ev.lost}
    assert n > 500 and systems == {"kmem", "sched", "raw_syscalls"}


@needs_root
@needs_tracecmd
def test_converted_files_hold_the_same_events(recordings):
    """v7 zstd -> v6 and v6 -> v7 uncompressed: byte-identical payloads."""
    def events(name):
        return [(e.cpu, e.ts, e.id, e.pid, e.payload) for e in
                read_tracedat(recordings / f"{name}.dat").events()]

    assert events("v7-zstd") == events("v6-from-v7")
    assert events("v6") == events("v7-from-v6")


@needs_root
@needs_tracecmd
def test_tracecmd_file_matches_the_workload(tmp_path):
    """kmalloc/kfree read from a trace-cmd recording are the events the same
    deterministic workload fires in process (test_run_tracecmd's oracle)."""
    from support.kmem import assert_window, expected_events

    # 4 s of workload paced in real time: trace-cmd, which may take over a
    # second to start on a busy machine, still records most of it
    count, seed = 3000, 21
    dat = tmp_path / "k.dat"
    args = ["run", "--cpus", 2, "--workload", "kmem", "--count", count, "--rate", 750,
            "--seed", seed, "--clock", "virtual", "--enable-all", "--",
            "trace-cmd", "record", "-e", "kmem", "-e", "sched", "-o", dat, "sleep", 5.5]
    p = subprocess.run([FAKEDEBUGFS, *map(str, args)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    rec = read_tracedat(dat)
    assert_window(our_kmem(rec), expected_events(2, seed, count))


def our_kmem(rec) -> list[tuple]:
    """kmalloc/kfree in test_run_tracecmd's shape: (event, cpu, pid, ts, {field: text})."""
    out = []
    for ev in rec.events():
        if ev.lost or ev.key not in ("kmem:kmalloc", "kmem:kfree"):
            continue
        v = rec.decode(ev)
        sym = rec.symbol(v["call_site"])
        fields = {"call_site": f"{sym[0]}+0x{sym[1]:x}", "ptr": f"0x{v['ptr']:x}"}
        if ev.key == "kmem:kmalloc":
            fields.update(bytes_req=str(v["bytes_req"]), bytes_alloc=str(v["bytes_alloc"]),
                          gfp_flags=f"0x{v['gfp_flags']:x}", node=str(v["node"]))
        out.append((ev.key.split(":")[1], ev.cpu, ev.pid, ev.ts, fields))
    return out


@needs_root
@needs_tracecmd
def test_small_fixtures_match_report():
    """The committed recordings (fixtures/replay, made by trace-cmd under run)."""
    files = sorted(FIXTURES.glob("*.dat"))
    assert files, "fixtures/replay/*.dat missing"
    for dat in files:
        assert dat.stat().st_size < 100_000
        assert assert_matches_report(read_tracedat(dat), dat) > 0


# --- the real kernel ----------------------------------------------------------------------


needs_real = pytest.mark.skipif(not realtracefs.available(), reason="needs root and tracefs")


@needs_real
@needs_tracecmd
def test_real_kernel_tracecmd_record(tmp_path):
    """``trace-cmd record -B`` of kmem and sched on this machine's kernel, in
    a scratch instance (the real tracefs mounted in a private mount
    namespace; the top level, which another tracing user may be changing
    meanwhile, is not touched).

    trace-cmd writes /proc/sys/kernel/ftrace_enabled, which a sandboxed /proc
    may refuse, so a file is bound there (as ``fakedebugfs run`` does);
    ``--no-filter`` keeps it from the function tracer's pid files, which
    such a kernel may refuse too (it then fails to clear them at exit,
    after the file is written)."""
    dat = tmp_path / "real.dat"
    p, _ = realtracefs.record(dat, "fdreplay_rec", "-e", "kmem", "-e", "sched", timeout=120)
    if not dat.exists():
        pytest.skip(f"trace-cmd could not record this kernel: {p.stderr.strip()[-300:]}")
    rec = read_tracedat(dat)
    assert rec.kind == "trace.dat v7" and "fdreplay_rec" in [b.name for b in rec.buffers]
    assert {"kmem:kmalloc", "sched:sched_switch"} <= set(rec.formats)
    assert len(rec.kallsyms) > 100_000 and rec.cmdlines
    assert assert_matches_report(rec, dat, "fdreplay_rec") > 0


def _raw_capture(root: str, cap: Path) -> tuple:
    """A scratch instance of the real tracefs at *root* with an 8 KiB
    buffer records kmem and sched while /proc/meminfo is read 200 times;
    its formats and trace_pipe_raw pages are saved in *cap*.  Returns the
    CPUs, their overrun counts and the instance's ``trace``."""
    name = f"fdreplay_raw{os.getpid()}"
    inst = Path(root) / "instances" / name
    inst.mkdir()
    try:
        (inst / "buffer_size_kb").write_text("8")
        for sysname in ("kmem", "sched"):
            (inst / "events" / sysname / "enable").write_text("1")
        subprocess.run(["sh", "-c", "for i in $(seq 200); do cat /proc/meminfo; done"],
                       capture_output=True, timeout=60)
        (inst / "tracing_on").write_text("0")
        cpus = sorted(int(p.name[3:]) for p in (inst / "per_cpu").iterdir())
        overrun = {c: int(re.search(r"^overrun: (\d+)", (inst / "per_cpu" / f"cpu{c}" /
                                                         "stats").read_text(), re.M)[1])
                   for c in cpus}
        text = (inst / "trace").read_text()
        save_formats(Path(root), cap / "events", ("kmem", "sched"))
        for c in cpus:
            (cap / f"cpu{c}").write_bytes(
                b"".join(read_chunks(inst / "per_cpu" / f"cpu{c}" / "trace_pipe_raw")))
    finally:
        realtracefs.remove_instance(root, name)
    return cpus, overrun, text


@needs_real
def test_real_kernel_raw_capture(tmp_path):
    """trace_pipe_raw pages of a scratch instance with an 8 KiB buffer, so
    kmem events overrun it: the events are those the instance's ``trace``
    prints, and the missed-events flags count the overrun."""
    cap = tmp_path / "cap"
    cpus, overrun, text = realtracefs.call(_raw_capture, cap)
    rec = read_rawcapture(cap)
    assert rec.page_header.commit_size == 8 and rec.endian == sys.byteorder
    ours = [(e.cpu, (e.ts + 500) // 1000, e.pid, e.key.split(":")[1])  # ns2usecs rounds
            for e in rec.buffer().per_cpu_events() if not e.lost]
    theirs = sorted(((int(m["cpu"]), int(m["sec"]) * 10**6 + int(m["frac"][:6]),
                      int(m["pid"]), m["name"]) for m in map(TRACE_LINE.match, text.splitlines())
                     if m), key=lambda t: t[0])  # stable: each CPU in time order
    assert ours and ours == theirs
    lost = [e for e in rec.buffer().per_cpu_events() if e.lost]
    for c in cpus:
        marks = [e for e in lost if e.cpu == c]
        assert bool(marks) == bool(overrun[c]), (c, marks, overrun[c])
        if marks and all(m.count is not None for m in marks):
            assert sum(m.count for m in marks) == overrun[c]


def save_formats(tracing: Path, dest: Path, systems, layout: str = "events") -> None:
    """header_page, header_event and the systems' format files under *dest*."""
    dest.mkdir(parents=True)
    for name in ("header_page", "header_event"):
        (dest / name).write_bytes((tracing / "events" / name).read_bytes())
    for sysname in systems:
        for ev in (tracing / "events" / sysname).iterdir():
            if (ev / "format").exists():
                (dest / sysname / ev.name).mkdir(parents=True)
                (dest / sysname / ev.name / "format").write_bytes((ev / "format").read_bytes())


# --- raw captures from a fake mount --------------------------------------------------------

def kmem_fired(cpus: int, seed: int, count: int) -> list[tuple]:
    """(event, cpu, pid, ts, values) of every kmalloc/kfree the workload fires in process."""
    from fakedebugfs.engine.kernel import Kernel
    from fakedebugfs.sources.workloads import make_workload

    kernel = Kernel(cpus=cpus, clock="virtual", seed=seed)
    out = []
    for name in ("kmalloc", "kfree"):
        kernel.engine.tracepoint(f"kmem:{name}").register(
            lambda cpu, pid, ts, v, name=name: out.append((name, cpu, pid, ts, tuple(v))))
    wl = make_workload("kmem", kernel, seed=seed, count=count)
    while not wl.done:
        wl.run(1000)
    return sorted(out, key=lambda e: (e[1], e[3]))


def read_kmem(rec) -> list[tuple]:
    out = []
    for ev in rec.buffer().per_cpu_events():
        if ev.lost or ev.key not in ("kmem:kmalloc", "kmem:kfree"):
            continue
        v = rec.decode(ev)
        names = ("call_site", "ptr", "bytes_req", "bytes_alloc", "gfp_flags", "node") \
            if ev.key == "kmem:kmalloc" else ("call_site", "ptr")
        out.append((ev.key.split(":")[1], ev.cpu, ev.pid, ev.ts, tuple(v[n] for n in names)))
    return out


@pytest.fixture
def fake_capture(fake, tmp_path):
    """A capture directory of a fake mount whose kmem workload ran to its count."""
    count, seed = 3000, 9
    mnt = fake("--cpus", 2, "--workload", "kmem", "--count", count, "--rate", 0, "--seed",
               seed, "--clock", "virtual", "--enable-all")
    done = wait_done(mnt)
    tracing = mnt / "tracing"
    (tracing / "tracing_on").write_text("0")
    cap = tmp_path / "cap"
    save_formats(tracing, cap / "events", ("kmem", "sched", "raw_syscalls"))
    for c in range(2):
        (cap / f"cpu{c}").write_bytes(b"".join(read_chunks(tracing / "per_cpu" / f"cpu{c}" / "trace_pipe_raw")))
    (cap / "saved_cmdlines").write_text((tracing / "saved_cmdlines").read_text())
    return cap, count, seed, done


def test_fake_raw_capture(fake_capture):
    cap, count, seed, done = fake_capture
    rec = read_rawcapture(cap)
    assert (rec.kind, rec.endian, rec.page_size, rec.long_size) == \
        ("raw capture", "little", 4096, 8)
    assert read_kmem(rec) == kmem_fired(2, seed, count)
    entries = sum(c["entries"] for c in done["ftrace"]["cpus"])
    assert sum(1 for e in rec.buffer().per_cpu_events() if not e.lost) == entries
    assert not any(e.lost for e in rec.events())
    assert rec.cmdlines


def test_schedviz_layout_and_tarball(fake_capture, tmp_path):
    """schedviz's collector layout (traces/cpuN, formats/…, no header_event)
    packed as its trace.tar.gz reads the same."""
    cap = fake_capture[0]
    sv = tmp_path / "sv"
    (sv / "traces").mkdir(parents=True)
    for c in range(2):
        shutil.copy(cap / f"cpu{c}", sv / "traces" / f"cpu{c}")
    shutil.copytree(cap / "events", sv / "formats")
    (sv / "formats" / "header_event").unlink()
    (sv / "metadata.textproto").write_text("trace_type: FTRACE\n")
    tgz = tmp_path / "trace.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        for p in sorted(sv.iterdir()):
            tar.add(p, arcname=p.name)

    def events(rec):
        return [(e.cpu, e.ts, e.payload) for e in rec.events()]

    want = events(read_rawcapture(cap))
    assert events(open_recording(sv)) == want
    assert events(open_recording(tgz)) == want


# --- pages built here: byte order, commit size, offsets, every event type ------------------


def built_capture(root: Path, endian: str, commit: int) -> Path:
    """A raw capture directory of :func:`built_pages`."""
    d = root / f"{endian}-{commit}"
    (d / "events" / "test" / "probe").mkdir(parents=True)
    (d / "events" / "header_page").write_text(header_page(commit))
    (d / "events" / "test" / "probe" / "format").write_text(FMT)
    for cpu, data in built_pages(Pages(endian, commit)).items():
        (d / f"cpu{cpu}").write_bytes(data)
    return d


@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("commit", [8, 4])
def test_built_pages(tmp_path, endian, commit):
    d = built_capture(tmp_path, endian, commit)
    for rec in (read_rawcapture(d, endian=endian), read_rawcapture(d)):  # given and guessed
        assert rec.endian == endian and rec.page_header.commit_size == commit
        got = []
        for ev in rec.buffer().per_cpu_events():
            if ev.lost:
                got.append(("lost", ev.cpu, ev.ts, ev.count))
            else:
                v = rec.decode(ev)
                got.append((ev.cpu, ev.ts, ev.pid, v["value"], v["delta"], v["tag"], v["msg"]))
        assert got == [
            (0, 1005, 10, 1, -3, "alpha", "hi"),
            (0, 1005 + (1 << 30) + 7, 11, 2, 4, "beta", ""),
            (0, 1005 + (1 << 30) + 7 + 3 + 1, 12, 3, 0, "gamma", "x" * 150),
            ("lost", 0, 1 << 40, 42),
            (0, (1 << 40) + 999, 13, 4, 1, "delta", "z"),
            ("lost", 1, 2000, None),
            (1, 2009, 20, 5, -1, "eps", ""),
        ]


# --- truncated and corrupted files ---------------------------------------------------------

ONE_LINE = re.compile(r"^\S+: (truncated|corrupt) in .+ at (offset 0x[0-9a-f]+|"
                      r".*byte 0x[0-9a-f]+.*): .+$")


def assert_clear_error(err: ReplayFormatError, *words) -> None:
    msg = str(err)
    assert "\n" not in msg and ONE_LINE.match(msg), msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def cut(src: Path, dest: Path, size: int) -> Path:
    dest.write_bytes(src.read_bytes()[:size])
    return dest


def patched(src: Path, dest: Path, offset: int, data: bytes) -> Path:
    raw = bytearray(src.read_bytes())
    raw[offset:offset + len(data)] = data
    dest.write_bytes(bytes(raw))
    return dest


@needs_root
@needs_tracecmd
@pytest.mark.parametrize("variant", ["v6", "v7-zstd", "v7-none"])
def test_truncated_tracedat(recordings, tmp_path, variant):
    src = recordings / f"{variant}.dat"
    size = src.stat().st_size
    for at in (5, 14, 40, 300, size // 20, size // 4, size // 2, size - 4096, size - 1):
        with pytest.raises(ReplayFormatError) as info:
            read_tracedat(cut(src, tmp_path / "t.dat", at))
        assert_clear_error(info.value)
    rec = read_tracedat(src)
    cd = rec.buffer().cpus[1]
    if rec.compression is None:  # cut in the middle of CPU 1's pages
        with pytest.raises(ReplayFormatError) as info:
            read_tracedat(cut(src, tmp_path / "t.dat", cd.file_offset + len(cd) // 2))
        # v7 keeps options after the data: the chain of options sections breaks first
        where = ("data of CPU 1", f"offset 0x{cd.file_offset:x}") if rec.version == 6 \
            else ("options section",)
        assert_clear_error(info.value, "truncated", *where)


@needs_root
@needs_tracecmd
@pytest.mark.parametrize("variant", ["v6", "v7-none", "v7-zstd"])
def test_corrupt_tracedat(recordings, tmp_path, variant):
    src = recordings / f"{variant}.dat"
    bad = tmp_path / "bad.dat"
    with pytest.raises(ReplayFormatError) as info:
        read_tracedat(patched(src, bad, 0, b"\x17\x08\x45"))
    assert_clear_error(info.value, "initial format", "offset 0x0")
    with pytest.raises(ReplayFormatError) as info:
        read_tracedat(patched(src, bad, 10, b"9"))
    assert_clear_error(info.value, "version '9'")
    rec = read_tracedat(src)
    cd = rec.buffer().cpus[0]
    if rec.compression is None:
        # a page whose commit word says more than a page holds
        with pytest.raises(ReplayFormatError) as info:
            read_tracedat(patched(src, bad, cd.file_offset + 8, struct.pack("<Q", 0x7FFFFFF)))
        assert_clear_error(info.value, "corrupt", "data of CPU 0",
                           f"offset 0x{cd.file_offset + 8:x}", "commit")
        # an event whose length runs past its page
        first = cd.file_offset + 16
        with pytest.raises(ReplayFormatError) as info:
            read_tracedat(patched(src, bad, first, struct.pack("<II", 0, 0xFFFF)))
        assert_clear_error(info.value, "data of CPU 0", f"offset 0x{first:x}", "runs past")
    else:
        # a byte of CPU 0's first compressed chunk
        chunk = cd.chunks[0][1]
        raw = src.read_bytes()
        with pytest.raises(ReplayFormatError) as info:
            read_tracedat(patched(src, bad, chunk + 20, bytes([raw[chunk + 20] ^ 0xFF]) * 8))
        assert_clear_error(info.value, "data of CPU 0", "uncompress")


def test_broken_raw_captures(tmp_path):
    d = built_capture(tmp_path, "little", 8)
    cpu1 = (d / "cpu1").read_bytes()
    (d / "cpu1").write_bytes(cpu1[:6000])
    with pytest.raises(ReplayFormatError) as info:
        read_rawcapture(d)
    assert_clear_error(info.value, "truncated", "cpu1", "pages of CPU 1", "offset 0x1000")
    (d / "cpu1").write_bytes(cpu1)
    cpu0 = bytearray((d / "cpu0").read_bytes())
    cpu0[4096 + 16:4096 + 24] = struct.pack("<II", 0, 5000)  # type_len 0, length past the page
    (d / "cpu0").write_bytes(bytes(cpu0))
    with pytest.raises(ReplayFormatError) as info:
        read_rawcapture(d)
    assert_clear_error(info.value, "corrupt", "pages of CPU 0", "offset 0x1010", "runs past")
    fmt = d / "events" / "test" / "probe" / "format"
    fmt.write_text(FMT.replace("ID: 77\n", ""))
    with pytest.raises(ReplayFormatError) as info:
        read_rawcapture(d)
    assert "format" in str(info.value) and "ID" in str(info.value)
    (d / "events" / "header_page").unlink()
    with pytest.raises(ReplayFormatError) as info:
        read_rawcapture(d)
    assert "header_page" in str(info.value)


def test_summary_command(tmp_path):
    """``python -m fakedebugfs.sources.replay.tracedat``: a summary, or the one-line error and status 1."""
    d = built_capture(tmp_path, "big", 4)
    p = subprocess.run([sys.executable, "-m", "fakedebugfs.sources.replay.tracedat", str(d)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and not p.stderr, p.stderr
    assert "raw capture, big endian" in p.stdout and "test: 5" in p.stdout
    assert "cpu0: 4 events in 2 pages, 1 lost marks (42 counted)" in p.stdout
    (d / "cpu0").write_bytes((d / "cpu0").read_bytes()[:100])
    p = subprocess.run([sys.executable, "-m", "fakedebugfs.sources.replay.tracedat", str(d)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and not p.stdout
    assert len(p.stderr.splitlines()) == 1 and "truncated in trace_pipe_raw pages of CPU 0" \
        in p.stderr


# --- trace.dat files written here: both byte orders, 4-byte longs, zlib, instances ---------


@pytest.mark.parametrize("version,endian,long_size,compression", [
    (6, "little", 8, "none"), (6, "big", 4, "none"), (7, "big", 4, "zlib"),
    (7, "little", 8, "zlib"), (7, "big", 8, "none"), (7, "little", 4, "zstd"),
])
def test_written_tracedat(tmp_path, version, endian, long_size, compression):
    dat = DatWriter(version, endian, long_size, compression).write(tmp_path / "w.dat")
    rec = read_tracedat(dat)
    assert (rec.kind, rec.endian, rec.long_size, rec.page_header.commit_size, rec.cpus) == \
        (f"trace.dat v{version}", endian, long_size, long_size, 2)
    assert (rec.compression or ("none",))[0] == compression
    assert [b.name for b in rec.buffers] == ["", "inst"]
    assert rec.cmdlines == {10: "alpha", 20: "eps", 30: "inst-task"}
    assert rec.kallsyms == KALLSYMS.decode() and rec.printk_formats == PRINTK.decode()
    assert rec.symbol(0xFFFFFFFF81000104) == ("probe_fn", 4)
    assert rec.options["tsc2nsec"] == {"multiplier": 3, "shift": 1, "offset": 99}
    assert (rec.options["offset"], rec.options["uname"]) == ("12345", "Linux test 6.0 x")
    assert rec.buffer().clock == "local" and rec.formats["test:probe"].id == 77
    top = [("lost", e.cpu, e.count) if e.lost else (e.cpu, e.ts, rec.decode(e)["msg"])
           for e in rec.events()]
    assert top == [(0, 1005, "hi"), ("lost", 1, None), (1, 2009, ""),
                   (0, 1005 + (1 << 30) + 7, ""), (0, 1005 + (1 << 30) + 11, "x" * 150),
                   ("lost", 0, 42), (0, (1 << 40) + 999, "z")]
    inst = [(e.cpu, e.ts, e.pid, rec.decode(e)["tag"]) for e in rec.events("inst")]
    assert inst == [(1, 5002, 30, "inst")]
    for at in (len(dat.read_bytes()) - 1, len(dat.read_bytes()) // 2, 100):
        with pytest.raises(ReplayFormatError) as info:
            read_tracedat(cut(dat, tmp_path / "cut.dat", at))
        assert_clear_error(info.value)


@needs_tracecmd
@pytest.mark.parametrize("version,endian,long_size", [(6, "big", 4), (7, "little", 8)])
def test_written_tracedat_reads_as_trace_cmd_reads_it(tmp_path, version, endian, long_size):
    """trace-cmd itself reads the files the test writes; its times are
    :meth:`Recording.report_ts` (TSC2NSEC and OFFSET applied)."""
    dat = DatWriter(version, endian, long_size).write(tmp_path / "w.dat")
    rec = read_tracedat(dat)
    theirs = [(r["buf"] or "", int(r["cpu"]), int(r["pid"]),
               int(r["sec"]) * 10**9 + int(r["frac"].ljust(9, "0")))
              for r in report(dat) if not isinstance(r, tuple)]
    ours = sorted(((b.name, e.cpu, e.pid, rec.report_ts(e.ts)) for b in rec.buffers
                   for e in b.events() if not e.lost), key=lambda t: t[3])
    assert ours == sorted(theirs, key=lambda t: t[3]) and len(ours) == 6


def read_all(path) -> int:
    """Open, iterate every buffer and decode every event of a recording."""
    rec = open_recording(path)
    n = 0
    for buf in rec.buffers:
        for ev in buf.events():
            if not ev.lost and ev.id in rec.by_id:
                rec.decode(ev, common=True)
            n += 1
    rec.summary()
    return n


@pytest.mark.parametrize("name", ["default-v6.dat", "default-v7-zstd.dat",
                                  "kmem-dropped-v7-zstd.dat", "raw capture"])
def test_mutated_recordings_fail_cleanly(tmp_path, name):
    """Random bytes overwritten, format numbers changed, tails cut: a
    recording either reads whole or raises one ReplayFormatError line."""
    import random

    rng = random.Random(name)
    if name == "raw capture":
        d = built_capture(tmp_path, "little", 8)
        victims = [d / "cpu0", d / "cpu1", d / "events" / "header_page",
                   d / "events" / "test" / "probe" / "format"]
        target = d
    else:
        victims = [tmp_path / name]
        shutil.copy(FIXTURES / name, victims[0])
        target = victims[0]
    originals = {v: v.read_bytes() for v in victims}
    for _ in range(150):
        victim = rng.choice(victims)
        data = bytearray(originals[victim])
        numbers = [m.start(1) for m in re.finditer(rb"(?:offset|size|ID):\s*(\d)", data)]
        kind = rng.random()
        if kind < 0.2 and numbers:
            data[rng.choice(numbers)] = ord(rng.choice("0123456789"))
        elif kind < 0.8:
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            del data[rng.randrange(len(data)):]
        victim.write_bytes(bytes(data))
        try:
            read_all(target)
        except ReplayFormatError as err:
            assert "\n" not in str(err)
        victim.write_bytes(originals[victim])


def test_fields_past_the_payload_decode_as_none(tmp_path):
    """A format promising more than the event holds (another kernel's layout,
    a damaged file) decodes those fields as None instead of failing."""
    d = built_capture(tmp_path, "little", 8)
    fmt = d / "events" / "test" / "probe" / "format"
    fmt.write_text(FMT.replace("offset:24;\tsize:4", "offset:240;\tsize:4")
                   .replace("offset:12;\tsize:4", "offset:300;\tsize:4"))
    rec = read_rawcapture(d)
    first = next(e for e in rec.events() if not e.lost)
    values = rec.decode(first)
    assert (values["msg"], values["value"], values["tag"]) == (None, None, "alpha")


def test_swapped_payloads_are_the_other_byte_order(tmp_path):
    """EventFormat.swap_payload turns the big-endian events of a recording
    into the bytes the same events have in a little-endian one."""
    big = read_rawcapture(built_capture(tmp_path, "big", 8))
    little = read_rawcapture(built_capture(tmp_path, "little", 8))
    fmt = big.formats["test:probe"]
    pairs = [(b, l) for b, l in zip(big.events(), little.events()) if not b.lost]
    assert len(pairs) == 5
    for b, l in pairs:
        assert b.payload != l.payload and fmt.swap_payload(b.payload) == l.payload
        assert fmt.swap_payload(l.payload) == b.payload
