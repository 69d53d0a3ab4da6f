"""Hist triggers on real mounts of the Debian 6.12 profile (issue 33): the
``hist`` file as the kernel lays it out, entries in the kernel's order
(checked against a run of the same writes in the Debian 6.12 guest,
fixtures/hist/), the trigger list, the errnos and ``error_log`` entries of
malformed triggers (their texts and carets as the guest printed them),
``:pause``/``:cont``/``:clear``, removal, shared (``name=``) histograms,
and the default 6.18 profile left without any of it."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from fakedebugfs import Fake

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hist"


def write(path, data: str, append: bool = True) -> None:
    with open(path, "a" if append else "w") as fp:
        fp.write(data)


def write_errno(path, data: str, append: bool = True):
    try:
        write(path, data, append)
    except OSError as err:
        return errno.errorcode[err.errno]
    return None


def errors(tracing: Path) -> list:
    """The error_log entries without their timestamps."""
    text = (tracing / "error_log").read_text()
    return [re.sub(r"^\[ *[0-9.]+\] ", "", e) for e in re.split(r"(?m)^(?=\[)", text) if e]


@pytest.fixture
def fk():
    with Fake(profile="debian-6.12", clock="virtual", cpus=2) as fake:
        yield fake


def test_marker_hist_matches_the_guest(fk):
    """The writes of fixtures/hist/marker-pids.sh (pids and counts as the
    guest saw them) give the four histograms the guest printed, byte for
    byte: ties in the kernel's order, .hex, .log2, .buckets, .percent,
    .graph, two sort keys, the trigger list."""
    guest = (FIXTURES / "marker-pids.debian-6.12.out").read_text()
    script = (FIXTURES / "marker-pids.sh").read_text()
    trig = fk.tracing / "events/ftrace/print/trigger"
    for n, m in enumerate(re.finditer(r"^echo '(.*)' >>? \$T$", script, re.M)):
        write(trig, m.group(1) + "\n", append=n > 0)
    for m in re.finditer(r"^P (\d+) (\d+)$", guest, re.M):
        for _ in range(int(m.group(2))):
            fk.emit("ftrace:print", pid=int(m.group(1)), buf="x")
    ours = trig.read_text() + (fk.tracing / "events/ftrace/print/hist").read_text()
    assert ours == guest[guest.index("hist:"):]


def test_syscall_keys_are_named_as_the_guest_names_them(fk):
    """fixtures/hist/syscall-write.py's writes (counts read as syscall
    numbers: names, numbers the kernel does not name, ties) in an instance:
    the trigger lists, hist files and the refusal of ``.syscall`` on a value
    are the guest's, byte for byte (names from the profile's ``syscalls``)."""
    import runpy

    fixture = runpy.run_path(str(FIXTURES / "syscall-write.py"), run_name="fixture")
    guest = (FIXTURES / "syscall-write.debian-6.12.out").read_text()
    pid, fd = map(int, re.match(r"P (\d+) (\d+)\n", guest).groups())
    inst = fk.tracing / "instances/h33sc"
    os.mkdir(inst)
    for event, cmd in fixture["TRIGGERS"]:
        filt = f" if common_pid == {pid} && " + ("id == 1" if event.startswith("raw") else f"fd == {fd}")
        write(inst / "events" / event / "trigger", cmd + filt)
    for n in fixture["COUNTS"]:
        fk.emit("raw_syscalls:sys_enter", pid=pid, id=1)
        fk.emit("syscalls:sys_enter_write", pid=pid, __syscall_nr=1, fd=fd, count=n)
    events = sorted({e for e, _ in fixture["TRIGGERS"]})
    ours = f"P {pid} {fd}\n" + "".join(
        f"### {d}\n" + (inst / "events" / d / "trigger").read_text()
        + (inst / "events" / d / "hist").read_text() for d in events)
    event, cmd = fixture["REFUSED"]
    tfd = os.open(inst / "events" / event / "trigger", os.O_WRONLY | os.O_APPEND)
    try:  # one write(2), as the fixture's (a buffered file retries it at close)
        os.write(tfd, cmd.encode())
        code = 0
    except OSError as err:
        code = err.errno
    finally:
        os.close(tfd)
    ours += f"### refused: {code}\n" + "".join(errors(inst))
    assert ours == guest


def test_hist_table_and_trigger_line(fk):
    """keys=common_pid.execname, sort=hitcount.descending in an instance:
    the header with the trigger's line, one entry per task with its comm,
    the counts, Totals."""
    inst = fk.tracing / "instances/h"
    os.mkdir(inst)
    trig = inst / "events/sched/sched_switch/trigger"
    write(trig, "hist:keys=common_pid.execname:vals=hitcount:sort=hitcount.descending")
    line = "hist:keys=common_pid.execname:vals=hitcount:sort=hitcount.descending:size=2048 [active]\n"
    assert trig.read_text() == line
    counts = {(0, "swapper/0"): 5, (100, "bash"): 3, (200, "sleep"): 1}
    for (pid, comm), n in counts.items():
        for _ in range(n):
            fk.emit("sched:sched_switch", pid=pid, comm=comm, prev_pid=pid, next_pid=1)
    hist = (inst / "events/sched/sched_switch/hist").read_text()
    assert hist.startswith("# event histogram\n#\n# trigger info: " + line + "#\n\n")
    entries = [l for l in hist.splitlines() if l.startswith("{")]
    want = [(("<idle>" if pid == 0 else comm), pid, n) for (pid, comm), n in
            sorted(counts.items(), key=lambda kv: -kv[1])]
    assert entries == [f"{{ common_pid: {c:<16s}[{p:10d}] }} hitcount: {n:10d}" for c, p, n in want]
    assert hist.endswith(f"\nTotals:\n    Hits: {sum(counts.values())}\n    Entries: {len(counts)}\n"
                         "    Dropped: 0\n")
    # the top level's event has no trigger, its hist file is empty
    assert (fk.tracing / "events/sched/sched_switch/hist").read_text() == ""


def test_malformed_triggers_are_refused_with_the_kernels_log(fk):
    """Each refusal: the errno, one error_log entry with the guest's words
    and caret, nothing added to the trigger list."""
    trig = fk.tracing / "events/kmem/kmalloc/trigger"
    before = trig.read_text()
    cases = [
        ("hist:keys=common_pid:vals=bytes_req:sort=common_pid,junk", "EINVAL",
         "Sort field must be a key or a val", "junk"),
        ("hist:keys=common_pid:vals=bytes_req:sort=", "EINVAL", "Empty assignment", "sort="),
        ("hist:keys=common_pid:vals=bytes_req:sort=common_pid,", "EINVAL", "Empty sort field",
         "sort="),
        ("hist:keys=common_pid:vals=bytes_req:sort=common_pid.junk", "EINVAL",
         "Invalid sort modifier", "junk"),
        ("hist:keys=common_pid:vals=bytes_req,bytes_alloc:sort=common_pid,bytes_req,bytes_alloc",
         "EINVAL", "Too many sort fields (Max = 2)", "sort="),
        ("hist:keys=nosuch", "EINVAL", "Couldn't find field", "nosuch"),
        ("hist:keys=common_pid:x=bytes_req/0", "EDOM", "Division by zero", "0"),
        ("hist:keys=common_pid:nohitcount", "ENOENT",
         "Non-hitcount value is required for 'nohitcount'", None),
        ("hist:keys=common_pid.buckets=0", "EINVAL", "Invalid field modifier", "0"),
    ]
    for cmd, code, text, at in cases:
        assert write_errno(trig, cmd) == code, cmd
        last = errors(fk.tracing)[-1]
        pos = ("hist:" + cmd[5:]).find(at) if at else 0
        assert last == (f"hist:kmem:kmalloc: error: {text}\n  Command: {cmd}\n"
                        + " " * (11 + pos) + "^\n"), cmd
    assert trig.read_text() == before
    assert write_errno(trig, "hist:vals=bytes_req") == "EINVAL"  # no keys: no log entry


def test_pause_cont_clear_and_removal(fk):
    ev = fk.tracing / "events/kmem/kfree"
    write(ev / "trigger", "hist:keys=call_site.hex:vals=hitcount")
    line = "hist:keys=call_site.hex:vals=hitcount:sort=hitcount:size=2048"
    fk.emit("kmem:kfree", call_site=0x10, ptr=1)
    write(ev / "trigger", "hist:keys=call_site.hex:pause")
    assert (ev / "trigger").read_text() == line + " [paused]\n"
    fk.emit("kmem:kfree", call_site=0x20, ptr=1)  # not counted while paused
    write(ev / "trigger", "hist:keys=call_site.hex:cont")
    fk.emit("kmem:kfree", call_site=0x10, ptr=1)
    hist = (ev / "hist").read_text()
    assert "{ call_site: 10 } hitcount:          2\n" in hist and "Hits: 2\n" in hist
    assert write_errno(ev / "trigger", "hist:keys=call_site.hex") == "EEXIST"
    write(ev / "trigger", "hist:keys=call_site.hex:clear")
    assert "Hits: 0\n    Entries: 0\n" in (ev / "hist").read_text()
    assert write_errno(ev / "trigger", "hist:keys=ptr:cont") == "ENOENT"
    write(ev / "trigger", "!" + line)
    assert (ev / "hist").read_text() == ""
    assert (ev / "enable").read_text() == "0\n"  # no trigger holds it in soft mode


def test_named_histogram_is_shared(fk):
    a, b = fk.tracing / "events/sched/sched_process_fork", fk.tracing / "events/sched/sched_process_exit"
    write(a / "trigger", "hist:name=shared:keys=common_pid")
    write(b / "trigger", "hist:name=shared:keys=common_pid")
    assert write_errno(b / "trigger", "hist:name=shared:keys=common_pid:vals=common_pid") \
        == "EINVAL"
    fk.emit("sched:sched_process_fork", pid=7)
    fk.emit("sched:sched_process_exit", pid=8)
    assert (a / "hist").read_text() == (b / "hist").read_text()
    assert "hist:name=shared:keys=common_pid:vals=hitcount" in (a / "hist").read_text()
    assert "Hits: 2\n" in (a / "hist").read_text()


def test_truncating_the_trigger_file_removes_hist_triggers(fk):
    trig = fk.tracing / "events/kmem/kmalloc/trigger"
    write(trig, "hist:keys=common_pid")
    write(trig, "traceon")
    write_errno(trig, "\n", append=False)  # O_TRUNC: every hist trigger goes
    assert trig.read_text() == "traceon:unlimited\n"


def test_linux_6_18_has_no_hist(tmp_path):
    """This machine's 6.18 has no hist triggers, synthetic events or snapshot."""
    with Fake(profile="linux-6.18", cpus=2) as fake:
        ev = fake.tracing / "events/kmem/kmalloc"
        assert not (ev / "hist").exists()
        assert not (fake.tracing / "synthetic_events").exists()
        assert not (fake.tracing / "snapshot").exists()
        assert write_errno(ev / "trigger", "hist:keys=common_pid") == "EINVAL"


