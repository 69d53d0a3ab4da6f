"""``current`` for the engine while a write to a tracefs file runs: the
kernel runs the file's ``write`` in the writer's task, on its CPU, so
what that code calls (``eventfs_create_dir`` when a definition adds an
event: :mod:`fakedebugfs.engine.ftrace.eventfs_calls`) is the writer's
(``bash-241 ... testprobe: (eventfs_create_dir+0x4/0x160)`` in the guest).
"""

from __future__ import annotations

from fakedebugfs.fs import pidview
from fakedebugfs.fs.fops import WRITER_PID
from fakedebugfs.trees.tracing_marker import _learn_comm, writer_cpu


def as_writer(engine, store):
    """*store* run with ``engine.current_task`` the writer's ``(pid, cpu)``
    (as the writer sees its pid); None again after it."""

    def run(data):
        local = WRITER_PID.get()
        if local:
            pid = pidview.shown(local)
            _learn_comm(engine, pid, local)
            engine.current_task = (pid, writer_cpu(local, engine.nr_cpus) or 0)
        try:
            return store(data)
        finally:
            engine.current_task = None

    return run


__all__ = ["as_writer"]
