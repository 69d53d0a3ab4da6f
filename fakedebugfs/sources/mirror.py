"""Mirroring: the running kernel's own events, fed into the fake.

``--mirror tree`` (``Fake(mirror="tree")``) records into the fake what the
real kernel's tracepoints record for the command ``fakedebugfs run``
starts and its descendants; ``--mirror system`` what they record for every
task on every CPU.  Nothing is written to the real tracefs: each event the
fake has enabled (top level or an instance, however it was enabled) is
opened on the kernel with perf_event_open(2), as ``perf record -e`` does,
and closed when no trace array has it enabled any more:

* one ``PERF_TYPE_TRACEPOINT`` event per (event, CPU) with
  ``PERF_SAMPLE_RAW``: the kernel hands each sample the tracepoint's entry
  (``struct trace_entry`` and the event's fields, ``__data_loc`` data
  after them: the bytes its ring buffer would hold), on every task, or in
  ``tree`` mode on the tasks of a cgroup (v2) the command is put in before
  it execs (PERF_FLAG_PID_CGROUP: its descendants, whenever forked, and
  nothing else; without cgroup v2, every task's samples are read and those
  of the tasks the leader below saw forked are kept); the ``syscalls``
  events are carried by ``raw_syscalls``' two, fanned out by the system
  call's number (:mod:`~fakedebugfs.sources.mirror_syscalls`) where the
  profile names the numbers;
* per CPU one ring (a ``PERF_COUNT_SW_DUMMY`` leader that also reports
  ``PERF_RECORD_COMM``, and in ``tree`` mode ``PERF_RECORD_FORK`` of the
  command's tasks: their names for ``saved_cmdlines``), every
  tracepoint event of that CPU redirected into it
  (``PERF_EVENT_IOC_SET_OUTPUT``);
* timestamps on ``CLOCK_MONOTONIC`` (``use_clockid``): the fake's
  ``--clock monotonic``, so a sample keeps its time.

A drain decodes each sample with the running kernel's layout of the event
(its ``format``) into the tracepoint's arguments, field by field by name
(:mod:`~fakedebugfs.sources.mirror_decode`: the profile may be another
kernel's), and fires them through the engine's batch path on the sample's
CPU (modulo the fake's CPUs), task and time: the entry is then the
profile's, and filters, ``set_event_pid``, triggers, ``saved_cmdlines``
and the text output apply as to any event.  An event the kernel lacks is
enabled and never fires from here; one whose fields cannot be translated
(an integer on one side, an array on the other) is refused when enabled
(EINVAL) with one line naming the field.  ``PERF_RECORD_LOST`` (the ring
was full) is accounted where the kernel accounts a lost event: the trace
arrays recording mirrored events lose that many events on that CPU
(``overrun``, and the next page's missed-events flag with the count).

Privileges: opening kernel tracepoints with raw samples takes CAP_PERFMON
(or CAP_SYS_ADMIN); :func:`privilege_problem` names what is missing.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
from typing import Callable, Optional

from fakedebugfs.engine.core.lazynp import np
from fakedebugfs.engine.ftrace.formatfile import EventFormat, FormatSyntaxError, parse_format
from fakedebugfs.engine.ftrace.trace_dynevent import is_dynamic
from fakedebugfs.native import libc
from fakedebugfs.sources.procevents import (ATTR_COMM, ATTR_COMM_EXEC, ATTR_INHERIT,
    ATTR_SAMPLE_ID_ALL, ATTR_TASK, ATTR_WATERMARK, PERF_ATTR_SIZE_VER5, PERF_COUNT_SW_DUMMY,
    PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_TYPE_SOFTWARE, Ring, comm_of, perf_event_attr)
from fakedebugfs.sources.mirror_cgroup import command_cgroup
from fakedebugfs.sources.mirror_decode import Decoder, not_integers, untranslatable
from fakedebugfs.sources.mirror_drain import MirrorDrain
from fakedebugfs.sources.mirror_slices import DRAIN_BYTES
from fakedebugfs.sources.mirror_syscalls import MirrorSyscalls
from fakedebugfs.sources.perfopen import LocalOpener, OpenerGone

log = logging.getLogger(__name__)


MODES = ("tree", "system")
PERF_TYPE_TRACEPOINT = 2  # include/uapi/linux/perf_event.h
PERF_SAMPLE_RAW = 1 << 10
ATTR_USE_CLOCKID = 1 << 25
CLOCK_MONOTONIC = 1
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_DISABLE = 0x2400, 0x2401  # _IO('$', 0), _IO('$', 1)
PERF_EVENT_IOC_SET_OUTPUT = 0x2405  # _IO('$', 5)
CAP_SYS_ADMIN, CAP_PERFMON = 21, 38  # include/uapi/linux/capability.h
# the fsopen(2) family, x86_64: a detached tracefs mount, never attached anywhere
SYS_fsopen, SYS_fsconfig, SYS_fsmount = 430, 431, 432
FSOPEN_CLOEXEC, FSCONFIG_CMD_CREATE, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY = 1, 6, 1, 1

RING_PAGES = int(os.environ.get("FAKEDEBUGFS_MIRROR_PAGES", "1024"))  # per CPU, power of two
# a PERF_RECORD_SAMPLE of sample_type TID | TIME | RAW after its header:
# { u32 pid, tid; u64 time; u32 size; char data[size]; }


class MirrorError(OSError):
    """Mirroring cannot start; the message is one line naming why."""


def privilege_problem() -> Optional[str]:
    """What keeps this process from opening kernel tracepoints with raw
    samples (perf_event_open's ``perf_trace_event_perm``), or None."""
    try:
        with open("/proc/self/status") as fp:
            caps = next(int(line.split()[1], 16) for line in fp if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        caps = 0
    if caps & (1 << CAP_PERFMON | 1 << CAP_SYS_ADMIN) and _initial_userns():
        return None
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as fp:
            paranoid = int(fp.read())
    except (OSError, ValueError):
        paranoid = 2
    if paranoid <= -1:
        return None
    return (f"--mirror needs CAP_PERFMON or CAP_SYS_ADMIN (run as root), or "
            f"kernel.perf_event_paranoid -1 (it is {paranoid}): kernel tracepoints' raw "
            f"samples are privileged")


def _initial_userns() -> bool:
    """Capabilities count for perf only in the initial user namespace (a
    rootless ``run`` is root in a namespace of its own)."""
    try:
        with open("/proc/self/uid_map") as fp:
            return fp.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


def raise_fd_limit() -> None:
    """Two descriptors per event and CPU (``-e syscalls``: ~1,400 on two
    CPUs where the profile does not name the system calls' numbers): the
    soft RLIMIT_NOFILE up to the hard one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class RealTracefs:
    """The running kernel's tracefs, read through a mount of its own that is
    attached nowhere (fsopen, fsmount: no mount point, nothing for anyone
    else to see) and read-only: ids and ``format`` files only."""

    def __init__(self):
        fs = libc.check(libc.syscall(SYS_fsopen, b"tracefs", FSOPEN_CLOEXEC), "fsopen(tracefs)")
        try:
            libc.check(libc.syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, None, None, 0),
                       "fsconfig(tracefs)")
            self.fd = libc.check(libc.syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                                              MOUNT_ATTR_RDONLY), "fsmount(tracefs)")
        finally:
            os.close(fs)
        self._formats: dict[str, Optional[str]] = {}
        self._parsed: dict[str, Optional[EventFormat]] = {}
        self._listed: dict[str, set] = {}  # system -> its events' names

    def format(self, key: str) -> Optional[str]:
        """``events/<system>/<name>/format``, or None when the kernel has no such event."""
        if key not in self._formats:
            system, _, name = key.partition(":")
            try:
                fd = os.open(f"events/{system}/{name}/format", os.O_RDONLY, dir_fd=self.fd)
            except OSError:
                self._formats[key] = None
            else:
                with os.fdopen(fd) as fp:
                    self._formats[key] = fp.read()
        return self._formats[key]

    def parsed(self, key: str) -> Optional[EventFormat]:
        """The event's ``format``, parsed (None: no such event, or a text
        this parser cannot read)."""
        if key not in self._parsed:
            text = self.format(key)
            try:
                self._parsed[key] = None if text is None else \
                    parse_format(text, key.partition(":")[0])
            except FormatSyntaxError as err:
                log.warning("mirror: %s: this kernel's format unreadable: %s", key, err)
                self._parsed[key] = None
        return self._parsed[key]

    def has(self, key: str) -> bool:
        """The kernel has the event (its system's directory listed once:
        no ``format`` read, which waits for ``event_mutex``, held by every
        release of a tracepoint's perf event through a grace period)."""
        system, _, name = key.partition(":")
        names = self._listed.get(system)
        if names is None:
            try:
                fd = os.open(f"events/{system}", os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.fd)
            except OSError:
                names = set()
            else:
                try:
                    names = set(os.listdir(fd))
                finally:
                    os.close(fd)
            self._listed[system] = names
        return name in names

    def event_id(self, key: str) -> Optional[int]:
        text = self.format(key)
        m = re.search(r"^ID: *(\d+)", text or "", re.M)
        return int(m[1]) if m else None

    def close(self) -> None:
        os.close(self.fd)


def release_later(fds: list) -> None:
    """Close *fds* without waiting for the kernel to release them: they are
    sent over a pair of UNIX sockets that then hold each other (and them)
    in flight, and both are closed; the kernel's garbage collector of
    in-flight sockets drops them in a worker.  A perf event's release waits
    for an RCU grace period (~30 ms each), which a server stopping with
    1,400 of them open must not wait for."""
    import socket

    try:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for i in range(0, len(fds), 250):  # SCM_MAX_FD is 253
            a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                               array_of(fds[i:i + 250]))])
        a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array_of([b.fileno()]))])
        b.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array_of([a.fileno()]))])
        a.close()
        b.close()
    except OSError as err:
        log.debug("mirror: release in flight failed (%s): closing one by one", err)
    for fd in fds:
        os.close(fd)


