"""The mount's server: one trio nursery owning every task.

Tasks: pyfuse3's request loop, the workload driver, the control socket and
the signal watcher.  SIGINT/SIGTERM (or an external unmount) end the FUSE
loop; the nursery then cancels the rest and the file system is unmounted on
the way out, whatever happened.
"""

from __future__ import annotations

import errno
import functools
import gc
import logging
import os
import signal
import sys
from typing import Callable, Optional

import pyfuse3
import trio

from fakedebugfs.control import runstate
from fakedebugfs.errors import MountError
from fakedebugfs.control.service import ControlService
from fakedebugfs.fs import pathglob, waitqueue
from fakedebugfs.fs.operations import TreeOperations, settle_heap
from fakedebugfs.fs.slices import slicer
from fakedebugfs.engine.kernel import Kernel
from fakedebugfs.instrument.faults import FaultTable
from fakedebugfs.server.control_socket import ControlSocket
from fakedebugfs.server.fusecheck import fuse_options, mount_problem
from fakedebugfs.server.workload import BATCH_MS, WorkloadDriver
from fakedebugfs.trees import build_root

log = logging.getLogger(__name__)

MAX_TASKS = 512  # FUSE requests in flight: blocking readers each hold one
# The GIL switch interval: a thread asking for the GIL (ktrace's page
# publisher, pyfuse3's notify thread, a workload's imports) gets it within
# this while the task loop is busy; at Python's 5 ms, ktrace's publisher,
# which takes the GIL back after every page store, fell seconds behind a
# loop kept busy by a reader's requests (GET_PRODUCED lagging, pages lost).
GIL_SWITCH = 0.0005
MIRROR_EVERY = 0.002  # seconds between drains of --mirror's rings
MIRROR_IDLE = 0.1  # ... while no event is mirrored (the rings hold comms and forks only)
MIRROR_SYNC_BYTES = 256 << 10  # slices of each ring a FUSE request drains first
MIRROR_SYNC_S = 0.05  # ... until what was there when it came, or this long
MIRROR_WRITE_SYNC_S = 10.0  # a write (tracing_on, enable, set_event_pid): all of it
MIRROR_WRITE_SLICE_S = 0.001  # ... in slices of about this long, requests answered between
TRIM_EVERY = 1.0  # seconds between heap trims while events are fired


def check_can_mount(mountpoint: str) -> None:
    """Refuse early, with the cause and its fix (:mod:`fakedebugfs.server.fusecheck`),
    what would fail later."""
    if not os.path.isdir(mountpoint):
        raise MountError(f"{mountpoint}: not a directory")
    if runstate.is_mounted(mountpoint):
        raise MountError(f"{mountpoint}: something is already mounted there "
                         f"(`fakedebugfs umount {mountpoint}`)")
    problem = mount_problem()
    if problem:
        raise MountError(problem)


