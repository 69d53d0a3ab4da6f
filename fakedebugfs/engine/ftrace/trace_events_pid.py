"""A trace array's event pid lists (kernel/trace/trace_events.c, 6.18).

``set_event_pid`` and ``set_event_notrace_pid`` (``ftrace_event_pid_write``,
the ``filtered_pids``/``filtered_no_pids`` of a trace array): which tasks
this array's events record (``trace_event_ignore_this_pid``), the
``sched_switch``/``sched_wakeup*`` exceptions that look at the other task
(``event_filter_pid_sched_switch_probe_pre``,
``event_filter_pid_sched_wakeup_probe_pre``), and ``event-fork``
(``trace_event_follow_fork``: children join their parent's lists, exiting
tasks leave them).
"""

from __future__ import annotations

# events whose pid filtering also looks at another task (pid fields)
PID_PAIR_EVENTS = {"sched:sched_switch": ("prev_pid", "next_pid"),
                   "sched:sched_wakeup": ("pid",), "sched:sched_wakeup_new": ("pid",),
                   "sched:sched_waking": ("pid",)}


class TraceEventPids:
    """The pid lists of one trace array and their verdict on each firing.
    A base of :class:`~.trace_events.TraceEvents`; needs ``engine`` of the
    trace array."""

    event_pids: set  # set_event_pid
    notrace_pids: set  # set_event_notrace_pid

    def _init_event_pids(self) -> None:
        self.event_pids = set()
        self.notrace_pids = set()
        self._fork_probes = None

    def ignore_pid(self, pid: int) -> bool:
        """``trace_event_ignore_this_pid``: set_event_notrace_pid, then
        set_event_pid."""
        if pid in self.notrace_pids:
            return True
        return bool(self.event_pids) and pid not in self.event_pids

    def pid_filtered(self, key: str, pid: int, values) -> bool:
        """The pid lists' verdict for one firing of *key*: ``sched_switch``
        is kept if its previous or next task is traced, a wake-up if the
        waker or the woken task is (``event_filter_pid_sched_switch_probe_pre``,
        ``..._sched_wakeup_probe_pre``); any other event by its task."""
        if not (self.event_pids or self.notrace_pids):
            return False
        if key in PID_PAIR_EVENTS:
            tp = self.engine.tracepoints[key]
            try:
                others = [values[tp.index(arg)] for arg in PID_PAIR_EVENTS[key]]
            except (ValueError, IndexError):
                return self.ignore_pid(pid)
            pids = others if key == "sched:sched_switch" else [pid] + others
            return all(self.ignore_pid(p) for p in pids)
        return self.ignore_pid(pid)

    def follow_fork(self, on: bool) -> None:
        """``trace_event_follow_fork``: with ``event-fork`` a forked task
        joins the pid lists its parent is in, an exiting one leaves them."""
        fork = self.engine.tracepoints.get("sched:sched_process_fork")
        exit_ = self.engine.tracepoints.get("sched:sched_process_exit")
        if fork is None or exit_ is None:
            return
        if self._fork_probes is None:
            self._fork_probes = (self._on_fork(fork), self._on_exit(exit_))
        for tp, probe in zip((fork, exit_), self._fork_probes):
            (tp.register if on else tp.unregister)(probe)

    def task_fork(self, parent: int, child: int) -> None:
        """``event_filter_pid_sched_process_fork``: *child* joins the
        lists *parent* is in."""
        for pids in (self.event_pids, self.notrace_pids):
            if parent in pids:
                pids.add(child)

    def task_exit(self, pid: int) -> None:
        """``event_filter_pid_sched_process_exit``: *pid* leaves the lists,
        once the events it made before its exit are in: a source that
        fires them later (the engine's ``pid_exit_hold``: ``run``'s mirror,
        whose samples of a task can still wait in its rings when the
        task's exit comes in) holds the removal until then."""
        if not (self.event_pids or self.notrace_pids):
            return
        hold = self.engine.pid_exit_hold
        if hold is not None:
            hold(lambda: self._leave_lists(pid))
        else:
            self._leave_lists(pid)

    def _leave_lists(self, pid: int) -> None:
        self.event_pids.discard(pid)
        self.notrace_pids.discard(pid)

    def _on_fork(self, tp):
        parent_i, child_i = tp.index("parent_pid"), tp.index("child_pid")

        def probe(cpu, pid, ts, values):
            self.task_fork(values[parent_i], values[child_i])
        return probe

    def _on_exit(self, tp):
        pid_i = tp.index("pid")

        def probe(cpu, pid, ts, values):
            self.task_exit(values[pid_i])
        return probe


__all__ = ["PID_PAIR_EVENTS", "TraceEventPids"]
