"""Replaying recordings into a mounted fake (fakedebugfs.sources.replay): the round
trip through an unmodified ``trace-cmd record`` gives the original's
``trace-cmd report``, line for line.

The oracle is trace-cmd itself: a recording (made on this machine's real
kernel, by trace-cmd under the fake, or written by the readers' tests) is
replayed with ``--keep-timestamps`` while ``trace-cmd record`` records the
fake; ``diff`` of the two reports, the ``cpus=`` line and the buffer-name
prefix of an instance's lines aside (the fake replays one buffer into its
top buffer), must be empty.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakedebugfs import Fake

# linux-6.18: the recordings are this machine's 6.18 (kmem_cache_alloc with the
# cache's name, function entries with args[]); under another profile a
# recording's formats that differ from the kernel's are its own
PROFILE = "linux-6.18"
from fakedebugfs.sources.replay import open_recording, read_tracedat
from fakedebugfs import ReplayError

from support import realtracefs
from support.tracedat import DatWriter, Pages, header_page

FIXTURES = Path(__file__).parent.parent / "fixtures" / "replay"
HAVE_TRACECMD = shutil.which("trace-cmd") is not None
needs_tracecmd = pytest.mark.skipif(not HAVE_TRACECMD, reason="trace-cmd is not installed")
pytestmark = [needs_tracecmd,
              pytest.mark.skipif(os.geteuid() != 0, reason="FUSE mounts and run need root")]
CLI = [sys.executable, "-m", "fakedebugfs"]
pytest_plugins = ["pytester"]
INSTANCE = f"fdreplay_rt{os.getpid()}"  # a scratch instance of our own
ONE_LINE = re.compile(r"^fakedebugfs replay: \S+: (truncated|corrupt) in .+ at offset 0x[0-9a-f]+"
                      r": .+$")


# --- helpers ------------------------------------------------------------------------------

def report_text(dat: Path, out: Path, buffer: str = "", lstrip: bool = False) -> Path:
    """``trace-cmd report`` of *dat* into *out*: the lines of *buffer* (its
    ``NAME: `` prefix taken off) and the drop lines, without the file's
    header line (``cpus=N``); *lstrip*: without their leading blanks (the
    top buffer's lines in a file with instances are indented by the width
    of their names, unevenly)."""
    proc = subprocess.run(["trace-cmd", "report", "-i", str(dat)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    prefix = f"{buffer}: " if buffer else None
    lines = []
    for line in proc.stdout.splitlines():
        if line.startswith("cpus="):
            continue
        if prefix is not None:
            if not line.startswith(prefix) and not line.startswith("CPU:"):
                continue
            line = line[len(prefix):] if line.startswith(prefix) else line
        elif re.match(r"^[\w.-]+: ", line) and not line.startswith("CPU:"):
            continue  # another buffer's line
        lines.append((line.lstrip() if lstrip else line) + "\n")
    out.write_text("".join(lines))
    return out


def systems_of(rec, buffer: str) -> list[str]:
    """The systems of the events in *buffer* (what to ``trace-cmd record -e``)."""
    buf = rec.buffer(buffer)
    return sorted({e.key.split(":")[0] for cpu in buf.cpus for e in buf.cpu_events(cpu)
                   if not e.lost and e.key})


def rerecord(recording: Path, out: Path, tmp_path: Path, buffer: str | None = None,
             via_cli: bool = False) -> dict:
    """Replay *recording* (``--keep-timestamps``, waiting for a tracer)
    into a fresh fake while ``trace-cmd record`` records it into *out*; the
    replay's status."""
    rec = open_recording(recording)
    with Fake(profile=PROFILE, cpus=max(2, rec.cpus)) as fk:
        cli = None
        if via_cli:
            argv = [*CLI, "replay", str(fk.root), str(recording), "--keep-timestamps",
                    "--wait-enabled", "--as-fast-as-possible"]
            if buffer is not None:
                argv += ["--buffer", buffer]
            cli = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
            number = wait_for_replay(fk, cli)
        else:
            number = fk.replay(recording, wait=False, wait_enabled=True, keep_timestamps=True,
                               buffer=buffer)["replay"]
        record = ["trace-cmd", "record", "-o", str(out)]
        name = fk.call("replay_status", replay=number)["buffer"]
        for system in systems_of(rec, name):
            record += ["-e", system]
        tc = fk.popen(record, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            fk.wait_readers(timeout=60)
            st = fk.call("replay_status", replay=number, wait=300, io_timeout=330)
            assert st["state"] == "done", st
            if cli is not None:
                _, err = cli.communicate(timeout=60)
                assert cli.returncode == 0, err
                assert err.strip().startswith("replayed "), err  # no progress bar on a pipe
            fk.wait_consumed(complete_pages=True, timeout=120)
        finally:
            tc.send_signal(signal.SIGINT)
            _, err = tc.communicate(timeout=120)
            if cli is not None and cli.poll() is None:
                cli.kill()
                cli.wait()
        assert tc.returncode == 0, err
        assert fk.status()["replayed"] == st["committed"]
    return st


def wait_for_replay(fk: Fake, cli: subprocess.Popen) -> int:
    """The number of the replay *cli* started, once it is installed."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if cli.poll() is not None:
            pytest.fail(f"fakedebugfs replay exited: {cli.communicate()}")
        try:
            return fk.call("replay_status")["replay"]
        except Exception:  # noqa: BLE001 - not started yet
            time.sleep(0.05)
    pytest.fail("fakedebugfs replay did not start")


def assert_round_trip(original: Path, recording: Path, tmp_path: Path, buffer: str = "",
                      via_cli: bool = False, replay_buffer: str | None = None,
                      lstrip: bool = False) -> dict:
    """Replay *recording*, re-record it, and ``diff`` the report of the
    re-recording with the report of *original* (its *buffer*)."""
    again = tmp_path / "again.dat"
    st = rerecord(recording, again, tmp_path, replay_buffer, via_cli)
    want = report_text(original, tmp_path / "want.txt", buffer, lstrip)
    got = report_text(again, tmp_path / "got.txt", "", lstrip)
    diff = subprocess.run(["diff", str(want), str(got)], capture_output=True, text=True)
    assert diff.returncode == 0, diff.stdout[:3000]
    assert want.read_text().count("\n") > 0
    return st


def raw_capture_of(dat: Path, buffer: str, dest: Path) -> Path:
    """The pages of *buffer* of a trace.dat as a raw capture directory
    (``cpuN`` files of trace_pipe_raw pages, ``events/`` format files,
    saved_cmdlines, kallsyms), as a ``cat trace_pipe_raw`` script saves them:
    trace-cmd's pages are those the kernel handed to its reads."""
    rec = read_tracedat(dat)
    (dest / "events").mkdir(parents=True)
    (dest / "events" / "header_page").write_text(rec.header_page)
    (dest / "events" / "header_event").write_text(rec.header_event)
    for fmt in rec.formats.values():
        d = dest / "events" / fmt.system / fmt.name
        d.mkdir(parents=True, exist_ok=True)
        (d / "format").write_text(fmt.text)
    for cpu, cd in rec.buffer(buffer).cpus.items():
        (dest / f"cpu{cpu}").write_bytes(bytes(cd.data))
    (dest / "saved_cmdlines").write_text("".join(f"{p} {c}\n" for p, c in rec.cmdlines.items()))
    (dest / "kallsyms").write_text(rec.kallsyms)
    return dest


# --- the real kernel ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_recording(tmp_path_factory):
    """``trace-cmd record -B`` (a scratch instance) of kmem and sched on this
    machine's kernel for ``sleep 1``: a v7 zstd trace.dat.  The real tracefs
    is as it was afterwards (the instance removed; the top level, which
    another tracing user may be changing meanwhile, is not touched).  The
    real tracefs is mounted for it in a private mount namespace."""
    if not realtracefs.available():
        pytest.skip("this machine has no tracefs")
    tmp = tmp_path_factory.mktemp("real")
    dat = tmp / "real.dat"
    proc, _ = realtracefs.record(dat, INSTANCE, "-e", "kmem", "-e", "sched",
                                 "--compression", "zstd")
    if not dat.exists():
        pytest.skip(f"trace-cmd could not record this kernel: {proc.stderr.strip()[-300:]}")
    return dat


def test_real_kernel_v7_round_trip(real_recording, tmp_path):
    """Must show: a v7 (zstd) recording of the real kernel's kmem and sched
    events, replayed with ``fakedebugfs replay --keep-timestamps`` and
    re-recorded by ``trace-cmd record``: the reports are the same."""
    rec = read_tracedat(real_recording)
    assert rec.kind == "trace.dat v7" and rec.compression[0] == "zstd"
    assert {"kmem:kmalloc", "sched:sched_switch"} <= set(rec.formats)
    st = assert_round_trip(real_recording, real_recording, tmp_path, INSTANCE, via_cli=True)
    assert st["buffer"] == INSTANCE and st["done"] == st["total"] > 0
    assert st["committed"] == st["done"]  # trace-cmd kept up: nothing overwritten


def test_real_kernel_v6_round_trip(real_recording, tmp_path):
    """Must show: the same recording converted by trace-cmd to version 6."""
    v6 = tmp_path / "real-v6.dat"
    # trace-cmd convert looks for a tracefs, and libtracefs mounts one at
    # /sys/kernel/tracing when none is mounted: in a private namespace, so
    # never on the host
    p = realtracefs.run(["trace-cmd", "convert", "--file-version", "6", "-i", real_recording,
                         "-o", v6], timeout=300)
    assert p.returncode == 0, p.stderr
    assert read_tracedat(v6).kind == "trace.dat v6"
    assert_round_trip(v6, v6, tmp_path, INSTANCE)


def test_real_kernel_raw_capture_round_trip(real_recording, tmp_path):
    """Must show: the real kernel's pages as a raw capture directory (cpuN
    files, events/ formats), replayed: the report is the trace.dat's."""
    cap = raw_capture_of(real_recording, INSTANCE, tmp_path / "cap")
    assert open_recording(cap).kind == "raw capture"
    assert_round_trip(real_recording, cap, tmp_path, INSTANCE)


# --- recordings made under the fake, and written by the readers' tests ---------------------

@pytest.mark.parametrize("name", ["default-v7-zstd", "default-v6", "kmem-dropped-v7-zstd"])
def test_fixture_round_trip(tmp_path, name):
    """trace-cmd recordings of the fake (v7, v6, one with overruns: its
    ``[N EVENTS DROPPED]`` lines come back where they were)."""
    dat = FIXTURES / f"{name}.dat"
    st = assert_round_trip(dat, dat, tmp_path)
    dropped = (tmp_path / "got.txt").read_text().count("EVENTS DROPPED")
    assert dropped == st["lost_marks"] and (dropped > 0) == ("dropped" in name)


class LostPageWriter(DatWriter):
    """The readers' written trace.dat, its counted drop on a page that starts
    with an event (trace-cmd prints no drop line for a page that starts
    with an absolute time stamp)."""

    def cpu_pages(self):
        pages = super().cpu_pages()
        pg = self.pages
        top = pages[""]
        top[0] = top[0][:4096] + pg.build(
            1 << 40, pg.event(0, pg.payload(13, 4, 1, b"delta", b"z\0"), force_long=True),
            lost=42)
        return pages


@pytest.mark.parametrize("version,endian,long_size", [(6, "big", 4), (7, "little", 8)])
def test_written_recording_round_trip(tmp_path, version, endian, long_size):
    """A recording of another machine: big endian with 4-byte longs (the
    payloads swapped), an event the fake does not have (defined from the
    file), TSC2NSEC and OFFSET times, a drop whose count the kernel did not
    store (``[EVENTS DROPPED]``) and one it did (``[42 EVENTS DROPPED]``)."""
    dat = LostPageWriter(version, endian, long_size).write(tmp_path / "w.dat")
    st = assert_round_trip(dat, dat, tmp_path, lstrip=True)
    assert st["created"] == ["test:probe"] and st["lost_marks"] == 2
    got = (tmp_path / "got.txt").read_text()
    assert "CPU:1 [EVENTS DROPPED]" in got and "CPU:0 [42 EVENTS DROPPED]" in got


# --- a broken recording: nothing replayed ----------------------------------------------------

@pytest.mark.parametrize("kind", ["tracedat-header", "tracedat-data", "raw-capture"])
def test_truncated_recording(tmp_path, kind):
    """Must show: ``fakedebugfs replay`` of a truncated file prints one line
    naming where it breaks, exits nonzero, and no event is replayed (or
    defined), with every event enabled."""
    src = (FIXTURES / "default-v7-zstd.dat").read_bytes()
    if kind == "raw-capture":
        bad = raw_capture_of(FIXTURES / "default-v7-zstd.dat", "", tmp_path / "cap")
        cpu1 = bad / "cpu1"
        cpu1.write_bytes(cpu1.read_bytes()[:4096 + 1000])
    else:
        bad = tmp_path / "cut.dat"
        bad.write_bytes(src[:20000] if kind == "tracedat-header" else src[:len(src) - 3000])
    with Fake(profile=PROFILE, cpus=2) as fk:
        (fk.tracing / "events" / "enable").write_text("1")
        events_before = (fk.tracing / "available_events").read_text()
        p = subprocess.run([*CLI, "replay", str(fk.root), str(bad)], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode != 0
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and ONE_LINE.match(lines[0]), p.stderr
        st = fk.status()
        assert (st["emitted"], st["replayed"]) == (0, 0)
        assert [line for line in (fk.tracing / "trace").read_text().splitlines()
                if not line.startswith("#")] == []
        assert (fk.tracing / "available_events").read_text() == events_before
        with pytest.raises(ReplayError, match="offset 0x"):
            fk.replay(bad)


def test_mount_replay_refuses_a_broken_file(tmp_path):
    cut = tmp_path / "cut.dat"
    cut.write_bytes((FIXTURES / "default-v6.dat").read_bytes()[:9000])
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run([*CLI, "mount", str(mnt), "--replay", str(cut)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "offset 0x" in p.stderr and len(p.stderr.splitlines()) == 1
    assert not os.path.ismount(mnt)


# --- options ------------------------------------------------------------------------------------

def trace_lines(fk: Fake) -> list[tuple]:
    """(comm-pid, cpu, seconds, event) of each line of ``trace``."""
    out = []
    for line in (fk.tracing / "trace").read_text().splitlines():
        m = re.match(r"^\s*(\S.*?-\d+)\s+\[(\d+)\]\s+\S+\s+(\d+\.\d+):\s+(\w+):", line)
        if m:
            out.append((m[1], int(m[2]), float(m[3]), m[4]))
    return out


def test_options_events_cpu_map_loop(tmp_path):
    """``--events`` keeps the events named, ``--cpu-map`` moves CPUs,
    ``--loop`` replays again after the last event, and without
    ``--keep-timestamps`` the first event is at the fake's clock; events the
    fake does not have enabled are not recorded."""
    dat = FIXTURES / "default-v7-zstd.dat"
    rec = open_recording(dat)
    kfree = [e for e in rec.events() if not e.lost and e.key == "kmem:kfree"]
    assert kfree
    with Fake(profile=PROFILE, cpus=2, clock="virtual") as fk:
        fk.replay(dat)  # nothing enabled: nothing recorded
        assert trace_lines(fk) == [] and fk.status()["replayed"] == 0
        (fk.tracing / "events" / "enable").write_text("1")
        start = fk.status()
        st = fk.replay(dat, events="kmem:kfree", cpu_map="0:1,1:0", loop=2)
        lines = trace_lines(fk)
        assert st["committed"] == len(lines) == 2 * len(kfree)
        assert {name for *_, name in lines} == {"kfree"}
        assert [cpu for _, cpu, _, _ in lines[:len(kfree)]] == [1 - e.cpu for e in kfree]
        first = min(rec.report_ts(e.ts) for e in rec.events() if not e.lost)
        # the recording's first event is put at the virtual clock's start, 1 s
        assert abs(lines[0][2] - (1e9 + rec.report_ts(kfree[0].ts) - first) / 1e9) < 2e-6
        assert lines[len(kfree)][2] > lines[len(kfree) - 1][2]  # the second loop comes after
        assert fk.status()["emitted"] - start["emitted"] == len(lines)


def test_speed_paces_the_replay(tmp_path):
    """``--speed 4``: the replay takes at least a quarter of the recorded span."""
    dat = FIXTURES / "default-v6.dat"
    rec = open_recording(dat)
    times = [e.ts for e in rec.events() if not e.lost]
    span = (max(times) - min(times)) / 1e9
    with Fake(profile=PROFILE, cpus=2) as fk:
        st = fk.replay(dat, speed=4)
    assert st["seconds"] >= span / 4 * 0.95


def test_conflicting_format_uses_the_recordings(tmp_path):
    """A recording whose ``kmem:kfree`` prints its fields in another order:
    the fake's event takes the recording's format (``format`` shows it),
    says so once, and its own ``trace`` prints the recording's way."""
    cap = raw_capture_of(FIXTURES / "default-v7-zstd.dat", "", tmp_path / "cap")
    fmt = cap / "events" / "kmem" / "kfree" / "format"
    text = fmt.read_text()
    old = re.search(r'print fmt: "call_site=%pS ptr=%p", (\(void \*\))?REC->call_site, REC->ptr',
                    text)
    assert old, text
    fmt.write_text(text.replace(old[0], 'print fmt: "ptr=%p from %pS", REC->ptr, '
                                         '(void *)REC->call_site'))
    with Fake(profile=PROFILE, cpus=2) as fk:
        (fk.tracing / "events" / "kmem" / "enable").write_text("1")
        st = fk.replay(cap)
        assert st["adopted"] == ["kmem:kfree"]
        assert [n for n in st["notes"] if "kmem:kfree" in n] and "kmem:kfree" in fk.log()
        served = (fk.tracing / "events" / "kmem" / "kfree" / "format").read_text()
        assert re.sub(r"ID: \d+", "", served) == re.sub(r"ID: \d+", "", fmt.read_text())
        assert re.search(r"kfree: ptr=\S+ from \w", (fk.tracing / "trace").read_text())
        again = fk.replay(cap)
        assert again["adopted"] == [] and not [n for n in again["notes"] if "kfree" in n]


def test_mount_replay_waits_for_a_tracer(tmp_path):
    """``Fake(replay=...)`` (``mount --replay``): the recording's events
    exist once mounted; the replay starts when trace-cmd turns them on."""
    dat = FIXTURES / "default-v6.dat"
    out = tmp_path / "again.dat"
    with Fake(profile=PROFILE, cpus=2, replay=dat) as fk:
        st = fk.call("replay_status")
        assert st["state"] == "waiting" and st["done"] == 0
        tc = fk.popen(["trace-cmd", "record", "-e", "kmem", "-e", "sched", "-e", "raw_syscalls",
                       "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        fk.wait_readers(timeout=60)
        st = fk.call("replay_status", replay=st["replay"], wait=60, io_timeout=90)
        assert st["state"] == "done"
        fk.wait_consumed(complete_pages=True, timeout=60)
        tc.send_signal(signal.SIGINT)
        tc.communicate(timeout=60)
    def untimed(path: Path) -> list[str]:  # not --keep-timestamps: the times moved
        return [re.sub(r"\s+\d+\.\d+: ", " TIME: ", line) for line in path.read_text().splitlines()]

    want = untimed(report_text(dat, tmp_path / "want.txt"))
    assert want and untimed(report_text(out, tmp_path / "got.txt")) == want


def test_the_server_answers_during_a_long_replay(tmp_path):
    """The replay runs in turns: ``tracing_on`` and control requests are
    answered while it goes on (a paced replay of a looped recording)."""
    dat = FIXTURES / "default-v7-zstd.dat"
    with Fake(profile=PROFILE, cpus=2) as fk:
        (fk.tracing / "events" / "enable").write_text("1")
        number = fk.replay(dat, wait=False, loop=500)["replay"]
        worst = 0.0
        for _ in range(20):
            t = time.monotonic()
            (fk.tracing / "tracing_on").read_text()
            fk.status()
            worst = max(worst, time.monotonic() - t)
        st = fk.call("replay_status", replay=number)
        assert st["state"] in ("running", "done")
        assert worst < 0.5, f"a read and a status took {worst:.3f} s during the replay"
        st = fk.call("replay_status", replay=number, wait=120, io_timeout=150)
        assert st["state"] == "done" and st["done"] == st["total"]


def test_pages_built_with_every_kind_of_event(tmp_path):
    """Raw capture pages with time extends, absolute stamps, discarded
    events and long events (the readers' built pages), replayed: trace
    shows each event with its recorded time and task."""
    d = tmp_path / "cap"
    (d / "events" / "test" / "probe").mkdir(parents=True)
    from support.tracedat import FMT, built_pages

    (d / "events" / "header_page").write_text(header_page(8))
    (d / "events" / "test" / "probe" / "format").write_text(FMT)
    for cpu, data in built_pages(Pages("little", 8)).items():
        (d / f"cpu{cpu}").write_bytes(data)
    (d / "saved_cmdlines").write_text("10 alpha\n11 beta\n12 gamma\n13 delta\n20 eps\n")
    with Fake(profile=PROFILE, cpus=2) as fk:
        st = fk.replay(d, keep_timestamps=True)
        assert st["created"] == ["test:probe"] and st["committed"] == 0  # not enabled
        (fk.tracing / "events" / "test" / "enable").write_text("1")
        fk.replay(d, keep_timestamps=True)
        lines = trace_lines(fk)
    assert [(c, cpu) for c, cpu, _, _ in lines] == [
        ("alpha-10", 0), ("eps-20", 1), ("beta-11", 0), ("gamma-12", 0), ("delta-13", 0)]


def test_replayed_events_go_through_pids_and_filters(tmp_path):
    """As a fired event: ``set_event_pid`` and an event filter decide what
    is recorded (the filter sees the recording's field values)."""
    dat = FIXTURES / "default-v7-zstd.dat"
    rec = open_recording(dat)
    events = [e for e in rec.events() if not e.lost]
    pid = max({e.pid for e in events}, key=lambda p: sum(e.pid == p for e in events))
    big = [e for e in events if e.key == "kmem:kmalloc" and rec.decode(e)["bytes_req"] > 64]
    with Fake(profile=PROFILE, cpus=2) as fk:
        (fk.tracing / "events" / "enable").write_text("1")
        (fk.tracing / "set_event_pid").write_text(str(pid))
        fk.replay(dat)
        lines = trace_lines(fk)
        assert lines and {c.rsplit("-", 1)[1] for c, *_ in lines} == {str(pid)}
        assert len(lines) == sum(e.pid == pid for e in events)
        (fk.tracing / "set_event_pid").write_text("")
        (fk.tracing / "trace").write_text("")
        (fk.tracing / "events" / "enable").write_text("0")
        (fk.tracing / "events" / "kmem" / "kmalloc" / "filter").write_text("bytes_req > 64")
        (fk.tracing / "events" / "kmem" / "kmalloc" / "enable").write_text("1")
        st = fk.replay(dat)
        assert st["committed"] == len(trace_lines(fk)) == len(big) > 0


def test_replay_into_an_instance(tmp_path):
    """``--into INSTANCE``: the recording goes into that instance's buffers
    and its enabled events decide; the top level records nothing of it.  An
    instance that does not exist is refused with one line, nothing replayed."""
    dat = FIXTURES / "default-v7-zstd.dat"
    rec = open_recording(dat)
    kfree = [e for e in rec.events() if not e.lost and e.key == "kmem:kfree"]
    with Fake(profile=PROFILE, cpus=2, clock="virtual", workload="none") as fk:
        with pytest.raises(ReplayError, match=r"--into scratch: no such instance"):
            fk.replay(dat, into="scratch")
        inst = fk.tracing / "instances" / "scratch"
        inst.mkdir()
        (fk.tracing / "events" / "enable").write_text("1")  # the top level: not replayed into
        (inst / "events" / "kmem" / "kfree" / "enable").write_text("1")
        st = fk.replay(dat, into="scratch")
        assert st["committed"] == len(kfree) > 0
        lines = [ln for ln in (inst / "trace").read_text().splitlines()
                 if not ln.startswith("#")]
        assert len(lines) == len(kfree) and all(" kfree: " in ln for ln in lines)
        assert trace_lines(fk) == []
        inst.rmdir()


def test_marker_replays_a_recording_beside_the_test(pytester):
    """``@pytest.mark.fakedebugfs(replay="prod.dat")``: the user's fixture
    fake replays the file beside the test once the tool turns its events on."""
    dat = FIXTURES / "default-v6.dat"
    rec = open_recording(dat)
    kmem = sum(1 for e in rec.events() if not e.lost and e.key.startswith("kmem:"))
    shutil.copy(dat, pytester.path / "prod.dat")
    pytester.makepyfile(test_user=f'''
import pytest

@pytest.mark.fakedebugfs(replay="prod.dat")
def test_tool_sees_the_recording(fakedebugfs):
    assert fakedebugfs.call("replay_status")["state"] == "waiting"
    (fakedebugfs.tracing / "events" / "kmem" / "enable").write_text("1")
    st = fakedebugfs.call("replay_status", wait=60, io_timeout=90)
    assert st["state"] == "done"
    lines = [l for l in (fakedebugfs.tracing / "trace").read_text().splitlines()
             if not l.startswith("#")]
    assert len(lines) == st["committed"] == {kmem}
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=1)
