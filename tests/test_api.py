"""The Python API (``fakedebugfs.Fake``), used as a test author would.

Each test starts a real fake (a FUSE mount served by a child process),
injects events over the control socket and reads them back through the
mounted files with plain file I/O, the way a tool under test would.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from fakedebugfs import (Event, EventError, Fake, MountError, RequestError, ScenarioError,
    ServerGone, WaitTimeout)
from fakedebugfs.control import runstate
from fakedebugfs.control.runstate import is_mounted

KMALLOC = dict(call_site=0x10, ptr=0x20, bytes_req=8, bytes_alloc=8, gfp_flags=0xCC0, node=-1)


def enable(fk, *events):
    for ev in events:
        system, name = ev.split(":")
        (fk.tracing / "events" / system / name / "enable").write_text("1")


def trace_lines(fk) -> list[str]:
    return [line for line in (fk.tracing / "trace").read_text().splitlines()
            if not line.startswith("#")]


def test_context_manager_mounts_and_always_unmounts():
    with Fake() as fk:
        root = fk.root
        assert is_mounted(root)
        assert (fk.tracing / "tracing_on").read_text() == "1\n"
        assert (fk.ktrace / "info").read_text().startswith("version ")
        assert (fk.kmemtrace / "abi_version").read_text() == "1\n"
    assert not is_mounted(root) and not root.exists()
    with pytest.raises(RuntimeError):
        with Fake() as fk:
            root = fk.root
            raise RuntimeError("the test failed")
    assert not is_mounted(root) and not root.exists()


def test_given_mount_point_is_kept(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with Fake(mnt) as fk:
        assert fk.root == mnt and is_mounted(mnt)
    assert not is_mounted(mnt) and mnt.is_dir()


def test_killed_test_process_leaves_no_mount(tmp_path):
    """A test run killed outright (SIGKILL) takes its fake with it."""
    script = tmp_path / "victim.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from fakedebugfs import Fake
        fk = Fake({str(tmp_path / 'mnt')!r}).start()
        print(fk.root, flush=True)
        time.sleep(60)
    """))
    (tmp_path / "mnt").mkdir()
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    root = p.stdout.readline().strip()
    assert is_mounted(root)
    p.send_signal(signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 10
    while is_mounted(root) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_mounted(root)


def test_killed_test_process_leaves_no_mount_point_of_its_own(tmp_path):
    """``Fake()`` made its mount point: a test killed outright (no
    ``close()`` runs) leaves neither the mount nor the directory."""
    script = tmp_path / "victim.py"
    script.write_text(textwrap.dedent("""
        import time
        from fakedebugfs import Fake
        fk = Fake().start()
        print(fk.root, flush=True)
        time.sleep(60)
    """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "FAKEDEBUGFS_FORKSERVER": "0"})
    root = p.stdout.readline().strip()
    assert root.startswith("/tmp/fakedebugfs-") and is_mounted(root)
    p.send_signal(signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 10
    while (is_mounted(root) or os.path.lexists(root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_mounted(root) and not os.path.lexists(root)


def test_a_closed_fakes_log_stays_with_it_not_in_the_run_directory():
    """A server's log with a warning in it: ``log()`` still gives it after
    ``close()``, and nothing of the fake is left in the run directory
    (a test suite's warnings would otherwise pile up there, one file a test)."""
    fk = Fake().start()
    files = runstate.paths(str(fk.root))
    with pytest.raises(OSError):
        (fk.tracing / "buffer_size_kb").write_text("1000000")  # refused: over the fake's limit
    assert "WARNING" in files["log"].read_text()
    fk.close()
    assert "limit of 268435456 bytes per CPU" in fk.log()
    assert [p for p in files.values() if p.exists()] == []


def test_options_are_checked_before_mounting():
    with pytest.raises(ValueError, match="--rate"):
        Fake(rate=float("inf"))
    with pytest.raises(ValueError, match="--cpus"):
        Fake(cpus=0)
    with pytest.raises(TypeError, match="unknown option 'cpu'"):
        Fake(cpu=2)
    with pytest.raises(ValueError, match="unknown workload"):
        Fake(workload="nope")


def test_mounting_over_a_mount_is_a_mount_error(tmp_path):
    with Fake() as fk:
        with pytest.raises(MountError, match="already mounted"):
            Fake(fk.root).start()


@pytest.mark.parametrize("cpu", [0, 1])
def test_emit_reaches_trace_with_task_cpu_and_fields(cpu):
    with Fake(cpus=2, clock="virtual") as fk:
        enable(fk, "kmem:kmalloc")
        assert fk.emit("kmem:kmalloc", cpu=cpu, pid=4242, comm="myapp", **KMALLOC) == 1
        (line,) = trace_lines(fk)
        assert re.match(rf"\s+myapp-4242\s+\[00{cpu}\] \.{{5}}\s+1\.000000: kmalloc: "
                        r"call_site=0x10 ptr=[0-9a-f]{16} bytes_req=8 bytes_alloc=8 "
                        r"gfp_flags=GFP_KERNEL node=-1 accounted=false$", line), line
        assert "4242 myapp" in (fk.tracing / "saved_cmdlines").read_text()
        per_cpu = fk.tracing / "per_cpu" / f"cpu{cpu}" / "stats"
        assert "entries: 1\n" in per_cpu.read_text()


def test_emit_goes_to_every_tracer_with_the_event_enabled():
    with Fake(cpus=2, clock="virtual", enable_all=True) as fk:
        fk.emit("kmem:kmalloc", cpu=1, pid=7, comm="a", **KMALLOC)
        fk.emit("kmem:kfree", cpu=1, pid=7, call_site=0x10, ptr=0x20)
        st = fk.status()
        assert st["injected"] == 2
        assert st["ftrace"]["cpus"][1]["entries"] == 2
        assert st["ktrace"]["entries"] == 2
        assert st["kmemtrace"]["records"] == 2


def test_emit_many_checks_all_before_firing_any():
    with Fake(clock="virtual") as fk:
        enable(fk, "kmem:kmalloc", "kmem:kfree")
        good = [Event("kmem:kmalloc", KMALLOC, cpu=0, pid=1, comm="one"),
                {"event": "kmem:kfree", "cpu": 1, "pid": 2, "fields": {"ptr": 0x20}}]
        bad = good + [Event("kmem:kfree", {"ptr": -1})]
        with pytest.raises(EventError, match=r"field ptr \(const void \*\) must be in"):
            fk.emit_many(bad)
        assert trace_lines(fk) == [] and fk.status()["injected"] == 0
        assert fk.emit_many(good) == 2
        assert [re.sub(r"\s+", " ", line).split(":")[-2].split()[-1] for line in trace_lines(fk)] \
            == ["kmalloc", "kfree"]


@pytest.mark.parametrize("fields, message", [
    ({"nope": 1}, "has no field 'nope'"),
    ({"node": 1 << 31}, r"field node \(int\) must be in \[-2147483648, 2147483647\]"),
    ({"bytes_req": "eight"}, r"field bytes_req \(size_t\) takes an integer"),
    ({"ptr": 1.5}, r"field ptr \(const void \*\) takes an integer"),
])
def test_bad_fields_are_typed_errors_naming_the_field(fields, message):
    with Fake() as fk:
        with pytest.raises(EventError, match=message):
            fk.emit("kmem:kmalloc", **fields)
        assert fk.status()["injected"] == 0


def test_strict_requires_every_field_and_defaults_are_zero():
    with Fake(clock="virtual") as fk:
        enable(fk, "kmem:kfree")
        with pytest.raises(EventError, match="field call_site is missing"):
            fk.emit("kmem:kfree", ptr=0x20, strict=True)
        fk.emit("kmem:kfree", ptr=0x20)
        (line,) = trace_lines(fk)
        assert re.search(r"\[000\] .* kfree: call_site=0x0 ptr=[0-9a-f]{16}$", line), line


def test_unknown_event_cpu_pid_comm_are_refused():
    with Fake(cpus=2) as fk:
        with pytest.raises(EventError, match="unknown event 'kmem:nope'"):
            fk.emit("kmem:nope")
        with pytest.raises(EventError, match="cpu 2 does not exist"):
            fk.emit("kmem:kfree", cpu=2)
        with pytest.raises(EventError, match="pid"):
            fk.emit("kmem:kfree", pid=-1)
        with pytest.raises(EventError, match="comm"):
            fk.emit("kmem:kfree", comm="x" * 16)


def test_timestamps_given_and_never_going_back():
    with Fake(clock="virtual") as fk:
        enable(fk, "kmem:kfree")
        fk.emit("kmem:kfree", cpu=0, ts=5_000_000_000)
        fk.emit("kmem:kfree", cpu=1, ts=4_000_000_000)  # another CPU: its own clock line
        with pytest.raises(EventError, match="never goes back"):
            fk.emit("kmem:kfree", cpu=0, ts=4_999_999_999)
        fk.emit("kmem:kfree", cpu=0)  # un-stamped: the (virtual) clock, now past 5 s
        stamps = [float(line.split(":")[0].split()[-1]) for line in trace_lines(fk)]
        assert stamps == [4.0, 5.0, 5.0]


def test_marker_event_is_the_trace_marker_entry():
    """6.18 writes a marker with preemption off (the ``1`` of the flags)."""
    with Fake(profile="linux-6.18", clock="virtual") as fk:
        fk.emit("ftrace:print", cpu=1, pid=99, comm="echo", buf="hello from a test")
        (line,) = trace_lines(fk)
        assert re.match(r"\s+echo-99\s+\[001\] \.\.\.1\.\s+1\.000000: tracing_mark_write: "
                        r"hello from a test$", line), line


def test_sys_enter_array_and_sched_switch_strings():
    with Fake(clock="virtual") as fk:
        enable(fk, "raw_syscalls:sys_enter", "sched:sched_switch")
        fk.emit("raw_syscalls:sys_enter", pid=3, id=257, args=[1, 0x2F, 3])
        fk.emit("sched:sched_switch", prev_comm="bash", prev_pid=3, prev_prio=120,
                prev_state=1, next_comm="swapper/0", next_pid=0, next_prio=120)
        enter, switch = trace_lines(fk)
        assert enter.endswith("sys_enter: NR 257 (1, 2f, 3, 0, 0, 0)")
        assert switch.endswith("sched_switch: prev_comm=bash prev_pid=3 prev_prio=120 "
                               "prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120")
        with pytest.raises(EventError, match="up to 6 integers"):
            fk.emit("raw_syscalls:sys_enter", args=list(range(7)))
        with pytest.raises(EventError, match="at most 15 bytes"):
            fk.emit("sched:sched_switch", prev_comm="a-very-long-command-name")


def test_wait_consumed_returns_when_a_reader_drained():
    with Fake(clock="virtual") as fk:
        enable(fk, "kmem:kfree")
        for i in range(5):
            fk.emit("kmem:kfree", cpu=i % 2, ptr=i)
        with pytest.raises(WaitTimeout, match="not consumed"):  # a trace_pipe reader:
            fk.wait_consumed(timeout=0.1, complete_pages=False)  # every event, not pages
        got = []

        def reader():
            with open(fk.tracing / "trace_pipe") as fp:
                while len(got) < 5:
                    got.append(fp.readline())

        t = threading.Thread(target=reader)
        t.start()
        fk.wait_consumed(timeout=10, complete_pages=False)
        t.join(5)
        assert len(got) == 5 and fk.status()["ftrace"]["cpus"][0]["read"] == 3


def test_wait_idle_and_done_follow_the_workload():
    with Fake(workload="kmem", count=3000, rate=0) as fk:
        fk.wait_done(timeout=60)
        fk.wait_idle(timeout=10)
        assert fk.status()["emitted"] == 3000
    with Fake(workload="default", rate=100) as fk:
        with pytest.raises(WaitTimeout, match="workload is still running"):
            fk.wait_idle(timeout=0.2)


def test_scenario_text_is_checked_whole_then_run():
    with Fake(clock="virtual") as fk:
        enable(fk, "kmem:kfree")
        with pytest.raises(ScenarioError, match="^scenario:3: kmem:kfree has no field") as err:
            fk.scenario("emit kmem:kfree ptr=1\nsleep 0.01\nemit kmem:kfree nope=2\n")
        assert err.value.line == 3 and fk.status()["injected"] == 0
        assert fk.scenario("emit kmem:kfree ptr=1 --repeat 2\nsleep 50ms\n"
                           '{"emit": "kmem:kfree", "cpu": 1, "fields": {"ptr": 3}}\n') == 3
        assert len(trace_lines(fk)) == 3


def test_server_gone_after_close():
    fk = Fake().start()
    fk.close()
    with pytest.raises(ServerGone):
        fk.status()
    fk.close()  # idempotent


def test_run_uses_this_fake():
    with Fake(clock="virtual") as fk:
        enable(fk, "kmem:kfree")
        fk.emit("kmem:kfree", pid=5, comm="inside", ptr=0x30)
        out = fk.run(["cat", "/sys/kernel/tracing/trace"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert "inside-5" in out.stdout and "kfree: call_site=0x0" in out.stdout
        mounts = fk.run(["grep", "-c", "tracefs", "/proc/mounts"], capture_output=True, text=True)
        assert mounts.stdout.strip() != "0"
    assert os.path.exists("/sys/kernel/tracing")  # the host's untouched


def test_emit_user_declared_ktrace_event(tmp_path):
    """A ktrace event declared with ``events=`` (the RFC's module notifier)
    is injected as ``ktrace.<module>:<name>``, its arguments typed by its
    format, and read back by the reference mmap + ioctl reader."""
    import json

    decl = tmp_path / "events.txt"
    decl.write_text('net_rx "len %u dev %s"\n')
    with Fake(events=decl, clock="virtual") as fk:
        (fk.ktrace / "events" / "net_rx").write_text("1")
        (fk.ktrace / "enabled").write_text("1")
        fk.emit("ktrace.events:net_rx", cpu=1, pid=9, arg0=1500, arg1="eth0")
        with pytest.raises(EventError, match=r"arg0 \(%u\) must be in \[0, 4294967295\]"):
            fk.emit("ktrace.events:net_rx", arg0=-1)
        out = subprocess.run([sys.executable, "-m", "fakedebugfs", "ktrace-read", str(fk.root),
                              "--json", "--disable"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        (event,) = [json.loads(line) for line in out.stdout.splitlines()]
        assert event["name"] == "net_rx" and event["cpu"] == 1
        assert event["args"] == [1500, "eth0"]


@pytest.mark.parametrize("pid", [0, -1, "1", True])
def test_watch_refuses_what_is_not_a_process(pid):
    """``watch`` (what ``run`` sends) takes a process id > 0 and never the
    server itself (pid 0 and -1 would be the server or every task)."""
    with Fake(workload="none") as fk:
        with pytest.raises(RequestError, match="must be a process id > 0"):
            fk.call("watch", pid=pid, parent=os.getpid())
        with pytest.raises(RequestError, match="does not watch itself"):
            fk.call("watch", pid=fk.status()["pid"], parent=os.getpid())


# --- commands end with their fake; waits that return when they should -------------

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "replay")


def sleeping(word: str) -> list[int]:
    """Pids of the processes ``sleep WORD``."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fp:
                if fp.read() == f"sleep\0{word}\0".encode():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def test_commands_and_their_groups_end_with_the_fake():
    """What popen started, and what that started in its process group (a
    background child), is gone once the fake closes."""
    word = f"{os.getpid() % 1000}.{time.monotonic_ns() % 100000:05d}"  # sleep's argument
    with Fake() as fk:
        fk.popen(["sh", "-c", f"sleep {word} & sleep {word}; true"])
        deadline = time.monotonic() + 30
        while len(sleeping(word)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(sleeping(word)) == 2  # the command's, and its background child
        start = time.monotonic()
    assert sleeping(word) == []
    assert time.monotonic() - start < 10


def test_wait_readers_returns_once_the_reader_is_gone():
    from fakedebugfs.api.fake import ReaderGone

    with Fake() as fk:
        rec = fk.popen(["trace-cmd", "record", "--no-such-option"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        start = time.monotonic()
        with pytest.raises(ReaderGone, match=r"the reader is gone \(trace-cmd exited with "
                                             r"status \d+\): not readers"):
            fk.wait_readers(timeout=30)
        assert time.monotonic() - start < 10 and rec.returncode != 0
        with pytest.raises(WaitTimeout):  # nothing watched: the whole timeout
            fk.wait_readers(timeout=0.3)


def test_wait_consumed_by_default_suits_trace_cmd(tmp_path):
    """wait_consumed() with its defaults (complete pages) returns while
    trace-cmd records; every event is in its report once stopped."""
    dat = tmp_path / "trace.dat"
    with Fake(cpus=2, clock="virtual") as fk:
        rec = fk.popen(["trace-cmd", "record", "-e", "kmem:kmalloc", "-o", str(dat)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        fk.wait_readers(timeout=60)
        deadline = time.monotonic() + 30
        while (fk.tracing / "tracing_on").read_text() != "1\n":
            assert time.monotonic() < deadline and rec.poll() is None
            time.sleep(0.01)
        from fakedebugfs import Event

        fk.emit_many([Event("kmem:kmalloc", dict(KMALLOC, bytes_req=i + 1), cpu=i % 2)
                      for i in range(2000)])
        fk.wait_consumed(timeout=30)
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
        assert rec.returncode == 0, err
        report = fk.run(["trace-cmd", "report", "-i", str(dat)], capture_output=True, text=True)
    assert sum("kmalloc:" in line for line in report.stdout.splitlines()) == 2000


def test_wait_done_follows_the_mount_replay(tmp_path):
    """A fake mounted with replay= (the marker's way): wait_done() waits for
    that replay, which starts once a recorder enables its events."""
    dat = os.path.join(FIXTURES, "default-v6.dat")
    with Fake(cpus=2, replay=dat) as fk:
        with pytest.raises(WaitTimeout, match="not done after 0.3 s"):
            fk.wait_done(timeout=0.3)  # waiting for a tracer
        tc = fk.popen(["trace-cmd", "record", "-e", "kmem", "-e", "sched", "-e", "raw_syscalls",
                       "-o", str(tmp_path / "again.dat")], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL)
        fk.wait_readers(timeout=60)
        fk.wait_done(timeout=120)
        assert fk.call("replay_status", replay=1)["state"] == "done"
        tc.send_signal(signal.SIGINT)
        tc.communicate(timeout=60)


@pytest.mark.parametrize("options", [{}, {"enable_all": True, "clock": "virtual"}])
def test_reset_returns_to_the_mount_state(options):
    with Fake(**options) as fk:
        t = fk.tracing
        names = ("set_event", "trace_options", "trace_clock", "buffer_size_kb",
                 "current_tracer", "tracing_on", "set_event_pid")
        before = {n: (t / n).read_text() for n in names}
        before["ktrace"] = (fk.ktrace / "enabled").read_text()
        (t / "instances" / "mine").mkdir()
        enable(fk, "kmem:kmalloc", "sched:sched_switch")
        (t / "trace_options").write_text("nooverwrite")
        (t / "trace_clock").write_text("global")
        (t / "buffer_size_kb").write_text("100")
        (t / "set_event_pid").write_text("42")
        (fk.ktrace / "enabled").write_text("0" if before["ktrace"] == "1\n" else "1")
        fk.emit("kmem:kmalloc", **KMALLOC)
        fk.fault("errno", path="tracing/trace_marker", errno="EIO")
        sleeper = fk.popen(["sleep", "300"])
        start = time.monotonic()
        fk.reset()
        took = time.monotonic() - start
        after = {n: (t / n).read_text() for n in names}
        after["ktrace"] = (fk.ktrace / "enabled").read_text()
        assert after == before
        assert list((t / "instances").iterdir()) == [] and trace_lines(fk) == []
        assert fk.faults() == [] and sleeper.poll() is not None
        assert took < 5
