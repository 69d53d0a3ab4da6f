"""Event triggers on real mounts: the trigger file's list and errnos as
the 6.18 kernel gives them, and their effects when the event fires."""

from __future__ import annotations

import errno
import os

import pytest

from conftest import wait_done


@pytest.fixture
def fake(fake):
    """This file's mounts serve linux-6.18, this machine's kernel: the trigger list
    and errnos are 6.18's (no hist there)."""
    return lambda *options, **kw: fake("--profile", "linux-6.18", *options, **kw)

AVAILABLE = "# Available triggers:\n# traceon traceoff stacktrace enable_event disable_event\n"


def write(path, data: str) -> None:
    with open(path, "w") as fp:
        fp.write(data)


def write_errno(path, data: str):
    try:
        write(path, data)
    except OSError as err:
        return errno.errorcode[err.errno]
    return None


@pytest.fixture
def tracing(fake):
    return fake("--workload", "none") / "tracing"


def test_trigger_list_and_errnos(tracing):
    trig = tracing / "events/initcall/initcall_finish/trigger"
    assert trig.read_text() == AVAILABLE
    write(trig, "traceon")
    write(trig, "stacktrace:3 if ret == 1")
    write(trig, "enable_event:initcall:initcall_level:2")
    assert trig.read_text() == ("enable_event:initcall:initcall_level:count=2\n"
                                "stacktrace:count=3 if ret == 1\ntraceon:unlimited\n")
    assert write_errno(trig, "traceoff") == "EEXIST"  # traceon/traceoff share a type
    assert write_errno(trig, "disable_event:initcall:initcall_level") == "EEXIST"
    assert write_errno(trig, "enable_event:initcall:nosuch") == "EINVAL"
    assert write_errno(trig, "snapshot") == "EINVAL"  # not in this kernel
    assert write_errno(trig, "hist:keys=ret") == "EINVAL"
    assert write_errno(trig, "traceon:99999999999999999999") == "ERANGE"
    assert write_errno(trig, "traceoff if nosuch == 1") == "EINVAL"
    # the target is soft-enabled, the triggering event too
    assert (tracing / "events/initcall/initcall_level/enable").read_text() == "0*\n"
    assert (tracing / "events/initcall/initcall_finish/enable").read_text() == "0*\n"
    for cmd in ("!traceoff", "!stacktrace", "!disable_event:initcall:initcall_level"):
        write(trig, cmd)  # '!' removes whichever of the type is there
    assert trig.read_text() == AVAILABLE
    assert (tracing / "events/initcall/initcall_level/enable").read_text() == "0\n"
    write(trig, "traceon:0x10")
    assert trig.read_text() == "traceon:count=16\n"
    assert "Field not found" in (tracing / "error_log").read_text()


def test_trigger_effects(fake):
    """traceoff with a filter stops tracing on the first matching event
    (itself recorded: a post trigger); enable_event turns on its target
    once; stacktrace adds kernel_stack entries; counts run down."""
    mnt = fake("--workload", "kmem", "--count", 3000, "--rate", 2000, "--seed", 5,
               "--clock", "virtual")
    tracing = mnt / "tracing"
    inst = tracing / "instances" / "t"
    os.mkdir(inst)
    write(inst / "events/kmem/kmalloc/enable", "1")
    write(inst / "events/kmem/kmalloc/trigger", "enable_event:kmem:kfree:1")
    write(inst / "events/kmem/kmalloc/trigger", "stacktrace:2")
    write(tracing / "tracing_on", "0")  # set up, then trace: the trigger sees it all
    write(tracing / "events/kmem/kmalloc/trigger", "traceoff if bytes_req > 1000")
    write(tracing / "events/kmem/kmalloc/enable", "1")
    write(tracing / "tracing_on", "1")
    wait_done(mnt)
    assert (tracing / "tracing_on").read_text() == "0\n"
    top = [l for l in (tracing / "trace").read_text().splitlines() if "kmalloc:" in l]
    assert int(top[-1].split("bytes_req=")[1].split()[0]) > 1000  # the last one is the trigger's
    assert all(int(l.split("bytes_req=")[1].split()[0]) <= 1000 for l in top[:-1])
    assert (inst / "tracing_on").read_text() == "1\n"
    assert (inst / "events/kmem/kfree/enable").read_text() == "1*\n"
    assert (inst / "events/kmem/kmalloc/trigger").read_text() == (
        "stacktrace:count=0\nenable_event:kmem:kfree:count=0\n")
    text = (inst / "trace").read_text()
    assert text.count("<stack trace>") == 2
    assert "kfree:" in text
