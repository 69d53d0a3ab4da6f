"""``tracing/`` on real mounts: the 2.6.29 kmemtrace plugin's session, trace_pipe,
trace_pipe_raw pages, errnos, and a comparison with the real tracefs.

Expected values come from an independent run of the same deterministic
workload in-process (the catalogue's tracepoint arguments, formatted here
with the seed's printf formats) and from decoding ``trace_pipe_raw`` with
the offsets read from the mount's own ``format`` files.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import read, read_chunks, wait_done, write
from support import realtracefs

from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.sources.workloads import make_workload


PROFILE = str(SHIPPED_PROFILES / "linux-6.18")


@pytest.fixture
def fake(fake):
    """This file's mounts serve linux-6.18, this machine's kernel: its fixtures
    (formats, the marker's flags, kmem_cache_alloc's cache name) are 6.18's and
    it compares with the real tracefs."""
    return lambda *options, **kw: fake("--profile", PROFILE, *options, **kw)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tracefs"
KMEM = ("kmalloc", "kfree", "kmem_cache_alloc", "kmem_cache_free", "mm_page_alloc", "mm_page_free")
TYPE_ID = {"kmalloc": 0, "kfree": 0, "kmem_cache_alloc": 1, "kmem_cache_free": 1,
           "mm_page_alloc": 2, "mm_page_free": 2}


def write_errno(path, data: bytes) -> str:
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as err:
        return f"open:{errno.errorcode[err.errno]}"
    try:
        os.write(fd, data)
        return "0"
    except OSError as err:
        return errno.errorcode[err.errno]
    finally:
        os.close(fd)


def emitted_kmem(seed: int, count: int) -> list[tuple]:
    """``(name, values)`` of every kmem tracepoint the workload fires, in order."""
    kernel = Kernel(clock="virtual", seed=seed, profile=PROFILE)
    fired = []
    for name in KMEM:
        kernel.engine.tracepoints[f"kmem:{name}"].register(
            lambda cpu, pid, ts, values, name=name: fired.append((name, values)))
    make_workload("kmem", kernel, seed=seed, count=count).run(count)
    return fired


def as_alloc(name, v):
    """``(call_site, ptr, req, alloc, gfp, node)`` as kmemtrace sees an allocation."""
    if name == "mm_page_alloc":
        pfn, order, gfp, _mt, site, ptr = v
        return site, ptr, 4096 << order, 4096 << order, gfp, -1
    return tuple(v[:6])


def as_free(name, v):
    return (v[2], v[3]) if name == "mm_page_free" else (v[0], v[1])


def original_line(name, v) -> str:
    """The seed's ``kmemtrace_print_{alloc,free}_original``."""
    if name in ("kmalloc", "kmem_cache_alloc", "mm_page_alloc"):
        site, ptr, req, alloc, gfp, node = as_alloc(name, v)
        return (f"type_id {TYPE_ID[name]} call_site {site} ptr {ptr} bytes_req {req} "
                f"bytes_alloc {alloc} gfp_flags {gfp} node {node}")
    site, ptr = as_free(name, v)
    return f"type_id {TYPE_ID[name]} call_site {site} ptr {ptr}"


def minimal_line(name, v, sym) -> str:
    """The seed's ``kmemtrace_print_{alloc,free}_compress``."""
    kind = "KCP"[TYPE_ID[name]]
    if name in ("kmalloc", "kmem_cache_alloc", "mm_page_alloc"):
        site, ptr, req, alloc, gfp, node = as_alloc(name, v)
        return "  +      %s   %4d   %4d   %08x   0x%x   %4d   %s" % (kind, req, alloc, gfp, ptr,
                                                                  node, sym(site))
    site, ptr = as_free(name, v)
    return "  -      %s     %s0x%x   %s%s" % (kind, " " * 23, ptr, " " * 7, sym(site))


# --- the 2.6.29 kmemtrace plugin: its shell session -------------------------

