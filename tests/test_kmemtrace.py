"""kmemtrace/ (both 2008 relay ABIs, docs/kmemtrace.md) against real mounts.

Readers know only the ABI: tests/c/kmemtrace_reader.c speaks the August
2008 layout, the 2008-07 test decodes the July 2008 one with the construct layout.
What the records must say is computed here, independently of the tracer:
the same deterministic workload runs in-process on a virtual clock, a probe
records the kmem tracepoints' values, and this file turns them into the
records each ABI defines (and, for a stalled reader, into what relay's
no-overwrite sub-buffers can hold).
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import stat
import subprocess
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from construct import GreedyRange

from conftest import FAKEDEBUGFS, build_c, errno_of, run_cli, wait_done
from fakedebugfs.engine.core.layouts import kmemtrace_event_v2008_07
from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.sources.workloads import make_workload

KMEM = ("kmem:kmalloc", "kmem:kmem_cache_alloc", "kmem:mm_page_alloc",
        "kmem:kfree", "kmem:kmem_cache_free", "kmem:mm_page_free")
TYPE = {"kmalloc": 0, "kmem_cache_alloc": 1, "mm_page_alloc": 2,
        "kfree": 0, "kmem_cache_free": 1, "mm_page_free": 2}
V08_ALLOC, V08_FREE, V07_SIZE = 48, 24, 56


# --- what the workload emits, computed in-process ------------------------------

def emitted(seed: int, count: int, workload: str = "kmem", cpus: int = 2, profile=None) -> list:
    """``(name, cpu, ts, {arg: value})`` of every kmem tracepoint hit
    (``.kallsyms``: the symbol table the sites were drawn from)."""
    kernel = Kernel(cpus=cpus, clock="virtual", seed=seed, profile=profile)
    events = Emitted()
    for key in KMEM:
        tp = kernel.engine.tracepoints[key]
        tp.register(lambda cpu, pid, ts, values, n=tp.name, a=tp.args:
                    events.append((n, cpu, ts, dict(zip(a, values)))))
    wl = make_workload(workload, kernel, seed=seed, count=count)
    while not wl.done:
        wl.run(997)
    assert len(events) == count
    events.kallsyms = kernel.engine.kallsyms
    return events


class Emitted(list):
    kallsyms = None


def as_alloc(name, v):
    """(call site, ptr, bytes_req, bytes_alloc, gfp, target cpu) of an allocation."""
    if name == "mm_page_alloc":
        size = 4096 << v["order"]
        return v["call_site"], v["ptr"], size, size, v["gfp_flags"], -1
    return v["call_site"], v["ptr"], v["bytes_req"], v["bytes_alloc"], v["gfp_flags"], v["node"]


def expected_v08(events) -> list[tuple]:
    """August 2008 records without sequence numbers: (cpu, event, type, fields...)."""
    out = []
    for name, cpu, _, v in events:
        if name.endswith("alloc") or name == "kmalloc":
            site, ptr, req, alloc, gfp, node = as_alloc(name, v)
            out.append((cpu, 0, TYPE[name], V08_ALLOC, site, ptr, req, alloc, gfp & 0xFFFFFFFF, node))
        else:
            out.append((cpu, 1, TYPE[name], V08_FREE, v["call_site"], v["ptr"]))
    return out


def relay_keeps(records, subbuf_size: int, n_subbufs: int) -> list[bool]:
    """Which records a never-read relay channel keeps: per CPU, records fill
    sub-buffers in order (a record that does not fit starts the next one);
    once all n_subbufs are used, that CPU drops everything after."""
    used = defaultdict(lambda: [0, 0])  # cpu -> [sub-buffers finished, offset]
    keep = []
    for rec in records:
        st, size = used[rec[0]], rec[3]
        if st[0] < n_subbufs and st[1] + size > subbuf_size:
            st[0], st[1] = st[0] + 1, 0
        if st[0] >= n_subbufs:
            keep.append(False)
            continue
        st[1] += size
        keep.append(True)
    return keep


# --- readers -------------------------------------------------------------------

@pytest.fixture(scope="module")
def kreader(tmp_path_factory):
    """tests/c/kmemtrace_reader.c, compiled once."""
    return build_c("kmemtrace_reader.c", tmp_path_factory.mktemp("bin"))


def parse_reader(stdout: str) -> list[tuple]:
    """C reader lines -> (seq, (cpu, event, type, size, fields...))."""
    out = []
    for line in stdout.splitlines():
        f = line.split()
        nums = [int(x, 0) for x in f]
        cpu, event, type_id, size, seq, site, ptr = nums[:7]
        out.append((seq, (cpu, event, type_id, size, site, ptr, *nums[7:])))
    return out


def start_reader(binary, mnt, tmp_path, *args):
    ready = tmp_path / "reader.ready"
    with open(tmp_path / "reader.out", "w") as out:  # a pipe nobody reads would stall it
        proc = subprocess.Popen([str(binary), "-r", str(ready), *args, str(Path(mnt) / "kmemtrace")],
                                stdout=out, stderr=subprocess.PIPE, text=True)
    proc.out_path = tmp_path / "reader.out"
    deadline = time.monotonic() + 10
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"reader did not start: {proc.communicate()[1]}")
        time.sleep(0.01)
    return proc


def stop_reader(proc, timeout=60):
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, err
    assert "cut record" not in err, err
    return parse_reader(proc.out_path.read_text()), err


def drain_reader(binary, mnt):
    p = subprocess.run([str(binary), "-d", str(Path(mnt) / "kmemtrace")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return parse_reader(p.stdout)


def overruns(mnt) -> int:
    return int((Path(mnt) / "kmemtrace" / "total_overruns").read_text())


def write_file(path, data: bytes):
    fd = os.open(path, os.O_WRONLY)
    try:
        return os.write(fd, data)
    finally:
        os.close(fd)


# --- the files -------------------------------------------------------------------

@pytest.mark.parametrize("abi,names", [
    ("2008-08", {"cpu0", "cpu1", "total_overruns", "abi_version", "enabled"}),
    ("2008-07", {"cpu0", "cpu1", "total_overruns", "abi_version"}),
])
def test_names_modes_and_text(fake, abi, names):
    mnt = fake("--workload", "none", "--kmemtrace-abi", abi)
    base = mnt / "kmemtrace"
    assert set(os.listdir(base)) == names
    for name in names:
        st = os.stat(base / name)
        assert stat.S_ISREG(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == (0o600 if name == "enabled" else 0o400), name
    assert (base / "abi_version").read_text() == "1\n"
    assert (base / "total_overruns").read_text() == "0\n"
    assert (base / "cpu0").read_bytes() == b""  # relay reads never block
    assert errno_of(write_file, base / "total_overruns", b"5\n") == errno.EACCES
    assert errno_of(write_file, base / "abi_version", b"2\n") == errno.EACCES
    assert errno_of(write_file, base / "cpu0", b"x") == errno.EINVAL
    fd = os.open(base / "cpu0", os.O_RDONLY)
    try:
        assert errno_of(os.lseek, fd, 10, os.SEEK_SET) == errno.ESPIPE
    finally:
        os.close(fd)


def test_enabled_file_switches_the_probes(fake):
    mnt = fake("--workload", "none")
    enabled = mnt / "kmemtrace" / "enabled"
    assert enabled.read_text() == "0\n"
    assert write_file(enabled, b"0x1\n") == 4
    assert enabled.read_text() == "1\n"
    assert errno_of(write_file, enabled, b"yes") == errno.EINVAL
    write_file(enabled, b"0")
    assert enabled.read_text() == "0\n"


def test_nothing_is_traced_unless_enabled(fake, kreader):
    mnt = fake("--workload", "kmem", "--count", "3000", "--rate", "0")
    wait_done(mnt)
    assert drain_reader(kreader, mnt) == []
    assert overruns(mnt) == 0


def test_poll_waits_for_a_finished_subbuf(fake):
    """relay_file_poll: readable only once a whole sub-buffer is finished;
    read() still returns the partial one."""
    mnt = fake("--workload", "kmem", "--count", "6", "--rate", "0", "--enable-all",
               "--cpus", "1", "--kmemtrace-subbuf-events", "16", "--seed", "1")
    wait_done(mnt)
    fd = os.open(mnt / "kmemtrace" / "cpu0", os.O_RDONLY)
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        assert p.poll(200) == []
        data = os.read(fd, 65536)
        assert 6 * V08_FREE <= len(data) <= 6 * V08_ALLOC
        assert os.read(fd, 65536) == b""
    finally:
        os.close(fd)
    mnt = fake("--workload", "kmem", "--count", "200", "--rate", "0", "--enable-all",
               "--cpus", "1", "--kmemtrace-subbuf-events", "16")
    wait_done(mnt)
    fd = os.open(mnt / "kmemtrace" / "cpu0", os.O_RDONLY)
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        assert p.poll(2000) == [(fd, select.POLLIN)]
    finally:
        os.close(fd)


# --- exact records ------------------------------------------------------------------

def test_reader_keeping_up_gets_every_record_exactly(fake, kreader, tmp_path):
    n, seed = 20000, 7
    mnt = fake("--workload", "kmem", "--count", n, "--rate", "10000", "--enable-all",
               "--clock", "virtual", "--seed", seed,
               "--kmemtrace-subbufs", "16", "--kmemtrace-subbuf-events", "256")
    proc = start_reader(kreader, mnt, tmp_path)  # 16 KiB sub-buffers: ~40 switches, ~40 wake-ups
    wait_done(mnt)
    got, err = stop_reader(proc)
    assert overruns(mnt) == 0
    assert len(got) + overruns(mnt) == n
    want = expected_v08(emitted(seed, n))
    assert sorted(got) == [(i + 1, rec) for i, rec in enumerate(want)]
    for cpu in (0, 1):  # each file in sequence order
        seqs = [s for s, rec in got if rec[0] == cpu]
        assert seqs == sorted(seqs)


@pytest.mark.parametrize("subbufs,events", [(2, 64), (3, 100)])
def test_stalled_reader_overruns_exactly(fake, kreader, subbufs, events):
    n, seed = 6000, 11
    mnt = fake("--workload", "kmem", "--count", n, "--rate", "0", "--enable-all",
               "--clock", "virtual", "--seed", seed,
               "--kmemtrace-subbufs", subbufs, "--kmemtrace-subbuf-events", events)
    wait_done(mnt)
    got = drain_reader(kreader, mnt)
    lost = overruns(mnt)
    assert lost > 0
    assert len(got) + lost == n
    want = expected_v08(emitted(seed, n))
    keep = relay_keeps(want, events * 64, subbufs)
    kept = [rec for rec, k in zip(want, keep) if k]
    assert sorted(got) == [(i + 1, rec) for i, rec in enumerate(kept)]
    assert lost == keep.count(False)
    # the channel recovers once read: nothing new is traced (the workload is done)
    assert drain_reader(kreader, mnt) == []


def test_seed003_layout(fake):
    n, seed = 5000, 5
    mnt = fake("--workload", "kmem", "--count", n, "--rate", "0", "--enable-all",
               "--clock", "virtual", "--seed", seed, "--kmemtrace-abi", "2008-07")
    wait_done(mnt)
    got = []
    for cpu in (0, 1):
        fd = os.open(mnt / "kmemtrace" / f"cpu{cpu}", os.O_RDONLY)
        data = b""
        try:
            select.select([fd], [], [], 0.1)
            while chunk := os.read(fd, 65536):
                data += chunk
        finally:
            os.close(fd)
        assert len(data) % V07_SIZE == 0
        for r in GreedyRange(kmemtrace_event_v2008_07).parse(data):
            got.append((r.timestamp, cpu, r.event_id, r.type_id, r.event_size, r.node,
                        r.call_site, r.ptr, r.bytes_req, r.bytes_alloc, r.gfp_flags))
    assert overruns(mnt) == 0
    want = []
    for name, cpu, ts, v in emitted(seed, n):
        if name.endswith("alloc") or name == "kmalloc":
            site, ptr, req, alloc, gfp, node = as_alloc(name, v)
            want.append((ts, cpu, 1, TYPE[name], V07_SIZE, node, site, ptr, req, alloc, gfp))
        else:
            want.append((ts, cpu, 2, TYPE[name], V07_SIZE, -1, v["call_site"], v["ptr"], 0, 0, 0))
    assert sorted(got) == want


# --- the clients --------------------------------------------------------------------

def independent_figures(events):
    """What the report must print, computed from the tracepoint values
    (call sites named by the table the fake serves: the default profile
    kernel's kallsyms, else the fake's own)."""
    ks = events.kallsyms

    def sym(addr):
        name, off, _ = ks.lookup(addr)
        return f"{name}+0x{off:x}"

    sites = defaultdict(lambda: [0, 0, 0, 0])  # allocs, frees, req, alloc
    live, freed = {}, set()
    issues = Counter()
    cross_allocs = cross_frees = 0
    for name, cpu, _, v in events:
        if name.endswith("alloc") or name == "kmalloc":
            site, ptr, req, alloc, _, node = as_alloc(name, v)
            row = sites[sym(site)]
            row[0] += 1
            row[2] += req
            row[3] += alloc
            cross_allocs += node not in (-1, cpu)
            issues["alloc_lt_req"] += alloc < req
            live[v["ptr"]] = (TYPE[name], cpu, sym(site))
            freed.discard(v["ptr"])
        elif v["ptr"] in live:
            type_id, acpu, asite = live.pop(v["ptr"])
            sites[asite][1] += 1
            cross_frees += acpu != cpu
            issues["kfree_of_cache"] += name == "kfree" and type_id == 1
            freed.add(v["ptr"])
        else:
            issues["double_free" if v["ptr"] in freed else "unknown_free"] += 1
            freed.add(v["ptr"])
    return sites, cross_allocs, cross_frees, issues


def parse_report(text: str):
    sites, totals = {}, {}
    section = None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line.rstrip(":")
            continue
        f = line.split()
        if section == "Per call site" and f and f[0] != "call":
            sites[f[0]] = [int(x) for x in f[1:6]] + [float(f[6])]
        elif ":" in line:
            key, _, value = line.strip().partition(":")
            totals[(section, key)] = value.strip()
    return sites, totals


@pytest.mark.parametrize("workload", ["kmem", "kmem-faults"])
def test_kmemtraced_and_report_end_to_end(fake, tmp_path, workload):
    """The report names call sites with the fake's own symbol table (its
    default without ``--kallsyms``): linux-6.18, which has no kallsyms."""
    n, seed = 20000, 3
    mnt = fake("--profile", "linux-6.18", "--workload", workload, "--count", n,
               "--rate", "20000", "--enable-all", "--clock", "virtual", "--seed", seed)
    out = tmp_path / "log"
    daemon = subprocess.Popen([FAKEDEBUGFS, "kmemtraced", str(mnt), "-o", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_done(mnt)
    time.sleep(0.3)
    daemon.send_signal(signal.SIGINT)
    _, err = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, err
    assert "warning" not in err
    assert sorted(os.listdir(out)) == ["cpu0.out", "cpu1.out"]

    check = run_cli("kmemtrace-check", out / "cpu0.out", out / "cpu1.out")
    assert check.stdout.count("OK") == 2, check.stdout

    chart = tmp_path / "frag.svg"
    report = run_cli("kmemtrace-report", out, "--chart", chart).stdout
    sites, totals = parse_report(report)
    events = emitted(seed, n, workload, profile=str(SHIPPED_PROFILES / "linux-6.18"))
    want_sites, cross_allocs, cross_frees, issues = independent_figures(events)
    assert set(sites) == set(want_sites)
    for name, (allocs, frees, req, alloc) in want_sites.items():
        frag = round(100.0 * (alloc - req) / alloc, 2)
        assert sites[name] == [allocs, frees, req, alloc, alloc - req, frag], name
    allocs = sum(r[0] for r in want_sites.values())
    assert totals[("Totals", "records")] == str(n)
    assert totals[("Totals", "allocations")] == str(allocs)
    assert totals[("Totals", "frees")] == str(n - allocs)
    assert totals[("Totals", "bytes requested")] == str(sum(r[2] for r in want_sites.values()))
    assert totals[("Totals", "bytes allocated")] == str(sum(r[3] for r in want_sites.values()))
    assert totals[("Cross-CPU", "allocations")].split()[0] == str(cross_allocs)
    assert totals[("Cross-CPU", "frees")].split()[0] == str(cross_frees)
    assert cross_allocs > 0 and cross_frees > 0
    for key, text in (("kfree_of_cache", "kfree() of kmem_cache_alloc() memory"),
                      ("alloc_lt_req", "bytes_alloc < bytes_req"),
                      ("unknown_free", "free of a pointer never allocated while tracing"),
                      ("double_free", "double free")):
        assert totals[("Inconsistencies", text)] == str(issues[key]), key
        assert (issues[key] > 0) == (workload == "kmem-faults"), key

    svg = ET.parse(chart).getroot()
    bars = [e for e in svg.iter("{http://www.w3.org/2000/svg}rect") if e.find("{*}title") is not None]
    assert len(bars) == min(20, len(want_sites))


def test_report_does_not_blame_a_ragged_capture_end(fake, tmp_path):
    """Readers stopping at different moments leave one CPU's tail missing;
    pointer reuse across that end must not be reported as double frees."""
    mnt = fake("--workload", "kmem", "--count", 20000, "--rate", 0, "--enable-all",
               "--clock", "virtual", "--seed", 5)
    wait_done(mnt)
    out = tmp_path / "log"
    run_cli("kmemtraced", mnt, "-o", out, "--duration", "0.3")
    clean = json.loads(run_cli("kmemtrace-report", out, "--json").stdout)
    assert clean["unchecked"] == 0 and clean["issues"]["double_free"] == 0
    cpu1 = out / "cpu1.out"
    data = cpu1.read_bytes()
    cpu1.write_bytes(data[:len(data) * 2 // 3 // 64 * 64])  # whole 64-byte records
    ragged = json.loads(run_cli("kmemtrace-report", out, "--json").stdout)
    assert ragged["unchecked"] > 0
    assert ragged["records"] + ragged["unchecked"] > ragged["complete_until"]
    for kind in ("double_free", "unknown_free", "alloc_of_live"):
        assert ragged["issues"][kind] == 0, kind


def test_report_reads_the_seed003_layout(fake, tmp_path):
    mnt = fake("--workload", "kmem", "--count", "4000", "--rate", "0", "--enable-all",
               "--kmemtrace-abi", "2008-07", "--clock", "virtual", "--seed", "2")
    wait_done(mnt)
    out = tmp_path / "log"
    run_cli("kmemtraced", mnt, "-o", out, "--duration", "0.3")
    report = json.loads(run_cli("kmemtrace-report", out, "--json").stdout)
    assert report["records"] == 4000
    sites, cross_allocs, cross_frees, _ = independent_figures(emitted(2, 4000))
    assert report["total"]["allocs"] == sum(r[0] for r in sites.values())
    assert report["cross_frees"] == cross_frees
    assert run_cli("kmemtrace-check", out / "cpu0.out").stdout.endswith("(2008-07), OK\n")
    png = run_cli("kmemtrace-report", out, "--chart", tmp_path / "frag.png", check=False)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert png.returncode == 1 and "matplotlib" in png.stderr
    else:
        assert png.returncode == 0 and (tmp_path / "frag.png").read_bytes()[:4] == b"\x89PNG"


def test_kmemtraced_warns_about_overruns(fake, tmp_path):
    mnt = fake("--workload", "kmem", "--count", "5000", "--rate", "0", "--enable-all",
               "--kmemtrace-subbufs", "2", "--kmemtrace-subbuf-events", "32")
    wait_done(mnt)
    p = run_cli("kmemtraced", mnt, "-o", tmp_path / "log", "--duration", "0.2")
    assert f"total_overruns is {overruns(mnt)}" in p.stderr
    assert overruns(mnt) > 0


def test_check_finds_malformed_files(tmp_path):
    kernel = Kernel(cpus=1, clock="virtual", enable_all=True)
    wl = make_workload("kmem", kernel, seed=4, count=50)
    wl.run(50)
    good = kernel.kmemtrace.chan.bufs[0].read(1 << 20)
    assert len(good) >= 50 * V08_FREE
    cases = {
        "ok": (good, "OK"),
        "padding": (good[:96] + bytes(40) + good[96:], "zero bytes"),
        "swapped": (good[48:96] + good[:48] + good[96:] if good[0] == 0 and good[48] == 0
                    else None, "sequence number"),
        "truncated": (good[:-5], "truncated record"),
        "badsize": (good[:2] + b"\x31\x00" + good[4:], "event size 49"),
        "badid": (b"\x07" + good[1:], "invalid event id 7"),
    }
    for name, (data, expect) in cases.items():
        if data is None:
            continue
        path = tmp_path / f"cpu0.{name}"
        path.write_bytes(data)
        p = run_cli("kmemtrace-check", path, check=False)
        assert expect in p.stdout, (name, p.stdout)
        assert p.returncode == (0 if name == "ok" else 1), name


def test_relay_reads_exactly_what_was_written():
    """kernel/relay.c semantics, in-process: whatever mix of record sizes,
    read sizes and full-buffer refusals, readers get the written records
    back in order, never padding, and every refused record is counted."""
    import random

    from fakedebugfs.engine.kmemtrace.relay import RelayChannel

    for trial in range(200):
        rng = random.Random(trial)
        refused = []
        chan = RelayChannel(rng.choice([48, 64, 100, 256]), rng.choice([1, 2, 3, 5]), 1,
                            lambda buf, *_: not buf.full() or refused.append(1))
        written, got, dropped = b"", b"", 0
        for k in range(2000):
            if rng.random() < 0.6:
                data = bytes([k % 251 + 1]) * rng.choice([24, 48, 56])
                if chan.write(0, data):
                    written += data
                elif len(data) <= chan.subbuf_size:  # too big: dropped, never asked
                    dropped += 1
            else:
                got += chan.bufs[0].read(rng.choice([1, 7, 24, 100, 4096]))
        while chunk := chan.bufs[0].read(4096):
            got += chunk
        assert got == written, trial
        assert len(refused) == dropped, trial
