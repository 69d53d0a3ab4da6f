"""``kmemtrace/``: the debugfs files of kmemtrace (the 2008 relay patches, mm/kmemtrace.c
``kmemtrace_setup_late``).

    kmemtrace/cpuN            0400  relay_file_operations (relay_late_setup_files)
    kmemtrace/total_overruns  0400  debugfs_create_u32: "%llu\\n"
    kmemtrace/abi_version     0400  debugfs_create_u32: "1\\n"
    kmemtrace/enabled         0600  DEFINE_SIMPLE_ATTRIBUTE "%llu\\n" (2008-08 ABI only)

``cpuN`` reads never block: they return what is there (0 bytes when empty),
never the padding; poll says readable once a whole sub-buffer is finished.
The files cannot be written (EINVAL) or seeked; read-only u32 attributes
refuse writes with EACCES, as ``fops_u32_ro`` does.  The ``enabled`` file is
in the August 2008 mm/kmemtrace.c, not in the August 2008 ABI document's list of
files; the July 2008 RFC code has no such file (docs/kmemtrace.md#files).
"""

from __future__ import annotations

import errno

from fakedebugfs.engine.kmemtrace.tracer import Kmemtrace
from fakedebugfs.fs.fops import POLLIN_RDNORM, FileOperations, OpenFile, ValueFile, fail
from fakedebugfs.fs.tree import Dir
from fakedebugfs.fs.waitqueue import WaitQueue


class RelayFile(FileOperations):
    """``relay_file_operations`` on one CPU's buffer (``struct rchan_buf``)."""

    nonseekable = True  # relay_file_open: nonseekable_open

    def __init__(self, tree: "KmemtraceTree", cpu: int):
        self.tree = tree
        self.buf = tree.kmemtrace.chan.bufs[cpu]
        self.read_wait = WaitQueue()  # buf->read_wait

    def read_nowait(self, f: OpenFile, off: int, size: int) -> bytes:
        """``relay_file_read`` (it never waits): the offset is ignored, the buffer's read
        position is shared by every open file."""
        return self.buf.read(size)

    def poll(self, f: OpenFile, pt) -> int:
        """``relay_file_poll``: POLLIN once a finished sub-buffer is unread."""
        if not f.readable:
            return 0
        pt.wait(self.read_wait)
        return 0 if self.buf.empty() else POLLIN_RDNORM


def u32_ro(value) -> ValueFile:
    """``debugfs_create_u32`` with a read-only mode (``fops_u32_ro``)."""
    return ValueFile(lambda: f"{value()}\n", _eacces)


def _eacces(data: bytes) -> None:
    raise fail(errno.EACCES)  # simple_attr_write without a set()


def kstrtoull(data: bytes) -> int:
    """``kstrtoull(buf, 0, &val)`` as ``simple_attr_write`` uses it: base from
    the prefix (0x hex, 0 octal), one trailing newline allowed."""
    text = data.split(b"\0", 1)[0].decode("ascii", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    base = 16 if text[:2].lower() == "0x" else 8 if text[:1] == "0" and len(text) > 1 else 10
    digits = text[2:] if base == 16 else text
    try:
        if not digits or not digits.isalnum():
            raise ValueError
        value = int(digits, base)
    except ValueError:
        raise fail(errno.EINVAL) from None
    if value >= 1 << 64:
        raise fail(errno.ERANGE)
    return value


class KmemtraceTree:
    """Builds ``kmemtrace/`` and wakes relay readers after each batch."""

    def __init__(self, kmemtrace: Kmemtrace):
        self.kmemtrace = kmemtrace
        self.root = self.setup_late()
        kmemtrace.engine.listeners.append(self.wakeup_readers)

    def setup_late(self) -> Dir:
        """The files of ``kmemtrace_setup_late``."""
        kt = self.kmemtrace
        root = Dir("kmemtrace")
        root.file("abi_version", 0o400, u32_ro(lambda: kt.abi_version))
        root.file("total_overruns", 0o400, u32_ro(lambda: kt.buf_overruns))
        if kt.abi.name == "2008-08":
            root.file("enabled", 0o600, ValueFile(lambda: f"{int(kt.enabled)}\n",
                                                  lambda data: kt.set_enabled(kstrtoull(data))))
        self.cpu_files = [RelayFile(self, cpu) for cpu in range(len(kt.chan.bufs))]
        for cpu, fops in enumerate(self.cpu_files):
            root.file(f"cpu{cpu}", 0o400, fops)  # relay_create_buf_file: S_IRUSR
        return root

    def wakeup_readers(self) -> None:
        """``wakeup_readers``: the deferred wake-up of a sub-buffer switch."""
        for fops in self.cpu_files:
            if fops.buf.wakeup_pending:
                fops.buf.wakeup_pending = False
                fops.read_wait.wake()


def create_tree(kernel) -> Dir:
    """``kmemtrace/`` for *kernel* (a :class:`fakedebugfs.engine.kernel.Kernel`)."""
    return KmemtraceTree(kernel.kmemtrace).root


__all__ = ["KmemtraceTree", "create_tree"]
