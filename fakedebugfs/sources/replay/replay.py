"""Replay a recording into a running fake: each event keeps its CPU,
timestamp, pid and payload bytes (``common_flags``, ``common_preempt_count``
included) and is committed into the tracefs ring buffer of its CPU, as the
kernel's ``trace_event_buffer_commit`` would have; the recording's lost-event
marks become the same lost events (``[N EVENTS DROPPED]`` in trace-cmd
report; ``[EVENTS DROPPED]`` where the kernel had no room for the count).

A replayed event is recorded as a fired one would be (:mod:`.commit`:
tracing on, its event enabled, the pid lists, its filter and triggers).
Replaying goes through :mod:`.install` first (formats, cmdlines, kallsyms,
clock), and only the recording's top buffer, or the one named, is
replayed, into the top level or the instance ``into`` names.

:class:`Replay` reads the recording (the buffer, the CPU map, the events
in the order and at the times to commit them) and runs it; its bases
commit each event (:class:`~.commit.ReplayCommit`) and pace it in the
server (:class:`~.pacing.ReplayPacing`).

Time: the first event is put at the fake's clock when the replay starts and
the others keep their distance from it, or, with ``keep_timestamps``, every
event keeps the time ``trace-cmd report`` shows for it in the recording
(:meth:`Recording.report_ts`), so a re-recording's report is the
original's.  A virtual clock is moved on to the last replayed event.

Pacing (:mod:`.pacing`): as fast as possible (default), at *speed* times
the recorded pace (1 is real time), waiting for readers while a buffer is
full of unread pages.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Iterator, Optional

from fakedebugfs.sources.replay.commit import ReplayCommit
from fakedebugfs.sources.replay.install import Installed, install, selected
from fakedebugfs.sources.replay.pacing import ReplayPacing
from fakedebugfs.sources.replay.recording import Recording

log = logging.getLogger(__name__)


@dataclass
class ReplayOptions:
    """How to replay (the CLI's flags, the API's keyword arguments)."""

    speed: Optional[float] = None  # None: as fast as possible; 1.0: real time
    loop: int = 1
    events: tuple = ()  # "system", "system:event", "system:*", "*:event"
    cpu_map: dict = field(default_factory=dict)  # recorded CPU -> fake CPU
    keep_timestamps: bool = False
    buffer: Optional[str] = None  # the recording's buffer (default: top, else the one with data)
    wait_enabled: bool = False  # start once tracing is on with a recorded event enabled
    into: Optional[str] = None  # the fake's instance to replay into (default: the top level)

    @classmethod
    def make(cls, speed=None, loop=1, events=(), cpu_map=None, keep_timestamps=False,
             buffer=None, wait_enabled=False, realtime=False,
             as_fast_as_possible=False, into=None) -> "ReplayOptions":
        """Checked options (ValueError naming the bad one)."""
        if realtime and speed not in (None, 1, 1.0):
            raise ValueError("--realtime and --speed: choose one")
        if as_fast_as_possible and (speed is not None or realtime):
            raise ValueError("--as-fast-as-possible and --speed/--realtime: choose one")
        if realtime:
            speed = 1.0
        if speed is not None:
            speed = float(speed)
            if not math.isfinite(speed) or speed <= 0:
                raise ValueError(f"--speed must be a number > 0, got {speed!r}")
        if isinstance(loop, bool) or not isinstance(loop, int) or loop < 1:
            raise ValueError(f"--loop must be a whole number >= 1, got {loop!r}")
        if into is not None and (not isinstance(into, str) or not into or "/" in into):
            raise ValueError(f"--into must name an instance, got {into!r}")
        return cls(speed, loop, parse_events(events), parse_cpu_map(cpu_map or {}),
                   bool(keep_timestamps), buffer, bool(wait_enabled), into)

    def wire(self) -> dict:
        """The options as the control ``replay`` request carries them."""
        return {"speed": self.speed, "loop": self.loop, "events": list(self.events),
                "cpu_map": {str(a): b for a, b in self.cpu_map.items()},
                "keep_timestamps": self.keep_timestamps, "buffer": self.buffer,
                "wait_enabled": self.wait_enabled, "into": self.into}


def parse_events(value) -> tuple:
    """``kmem,sched:sched_switch`` (or a list of them) -> a tuple of patterns."""
    if isinstance(value, str):
        value = value.split(",")
    out = []
    for item in value or ():
        item = str(item).strip()
        if not item:
            continue
        system, _, name = item.partition(":")
        if not system or ":" in name:
            raise ValueError(f"--events: {item!r} is not SYSTEM, SYSTEM:EVENT or SYSTEM:*")
        out.append(item)
    return tuple(out)


def parse_cpu_map(value) -> dict:
    """``0:1,1:0`` (or a dict, or a list of ``a:b``) -> {recorded CPU: fake CPU}."""
    if isinstance(value, dict):
        items = list(value.items())
    else:
        if isinstance(value, str):
            value = value.split(",")
        items = []
        for pair in value:
            if not str(pair).strip():
                continue
            a, sep, b = str(pair).strip().partition(":")
            if not sep:
                raise ValueError(f"--cpu-map: {pair!r} is not FROM:TO")
            items.append((a, b))
    out = {}
    for a, b in items:
        try:
            a, b = int(a), int(b)
        except (TypeError, ValueError):
            raise ValueError(f"--cpu-map: {a}:{b} is not two CPU numbers") from None
        if a < 0 or b < 0:
            raise ValueError(f"--cpu-map: {a}:{b}: CPU numbers are >= 0")
        out[a] = b
    return out


class Replay(ReplayCommit, ReplayPacing):
    """One replay of *rec* into *kernel* (checked and installed when made:
    a ValueError names what cannot be replayed, before any event is)."""

    def __init__(self, kernel, rec: Recording, options: ReplayOptions):
        self.kernel = kernel
        self.rec = rec
        self.options = options
        self.buffer = self._pick_buffer()
        self.cpu_of = self._cpu_map()
        self.state = "ready"
        self.error: Optional[str] = None
        self.total = sum(cd.events for cd in self.buffer.cpus.values()) * options.loop
        self.done = 0  # recorded events handled (committed, filtered or skipped)
        self.committed = 0  # written into a ring buffer
        self.lost_marks = 0
        self.started = self.finished = None
        if options.into is not None and options.into not in kernel.ftrace.instances:
            raise ValueError(f"--into {options.into}: no such instance "
                             f"(mkdir tracing/instances/{options.into} first)")
        self.installed: Installed = install(kernel, rec, options.events)
        if len([b for b in rec.buffers if b.cpus]) > 1:
            self.installed.notes.append(
                f"only buffer {self.buffer.name or '(top)'!r} is replayed "
                "(--buffer NAME picks another, --into INSTANCE where it goes)")

    @property
    def array(self):
        """The trace array replayed into: the top level, or the instance
        ``--into`` names (ValueError once it is removed)."""
        ft = self.kernel.ftrace
        if self.options.into is None:
            return ft
        try:
            return ft.instances[self.options.into]
        except KeyError:
            raise ValueError(f"instance {self.options.into} was removed") from None

    # --- checks ------------------------------------------------------------------

    def _pick_buffer(self):
        rec, name = self.rec, self.options.buffer
        if name is not None:
            try:
                return rec.buffer(name)
            except KeyError as err:
                raise ValueError(str(err.args[0])) from None
        with_data = [b for b in rec.buffers if b.cpus and any(cd.events or cd.lost_markers
                                                              for cd in b.cpus.values())]
        top = next((b for b in rec.buffers if b.name == ""), None)
        if top is not None and (top in with_data or not with_data):
            return top
        if with_data:
            return with_data[0]
        if rec.buffers:
            return rec.buffers[0]
        raise ValueError(f"{rec.source}: no buffer to replay")

    def _cpu_map(self) -> dict:
        n = self.kernel.engine.nr_cpus
        out = {}
        for cpu in sorted(self.buffer.cpus):
            to = self.options.cpu_map.get(cpu, cpu)
            if cpu in self.options.cpu_map and not 0 <= to < n:
                raise ValueError(f"--cpu-map {cpu}:{to}: the fake has {n} CPUs (0-{n - 1})")
            if not 0 <= to < n:
                raise ValueError(f"the recording has events on CPU {cpu} and the fake has "
                                 f"{n} CPUs: mount with --cpus {cpu + 1} or give --cpu-map "
                                 f"{cpu}:N")
            out[cpu] = to
        return out

    # --- reading: what to commit, in order ---------------------------------------------

    def _first(self) -> int:
        """The recorded (ring-buffer) time of the buffer's first event."""
        firsts = []
        for cpu in self.buffer.cpus:
            ev = next((e for e in self.buffer.cpu_events(cpu) if not e.lost), None)
            if ev is not None:
                firsts.append(ev.ts)
        return min(firsts, default=0)

    def _report_time(self):
        """:meth:`Recording.report_ts` as one expression (it is per event)."""
        rec = self.rec
        const = rec.report_ts(0)
        tsc = rec.options.get("tsc2nsec")
        if tsc and tsc["multiplier"]:
            mult, shift = tsc["multiplier"], tsc["shift"]
            return lambda ts: ((ts * mult) >> shift) + const
        return lambda ts: ts + const

    def items(self) -> Iterator[tuple]:
        """``(cpu, ts, payload or None, target or lost count)`` in the order
        to commit them: the merged recording, *loop* times, each loop after
        the last event of the one before."""
        opts, targets, cpu_of = self.options, self.installed.targets, self.cpu_of
        report_ts = self._report_time()
        first = report_ts(self._first())
        shift = 0 if opts.keep_timestamps else self.kernel.engine.clock.now() - first
        last = first
        for n in range(opts.loop):
            if n:
                shift += last - first + 1
            for ev in self.buffer.events():
                ts = report_ts(ev.ts)
                if ts > last:
                    last = ts
                if ev.lost:
                    yield cpu_of[ev.cpu], ts + shift, None, ev.count
                else:
                    yield cpu_of[ev.cpu], ts + shift, ev.payload, targets.get(ev.id)

    # --- running -------------------------------------------------------------------------

    def run_sync(self) -> "Replay":
        """Replay everything now, with no pacing and no waiting for readers
        (a fake without readers, the bench)."""
        self._begin()
        try:
            for cpu, ts, payload, what in self.items():
                self._step(cpu, ts, payload, what)
        except Exception as err:
            self._fail(err)
            raise
        self._end()
        return self

    def _step(self, cpu, ts, payload, what) -> None:
        if payload is None:
            self.lose(cpu, what)
            return
        self.done += 1
        if self.commit(cpu, ts, payload, what):
            self.committed += 1
            engine = self.kernel.engine
            engine.emitted += 1
            if ts > engine.last_ts[cpu]:
                engine.last_ts[cpu] = ts

    def _begin(self) -> None:
        self.state = "running"
        self.started = time.monotonic()
        self._taken0 = [buf.consumed_events for buf in self.array.buffers]

    def _end(self) -> None:
        engine = self.kernel.engine
        clock = engine.clock
        if clock.deterministic:
            clock.advance(max(engine.last_ts) - clock.now())
        engine.batch_done()
        self.state = "done"
        self.finished = time.monotonic()

    def _fail(self, err: BaseException) -> None:
        self.state = "failed"
        self.error = str(err) or repr(err)
        self.finished = time.monotonic()
        self.kernel.engine.batch_done()

    async def run(self, slicer) -> None:
        """Replay in the server: turns of the *slicer* (FUSE requests go
        first), paced, waiting for readers when a buffer is full."""
        import trio

        try:
            if self.options.wait_enabled:
                self.state = "waiting"
                while not self.ready_to_start():
                    await trio.sleep(0.005)
            self._begin()
            await self._play(trio, slicer)
        except trio.Cancelled:
            self.state, self.error = "failed", "cancelled (the fake is going away)"
            raise
        except Exception as err:  # never the server's end: reported in the status
            log.exception("replay of %s failed", self.rec.source)
            self._fail(err)
            return
        self._end()
        log.info("replay of %s: %d events, %d committed", self.rec.source, self.done,
                 self.committed)

    def status(self) -> dict:
        """Progress and result, as the control ``replay_status`` gives them."""
        elapsed = ((self.finished or time.monotonic()) - self.started) if self.started else 0.0
        return {"state": self.state, "error": self.error, "source": self.rec.source,
                "kind": self.rec.kind, "buffer": self.buffer.name, "total": self.total,
                "done": self.done, "committed": self.committed, "lost_marks": self.lost_marks,
                "seconds": round(elapsed, 6), "created": list(self.installed.created),
                "adopted": list(self.installed.adopted), "notes": list(self.installed.notes)}


def replay_sync(kernel, rec: Recording, **options) -> Replay:
    """Replay *rec* into *kernel* now (no server): checked, installed, committed."""
    return Replay(kernel, rec, ReplayOptions.make(**options)).run_sync()


__all__ = ["Replay", "ReplayOptions", "parse_cpu_map", "parse_events", "replay_sync",
           "selected"]
