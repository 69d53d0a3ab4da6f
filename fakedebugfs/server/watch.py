"""The server's side of ``fakedebugfs run``'s process events.

``run`` asks the server (control request ``watch``) to watch its command
before the command execs; the server opens the perf side-band buffers
(:mod:`fakedebugfs.sources.procevents`) and injects what they report.

While a tracer listens to one of the tracepoints they stand for
(:data:`SIDEBAND`: an enabled event in any trace array, ``event-fork``'s
follower, an enabled uprobe an exec may hit), the server drains them

* every ``DRAIN_EVERY`` (a task; not on each perf wake-up, which a busy
  command would make for every switch), and
* before every FUSE open of a file that is not static
  (:meth:`Watches.sync`, the adapter's ``on_open``),

so a reader that opens ``trace`` right after its child was switched out
finds the switch there, as it would on the kernel, where the tracepoint
and the reader share one ring buffer.

With nothing attached to those tracepoints a drain would inject nothing
(each event is left out, as a static key that is off costs the kernel
nothing), so neither an open nor a timer pays for one: the server waits on
the perf fds, which wake it when a ring is half full (``wakeup_watermark``)
or once the command is gone, and looks again every ``QUIET_CHECK`` for a
probe that came without an enable (``event-fork``, ktrace).  What the
drains then take in are the command's forks, execs and names (the records
are few: the context switches are not recorded then), kept so that the
events fired later name each task as the kernel does.  A trace array's
enable of one of those events (``on_enable_change``) first drains what
happened before it (not shown: the probe is not there yet), turns the
context-switch records on for ``sched_switch``, and wakes the drains; its
disable drains what happened until then.  (``trace-cmd reset`` inside
``run`` cost the server 2.4-3.0 s of CPU with a drain every 5 ms, twice
what it costs with ``--clock virtual``, which watches nothing; now the
same: docs/cost.md.)

An exec also hits the uprobes on the binary it loads: each enabled entry
probe on that file (same device and inode) fires once, after the exec's
``sched_process_exec``, as if the probed instruction ran once in the new
image (:func:`~fakedebugfs.engine.ftrace.trace_uprobe.exec_hits`); its
``__probe_ip`` is where the task mapped that file offset (the exec's first
executable mapping, else ``/proc/PID/maps`` while the task lives, else the
offset itself).
"""

from __future__ import annotations

import logging
import os
import select

import trio

from fakedebugfs.engine.core.tracepoint import Tracepoint
from fakedebugfs.engine.ftrace.trace_dynevent import is_dynamic
from fakedebugfs.engine.ftrace.trace_uprobe import exec_hits, hit_fields
from fakedebugfs.sources.inject import InjectError
from fakedebugfs.sources.forkallocs import EVENT as FORK_KMALLOC, ForkAllocs, shown as allocs_shown
from fakedebugfs.sources.procevents import ProcessEvents

log = logging.getLogger(__name__)

DRAIN_EVERY = 0.005  # seconds between drains when no open asks for one (a tracer listens)
QUIET_CHECK = 0.1  # seconds between looks for a probe while nothing listens
# the tracepoints the process events become (sources/procevents.py); a
# fork's kmallocs in its parent too, where the profile shows them
# (sources/forkallocs.py)
SIDEBAND = ("sched:sched_switch", "sched:sched_process_fork", "sched:sched_process_exit",
            "sched:sched_process_exec", "sched:sched_waking", "sched:sched_wakeup")
FORK_EVENT = "sched:sched_process_fork"
EXEC_EVENT = "sched:sched_process_exec"
SWITCH_EVENT = "sched:sched_switch"
# the events made from the context switches (a switch in after a sleep is a wake-up too)
SWITCH_EVENTS = (SWITCH_EVENT, "sched:sched_waking", "sched:sched_wakeup")


