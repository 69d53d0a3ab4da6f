"""``trace_marker`` and ``trace_marker_raw``: the kernel's
``tracing_mark_fops`` / ``tracing_mark_raw_fops`` (``tracing_mark_write``,
``tracing_mark_raw_write``): a write becomes a ``print`` (or ``raw_data``)
entry recorded as ``current``, the writer, on the CPU it runs on, its comm
recorded as ``tracing_record_cmdline`` does.
"""

from __future__ import annotations

from typing import Optional

from fakedebugfs.fs import pidview
from fakedebugfs.fs.fops import FileOperations, OpenFile, writer_pid


def writer_cpu(pid: int, nr_cpus: int) -> Optional[int]:
    """The CPU task *pid* runs on (``/proc/PID/stat`` field 39,
    ``processor``: a writer blocked in write(2) is where it wrote from),
    folded into the fake's CPUs; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fp:
            stat = fp.read()
        return int(stat[stat.rindex(b")") + 2:].split()[36]) % nr_cpus
    except (OSError, ValueError, IndexError):
        return None


class Marker(FileOperations):
    """``tracing_mark_fops``/``tracing_mark_raw_fops``."""

    def __init__(self, tree, raw: bool):
        self.tree = tree
        self.raw = raw

    async def write(self, f: OpenFile, off: int, data: bytes) -> int:
        local = writer_pid(f)  # tracing_mark_write records current, the writer
        pid = pidview.shown(local)  # as the writer sees itself (fs/pidview.py)
        _learn_comm(self.tree.ft.engine, pid, local)
        cpu = writer_cpu(local, self.tree.ft.engine.nr_cpus)  # on current's CPU
        n = self.tree.ft.marker(pid, data, raw=self.raw, cpu=cpu)
        self.tree.wake()
        return n


def _learn_comm(engine, pid: int, local: int) -> None:
    """``tracing_record_cmdline`` for a writer: its comm from /proc
    (*local*: its pid there)."""
    if pid and pid not in engine.comms:
        try:
            with open(f"/proc/{local}/comm") as fp:
                engine.set_comm(pid, fp.read().strip())
        except OSError:
            pass