@pytest.mark.parametrize("profile", ["linux-6.18", "debian-6.12"])
def test_the_kmemtrace_plugin_only_when_asked(fake, profile):
    """A profile's ``available_tracers`` is its kernel's, byte for byte:
    ``kmemtrace`` is refused as an unknown tracer (EINVAL) until
    ``--kmemtrace-tracer`` registers it, first in the list."""
    captured = (SHIPPED_PROFILES / profile / "available_tracers").read_text()
    if profile == "linux-6.18":  # docs/profiles.md: the host lists a tracer it refuses
        captured = captured.replace("function ", "")
    tracing = fake("--profile", profile, "--workload", "none") / "tracing"
    assert read(tracing / "available_tracers") == captured
    with pytest.raises(OSError) as err:
        write(tracing / "current_tracer", "kmemtrace\n")
    assert err.value.errno == errno.EINVAL
    tracing = fake("--profile", profile, "--workload", "none", "--kmemtrace-tracer") / "tracing"
    assert read(tracing / "available_tracers") == "kmemtrace " + captured
    write(tracing / "current_tracer", "kmemtrace\n")
    assert read(tracing / "current_tracer") == "kmemtrace\n"


def test_kmemtrace_session(fake):
    count, seed = 1500, 7
    mnt = fake("--workload", "kmem", "--count", count, "--seed", seed, "--clock", "virtual",
               "--rate", 3000, "--kmemtrace-tracer")
    tracing = mnt / "tracing"
    assert read(tracing / "available_tracers").split()[0] == "kmemtrace"
    write(tracing / "current_tracer", "kmemtrace\n")
    assert read(tracing / "current_tracer") == "kmemtrace\n"
    wait_done(mnt)
    expected = emitted_kmem(seed, count)
    kernel = Kernel(clock="virtual", seed=seed, profile=PROFILE)
    sym = kernel.engine.kallsyms.sym

    text = read(tracing / "trace")
    assert text.startswith("# tracer: kmemtrace\n#\n")
    lines = text.splitlines()[2:]
    assert 0 < len(lines) <= len(expected)
    # the tracer started while the workload ran: its lines are the tail
    assert lines == [original_line(n, v) for n, v in expected[-len(lines):]]

    write(tracing / "trace_options", "kmem_minimalistic\n")
    assert read(tracing / "options" / "kmem_minimalistic") == "1\n"
    text = read(tracing / "trace")
    header = ("# tracer: kmemtrace\n#\n#\n"
              "# ALLOC  TYPE  REQ   GIVEN  FLAGS           POINTER         NODE    CALLER\n"
              "# FREE   |      |     |       |              |   |            |        |\n"
              "# |\n\n")
    assert text.startswith(header)
    table = text[len(header):].splitlines()
    assert table == [minimal_line(n, v, sym) for n, v in expected[-len(lines):]]
    assert any(line.startswith("  +      C") for line in table)

    write(tracing / "options" / "kmem_minimalistic", "0")
    assert "nokmem_minimalistic\n" in read(tracing / "trace_options")
    write(tracing / "current_tracer", "nop")
    assert not (tracing / "options" / "kmem_minimalistic").exists()
    assert write_errno(tracing / "trace_options", b"kmem_minimalistic") == "EINVAL"


# --- trace, trace_pipe, trace_pipe_raw ----------------------------------------------

def parse_format(text: str) -> dict:
    fields = {}
    for m in re.finditer(r"field:(.*?) (\w+)(\[\])?;\toffset:(\d+);\tsize:(\d+);\tsigned:(\d);", text):
        fields[m.group(2)] = (int(m.group(4)), int(m.group(5)), m.group(6) == "1")
    ident = int(re.search(r"^ID: (\d+)$", text, re.M).group(1))
    return {"id": ident, "fields": fields}


def get_field(payload: bytes, spec) -> int:
    off, size, signed = spec
    return int.from_bytes(payload[off:off + size], "little", signed=signed)


def read_raw_nonblock(path) -> bytes:
    """Whole pages of a trace_pipe_raw file, read with O_NONBLOCK."""
    chunks = read_chunks(path)
    assert all(len(page) == 4096 for page in chunks)
    return b"".join(chunks)


