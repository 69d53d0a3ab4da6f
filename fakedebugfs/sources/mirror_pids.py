"""The pids in mirrored events' fields, as the command numbers its tasks.

The kernel writes a tracepoint's pid fields (``pid_t`` in its format:
``sched_process_fork``'s ``parent_pid`` and ``child_pid``,
``sched_process_exec``'s ``pid``, ``sched_switch``'s ``prev_pid`` and
``next_pid`` ...) with the task's pid in the initial PID namespace
(``task->pid``), whereas a perf sample names its task as the namespace
of the event's opener numbers it.  ``run``'s command lives in a PID
namespace of its own, and the fake is its machine: ``$!``, getpid(),
``set_event_pid`` and each line's task are its numbers, so the fields
are translated to them too:

* each sample pairs its task's two numbers (the entry's ``common_pid``,
  the sample's ``tid``): every task that made a sample is known;
* a task not seen yet (a fork's child before its first sample) is looked
  up in the proc of the initial PID namespace's side (opened when the
  mirror was made, before ``run`` made its namespaces): its ``NSpid``
  at the opener's depth;
* a task of no namespace under the opener's (a host daemon in
  ``--mirror system``), or gone before it was seen, keeps the kernel's
  number.

A mixin of :class:`~fakedebugfs.sources.mirror_drain.MirrorDrain`
(:meth:`pid_setup` is called by the mirror's constructor; the opener
sets ``opener``)."""

from __future__ import annotations

import os
from typing import Optional

from fakedebugfs.engine.core.lazynp import np

KNOWN_MOST = 1 << 16  # tasks remembered (the table starts again past it)


class MirrorPids:
    """Kernel pids -> the opener's namespace's."""

    def pid_setup(self) -> None:
        try:
            self._host_proc: Optional[int] = os.open(
                "/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            self._host_proc = None
        self._ns_of: dict[int, int] = {}  # kernel pid -> the opener's namespace's

    def pid_close(self) -> None:
        if self._host_proc is not None:
            os.close(self._host_proc)
            self._host_proc = None

    def learn_pids(self, kernel_pid, tid) -> None:
        """Pairs of the samples: *kernel_pid* (``common_pid``) and *tid*
        (the sample's, 0 for a task outside the opener's namespace)."""
        inside = (tid > 0) & (tid < 1 << 22)  # (0: outside it; an exiting task: -1)
        if not inside.any():
            return
        pairs = np.unique(kernel_pid[inside] << 32 | tid[inside]).tolist()
        if len(self._ns_of) + len(pairs) > KNOWN_MOST:
            self._ns_of.clear()
        self._ns_of.update((p >> 32, p & 0xFFFFFFFF) for p in pairs)

    def ns_pids(self, col):
        """A column of kernel pids as the opener's namespace numbers them."""
        known = self._ns_of
        values = col.tolist()
        for v in set(values):
            if v > 0 and v not in known:
                known[v] = self._looked_up(v)
        return np.fromiter((known.get(v, v) for v in values), np.int64, len(values))

    def _looked_up(self, pid: int) -> int:
        """*pid*'s number at the opener's depth, from the initial side's
        proc; *pid* itself when it has none there (or is gone)."""
        if self._host_proc is None:
            return pid
        depth = self._opener_depth()
        ns = _nspid(self._host_proc, str(pid))
        return ns[depth] if depth is not None and len(ns) > depth else pid

    def _opener_depth(self) -> Optional[int]:
        """Where the opener's namespace is in an ``NSpid`` line of that
        proc: the server's own depth, one more for the command's init."""
        mine = _nspid(self._host_proc, "self")
        if not mine:
            return None
        return len(mine) - 1 + bool(getattr(self.opener, "remote", False))


def _nspid(proc_fd: int, name: str) -> list:
    try:
        with open(f"/proc/self/fd/{proc_fd}/{name}/status", "rb") as fp:
            for line in fp:
                if line.startswith(b"NSpid:"):
                    return [int(v) for v in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


__all__ = ["MirrorPids"]
