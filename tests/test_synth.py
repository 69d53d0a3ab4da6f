"""Synthetic events and inter-event hist triggers on real mounts of the
Debian 6.12 profile (issue 33): ``synthetic_events`` (the listing, the
format the guest shows, refusals with the kernel's error_log entries,
EBUSY removal while used), and a latency computed across two events
(variables, ``common_timestamp.usecs``, ``onmatch().<synth>()``,
``onmax().save()``) recorded as the synthetic event's lines."""

from __future__ import annotations

import errno
import re
import time
from pathlib import Path

import pytest

from fakedebugfs import Fake


def write(path, data: str, append: bool = True) -> None:
    with open(path, "a" if append else "w") as fp:
        fp.write(data)


def write_errno(path, data: str, append: bool = True):
    try:
        write(path, data, append)
    except OSError as err:
        return errno.errorcode[err.errno]
    return None


def gone(path, timeout: float = 2.0) -> bool:
    """The directory is gone once the kernel's cached entry is dropped (the
    server invalidates it from a thread of its own, a moment after the write)."""
    end = time.monotonic() + timeout
    while path.exists():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def fk():
    with Fake(profile="debian-6.12", clock="virtual", cpus=2) as fake:
        yield fake


def test_synthetic_events_file_and_format(fk):
    t = fk.tracing
    write(t / "synthetic_events", "wl u64 lat; pid_t pid; char comm[16]\n")
    write(t / "synthetic_events", "ping u64 lat; char filename[]\n")
    assert (t / "synthetic_events").read_text() == (
        "wl\tu64 lat; pid_t pid; char[16] comm\nping\tu64 lat; char[] filename\n")
    fmt = (t / "events/synthetic/wl/format").read_text()
    # as the Debian 6.12 guest shows it: u64 slots, a fixed string without its length
    assert "\tfield:u64 lat;\toffset:8;\tsize:8;\tsigned:0;\n" in fmt
    assert "\tfield:pid_t pid;\toffset:16;\tsize:4;\tsigned:1;\n" in fmt
    assert "\tfield:char comm[];\toffset:24;\tsize:16;\tsigned:1;\n" in fmt
    assert fmt.endswith('print fmt: "lat=%llu, pid=%d, comm=%s", REC->lat, REC->pid, REC->comm\n')
    assert '"lat=%llu, filename=%s", REC->lat, __get_str(filename)' in \
        (t / "events/synthetic/ping/format").read_text()
    for cmd, code, text, pos in (("bad! u64 x", "EINVAL", "Illegal name", 0),
                                 ("x u6 y", "EINVAL", "Invalid type", 2),
                                 ("wl u64 x", "EEXIST", "Event already exists", 0),
                                 ("y char x[300]", "EINVAL", "Invalid array specification", 7)):
        assert write_errno(t / "synthetic_events", cmd) == code
        last = re.split(r"(?m)^(?=\[)", (t / "error_log").read_text())[-1]
        assert re.sub(r"^\[ *[0-9.]+\] ", "", last) == \
            f"synthetic_events: error: {text}\n  Command: {cmd}\n" + " " * (11 + pos) + "^\n"
    write(t / "synthetic_events", "!ping")
    assert "ping" not in (t / "synthetic_events").read_text()
    assert gone(t / "events/synthetic/ping")
    assert write_errno(t / "synthetic_events", "!ping") == "ENOENT"


def test_onmatch_latency_is_traced(fk):
    t = fk.tracing
    write(t / "synthetic_events", "wakeup_latency u64 lat; pid_t pid; char comm[16]")
    write(t / "events/sched/sched_waking/trigger", "hist:keys=pid:ts0=common_timestamp.usecs")
    write(t / "events/sched/sched_switch/trigger",
          "hist:keys=next_pid:wakeup_lat=common_timestamp.usecs-$ts0:"
          "onmatch(sched.sched_waking).wakeup_latency($wakeup_lat,next_pid,next_comm):"
          "onmax($wakeup_lat).save(next_comm,prev_pid)")
    write(t / "events/synthetic/wakeup_latency/enable", "1")
    # a variable's hist sets the clock as clock= says (global by default)
    assert "[global]" in (t / "trace_clock").read_text()
    lats = {100: 7, 101: 30, 102: 12}
    ts = 1_000_000_000
    for pid, lat in lats.items():
        fk.emit("sched:sched_waking", cpu=0, pid=1, ts=ts, fields={"pid": pid, "comm": f"t{pid}"})
        ts += lat * 1000
        fk.emit("sched:sched_switch", cpu=1, pid=0, ts=ts, prev_pid=0, prev_comm="swapper/1",
                next_pid=pid, next_comm=f"t{pid}")
        ts += 1000
    lines = [l for l in (t / "trace").read_text().splitlines() if "wakeup_latency:" in l]
    assert [l.split("wakeup_latency: ", 1)[1] for l in lines] == \
        [f"lat={lat} pid={pid} comm=t{pid}" for pid, lat in lats.items()]
    hist = (t / "events/sched/sched_switch/hist").read_text()
    for pid, lat in lats.items():
        assert f"{{ next_pid: {pid:10d} }} hitcount:          1\n\tmax: {lat:10d}" \
               f"  next_comm: {'t' + str(pid):<32s}  prev_pid:          0\n" in hist
    # in use: the synthetic event cannot go
    assert write_errno(t / "synthetic_events", "!wakeup_latency") == "EBUSY"
    write(t / "events/synthetic/wakeup_latency/enable", "0")
    write(t / "events/sched/sched_switch/trigger", "", append=False)  # O_TRUNC removes
    write(t / "synthetic_events", "!wakeup_latency")
    assert gone(t / "events/synthetic/wakeup_latency")