class Watches:
    """The commands watched by one server; events go to *injector*."""

    def __init__(self, injector, nr_cpus: int):
        self.injector = injector
        self.nr_cpus = nr_cpus
        self.watched: list[ProcessEvents] = []
        self.lost = 0  # process events a failure of the fake's left out (drain)
        self.mirrored = ()  # events --mirror takes from the kernel itself (not injected)
        self.poller = select.epoll()  # the rings' fds, and the kick
        self.kick = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.proc = "/proc"  # the proc of the PID namespace the watched pids are of
        self.poller.register(self.kick, select.EPOLLIN)
        self.hooked = None  # the ftrace whose on_enable_change calls enable_change
        self._listened, self._listened_at = False, None  # listened()'s answer, and when
        self._allocs = None  # ForkAllocs: a fork's kmallocs in its parent

    def add(self, pid: int, parent: int, parent_comm: str, opened=None,
            proc: str = "/proc") -> ProcessEvents:
        """Watch *pid* (forked by *parent*, not yet exec'd); OSError where
        the kernel refuses (perf_event_paranoid, seccomp).  *opened*: its
        perf events, opened in the command's PID namespace
        (:func:`~fakedebugfs.sources.procevents.open_watch`), whose proc is
        *proc*."""
        pe = ProcessEvents(pid, self.nr_cpus, opened, proc)
        self.proc = proc
        self.watched.append(pe)
        for fd in pe.fds():
            self.poller.register(fd, select.EPOLLIN)
        if self.hooked is None:
            self.hooked = self.injector.kernel.ftrace
            self.hooked.on_enable_change.append(self.enable_change)
        pe.switches(self.switches_wanted())
        self.inject([pe.fork_event(parent, parent_comm)])
        return pe

    def switches_wanted(self) -> bool:
        """``sched_switch`` (or a wake-up event) has a probe, and it is not --mirror's."""
        tps = self.injector.kernel.engine.tracepoints
        return any(key in tps and bool(tps[key].probes) and key not in self.mirrored
                   for key in SWITCH_EVENTS)

    def switches(self, on: bool) -> None:
        """Record the watched tasks' context switches (*on*) or not."""
        for pe in self.watched:
            try:
                pe.switches(on)
            except OSError as err:  # never the server's end
                log.debug("context switches of %d: %s", pe.pid, err)

    def enable_change(self, key: str, on: bool) -> None:
        """The fake's hook before an array starts (*on*) or stops recording
        *key*: for a side-band event or a uprobe, what the rings hold goes
        in first (before an enable, the new probe is not there yet: none of
        it is shown for *key*, as the kernel recorded nothing before), the
        switches are recorded from an enable of ``sched_switch`` on, and the
        drains are woken (they look again which events are listened to).
        Never raises: an OSError would refuse the enable."""
        if not self._sideband(key) and not is_dynamic(self.injector.kernel.ftrace, key):
            return
        try:
            self.drain()
            if on and key in SWITCH_EVENTS and key not in self.mirrored:
                self.switches(True)
            os.eventfd_write(self.kick, 1)
        except Exception:  # noqa: BLE001: never the enable's failure
            log.exception("process events before %sabling %s", "en" if on else "dis", key)

    def listened(self) -> bool:
        """A probe is attached to one of the :data:`SIDEBAND` tracepoints
        (an enabled event in any trace array, ``event-fork``'s follower...)
        or a uprobe event is enabled.  Asked before every open: the answer
        is kept until a probe is attached or detached anywhere
        (``Tracepoint.changes``) or a tracepoint comes or goes."""
        engine = self.injector.kernel.engine
        tracepoints = engine.tracepoints
        version = getattr(tracepoints, "version", None)
        stamp = (Tracepoint.changes, id(tracepoints), version, id(engine.kallsyms))
        if stamp != self._listened_at or version is None:
            self._listened, self._listened_at = self._listening(tracepoints), stamp
        return self._listened

    def _listening(self, tracepoints) -> bool:
        """:meth:`listened`, asked of the tracepoints themselves."""
        for name in (*SIDEBAND, FORK_KMALLOC):
            tp = tracepoints.get(name)
            if tp is not None and tp.probes and self._sideband(name):
                return True
        return self.uprobes_enabled()

    def _sideband(self, key: str) -> bool:
        """*key* is one of the events the watcher makes: :data:`SIDEBAND`,
        and a fork's kmallocs where the profile shows them."""
        return key in SIDEBAND or (key == FORK_KMALLOC
                                   and allocs_shown(self.injector.kernel.engine.kallsyms))

    def _dyn(self):
        """The fake's dynamic events (None before its tracing tree is made)."""
        return getattr(self.injector.kernel.ftrace, "dyn_events", None)

    def uprobes_enabled(self) -> bool:
        """A uprobe event is enabled: an exec may hit it."""
        dyn = self._dyn()
        return bool(dyn is not None and dyn.list) and any(dyn.busy(p.key) for p in dyn.list)

    def sync(self) -> None:
        """Before an open: inject what the watched buffers hold now, if
        anything listens (else the next :meth:`follow` round takes the
        records in, for the tasks' names and execs it keeps)."""
        if self.listened():
            self.drain()

    def drain(self) -> None:
        """Inject whatever the watched buffers hold now.  A batch the fake
        fails on is logged with its traceback and counted (``lost``), never
        the end of the server: the command's tools keep their mount."""
        for pe in self.watched:
            events = pe.drain()
            if events:
                try:
                    self.inject(events)
                except Exception:  # noqa: BLE001: a bug of ours, not the server's end
                    self.lost += len(events)
                    log.exception("%d process events lost", len(events))

    def inject(self, events: list[dict]) -> None:
        """Fire each event the fake can show; one it cannot (an event the
        profile lacks, a pid of another namespace) is left out alone, and
        one no tracer listens to costs nothing (a context switch with
        ``sched_switch`` off)."""
        prepared = []
        tracepoints = self.injector.kernel.engine.tracepoints
        uprobes = any(ev["event"] == EXEC_EVENT for ev in events) and self.uprobes_enabled()
        kmalloc = tracepoints.get(FORK_KMALLOC)
        if kmalloc is not None and kmalloc.probes and FORK_KMALLOC not in self.mirrored:
            events = self.with_fork_allocs(events)
        for ev in events:
            tp = tracepoints.get(ev["event"])
            # nothing attached: the static key is off
            if ev["event"] not in self.mirrored and (tp is None or tp.probes):
                try:
                    prepared.append(self.injector.prepare(
                        ev["event"], cpu=ev["cpu"], pid=ev["pid"], comm=ev.get("comm"),
                        fields=ev.get("fields") or {}))
                except (InjectError, ValueError) as err:
                    log.debug("process event left out: %s", err)
            if uprobes and ev["event"] == EXEC_EVENT:
                prepared += self.uprobe_hits(ev)
        if prepared:
            self.injector.fire(prepared)

    def with_fork_allocs(self, events: list[dict]) -> list[dict]:
        """*events* with each fork's kmallocs in its parent before it
        (:mod:`fakedebugfs.sources.forkallocs`)."""
        kallsyms = self.injector.kernel.engine.kallsyms
        if self._allocs is None or self._allocs.kallsyms is not kallsyms:
            self._allocs = ForkAllocs(kallsyms, self.proc)
        self._allocs.proc = self.proc
        out = []
        for ev in events:
            if ev["event"] == FORK_EVENT:
                out += self._allocs.events(ev)
            out.append(ev)
        return out

    def uprobe_hits(self, ev: dict) -> list:
        """The uprobe events one exec (*ev*) hits, prepared."""
        filename = (ev.get("fields") or {}).get("filename") or ""
        try:
            st = os.stat(filename)
        except (OSError, ValueError):
            return []
        out = []
        comm = ev.get("comm") or ""
        for probe in exec_hits(self._dyn(), (st.st_dev, st.st_ino)):
            ip = mapped_address(ev["pid"], st.st_ino, probe.offset, ev.get("mapping"),
                                self.proc)
            for fields in (hit_fields(probe, ip, comm), {"__probe_ip": ip}):
                try:
                    out.append(self.injector.prepare(probe.key, cpu=ev["cpu"], pid=ev["pid"],
                                                     comm=comm, fields=fields))
                    break
                except (InjectError, ValueError) as err:
                    log.debug("uprobe hit left out: %s", err)
        return out

    async def follow(self) -> None:
        """Drain until cancelled: every ``DRAIN_EVERY`` seconds while a
        tracer listens (a reader blocked in ``trace_pipe`` is woken by what
        this injects), else when a ring is half full, the command is gone,
        an enable kicks, or ``QUIET_CHECK`` passed."""
        while True:
            if self.listened():
                self.switches(self.switches_wanted())
                await trio.sleep(DRAIN_EVERY)
            else:
                self.switches(False)
                with trio.move_on_after(QUIET_CHECK):
                    await trio.lowlevel.wait_readable(self.poller.fileno())
                self.woken()
            self.drain()

    def woken(self) -> None:
        """Take the kick and the rings of commands gone (EPOLLHUP for
        ever: a ring's perf event whose task and descendants all exited)
        out of the poller's ready set."""
        for fd, mask in self.poller.poll(0):
            if fd == self.kick:
                try:
                    os.eventfd_read(self.kick)
                except BlockingIOError:
                    pass
            elif mask & (select.EPOLLHUP | select.EPOLLERR):
                self.poller.unregister(fd)

    def close(self) -> None:
        if self.hooked is not None:
            try:
                self.hooked.on_enable_change.remove(self.enable_change)
            except ValueError:
                pass
            self.hooked = None
        for pe in self.watched:
            pe.close()
        self.watched = []
        if not self.poller.closed:
            self.poller.close()
            os.close(self.kick)


def mapped_address(pid: int, ino: int, offset: int, mapping=None, proc: str = "/proc") -> int:
    """The address at which task *pid* mapped the file offset *offset* of
    the file of inode *ino*: in *mapping* (the exec's first executable
    mapping of it, (addr, len, pgoff)), else in ``/proc/PID/maps`` (start,
    pgoff, inode), else *offset* itself (gone, or never mapped there)."""
    if mapping is not None:
        addr, length, pgoff = mapping
        if pgoff <= offset < pgoff + length:
            return addr + offset - pgoff
    try:
        with open(f"{proc}/{pid}/maps") as fp:
            lines = fp.read().splitlines()
    except OSError:
        return offset
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 5 or parts[4] != str(ino):
            continue
        try:
            start, end = (int(x, 16) for x in parts[0].split("-"))
            pgoff = int(parts[2], 16)
        except ValueError:
            continue
        if pgoff <= offset < pgoff + end - start:
            return start + offset - pgoff
    return offset
