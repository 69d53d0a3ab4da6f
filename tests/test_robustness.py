"""A client's bytes never break the server.

Every file of all three trees gets junk written to it, is read, seeked and
sent random ioctls.  The kernel would answer each with data or an errno; the
fake must too: no EIO (what the adapter answers when a file operation raises
something unexpected), no hang, and the mount keeps working afterwards.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import stat

import pytest

from conftest import status

JUNK = [
    b"", b"\n", b"0", b"1", b"-1", b"+1", b" 1", b"0x10", b"1\n\n", b"\x00", b"\x001",
    b"\xff\xfe\xfd", b"18446744073709551616", b"99999999999", b"4294967296",
    b"9" * 70, b"a" * 4096, b"nop", b"kmemtrace", b"!", b"common_pid == ", b"kmem:*",
    b"kmalloc", b"1 2 3", b"\n\n\n", bytes(range(256)), b"x" * 70000,
]


def _files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            yield os.path.join(dirpath, name)


# the profile's 2,305 events share one implementation: their files are poked
# for these systems only (all of them would take minutes through FUSE)
POKED_SYSTEMS = {"kmem", "sched", "raw_syscalls", "irq", "ftrace"}


def _poked(root, path) -> bool:
    parts = os.path.relpath(path, root).split(os.sep)
    return not (len(parts) > 3 and parts[:2] == ["tracing", "events"]
                and parts[2] not in POKED_SYSTEMS)


def _try(fn, *args):
    """Run one syscall; return its errno (0 when it worked)."""
    try:
        fn(*args)
        return 0
    except OSError as err:
        return err.errno


def _poke(path, rng) -> list[tuple[str, str, int]]:
    """Everything a careless or hostile client might do to one file."""
    eio = []
    for data in JUNK:
        fd = _open(path, os.O_WRONLY | os.O_NONBLOCK)
        if fd is None:
            break
        code = _try(os.write, fd, data)
        os.close(fd)
        if code == errno.EIO:
            eio.append((path, f"write {data[:20]!r}", code))
    fd = _open(path, os.O_RDONLY | os.O_NONBLOCK)
    if fd is not None:
        for _ in range(3):
            code = _try(os.read, fd, rng.choice((1, 7, 4096, 65536)))
            if code == errno.EIO:
                eio.append((path, "read", code))
        _try(os.lseek, fd, rng.randrange(1 << 20), os.SEEK_SET)
        for cmd in (0, 1, 0x4004F503, 0x8004F500 | rng.randrange(16), rng.getrandbits(32)):
            code = _try(fcntl.ioctl, fd, cmd, b"\0" * 8)
            if code == errno.EIO:
                eio.append((path, f"ioctl {cmd:#x}", code))
        os.close(fd)
    return eio


def _open(path, flags):
    try:
        return os.open(path, flags)
    except OSError:
        return None


@pytest.mark.parametrize("options", [
    ("--workload", "default", "--cpus", "2"),
    ("--workload", "kmem", "--cpus", "3", "--kmemtrace-abi", "2008-07", "--buffer-size", "8192"),
])
def test_junk_everywhere_never_breaks_the_server(fake, options):
    mnt = fake(*options, "--rate", "5000", "--enable-all")
    rng = random.Random(7)
    files = sorted(f for f in _files(mnt) if _poked(mnt, f))
    assert len(files) > 100
    eio = []
    for path in files:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:  # a tracer's option files go with it
            continue
        if stat.S_ISREG(mode):
            eio += _poke(path, rng)
    assert eio == []
    # still alive and serving
    assert status(mnt)["pid"] > 0
    assert (mnt / "ktrace" / "info").read_text().startswith("version 1.0.0\n")
    assert (mnt / "kmemtrace" / "abi_version").read_text() == "1\n"
    (mnt / "tracing" / "tracing_on").write_text("1")
    assert (mnt / "tracing" / "tracing_on").read_text() == "1\n"
    assert "kmem" in os.listdir(mnt / "tracing" / "events")
    (mnt / "tracing" / "buffer_size_kb").write_text("64")
    assert (mnt / "tracing" / "buffer_size_kb").read_text() == "67\n"  # 17 pages of 4080 bytes
