"""``tracing/instances/``: mkdir/rmdir of whole trace arrays, laid out as
the 6.18 kernel lays them out (fixtures/tracefs/instance_layout.txt, a
listing of a real instance), each with its own buffers and event state,
and trace-cmd's ``-B`` working on them."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS, wait_done

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tracefs"
# what this kernel's instance has that the fake does not emulate: function
# tracing files and the function tracer's option files
NOT_EMULATED = ("set_ftrace_", "options/func_stack_trace", "options/func-no-repeats")


def layout(root: Path) -> set[tuple[str, str]]:
    """(mode string, path) of everything under *root* but events/, as
    ``find -maxdepth 3 -printf '%M %p'`` lists it."""
    out = {("drwxr-x---", ".")}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (rel.parts[0] == "events" and len(rel.parts) > 1) or len(rel.parts) > 3:
            continue
        out.add((stat.filemode(os.lstat(path).st_mode), f"./{rel}"))
    return out


def kernel_layout() -> set[tuple[str, str]]:
    rows = set()
    for line in (FIXTURES / "instance_layout.txt").read_text().splitlines():
        mode, path = line.split(" ", 1)
        if not any(path.startswith("./" + p) for p in NOT_EMULATED):
            rows.add((mode, path))
    return rows


def write(path, data: str) -> None:
    with open(path, "w") as fp:
        fp.write(data)


def test_mkdir_gives_the_kernels_instance_layout(fake):
    """The instance this machine's 6.18 makes (fixtures' instance_layout.txt)."""
    tracing = fake("--profile", "linux-6.18", "--workload", "none") / "tracing"
    os.mkdir(tracing / "instances" / "probe")
    inst = tracing / "instances" / "probe"
    assert layout(inst) == kernel_layout()
    assert os.listdir(tracing / "instances") == ["probe"]
    # the same event directories as the top level
    assert sorted(os.listdir(inst / "events")) == sorted(os.listdir(tracing / "events"))
    assert (inst / "events/sched/sched_switch/trigger").read_text().startswith(
        "# Available triggers:")


def test_mkdir_rmdir_errnos(fake):
    tracing = fake("--workload", "none") / "tracing"
    inst = tracing / "instances" / "x"
    os.mkdir(inst)
    with pytest.raises(FileExistsError):
        os.mkdir(inst)
    for bad in (tracing / "events" / "zz", inst / "sub"):
        with pytest.raises(PermissionError) as err:
            os.mkdir(bad)
        assert err.value.errno == errno.EPERM
    with pytest.raises(PermissionError) as err:
        open(tracing / "newfile", "w")
    assert err.value.errno == errno.EACCES
    for call in (lambda: os.unlink(tracing / "trace"), lambda: os.rmdir(tracing / "events/sched"),
                 lambda: os.rename(tracing / "trace", tracing / "t2")):
        with pytest.raises(PermissionError) as err:
            call()
        assert err.value.errno == errno.EPERM
    fd = os.open(inst / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(OSError) as err:
            os.rmdir(inst)
        assert err.value.errno == errno.EBUSY
    finally:
        os.close(fd)
    os.rmdir(inst)
    assert not inst.exists()
    with pytest.raises(FileNotFoundError):
        os.rmdir(inst)


def test_events_fire_into_each_instance_that_enabled_them(fake):
    """Two instances and the top level, each with its own events, filter,
    tracing_on and buffer: an event lands in every array that enabled it."""
    mnt = fake("--workload", "kmem", "--count", 2000, "--rate", 4000, "--seed", 3,
               "--clock", "virtual")
    tracing = mnt / "tracing"
    a, b = tracing / "instances" / "a", tracing / "instances" / "b"
    os.mkdir(a)
    os.mkdir(b)
    write(tracing / "events/kmem/kmalloc/enable", "1")
    write(a / "events/kmem/kmalloc/filter", "bytes_req > 256")  # before the event is on
    write(a / "set_event", "kmem:kmalloc")
    write(b / "events/kmem/kfree/enable", "1")
    wait_done(mnt)

    def lines(root):
        return [l for l in (root / "trace").read_text().splitlines() if not l.startswith("#")]
    top, in_a, in_b = lines(tracing), lines(a), lines(b)
    assert top and in_a and in_b
    assert all("kmalloc:" in l for l in top + in_a)
    assert all("kfree:" in l for l in in_b)
    assert all(int(l.split("bytes_req=")[1].split()[0]) > 256 for l in in_a)
    assert len(in_a) < len(top)  # the filter is the instance's own
    assert (a / "set_event").read_text() == "kmem:kmalloc\n"
    assert (tracing / "set_event").read_text() == "kmem:kmalloc\n"
    assert (b / "set_event").read_text() == "kmem:kfree\n"
    # per-instance buffers: resizing one leaves the others
    write(a / "buffer_size_kb", "64")
    assert (a / "buffer_size_kb").read_text() == "67\n"
    assert (tracing / "buffer_size_kb").read_text() == "1410\n"
    os.rmdir(a)
    os.rmdir(b)
    assert sorted(os.listdir(tracing / "instances")) == []


@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="trace-cmd is not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="fakedebugfs run needs root")
def test_trace_cmd_buffers(tmp_path):
    """``trace-cmd record -B``, ``show -B`` and ``reset -B`` under ``run``."""
    script = (
        "set -e; trace-cmd record -B foo -e sched:sched_switch -o b.dat sleep 1 >rec.log 2>&1;"
        "mkdir /sys/kernel/tracing/instances/keep;"
        "echo hello > /sys/kernel/tracing/instances/keep/trace_marker;"
        "trace-cmd show -B keep > show.txt; trace-cmd reset -B keep;"
        "ls /sys/kernel/tracing/instances > after.txt;"
        "cat /sys/kernel/tracing/instances/keep/trace > reset.txt;"
        "trace-cmd report -i b.dat > report.txt")
    proc = subprocess.run([FAKEDEBUGFS, "run", "--", "sh", "-c", script], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + (tmp_path / "rec.log").read_text()
    report = (tmp_path / "report.txt").read_text()
    assert "sched_switch:" in report and "foo:" in report
    assert "hello" in (tmp_path / "show.txt").read_text()
    assert (tmp_path / "after.txt").read_text().split() == ["keep"]  # -B foo was removed
    assert "hello" not in (tmp_path / "reset.txt").read_text()