def decode_pages(data: bytes):
    """Events of ``trace_pipe_raw`` pages, with the layout of header_page/header_event."""
    for base in range(0, len(data), 4096):
        ts, commit = struct.unpack_from("<QQ", data, base)
        size = commit & ((1 << 27) - 1)
        off = base + 16
        while off < base + 16 + size:
            word = struct.unpack_from("<I", data, off)[0]
            type_len, delta = word & 31, word >> 5
            if type_len == 29:
                off += 4 + struct.unpack_from("<I", data, off + 4)[0]
                continue
            if type_len == 30:
                ts += (struct.unpack_from("<I", data, off + 4)[0] << 27) + delta
                off += 8
                continue
            ts += delta
            if type_len == 0:
                length = struct.unpack_from("<I", data, off + 4)[0] - 4
                yield ts, data[off + 8:off + 8 + length]
                off += 8 + ((length + 3) & ~3)
            else:
                yield ts, data[off + 4:off + 4 + type_len * 4]
                off += 4 + type_len * 4



def test_trace_pipe_raw_matches_trace(fake):
    count, seed = 800, 3
    mnt = fake("--workload", "kmem", "--count", count, "--seed", seed, "--clock", "virtual",
               "--enable-all")
    wait_done(mnt)
    tracing = mnt / "tracing"
    text_lines = [line for line in read(tracing / "trace").splitlines() if not line.startswith("#")]
    assert len(text_lines) == count
    formats = {name: parse_format(read(tracing / f"events/kmem/{name}/format")) for name in KMEM}
    by_id = {f["id"]: name for name, f in formats.items()}
    for name in KMEM:
        assert int(read(tracing / f"events/kmem/{name}/id")) == formats[name]["id"]
    events = []
    for cpu in range(2):
        for ts, payload in decode_pages(read_raw_nonblock(tracing / f"per_cpu/cpu{cpu}/trace_pipe_raw")):
            events.append((ts, cpu, payload))
    events.sort()
    assert len(events) == count
    expected = emitted_kmem(seed, count)
    for (ts, cpu, payload), (name, values), line in zip(events, expected, text_lines):
        common_type = struct.unpack_from("<H", payload)[0]
        assert by_id[common_type] == name
        assert f" [{cpu:03d}] " in line and f": {name}: " in line
        usecs = (ts + 500) // 1000  # ns2usecs: rounded
        assert f" {usecs // 1000000}.{usecs % 1000000:06d}: " in line
        fields = formats[name]["fields"]
        if name == "kmalloc":
            assert get_field(payload, fields["bytes_req"]) == values[2]
            assert get_field(payload, fields["node"]) == values[5]
            assert f"bytes_req={values[2]} " in line
        elif name == "kmem_cache_alloc":
            loc = get_field(payload, fields["name"])
            assert payload[loc & 0xFFFF:(loc & 0xFFFF) + (loc >> 16)] == values[6].encode() + b"\0"
        elif name == "mm_page_alloc":
            assert get_field(payload, fields["pfn"]) == values[0]
            assert f"pfn=0x{values[0]:x} order={values[1]} " in line
    # consumed: a non-blocking read finds nothing now
    fd = os.open(tracing / "per_cpu/cpu0/trace_pipe_raw", os.O_RDONLY | os.O_NONBLOCK)
    with pytest.raises(BlockingIOError):
        os.read(fd, 4096)
    os.close(fd)


