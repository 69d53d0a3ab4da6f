"""The snapshot buffer on real mounts of the Debian 6.12 profile (issue 33):
``snapshot`` (the help text of a freed and an allocated snapshot, the swap,
clear and free), ``per_cpu/cpuN/snapshot``, the ``snapshot`` trigger and
``tracing_max_latency``."""

from __future__ import annotations

import errno

import pytest

from fakedebugfs import Fake

HELP = ("# Snapshot commands:\n"
        "# echo 0 > snapshot : Clears and frees snapshot buffer\n"
        "# echo 1 > snapshot : Allocates snapshot buffer, if not already allocated.\n"
        "#                      Takes a snapshot of the main buffer.\n"
        "# echo 2 > snapshot : Clears snapshot buffer (but does not allocate or free)\n"
        "#                      (Doesn't have to be '2' works with any number that\n"
        "#                       is not a '0' or '1')\n")


def write(path, data: str) -> None:
    with open(path, "w") as fp:
        fp.write(data)


def write_errno(path, data: str):
    try:
        write(path, data)
    except OSError as err:
        return errno.errorcode[err.errno]
    return None


def events(text: str) -> list:
    return [l for l in text.splitlines() if not l.startswith("#")]


@pytest.fixture
def fk():
    with Fake(profile="debian-6.12", clock="virtual", cpus=2) as fake:
        yield fake


def test_snapshot_swap_clear_free(fk):
    t = fk.tracing
    assert (t / "snapshot").read_text() == \
        "# tracer: nop\n#\n#\n# * Snapshot is freed *\n#\n" + HELP
    fk.emit("ftrace:print", pid=5, buf="before")
    write(t / "snapshot", "1")  # allocate and take: the main buffer's events move
    snap = (t / "snapshot").read_text()
    assert [l.split(": ", 2)[-1] for l in events(snap)] == ["before"]
    assert events((t / "trace").read_text()) == []
    fk.emit("ftrace:print", pid=5, buf="after")
    write(t / "snapshot", "1")  # a swap: each buffer gets the other's content
    assert [l.split(": ", 2)[-1] for l in events((t / "snapshot").read_text())] == ["after"]
    assert [l.split(": ", 2)[-1] for l in events((t / "trace").read_text())] == ["before"]
    write(t / "snapshot", "2")  # clear
    assert (t / "snapshot").read_text() == \
        "# tracer: nop\n#\n#\n# * Snapshot is allocated *\n#\n" + HELP
    assert write_errno(t / "per_cpu/cpu0/snapshot", "0") == "EINVAL"
    # Debian 6.12 has no CONFIG_RING_BUFFER_ALLOW_SWAP (no irqsoff tracer): as its guest says
    assert write_errno(t / "per_cpu/cpu0/snapshot", "1") == "EINVAL"
    assert "# echo 0 > snapshot : Invalid for per_cpu snapshot file.\n" \
           "# echo 1 > snapshot : Not supported with this kernel.\n" \
           "#                     Must use main snapshot file to allocate.\n" in \
        (t / "per_cpu/cpu0/snapshot").read_text()
    write(t / "snapshot", "0")
    assert "Snapshot is freed" in (t / "snapshot").read_text()
    assert write_errno(t / "snapshot", "x") == "EINVAL"


def test_snapshot_trigger_and_max_latency(fk):
    t = fk.tracing
    write(t / "events/sched/sched_process_fork/trigger", "snapshot:1")
    assert (t / "events/sched/sched_process_fork/trigger").read_text() == "snapshot:count=1\n"
    assert "Snapshot is allocated" in (t / "snapshot").read_text()  # set, it allocates
    fk.emit("ftrace:print", pid=5, buf="first")
    fk.emit("sched:sched_process_fork", pid=5)
    fk.emit("ftrace:print", pid=5, buf="second")
    fk.emit("sched:sched_process_fork", pid=5)  # the count is spent
    assert [l.split(": ", 2)[-1] for l in events((t / "snapshot").read_text())] == ["first"]
    assert (t / "events/sched/sched_process_fork/trigger").read_text() == "snapshot:count=0\n"
    assert (t / "tracing_max_latency").read_text() == "0\n"
    write(t / "tracing_max_latency", "25")
    assert (t / "tracing_max_latency").read_text() == "25\n"


def test_instances_have_their_own_snapshot(fk):
    import os

    inst = fk.tracing / "instances/s"
    os.mkdir(inst)
    write(inst / "snapshot", "1")
    assert "Snapshot is allocated" in (inst / "snapshot").read_text()
    assert "Snapshot is freed" in (fk.tracing / "snapshot").read_text()
    assert not (inst / "synthetic_events").exists()