def test_action_errors(fk):
    t = fk.tracing
    write(t / "synthetic_events", "wl u64 lat; pid_t pid")
    write(t / "events/sched/sched_waking/trigger", "hist:keys=pid:ts0=common_timestamp.usecs")
    trig = t / "events/sched/sched_switch/trigger"
    for cmd, text, at in (
            ("hist:keys=next_pid:lat=common_timestamp.usecs-$ts0:onmatch(sched.sched_waking).wl($lat)",
             "Param count doesn't match synthetic event field count", "wl"),
            ("hist:keys=next_pid:onmatch(sched.nosuch).wl(xx)", "Invalid subsystem or event name",
             "nosuch"),
            ("hist:keys=next_pid:onmax(prev_prio).save(prev_comm)",
             "For onmax(x) or onchange(x), x must be a variable", "prev_prio"),
            ("hist:keys=next_pid:x=$nosuch", "Couldn't find field", "$nosuch")):
        assert write_errno(trig, cmd) == "EINVAL", cmd
        last = re.split(r"(?m)^(?=\[)", (t / "error_log").read_text())[-1]
        assert re.sub(r"^\[ *[0-9.]+\] ", "", last) == (
            f"hist:sched:sched_switch: error: {text}\n  Command: {cmd}\n"
            + " " * (11 + cmd.find(at)) + "^\n"), cmd
    assert trig.read_text().startswith("# Available triggers:")


def test_dynamic_events_take_synthetic_events(fk):
    """libtracefs writes synthetic events to dynamic_events as s: commands."""
    t = fk.tracing
    write(t / "dynamic_events", "s:wl u64 lat; pid_t pid\n")
    write(t / "synthetic_events", "other u64 x\n")
    assert (t / "dynamic_events").read_text() == \
        "s:synthetic/wl\tu64 lat; pid_t pid\ns:synthetic/other\tu64 x\n"
    assert (t / "synthetic_events").read_text() == "wl\tu64 lat; pid_t pid\nother\tu64 x\n"
    assert write_errno(t / "dynamic_events", "s:junk/myevent char str[") == "EINVAL"
    last = re.split(r"(?m)^(?=\[)", (t / "error_log").read_text())[-1]
    assert re.sub(r"^\[ *[0-9.]+\] ", "", last) == (
        "synthetic_events: error: Command must be of the form: s or -:[synthetic/]<name> "
        "field[;field] ...\n  Command: s:junk/myevent char str[\n           ^\n")
    write(t / "dynamic_events", "-:synthetic/wl\n")
    write(t / "dynamic_events", "-:other\n")
    assert (t / "synthetic_events").read_text() == ""
    assert gone(t / "events/synthetic")


BUILD = Path(__file__).resolve().parents[1] / "build" / "conformance"
TRACE_CMD_33 = BUILD / "src" / "trace-cmd-v3.3.3" / "tracecmd" / "trace-cmd"  # bench.conformance's


@pytest.mark.skipif(not TRACE_CMD_33.exists(), reason="no trace-cmd 3.3 (python -m bench.conformance builds it)")
def test_trace_cmd_sqlhist_as_the_guest(fk):
    """``trace-cmd sqlhist -e`` (libtracefs's SQL to synthetic events and hist
    triggers): its commands are taken, and the trigger lists, the
    synthetic event and its format are what the Debian 6.12 guest shows."""
    sql = ("SELECT end.next_pid AS pid, (end.TIMESTAMP_USECS - start.TIMESTAMP_USECS) AS delta "
           "FROM sched_waking AS start JOIN sched_switch AS end ON start.pid = end.next_pid")
    out = fk.run(["env", f"LD_LIBRARY_PATH={BUILD / 'prefix' / 'lib'}", str(TRACE_CMD_33),
                  "sqlhist", "-e", "-n", "wakeup_lat", sql],
                 capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    t = fk.tracing
    assert (t / "dynamic_events").read_text() == "s:synthetic/wakeup_lat\tpid_t pid; u64 delta\n"
    waking = re.sub(r"_[0-9]*_", "_N_", (t / "events/sched/sched_waking/trigger").read_text())
    switch = re.sub(r"_[0-9]*_", "_N_", (t / "events/sched/sched_switch/trigger").read_text())
    assert waking == "hist:keys=pid:vals=hitcount:_N_arg_N_2=common_timestamp.usecs:" \
                     "sort=hitcount:size=2048:clock=global [active]\n"
    assert switch == ("hist:keys=next_pid:vals=hitcount:_N_pid_N_1=next_pid,"
                      "_N_delta_N_3=common_timestamp.usecs-$_N_arg_N_2:sort=hitcount:size=2048:"
                      "clock=global:onmatch(sched.sched_waking).trace(wakeup_lat,$_N_pid_N_1,"
                      "$_N_delta_N_3) [active]\n")
    fmt = (t / "events/synthetic/wakeup_lat/format").read_text()
    assert "\tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;\n" \
           "\tfield:u64 delta;\toffset:16;\tsize:8;\tsigned:0;\n" in fmt