def test_trace_pipe_consumes(fake):
    count = 300
    mnt = fake("--workload", "kmem", "--count", count, "--seed", 2, "--clock", "virtual",
               "--enable-all")
    wait_done(mnt)
    tracing = mnt / "tracing"
    fd = os.open(tracing / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
    data = b""
    try:
        while True:
            try:
                chunk = os.read(fd, 1000)
            except BlockingIOError:
                break
            assert chunk.endswith(b"\n") and len(chunk) <= 1000
            data += chunk
    finally:
        os.close(fd)
    lines = data.decode().splitlines()
    assert len(lines) == count
    stamps = [float(re.search(r"\s(\d+\.\d{6}): ", line).group(1)) for line in lines]
    assert stamps == sorted(stamps)
    assert "entries-in-buffer/entries-written: 0/0 " in read(tracing / "trace")
    # a blocking reader is woken by a marker write
    proc = subprocess.Popen(["head", "-n", "1", str(tracing / "trace_pipe")],
                            stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    write(tracing / "trace_marker", "hello from the test")
    out, _ = proc.communicate(timeout=10)
    assert out.endswith("tracing_mark_write: hello from the test\n")
    assert re.match(r"\s+pytest-\d+\s+\[\d{3}\] \.\.\.1\.\s+\d+\.\d{6}: ", out)


def test_trace_truncate_and_stats(fake):
    mnt = fake("--workload", "kmem", "--count", 200, "--seed", 4, "--clock", "virtual",
               "--enable-all")
    wait_done(mnt)
    tracing = mnt / "tracing"
    stats = read(tracing / "per_cpu/cpu0/stats")
    assert re.match(r"entries: \d+\noverrun: 0\ncommit overrun: 0\nbytes: \d+\n"
                    r"oldest event ts: +\d+\.\d{6}\nnow ts: +\d+\.\d{6}\n"
                    r"dropped events: 0\nread events: 0\n$", stats)
    entries = sum(int(re.search(r"entries: (\d+)", read(tracing / f"per_cpu/cpu{c}/stats")).group(1))
                  for c in range(2))
    assert entries == 200
    with open(tracing / "trace", "w"):
        pass  # O_TRUNC clears
    assert "entries-in-buffer/entries-written: 0/0 " in read(tracing / "trace")
    assert read(tracing / "buffer_size_kb") == "1410\n"  # 354 pages of 4080 bytes
    assert read(tracing / "buffer_total_size_kb") == "2820\n"
    write(tracing / "buffer_size_kb", "64")
    assert read(tracing / "per_cpu/cpu1/buffer_size_kb") == "67\n"  # rounded to pages
    assert read(tracing / "buffer_total_size_kb") == "134\n"


def test_events_control(fake):
    mnt = fake("--workload", "none")
    tracing = mnt / "tracing"
    assert read(tracing / "events/enable") == "0\n"
    write(tracing / "events/kmem/kmalloc/enable", "1")
    assert read(tracing / "events/kmem/enable") == "X\n"
    assert read(tracing / "set_event") == "kmem:kmalloc\n"
    write(tracing / "set_event", "kmem:*")  # O_TRUNC first disables everything
    assert read(tracing / "events/kmem/enable") == "1\n"
    with open(tracing / "set_event", "a") as fp:
        fp.write("!kmem:kfree")
    assert "kmem:kfree" not in read(tracing / "set_event")
    write(tracing / "events/kmem/filter", "0")
    write(tracing / "events/kmem/kmalloc/filter", "bytes_req > 100")
    assert read(tracing / "events/kmem/kmalloc/filter") == "bytes_req > 100\n"
    write(tracing / "events/kmem/kmalloc/filter", "0")
    assert read(tracing / "events/kmem/kmalloc/filter") == "none\n"
    assert read(tracing / "trace_clock").startswith("[local] global")
    write(tracing / "trace_clock", "global")
    assert read(tracing / "trace_clock").startswith("local [global]")
    available = read(tracing / "available_events").split()
    assert {f"kmem:{n}" for n in KMEM} <= set(available)


def test_write_errnos_match_real_kernel(fake):
    """Replay the writes captured against the real kernel (fixtures/tracefs/
    write_errnos.txt, made in a tracefs instance) in the same order."""
    mnt = fake("--workload", "none")
    tracing = mnt / "tracing"
    for line in (FIXTURES / "write_errnos.txt").read_text().splitlines():
        m = re.fullmatch(r"(\S+) b'(.*)' (\S+)", line)
        rel, data, want = m.group(1), m.group(2).encode().decode("unicode_escape").encode(), m.group(3)
        assert write_errno(tracing / rel, data) == want, line


def test_formats_match_fixtures(fake):
    mnt = fake("--workload", "none")
    tracing = mnt / "tracing"
    for rel in ("events/header_page", "events/header_event"):
        assert (tracing / rel).read_bytes() == (FIXTURES / rel).read_bytes()
    for fmt in FIXTURES.glob("events/*/*/format"):
        rel = fmt.relative_to(FIXTURES)
        assert (tracing / rel).read_bytes() == fmt.read_bytes(), rel
    assert read(tracing / "trace_options") == read(FIXTURES / "trace_options")
    assert read(tracing / "trace_clock") == read(FIXTURES / "trace_clock")
    for rel in ("events/kmem/filter", "events/kmem/kmalloc/filter", "events/kmem/kmalloc/trigger",
                "events/kmem/enable", "events/enable", "tracing_on", "current_tracer",
                "tracing_cpumask", "set_event_pid", "error_log", "dynamic_events",
                "buffer_percent", "timestamp_mode", "available_tracers"):
        want = read(FIXTURES / rel)
        if rel == "available_tracers":  # no function tracer where the kernel refuses
            # it (this host's 6.18; docs/profiles.md)
            want = " ".join(t for t in want.split() if t != "function") + "\n"
        assert read(tracing / rel) == want, rel
    assert read(tracing / "trace").splitlines()[4:] == \
        read(FIXTURES / "instance_trace_empty.txt").splitlines()[4:]


def our_modes(root: Path) -> dict:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = os.lstat(path).st_mode & 0o7777
    return out


EXTRA = ("events/ftrace/kmem_alloc", "events/ftrace/kmem_free", "options/kmem_minimalistic")


def test_differential_real_tracefs(fake, tmp_path):
    """Names, modes, header_page/header_event and kmem formats against the
    real tracefs (read only; mounted for the comparison in a private mount
    namespace)."""
    if not realtracefs.available():
        pytest.skip("no tracefs to compare with")
    mnt = fake("--workload", "none")
    realtracefs.call(_same_as_real, mnt / "tracing")


def _same_as_real(real: str, ours: Path) -> None:
    real = Path(real)
    assert os.stat(ours).st_mode & 0o7777 == os.stat(real).st_mode & 0o7777
    for rel, mode in our_modes(ours).items():
        if rel.startswith(EXTRA):
            continue
        assert (real / rel).exists(), rel
        assert mode == os.lstat(real / rel).st_mode & 0o7777, rel
    for rel in ("events/header_page", "events/header_event"):
        assert (ours / rel).read_bytes() == (real / rel).read_bytes()
    for name in KMEM:
        for rel in (f"events/kmem/{name}/format", f"events/kmem/{name}/id"):
            assert read(ours / rel) == read(real / rel), rel


def test_trace_pipe_raw_blocking_poll_ioctl(fake):
    """A blocking read waits for a complete page; poll says readable only
    then; ioctl(fd, 0) wakes a blocked reader; O_NONBLOCK takes the partial
    page at the end, then EAGAIN."""
    import fcntl
    import select
    import threading

    mnt = fake("--workload", "none")
    tracing = mnt / "tracing"
    raw = tracing / "per_cpu/cpu0/trace_pipe_raw"
    fd = os.open(raw, os.O_RDONLY)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        assert poller.poll(100) == []
        result = {}
        reader = threading.Thread(target=lambda: result.setdefault("data", os.read(fd, 4096)))
        reader.start()
        # marker entries written on CPU 0 (a marker goes to the writer's CPU)
        script = ("import os\nos.sched_setaffinity(0, {0})\n"
                  f"fd = os.open({str(tracing / 'trace_marker')!r}, os.O_WRONLY)\n"
                  "for i in range(3): os.write(fd, b'x' * 100)\n")
        subprocess.run([os.sys.executable, "-c", script], check=True)
        time.sleep(0.3)
        assert reader.is_alive()  # three entries are not a page
        fcntl.ioctl(fd, 0)
        reader.join(5)
        assert not reader.is_alive()
        page = result["data"]
        assert len(page) == 4096
        assert len(list(decode_pages(page))) == 3
        assert select.select([fd], [], [], 0)[0] == []
        # trace-cmd's end of recording: O_NONBLOCK via fcntl, read until
        # EAGAIN.  FUSE does not pass the new flags to pyfuse3's read, so
        # after the ioctl wake-up an empty buffer reads as end of file.
        fl = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, fl | os.O_NONBLOCK)
        try:
            assert os.read(fd, 4096) == b""
        except BlockingIOError:
            pass
    finally:
        os.close(fd)


def test_missed_events_after_overrun(fake):
    mnt = fake("--workload", "none")
    tracing = mnt / "tracing"
    write(tracing / "buffer_size_kb", "8")  # two pages per CPU
    stats_before = read(tracing / "per_cpu/cpu0/stats")
    assert "overrun: 0" in stats_before
    fd = os.open(tracing / "trace_marker", os.O_WRONLY)
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})  # a marker goes to the writer's CPU
    try:
        for _ in range(400):
            os.write(fd, b"y" * 60)
    finally:
        os.sched_setaffinity(0, cpus)
        os.close(fd)
    cpu = 0
    stats = read(tracing / f"per_cpu/cpu{cpu}/stats")
    overrun = int(re.search(r"overrun: (\d+)", stats).group(1))
    assert overrun > 0
    data = read_raw_nonblock(tracing / f"per_cpu/cpu{cpu}/trace_pipe_raw")
    commit = struct.unpack_from("<Q", data, 8)[0]
    assert commit & (1 << 31)  # RB_MISSED_EVENTS
    size = commit & ((1 << 27) - 1)
    if commit & (1 << 30):  # RB_MISSED_STORED: only when the count fits
        assert struct.unpack_from("<Q", data, 16 + size)[0] == overrun
    else:
        assert size > 4080 - 8
    entries = sum(1 for _ in decode_pages(data))
    assert entries + overrun == 400


