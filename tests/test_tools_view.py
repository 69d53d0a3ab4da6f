"""What tools see of the fake beyond the catalogue (issue 11, item 4):
statfs() magic inside ``fakedebugfs run``, the pid of trace_marker entries,
saved_cmdlines, the errno of creating a file, exec'd comms, stack entries.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

import pytest

from conftest import FAKEDEBUGFS, build_c, run_cli

ROOT = os.geteuid() == 0
DEBUGFS_MAGIC, TRACEFS_MAGIC = 0x64626720, 0x74726163


def fake_run(*cmd, options=(), timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([FAKEDEBUGFS, "run", *options, "--", *cmd], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.skipif(not ROOT, reason="fakedebugfs run needs root")
def test_statfs_inside_run_reports_debugfs_and_tracefs_magic(tmp_path):
    prog = build_c("statfs_magic.c", tmp_path)
    paths = ["/sys/kernel/tracing", "/sys/kernel/tracing/trace", "/sys/kernel/debug",
             "/sys/kernel/debug/ktrace", "/sys/kernel/debug/tracing/events"]
    res = fake_run(str(prog), *paths)
    assert res.returncode == 0, res.stderr
    got = {p: (int(a, 16), int(b, 16)) for p, a, b in map(str.split, res.stdout.splitlines())}
    for path in paths:
        magic = TRACEFS_MAGIC if "tracing" in path else DEBUGFS_MAGIC
        assert got[path] == (magic, magic), path


def test_creating_a_missing_file_answers_as_the_kernel(fake):
    """open(O_CREAT) and mknod() of a new name: EACCES (tracefs and debugfs
    have no create/mknod; 6.18 answers EACCES for both), mkdir outside
    instances/: EPERM."""
    mnt = fake("--workload", "none")
    for d in ("tracing", "tracing/events", "ktrace", "kmemtrace"):
        path = str(mnt / d / "newfile")
        with pytest.raises(PermissionError) as exc:
            os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        assert exc.value.errno == errno.EACCES, d
        with pytest.raises(PermissionError) as exc:
            os.mknod(path)
        assert exc.value.errno == errno.EACCES, d
        with pytest.raises(PermissionError) as exc:
            os.mkdir(path + ".d")
        assert exc.value.errno == errno.EPERM, d


@pytest.mark.skipif(not ROOT or shutil.which("trace-cmd") is None,
                    reason="needs root and trace-cmd")
def test_trace_cmd_record_T_reports_symbolised_stacks(tmp_path):
    """``trace-cmd record -T`` (options/stacktrace): a kernel_stack entry
    after each event, its frames symbolised from the fake kallsyms."""
    out = tmp_path / "t.dat"
    res = fake_run("trace-cmd", "record", "-q", "-T", "-e", "sched:sched_switch",
                   "-o", str(out), "sleep", "0.5")
    assert res.returncode == 0, res.stderr
    rep = subprocess.run(["trace-cmd", "report", "-i", str(out)], capture_output=True,
                         text=True, check=True).stdout
    lines = rep.splitlines()
    switches = [i for i, ln in enumerate(lines) if " sched_switch: " in ln]
    assert switches, rep[:2000]
    i = switches[0]
    assert "kernel_stack:" in lines[i + 1]
    frames = [ln.split()[1] for ln in lines[i + 2:i + 9] if ln.startswith("=> ")]
    assert frames[:2] == ["__schedule", "schedule"]
    assert frames[-1] == "entry_SYSCALL_64_after_hwframe"


def test_stacktrace_trigger_prints_the_kernel_stack_text(fake):
    """The ``stacktrace`` trigger's entry in ``trace``: ``<stack trace>`` and
    one `` => symbol`` line per frame (trace_stack_print)."""
    mnt = fake("--workload", "none")
    ev = mnt / "tracing/events/irq/irq_handler_entry"
    (ev / "trigger").write_text("stacktrace")
    (ev / "enable").write_text("1")
    run_cli("emit", mnt, "irq:irq_handler_entry", "irq=24", "name=virtio0", "--pid", "0")
    text = (mnt / "tracing/trace").read_text()
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert any(ln.endswith(": <stack trace>") for ln in body), text
    frames = [ln for ln in body if ln.startswith(" => ")]
    assert frames[0] == " => __handle_irq_event_percpu"
    assert len(frames) == 6


def test_trace_marker_entries_carry_the_writers_pid(fake, tmp_path):
    """A file opened by one process and written by its forked child: each
    entry has the pid of the task that wrote it (tracing_mark_write records
    current), not the opener's."""
    mnt = fake("--workload", "none")
    prog = build_c("marker_writer.c", tmp_path)
    res = subprocess.run([str(prog), str(mnt / "tracing/trace_marker")], capture_output=True,
                         text=True, check=True)
    parent, child = map(int, res.stdout.split())
    lines = [ln for ln in (mnt / "tracing/trace").read_text().splitlines()
             if "tracing_mark_write:" in ln]
    got = {ln.split("tracing_mark_write: ")[1]: int(ln.split("[")[0].rsplit("-", 1)[1])
           for ln in lines}
    assert got == {f"child {child}": child, f"parent {parent}": parent}


def _cmdlines(tracing) -> dict:
    return {int(p): c for p, c in (ln.split(" ", 1) for ln in
                                   (tracing / "saved_cmdlines").read_text().splitlines())}


def test_saved_cmdlines_records_only_tasks_with_recorded_entries_and_is_capped(fake, tmp_path):
    """A comm is saved when an entry of its task is recorded (not for an
    event that is off, nor while tracing is off); saved_cmdlines_size bounds
    the map and the oldest pids go first (trace_save_cmdline's ring)."""
    mnt = fake("--workload", "none")
    tracing = mnt / "tracing"
    assert _cmdlines(tracing) == {}
    run_cli("emit", mnt, "irq:softirq_entry", "vec=1", "--pid", "501", "--comm", "off-event")
    (tracing / "events/irq/softirq_entry/enable").write_text("1")
    (tracing / "tracing_on").write_text("0")
    run_cli("emit", mnt, "irq:softirq_entry", "vec=1", "--pid", "502", "--comm", "tracing-off")
    assert _cmdlines(tracing) == {}
    (tracing / "tracing_on").write_text("1")
    run_cli("emit", mnt, "irq:softirq_entry", "vec=1", "--pid", "503", "--comm", "recorded")
    assert _cmdlines(tracing) == {503: "recorded"}
    (tracing / "saved_cmdlines_size").write_text("1")
    cap = int((tracing / "saved_cmdlines_size").read_text())  # 6552: one page-rounded map
    assert cap >= 1
    assert _cmdlines(tracing) == {}  # a new, empty buffer
    n = cap + 20
    scenario = tmp_path / "many.txt"
    scenario.write_text("".join(f"emit irq:softirq_entry vec=1 --pid {1000 + i} "
                                f"--comm task{i}\n" for i in range(n)))
    run_cli("emit", mnt, "--file", scenario)
    saved = _cmdlines(tracing)
    assert len(saved) == cap
    assert saved == {1000 + i: f"task{i}" for i in range(n - cap, n)}