SLP = 'if next_comm == "h33slp" || prev_comm == "h33slp"'
REPLAY_TRIGGERS = (  # as fixtures/hist/replay.sh set them in the guest, in this order
    ("sched/sched_switch",
     f"hist:keys=next_pid,prev_state:vals=hitcount:sort=hitcount.descending,next_pid {SLP}"),
    ("sched/sched_switch", f"hist:keys=prev_comm:vals=prev_prio.hex:sort=prev_comm {SLP}"),
    ("sched/sched_waking", 'hist:keys=common_pid.execname,target_cpu:vals=prio if comm == "h33slp"'),
    ("sched/sched_waking", 'hist:keys=pid:ts0=common_timestamp.usecs if comm == "h33slp"'),
    ("sched/sched_switch", "hist:keys=next_pid:lat=common_timestamp.usecs-$ts0:"
                           "onmatch(sched.sched_waking).h33lat($lat,next_pid)"
                           ' if next_comm == "h33slp"'),
    ("synthetic/h33lat", "hist:keys=lat.log2"),
    ("synthetic/h33lat", "hist:keys=pid.buckets=10:vals=lat"),
)


@pytest.mark.skipif(not (FIXTURES / "replay.dat").exists(), reason="no guest recording")
def test_replayed_recording_gives_the_guests_histograms(tmp_path):
    """The guest recorded sched_switch and sched_waking with trace-cmd while
    hist triggers (modifiers, a variable, an onmatch into a synthetic event
    and histograms of that) aggregated them; the same triggers in the fake,
    the recording replayed: every hist file is the guest's, ties included."""
    guest = (FIXTURES / "replay.hists.debian-6.12.txt").read_text()
    with Fake(profile="debian-6.12", clock="virtual", cpus=4) as fk:  # the guest's 4 CPUs
        write(fk.tracing / "synthetic_events", "h33lat u64 lat; pid_t pid")
        inst = fk.tracing / "instances/h33r"
        os.mkdir(inst)
        for event, cmd in REPLAY_TRIGGERS:
            write(inst / "events" / event / "trigger", cmd)
        fk.replay(FIXTURES / "replay.dat", keep_timestamps=True, into="h33r",
                  events="sched:sched_switch,sched:sched_waking")
        ours = "".join(f"### {d}\n" + (inst / d / "trigger").read_text() + (inst / d / "hist").read_text()
                       for d in ("events/sched/sched_switch", "events/sched/sched_waking",
                                 "events/synthetic/h33lat"))
    assert ours == guest


def test_trigger_strings_answer_as_the_guest(fk):
    """tests/hist_fuzz.py's 300 trigger strings (seed 33), written in the
    Debian 6.12 guest and in the fake: every errno, trigger list and
    error_log entry the same (fixtures/hist/fuzz-300-33.debian-6.12.jsonl)."""
    import json

    script = Path(__file__).resolve().parent / "hist_fuzz.py"
    out = fk.run(["python3", str(script), "/sys/kernel/tracing", "300", "33"],
                 capture_output=True, text=True, timeout=600)
    ours = [json.loads(l) for l in out.stdout.splitlines() if l.startswith('{"cmd"')]
    guest = [json.loads(l) for l in
             (FIXTURES / "fuzz-300-33.debian-6.12.jsonl").read_text().splitlines()]
    assert len(ours) == len(guest) == 300
    for a, b in zip(guest, ours):
        assert a == b, a["cmd"]