def test_filters_apply(fake):
    """``events/kmem/kmalloc/filter`` keeps only matching entries; a system
    filter applies to the events that have its fields."""
    mnt = fake("--workload", "kmem", "--count", 3000, "--rate", 3000, "--seed", 9,
               "--clock", "virtual")
    tracing = mnt / "tracing"
    write(tracing / "events/kmem/filter", "ptr != 0")
    assert read(tracing / "events/kmem/kfree/filter") == "ptr != 0\n"
    # a system filter is accepted even where no event has the field (6.18):
    # each event then shows the subsystem error and stays unfiltered
    write(tracing / "events/kmem/filter", "nosuchfield == 1")
    assert read(tracing / "events/kmem/kfree/filter") == (
        "nosuchfield == 1\n^\nparse_error: Couldn't find or set field in one of a "
        "subsystem's events\n\n")
    write(tracing / "events/kmem/filter", "ptr != 0")
    assert write_errno(tracing / "events/kmem/kmalloc/filter", b"bytes_req ~ 3") == "EINVAL"
    write(tracing / "events/kmem/kmalloc/filter", "bytes_req > 1000 && gfp_flags & 0x400000")
    write(tracing / "events/kmem/kmalloc/enable", "1")
    wait_done(mnt)
    lines = [line for line in read(tracing / "trace").splitlines() if not line.startswith("#")]
    fired = [v for n, v in emitted_kmem(9, 3000) if n == "kmalloc"]
    want = [v for v in fired if v[2] > 1000 and v[4] & 0x400000]
    assert 0 < len(lines) <= len(want)
    for line in lines:
        assert int(re.search(r"bytes_req=(\d+)", line).group(1)) > 1000
        assert "accounted=true" in line