def array_of(fds: list) -> bytes:
    import array

    return array.array("i", fds).tobytes()


def _attr(kind: int, config: int, sample_type: int, flags: int, watermark: int = 0,
          regs_user: int = 0) -> bytes:
    return perf_event_attr.build(dict(
        type=kind, size=PERF_ATTR_SIZE_VER5, config=config, sample_period=1,
        sample_type=sample_type, read_format=0, flags=flags | ATTR_USE_CLOCKID,
        wakeup_events=watermark, bp_type=0, config1=0, config2=0, branch_sample_type=0,
        sample_regs_user=regs_user, sample_stack_user=0, clockid=CLOCK_MONOTONIC,
        sample_regs_intr=0, aux_watermark=0, sample_max_stack=0, reserved_2=0))


class Mirror(MirrorSyscalls, MirrorDrain):
    """The perf events of one fake's mirroring (see the module docstring).

    *kernel*: the fake's :class:`~fakedebugfs.engine.kernel.Kernel`; *mode*
    ``tree`` (*pid*: the command, set by :meth:`follow`) or ``system``.
    :meth:`attach` subscribes it to the fake's enables; :meth:`drain` fires
    what the rings hold."""

    def __init__(self, kernel, mode: str, pages: int = RING_PAGES, skip_pid: int = 0):
        if mode not in MODES:
            raise ValueError(f"mirror mode {mode!r}: choose from {', '.join(MODES)}")
        problem = privilege_problem()
        if problem:
            raise MirrorError(errno.EPERM, problem)
        self.kernel, self.mode, self.pages = kernel, mode, pages
        self.pid = -1 if mode == "system" else None  # tree: the command's, once known
        self.skip_pid = skip_pid  # the server's own tasks (system mode) are not mirrored
        self.tracefs = RealTracefs()
        self.opener = LocalOpener()  # tree under run: the command's init's (follow)
        self.proc = "/proc"  # the proc that numbers the samples' tasks as they are
        self.pid_setup()  # (the initial side's proc: before run makes its namespaces)
        raise_fd_limit()
        np.zeros(0)  # numpy loaded now, not in the first drain (a FUSE write waiting)
        self.rings: dict[int, Ring] = {}  # real CPU -> its ring (the leader's)
        self.opened: dict[str, list[int]] = {}  # event key -> fds, one per CPU
        self.parked: dict[str, list[int]] = {}  # disabled events' fds (_close_event)
        self.decoders: dict[int, Decoder] = {}  # real event id -> decoder
        self.mirrored = 0  # samples fired into the fake
        self.lost = 0  # samples the kernel reported lost
        self.refused: list[str] = []
        self.leave: frozenset = frozenset()  # events left to another source (run's watcher)
        # opened only once a trace array records them (run's default): not for
        # the function tracers' call trees, which ask for their start events
        self.recorded_only = False
        self.absent: set[str] = set()  # enabled events the running kernel lacks
        self.members: Optional[set] = None  # tree: the tasks of the tree (leaders' forks)
        self.cgroup_fd: Optional[int] = None  # tree: the command's cgroup, where one is made
        self.cgroup_path: Optional[str] = None
        self.on_fire: Optional[Callable[[], None]] = None
        # run's process events, in before each drain: a task's fork is in
        # (event-fork's pid lists) before its samples (its exit's removal
        # waits for them: hold_exit)
        self.before_drain: Optional[Callable[[], None]] = None
        self._clock_base = None  # virtual clock: (sample time, fake time) of the first
        self.drained_at = 0.0  # time.monotonic() of the last drain
        self.cost = 0.0  # seconds a byte of records costs a drain, of the last drains
        self._taken: dict = {}  # CpuBuffer -> ((consumed_events, reader_asked), when last changed)
        self._exits: list = []  # tree: (ring marks, pid-list removal) held (hold_exit)
        self._last_sample: dict[int, int] = {}  # task -> perf time of its last sample fired
        self._named_at: dict[int, int] = {}  # task -> perf time of its last COMM record
        self.syscalls_setup()  # syscalls events carried by raw_syscalls' (mirror_syscalls)

    # --- what is open -------------------------------------------------------------

    def cpus(self) -> list[int]:
        return list(range(os.cpu_count() or 1))

    def follow(self, pid: int, opener=None, proc: str = "/proc") -> None:
        """``tree``: mirror *pid*'s tree from now on (the command of ``run``);
        the events already enabled are opened on it.  *opener*, *proc*:
        the command's PID namespace's (a
        :class:`~fakedebugfs.sources.perfopen.RemoteOpener` to its init,
        its proc): the samples number tasks as the command does."""
        if self.mode != "tree" or self.pid is not None:
            if opener is not None:
                opener.close()
            return
        if opener is not None:
            self.opener, self.proc = opener, proc
        self.pid = pid
        self.members = {pid}
        self.cgroup_fd, self.cgroup_path = command_cgroup(pid, self.proc)
        if self.cgroup_fd is not None:  # the kernel keeps the tree's samples only
            self.members = None
        if pid not in self.kernel.engine.comms:
            self.kernel.engine.set_comm(pid, comm_of(pid, self.proc))
        self._open_rings()
        self.kernel.engine.pid_exit_hold = self.hold_exit
        for key in self.wanted():
            self._open_event(key)

    def start(self) -> None:
        """``system``: the rings and the events already enabled."""
        if self.mode == "system":
            self._open_rings()
            for key in self.wanted():
                self._open_event(key)

    def attach(self) -> None:
        """Follow the fake's enables from now on."""
        self.kernel.ftrace.on_enable_change.append(self.enable_change)
        self.kernel.ftrace.on_enabled.append(self.enabled_change)
        self.kernel.ftrace.on_enabled.append(self.probe_order)

    def enabled_change(self, tr, key: str, on: bool) -> None:
        """A trace array's probe of *key* registered (*on*): with
        :attr:`recorded_only`, the event is opened now (a call tree's
        start event, which no array records, never is)."""
        if on and self.recorded_only and self.rings and self._mirrorable(key):
            self._open_event(key)

    def _mirrorable(self, key: str) -> bool:
        return not (key.startswith("ftrace:") or key.startswith("kmemtrace:")
                    or key in self.leave or is_dynamic(self.kernel.ftrace, key))

    def wanted(self) -> list[str]:
        """Every event some trace array has enabled."""
        keys = set()
        for tr in self.kernel.ftrace.arrays():
            keys |= tr.enabled
        return sorted(k for k in keys if not k.startswith("ftrace:") and k not in self.leave)

    def enable_change(self, key: str, on: bool) -> None:
        """The fake's hook, called before an array starts (*on*; OSError
        refuses) or stops recording *key*."""
        if key.startswith("ftrace:") or key.startswith("kmemtrace:"):
            return  # the tracer's own entries: nothing on the kernel
        if is_dynamic(self.kernel.ftrace, key):
            return  # a probe defined in the fake (uprobe_events): injected, never mirrored
        if key in self.leave:
            return  # another source makes them (run's process watcher, in the command's world)
        if on:
            self.check_event(key)
            if self.rings and not self.recorded_only:
                self._open_event(key)
            return
        # called before the array lets go: what the kernel recorded until
        # now goes in first (all of it), then the event stops if no other
        # array has it
        self.sync(DRAIN_BYTES, 10.0)
        if sum(key in tr.enabled for tr in self.kernel.ftrace.arrays()) <= 1:
            self._close_event(key)

    def check_event(self, key: str) -> None:
        """EINVAL, with one line naming it, for an event whose entries on
        the running kernel cannot be translated into the profile's layout
        (:mod:`~fakedebugfs.sources.mirror_decode`).  An event the kernel
        lacks is not refused: it is enabled in the fake and never fires
        from the mirror (said once, at debug level).  A syscalls event
        carried by raw_syscalls (mirror_syscalls) is looked for in the
        kernel's listing, its format not read: its fields must be integers."""
        ev = self.kernel.ftrace.events.get(key)
        carried = self.carrier_of(key) is not None
        host = None if carried else self.tracefs.parsed(key)
        if not (self.tracefs.has(key) if carried else host is not None):
            if key not in self.absent:
                self.absent.add(key)
                log.debug("mirror: %s: the running kernel has no such event (enabled in "
                          "the fake, never fired by the mirror)", key)
            return
        why = "the fake has no type of it" if ev is None else \
            not_integers(ev) if carried else untranslatable(ev, host)
        if why:
            if key not in self.refused:
                self.refused.append(key)
                log.warning("mirror: %s not mirrored: %s", key, why)
            raise MirrorError(errno.EINVAL, f"mirror: {key} refused: {why}")

    def _open_rings(self) -> None:
        flags = ATTR_COMM | ATTR_COMM_EXEC | ATTR_SAMPLE_ID_ALL | ATTR_WATERMARK
        if self.mode == "tree":  # forks too: a child has its parent's name
            flags |= ATTR_TASK
            flags |= ATTR_INHERIT
        attr = _attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY, PERF_SAMPLE_TID | PERF_SAMPLE_TIME,
                     flags, watermark=self.pages * 4096 // 4)
        try:
            for cpu in self.cpus():
                try:
                    fd = self.opener.open(attr, self.pid, cpu)
                except OSError as err:
                    if err.errno == errno.ENODEV:  # an offline CPU
                        continue
                    raise
                self.rings[cpu] = Ring(fd, cpu, self.pages)
        except OSError:
            self.close()
            raise

    def _open_event(self, key: str) -> None:
        if self.open_carried(key):  # a syscalls event: raw_syscalls' perf events carry it
            return
        if key in self.opened:
            return
        fds = self.parked.pop(key, None)
        if fds is not None:  # opened before: enabled again
            for fd in fds:
                fcntl.ioctl(fd, PERF_EVENT_IOC_ENABLE, 0)
            self.opened[key] = fds
            return
        ident = self.tracefs.event_id(key)
        if ident is None:
            return
        # every task's (tree: the samples of the tree's tasks are kept, a
        # task forked before the event was enabled included)
        extra, regs = self.sample_type_extra(key)  # raw_syscalls: the task's ABI too
        attr = _attr(PERF_TYPE_TRACEPOINT, ident,
                     PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW | extra,
                     ATTR_SAMPLE_ID_ALL, regs_user=regs)
        fds: list[int] = []
        try:
            for cpu, ring in self.rings.items():
                fd = self.opener.open(attr, -1, cpu, self.cgroup_fd)
                fds.append(fd)
                fcntl.ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, ring.fd)
        except OSError as err:
            for fd in fds:
                os.close(fd)
            if isinstance(err, OpenerGone):  # the command's tree ended: nothing to mirror
                log.debug("mirror: %s not opened: %s", key, err)
            elif key not in self.absent:
                # the kernel will not give this event's samples (6.18 refuses
                # irq_vectors:irq_work_exit with EPERM, even to root): enabled
                # in the fake as an event the kernel lacks, and never fired
                self.absent.add(key)
                log.warning("mirror: %s not mirrored: perf_event_open: %s", key,
                            err.strerror or err)
            return
        self.opened[key] = fds
        self.decoders[ident] = self._decoder(key)

    def _decoder(self, key: str) -> Decoder:
        """The translation of *key*'s entries from the running kernel's
        layout into the profile's (made once per event)."""
        return Decoder(self.kernel.engine.tracepoints[key], self.kernel.ftrace.events[key],
                       self.tracefs.parsed(key))

    def _close_event(self, key: str) -> None:
        """Stop *key*: disabled, kept open (closing the last perf event of a
        tracepoint waits for an RCU grace period, ~30 ms: ``-e syscalls``
        would take 20 s to disable); closed with the mirror."""
        if self.close_carried(key):  # a syscalls event, or raw_syscalls still carrying them
            return
        fds = self.opened.pop(key, None)
        if fds is not None:
            for fd in fds:
                fcntl.ioctl(fd, PERF_EVENT_IOC_DISABLE, 0)
            self.parked[key] = fds

    def close(self) -> None:
        """Close everything; the perf events go in the background (see
        :func:`release_later`)."""
        if self.kernel.engine.pid_exit_hold == self.hold_exit:
            self.kernel.engine.pid_exit_hold = None
        self.release_exits(everything=True)
        fds = [fd for group in (*self.opened.values(), *self.parked.values()) for fd in group]
        self.opened, self.parked = {}, {}
        self.close_carriers()
        for ring in self.rings.values():
            ring.map.close()
            fds.append(ring.fd)
        self.rings = {}
        release_later(fds)
        self.opener.close()
        self.pid_close()
        if self.cgroup_fd is not None:
            os.close(self.cgroup_fd)
            self.cgroup_fd = None
            try:
                os.rmdir(self.cgroup_path)
            except OSError as err:  # a task of the command still in it
                log.warning("mirror: %s left: %s", self.cgroup_path, err.strerror)


__all__ = ["MODES", "Mirror", "MirrorError", "RealTracefs", "privilege_problem"]