class Server(ControlSocket):
    def __init__(self, kernel: Kernel, mountpoint: str, workload=None, rate: float = 0,
                 batch_ms: float = BATCH_MS, uid: Optional[int] = None,
                 gid: Optional[int] = None, mirror=None):
        self.kernel = kernel
        self.mirror = mirror  # sources.mirror.Mirror: --mirror's real events
        # the files' owner (tracefs' uid=, gid=): by default whoever mounts
        self.uid = os.geteuid() if uid is None else uid
        self.gid = os.getegid() if gid is None else gid
        self.mountpoint = runstate.canonical(mountpoint)
        self.workload = workload
        self.rate = rate
        self.batch_ms = batch_ms
        self.done = workload is None
        self.driver = None  # server.workload.WorkloadDriver, while the workload runs
        self.faults = FaultTable(kernel)  # scripted faults (instrument/faults.py)
        self._replays = None  # server.replays.Replays, made on first use
        self.service = ControlService(self)
        self.peers = None  # who may use the control socket (made where it serves)
        self.ops: Optional[TreeOperations] = None  # once mounted
        self.nursery: Optional[trio.Nursery] = None  # once mounted
        self.watches = None  # server.watch.Watches: `run`'s command, once watched

    def watch(self, pid: int, parent: int, parent_comm: str, opened=None,
              proc: str = "/proc", opener: Optional[int] = None) -> None:
        """Inject the process events and context switches of *pid* and its
        descendants (:mod:`fakedebugfs.server.watch`); OSError if refused.
        *opened*, *proc*: its perf events, opened in the command's PID
        namespace, and that namespace's proc (``run``'s command init);
        *opener*: a socket to that init, which opens ``--mirror tree``'s
        events there (:mod:`fakedebugfs.sources.perfopen`)."""
        sock = None
        if opener is not None:
            import socket

            from fakedebugfs.sources.perfopen import RemoteOpener

            sock = RemoteOpener(socket.socket(fileno=opener))
        if self.watches is None:
            from fakedebugfs.server.watch import Watches  # `run`'s: not needed by a mount

            self.watches = Watches(self.service.injector, self.kernel.engine.nr_cpus)
            if self.nursery is not None:
                self.nursery.start_soon(self.watches.follow)
        if self.mirror is not None:  # what it mirrors is not made up as well
            self.watches.mirrored = self.mirror.opened
            self.mirror.before_drain = self.watches.sync
        self.watches.add(pid, parent, parent_comm, opened, proc)
        if self.mirror is not None and self.mirror.mode == "tree" and \
                (opened is None or sock is not None):
            try:
                self.mirror.follow(pid, sock, proc)
            except OSError as err:  # the process events go on without the mirror
                log.warning("mirror: the command's tree is not mirrored: %s", err)
                self.mirror.close()
        elif sock is not None:
            sock.close()
        if self.ops is not None:
            self.ops.on_open = self.sync_sources

    def sync_sources(self) -> None:
        """Before a FUSE open: what happened until now is in the buffers
        (the watched command's process events, the mirrored ones)."""
        if self.watches is not None:
            self.watches.sync()
        if self.mirror is not None:
            self.mirror.sync(MIRROR_SYNC_BYTES, MIRROR_SYNC_S)

    def mirror_sync(self) -> None:
        """Before a FUSE read or poll: the mirror's recent samples (for at
        most MIRROR_SYNC_S: a request never waits for a whole backlog),
        held while a reader is behind (Mirror.reader_behind)."""
        self.mirror.sync(MIRROR_SYNC_BYTES, MIRROR_SYNC_S, hold=True)

    def mirror_sync_all(self) -> None:
        """Before a FUSE write: every event the rings held when it came is
        in, as the kernel had recorded each before the write (a
        ``tracing_on`` 0 that ends a recording must not drop the backlog)."""
        self.mirror.sync(MIRROR_SYNC_BYTES, MIRROR_WRITE_SYNC_S)

    def before_write(self) -> None:
        """Before a FUSE write to a file that is not static: what the
        simulated machine did until now is recorded first (the paced
        workload's owed events: :meth:`WorkloadDriver.catch_up`; with
        --mirror, the rings' backlog; ``run``'s process events: a short
        command's exec and exit before the ``tracing_on`` 0 that ends its
        recording)."""
        if self.driver is not None:
            self.driver.catch_up()
        if self.watches is not None:
            self.watches.sync()
        if self.mirror is not None:
            self.mirror_sync_all()

    def write_defers(self) -> bool:
        """A write waits for the mirror's backlog (:meth:`drain_before_write`):
        its rings hold records."""
        return self.mirror.backlog()

    async def drain_before_write(self) -> None:
        """Before a FUSE write, with --mirror: every event the rings held
        when it came is in, as :meth:`mirror_sync_all` does, but in slicer
        turns of about MIRROR_WRITE_SLICE_S, the other requests answered
        between them.

        On the kernel, the traced command's tracepoints are written as it
        runs, and a tool's other tasks go on meanwhile on other CPUs.  Here
        the one server fires them when the write comes, and a system call
        the function tracers expand into its call tree costs the drain some
        60 us: a short command's backlog held the loop for 10-70 ms.
        ``trace-cmd record -p function ls`` then lost its whole recording:
        its per-CPU recorders, which open ``trace_pipe_raw`` and read
        ``events/header_page`` before they start reading, waited behind the
        drain of the ``tracing_on`` 0 that ends the recording, and the
        SIGUSR1 that follows it came before they read anything
        (docs/function-tracing.md#trace-cmd-record-with-a-short-command)."""
        if self.watches is not None:  # run's process events first, as before_write
            self.watches.sync()
        mirror = self.mirror
        marks = mirror.marks()
        give_up = trio.current_time() + MIRROR_WRITE_SYNC_S
        try:
            while not mirror.reached(marks) and trio.current_time() < give_up:
                async with slicer.turn(slicer.WRITER) as turn:
                    while True:
                        mirror.drain(mirror.slice_for(MIRROR_WRITE_SLICE_S))
                        if mirror.reached(marks) or turn.over():
                            break
        except Exception:  # noqa: BLE001: the kernel's bytes never stop the server
            log.exception("mirror: a drain before a write failed")

    async def drive_mirror(self) -> None:
        """``--mirror``: drain the kernel's rings every MIRROR_EVERY seconds
        in slicer turns (FUSE requests waiting end a turn's wait)."""
        mirror = self.mirror
        mirror.on_fire = self.kernel.engine.batch_done
        while True:
            # nothing enabled (run's default mirror, before any enable): no
            # wake-up every 2 ms; a FUSE request drains what it needs itself
            await trio.sleep(MIRROR_EVERY if mirror.opened else MIRROR_IDLE)
            if mirror.rings and mirror.pending():
                await slicer.quiet()  # a tool's sweep first (fs/slices.py)
                async with slicer.turn(slicer.WRITER) as turn:
                    try:  # slices of a turn's length until a FUSE request waits
                        while mirror.drain(mirror.slice_for(slicer.slice_s)) \
                                and not turn.over() and mirror.pending():
                            pass
                    except Exception:  # noqa: BLE001: the kernel's bytes never stop the server
                        log.exception("mirror: a drain failed")

    def replays(self):
        """The replay runner (:mod:`fakedebugfs.server.replays`), made on first use."""
        if self._replays is None:
            from fakedebugfs.server.replays import Replays

            self._replays = Replays(self.kernel, release_heap)
        return self._replays

    def replayed(self) -> int:
        """Events the replays of this mount have committed (0 before any)."""
        return self._replays.committed() if self._replays is not None else 0

    def open_nodes(self) -> set:
        """The tree nodes of every open file."""
        if self.ops is None:
            return set()
        return {f.node for f in list(self.ops.open_files.values())}

    def status(self) -> dict:
        kt, ft = self.kernel.ktrace, self.kernel.ftrace
        return {
            "pid": os.getpid(),
            "mountpoint": self.mountpoint,
            "workload": getattr(self.workload, "name", "none"),
            "emitted": self.kernel.engine.emitted,
            # the paced workload's events owed more than a second: never generated
            "workload_skipped": self.driver.skipped if self.driver is not None else 0,
            "done": self.done,
            "ktrace": {"enabled": kt.enabled, "overflow": kt.overflow(),
                       "entries": sum(b.entries for b in kt.buffers)},
            "kmemtrace": self.kernel.kmemtrace.status(),
            "ftrace": {"tracing_on": ft.tracing_on, "enabled": sorted(ft.enabled),
                       "cpus": [{"entries": ft.entries(cpu), "overrun": buf.overrun,
                                 "dropped": buf.dropped, "read": buf.consumed_events}
                                for cpu, buf in enumerate(ft.buffers)]},
        }

    # --- tasks ------------------------------------------------------------

    async def drive_workload(self) -> None:
        """Fire the workload (:mod:`fakedebugfs.server.workload`) until it
        is done."""
        if self.workload is None:
            return
        self.driver = WorkloadDriver(self.workload, self.kernel.engine, self.rate,
                                     self.batch_ms, release_heap)
        await self.driver.run()
        self.done = True

    async def trim_heap(self) -> None:
        """Every TRIM_EVERY seconds while events are fired or instances
        come and go, give the heap's free pages back (:func:`release_heap`):
        a batch's arrays, or a removed instance's ring buffers, are freed
        but glibc keeps the pages (~5 MB after 400,000 kmem events with
        every tracer on; 2.8 MB an instance); a trim costs ~0.2 ms.  After
        instances went, Python's free lists are emptied first
        (``free_lists``)."""
        engine, seen = self.kernel.engine, (None, self.kernel.ftrace.instances_removed)
        while True:
            await trio.sleep(TRIM_EVERY)
            # (instances removed, not how many there are: a cycle of mkdir
            # and rmdir between two ticks leaves the count as it was)
            now = (engine.emitted, self.kernel.ftrace.instances_removed)
            if now != seen:
                removed = now[1] != seen[1]
                seen = now
                release_heap(free_lists=removed)

    async def watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as sigs:
            async for signum in sigs:
                log.info("signal %d: unmounting", signum)
                waitqueue.shutdown()
                pyfuse3.terminate()
                return

    # --- the whole life of a mount ---------------------------------------------

    async def run(self, ready: Optional[Callable[[], None]] = None) -> None:
        root = build_root(self.kernel)
        ops = self.ops = TreeOperations(root, uid=self.uid, gid=self.gid, faults=self.faults)
        self.faults.paths = functools.partial(pathglob.unmatched, root)  # typos refused
        ops.on_write = self.before_write
        options = set(pyfuse3.default_options) | fuse_options()
        paths = runstate.paths(self.mountpoint)
        try:
            _stderr_of(pyfuse3.init, ops, self.mountpoint, options)
        except _Failed as failed:
            raise MountError(f"cannot mount {self.mountpoint}: {failed.error}"
                             f"{mount_hint(failed.said)}") from None
        switch = sys.getswitchinterval()
        sys.setswitchinterval(GIL_SWITCH)
        slicer.attach()  # long work waits while requests are queued
        clean = False
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                await nursery.start(self.serve_control, str(paths["sock"]))
                nursery.start_soon(self.watch_signals)
                nursery.start_soon(self.drive_workload)
                nursery.start_soon(self.trim_heap)
                if self.mirror is not None:
                    self.mirror.skip_pid = os.getpid()  # not the server's own work
                    self.mirror.attach()
                    self.mirror.start()
                    ops.on_open = self.sync_sources
                    ops.on_io = self.mirror_sync
                    ops.write_defers = self.write_defers
                    ops.drain_before_write = self.drain_before_write
                    nursery.start_soon(self.drive_mirror)
                runstate.write_state(self.mountpoint, pid=os.getpid())
                settle_heap()  # the trees and engine, never scanned by the collector again
                gc.enable()  # `fakedebugfs mount` starts with it off (cli.main)
                release_heap()  # what building them freed (the profile's text...)
                if ready is not None:
                    ready()
                await pyfuse3.main(min_tasks=4, max_tasks=MAX_TASKS)
                nursery.cancel_scope.cancel()
            clean = True
        finally:
            if self.watches is not None:
                self.watches.close()
            if self.mirror is not None:
                self.mirror.close()
            if not ops.invalidations.close():
                log.warning("unmount: an entry invalidation still waits in the kernel")
            _close()
            runstate.clear_state(self.mountpoint, drop_log=clean)
            sys.setswitchinterval(switch)