def test_trace_marker(fake):
    """trace_marker/trace_marker_raw entries, EBADF while tracing is off,
    EINVAL with ``nomarkers``; ``nocontext-info`` drops the prefix (all as
    an instance of the real 6.18 tracefs answers)."""
    mnt = fake("--workload", "none")
    tracing = mnt / "tracing"
    write(tracing / "trace_marker", "hello\n")
    fd = os.open(tracing / "trace_marker_raw", os.O_WRONLY)
    try:
        with pytest.raises(OSError) as err:
            os.write(fd, b"ab")
        assert err.value.errno == errno.EINVAL
        os.write(fd, b"\x01\x02\x00\x00xyz")
    finally:
        os.close(fd)
    lines = [l for l in read(tracing / "trace").splitlines() if not l.startswith("#")]
    assert re.fullmatch(r"\s+pytest-\d+\s+\[\d{3}\] \.\.\.1\.\s+\d+\.\d{6}: tracing_mark_write: hello",
                        lines[0])
    assert lines[1].endswith(": # 201 buf: 78 79 7a 00")
    write(tracing / "trace_options", "nocontext-info")
    assert read(tracing / "trace").splitlines()[-2] == "tracing_mark_write: hello"
    write(tracing / "trace_options", "nomarkers")
    assert write_errno(tracing / "trace_marker", b"x") == "EINVAL"
    write(tracing / "trace_options", "markers")
    write(tracing / "tracing_on", "0")
    assert write_errno(tracing / "trace_marker", b"x") == "EBADF"
    assert write_errno(tracing / "trace_options", b"\n") == "EINVAL"


