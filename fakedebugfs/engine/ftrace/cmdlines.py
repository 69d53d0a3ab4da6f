"""``saved_cmdlines``: the pid -> comm map tracing keeps (``struct
saved_cmdlines_buffer`` of kernel/trace/trace_sched_switch.c).

A comm is saved only when an entry of its task is recorded
(``tracing_record_cmdline`` after a commit, with the ``record-cmd`` option
on; the idle task never), into a ring of ``saved_cmdlines_size`` slots: a
new pid takes the slot after the last one used, evicting the pid there
(``trace_save_cmdline``).  ``saved_cmdlines`` lists the slots in order
(``saved_cmdlines_show``); resizing starts an empty buffer
(``allocate_cmdlines_buffer``).  The text of ``trace`` names tasks from it
(``trace_find_cmdline``: ``<idle>`` for 0, ``<...>`` when not saved).
"""

from __future__ import annotations

from typing import Optional

from fakedebugfs.engine.core.lazynp import np


class SavedCmdlines:
    """The saved pid -> comm slots; *comms* gives a task's comm now."""

    def __init__(self, comms: dict, size: int):
        self.comms = comms
        self.resize(size)

    def resize(self, size: int) -> None:
        self.num = size
        self.slots: list[Optional[tuple[int, str]]] = [None] * size
        self.map: dict[int, int] = {}  # pid -> slot
        self.idx = 0

    def record(self, pid: int) -> None:
        """``trace_save_cmdline`` for task *pid* (its comm now)."""
        if pid <= 0:
            return
        comm = self.comms.get(pid)
        if comm is None:
            return
        slot = self.map.get(pid)
        if slot is None:
            slot = (self.idx + 1) % self.num
            old = self.slots[slot]
            if old is not None:
                self.map.pop(old[0], None)
            self.map[pid] = slot
            self.idx = slot
        elif self.slots[slot][1] == comm:
            return
        self.slots[slot] = (pid, comm)

    def record_many(self, pids, order=None) -> None:
        """:meth:`record` of each pid of *pids* (an array, in order): each
        distinct pid once, in order of first appearance, unless a slot
        that would be taken holds a pid of *pids* (then every change of
        pid is recorded, as one by one).  *order*: the distinct pids in
        order of first appearance, when the caller has them."""
        pids = np.asarray(pids)
        if not len(pids) or (order is not None and self.saved(order)):
            return  # (with order: often every task is saved already, batch after batch)
        change = np.ones(len(pids), bool)
        change[1:] = pids[1:] != pids[:-1]
        heads = pids[change]  # each run of one task once
        if order is None:
            uniq, first = np.unique(heads, return_index=True)
            order = uniq[np.argsort(first)].tolist()
        new = sum(1 for p in order if p > 0 and p not in self.map and p in self.comms)
        victims = {self.slots[(self.idx + k) % self.num][0]
                   for k in range(1, min(new, self.num) + 1)
                   if self.slots[(self.idx + k) % self.num] is not None}
        if new >= self.num or victims.intersection(order):
            order = heads.tolist()
        for pid in order:
            self.record(pid)

    def saved(self, pids) -> bool:
        """Recording each of *pids* would change nothing: each is the idle
        task, has no comm, or is saved with its comm now."""
        comms, slots, where = self.comms, self.slots, self.map
        for pid in pids:
            if pid > 0 and pid in comms:
                slot = where.get(pid)
                if slot is None or slots[slot][1] != comms[pid]:
                    return False
        return True

    def get(self, pid: int, default: str = "<...>") -> str:
        """``trace_find_cmdline``."""
        if pid == 0:
            return "<idle>"
        slot = self.map.get(pid)
        return self.slots[slot][1] if slot is not None else default

    def __contains__(self, pid) -> bool:
        return pid == 0 or pid in self.map

    def __getitem__(self, pid):
        if pid not in self:
            raise KeyError(pid)
        return self.get(pid)

    def show(self) -> str:
        """``saved_cmdlines``: ``<pid> <comm>`` per used slot, in slot order."""
        return "".join(f"{s[0]} {s[1]}\n" for s in self.slots if s is not None)


__all__ = ["SavedCmdlines", "SavedTgids"]


class SavedTgids:
    """``tgid_map`` and ``saved_tgids`` (kernel/trace/trace_sched_switch.c):
    while ``record-tgid`` is set, each recorded task's thread-group id by
    pid (``trace_save_tgid``; the idle task, pid 0, is never saved), shown
    ``"<pid> <tgid>"`` in pid order; kept when the option is cleared.  The
    fake's tasks are their own thread group (tgid = pid) unless told."""

    def __init__(self):
        self.map: dict[int, int] = {}

    def record(self, pid: int, tgid: int = 0) -> None:
        if pid > 0:
            self.map[pid] = tgid or pid

    def find(self, pid: int) -> int:
        """``trace_find_tgid``: 0 when not saved."""
        return self.map.get(pid, 0)

    def show(self) -> str:
        return "".join(f"{pid} {tgid}\n" for pid, tgid in sorted(self.map.items()))