def release_heap(free_lists: bool = False) -> None:
    """``malloc_trim(0)``: glibc keeps the pages of freed memory for later
    allocations; this gives those it can back to the system (a no-op
    without glibc).  A trim gives back only whole free pages.

    With *free_lists*, after instances were removed: Python keeps freed
    tuples (up to 2,000 of each length), lists, dicts and frames on free
    lists of its own for reuse, so some of a removed instance's objects
    stay allocated, one or two on each page its tree had, and those pages
    stay (each removed 6.12 instance's 11-flag tuple alone: 300 more
    pages a cycle of 300 until that list is full, 1 MB a cycle).  A full
    collection empties those lists (and scans only what was made since
    the last ``settle_heap``: a few hundred objects), so the pages of a
    removed instance all go back, as the kernel's at ``instance_rmdir``."""
    if free_lists:
        gc.collect()
    global _malloc_trim
    if _malloc_trim is None:
        import ctypes

        _malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", False)
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None  # libc's, once looked up (False: none)


def mount_hint(said: str = "") -> str:
    """Why a mount failed: fusermount3's own words (libfuse says only
    "fuse_session_mount failed"), else what a check can tell."""
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    if lines:
        return f": {lines[-1]}"
    problem = mount_problem()
    return f": {problem}" if problem else ""


class _Failed(Exception):
    def __init__(self, error, said: str):
        super().__init__(str(error))
        self.error, self.said = error, said


def _stderr_of(fn, *args) -> str:
    """Call *fn* with what it (and fusermount3, its child) writes on fd 2
    kept, and written to the real stderr too; _Failed if it raised
    RuntimeError."""
    import tempfile

    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        error = None
        try:
            fn(*args)
        except RuntimeError as err:
            error = err
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        said = tmp.read().decode(errors="replace")
    if said:
        os.write(2, said.encode())
    if error is not None:
        raise _Failed(error, said)
    return said


def _close() -> None:
    try:
        pyfuse3.close(unmount=True)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOENT):
            log.warning("unmount: %s", err)