@pytest.mark.parametrize("name", ["trace_pipe", "per_cpu/cpu0/trace_pipe_raw"])
def test_nonblock_set_after_open_gives_eagain(fake, name):
    """Tools often open the pipes, then set O_NONBLOCK with fcntl(): an empty
    pipe must answer EAGAIN at once instead of blocking, and a nonblocking
    read returns what there is (for trace_pipe_raw, the partial page).
    One CPU, so the marker lands in the buffer read."""
    mnt = fake("--workload", "none", "--cpus", "1")
    fd = os.open(mnt / "tracing" / name, os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        with pytest.raises(BlockingIOError):
            os.read(fd, 4096)
        write(mnt / "tracing" / "trace_marker", "hello")
        assert os.read(fd, 4096)
        with pytest.raises(BlockingIOError):
            os.read(fd, 4096)
    finally:
        os.close(fd)


def test_a_group_gets_an_event_by_chgrp_and_chmod(public_fake):
    """What admins do to let a group trace without root: chgrp and chmod the
    path to an event's ``enable``.  Ownership stays on each node changed (a
    directory's new group is not its children's); a non-root user writes
    the file once the group may, and may not chown it."""
    mnt = Path(public_fake("--workload", "none"))
    tr = mnt / "tracing"
    kmalloc = tr / "events" / "kmem" / "kmalloc"
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

    def as_nobody(script):
        return subprocess.run([*nobody, "sh", "-c", script], capture_output=True, text=True,
                              timeout=30)

    write_enable = f"echo 1 > {kmalloc / 'enable'}"
    assert as_nobody(write_enable).returncode != 0  # root's 0700/0640 tree: no way in
    for d in (tr, tr / "events", tr / "events" / "kmem", kmalloc):
        os.chown(d, -1, 65534)
        os.chmod(d, 0o750)
    os.chown(kmalloc / "enable", -1, 65534)
    os.chmod(kmalloc / "enable", 0o660)
    st = os.stat(kmalloc / "enable")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 65534, 0o660)
    sibling = os.stat(tr / "events" / "kmem" / "kfree")
    assert sibling.st_gid == 0 and sibling.st_mode & 0o777 == os.stat(tr / "events" / "sched").st_mode & 0o777
    p = as_nobody(write_enable)
    assert p.returncode == 0, p.stderr
    assert read(kmalloc / "enable") == "1\n"
    assert "kmem:kmalloc" in read(tr / "set_event").split()
    p = as_nobody(f"chown 65534 {kmalloc / 'enable'}")
    assert p.returncode != 0 and "Operation not permitted" in p.stderr
