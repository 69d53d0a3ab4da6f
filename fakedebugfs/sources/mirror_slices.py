"""When the mirror's perf rings are drained (the server loop's
:meth:`~DrainSlices.pending`, a FUSE request's :meth:`~DrainSlices.sync`)
and how much of them one drain takes: a slice sized by
the destination buffers (no drain overwrites, within one turn, what a
consuming reader would have taken on the kernel) and by time, from the
measured cost of a byte (a system call the function tracers expand into
its call tree costs a hundred times a plain event), and held while a
consuming reader is behind.  A mixin of
:class:`~fakedebugfs.sources.mirror_drain.MirrorDrain` (which sets
``kernel``, ``opened``, ``rings``, ``cost``, ``drained_at``, ``_taken`` and
``_exits``)."""

from __future__ import annotations

import time

DRAIN_BYTES = 256 << 10  # a drain takes at most this much of a ring's records
SLICE_FIRST = 16 << 10  # ... in a slice of slicer turns, before a drain's cost is known
SLICE_LEAST = 1024  # ... and at least this much (some ten samples)
COST_FROM = 16 << 10  # bytes a drain takes, or ...
COST_TIME = 0.002  # ... seconds it lasts, to teach the cost of a byte (slice_for)
SLICE_SHARE = 4  # ... and this fraction of a destination buffer at most (slice_bytes)
DRAIN_AT = 128 << 10  # bytes in a ring that make the loop drain at once (else DRAIN_EVERY)
DRAIN_WORK = 0.002  # seconds of drain work that make the loop drain at once
DRAIN_EVERY = 0.02  # seconds records wait at most for the loop (a ring of 4 MiB holds
# ~87,000 samples: 170 ms of a program making 500,000 traced syscalls/s)
READER_WINDOW = 0.05  # s: a buffer whose reader took pages this recently has a reader (reader_behind)


class DrainSlices:
    """The sizes of the mirror's drains."""

    def slice_bytes(self) -> int:
        """The most one drain takes of a ring: DRAIN_BYTES, and no more
        than a SLICE_SHARE-th of the smallest per-CPU buffer of the trace
        arrays recording mirrored events (at least a page).

        On the kernel a consuming reader (``trace_pipe_raw`` spliced on
        another CPU) takes pages while the tracepoints write them; here the
        one server both fires the samples and answers the reads, so a
        reader gets its turn only between two drains.  A drain larger than
        the buffer (a backlog of a burst: 87,000 samples fit in a ring of
        4 MiB, 72,000 ``sys_enter_getppid`` in libtracefs' 1,410 KB
        buffer) overwrote, within one turn, events the reader would have
        taken on the kernel; what a slice leaves waits in the perf ring,
        which counts its own losses (PERF_RECORD_LOST -> ``overrun``).  A
        perf sample is longer than its ring buffer entry (28 bytes of
        header against 4), so a slice fills less than its share."""
        least = min((buf.size for buf in self._mirrored_buffers()), default=None)
        if least is None:
            return DRAIN_BYTES
        return max(4096, min(DRAIN_BYTES, least // SLICE_SHARE))

    def _mirrored_buffers(self):
        """The per-CPU buffers of the trace arrays recording mirrored
        events (an enabled event that is opened here)."""
        opened = self.opened.keys()
        for tr in self.kernel.ftrace.arrays():
            if not tr.enabled.isdisjoint(opened):
                yield from tr.buffers

    def reader_behind(self) -> bool:
        """A consuming reader (``trace_pipe_raw``, ``trace_pipe``) of a
        buffer recording mirrored events took pages, or asked for one, in
        the last READER_WINDOW seconds and half of that buffer still waits
        for it.  (Asked: a nonblocking reader spinning on EAGAIN between
        two bursts is there when the next one comes, and its next read's
        own drain must leave it pages to take rather than fill the whole
        buffer first: a reader as libtracefs' ``tracefs_cpu_write`` lost
        2,000-22,000 events of a burst's start so, 1 run in 3.)

        On the kernel that reader, on another CPU, takes pages while the
        tracepoints write them.  Here the one server both fires the samples
        and answers the reads, on the CPU the reader needs too: draining on
        would overwrite what the reader is about to take (and take its
        CPU).  So the backlog waits in the perf ring, which counts its own
        losses (PERF_RECORD_LOST -> ``overrun``), until the reader catches
        up, or stops reading (after READER_WINDOW the drains go on and
        overwrite, as the kernel's writer does).  A buffer no one consumes
        (``trace`` read, or nothing) never holds the drains."""
        now = time.monotonic()
        taken = self._taken
        behind = False
        for buf in self._mirrored_buffers():
            seen = taken.get(buf)
            mark = (buf.consumed_events, buf.reader_asked)
            if seen is None or seen[0] != mark:
                taken[buf] = seen = (mark, now if seen is not None else 0.0)
            if now - seen[1] < READER_WINDOW and 2 * (buf.produced - buf.consumed) > buf.size:
                behind = True
        if len(taken) > 64:  # buffers of removed instances or resized ones
            live = {b for tr in self.kernel.ftrace.arrays() for b in tr.buffers}
            self._taken = {b: v for b, v in taken.items() if b in live}
        return behind

    def slice_for(self, seconds: float) -> int:
        """Bytes of each ring a drain of about *seconds* takes, by the
        cost of the last drains (what an event costs depends on what
        records it: a system call the function tracers expand into its
        call tree costs a hundred times a plain event), between
        SLICE_LEAST and :meth:`slice_bytes`."""
        most = self.slice_bytes()
        if not self.cost:
            return min(most, SLICE_FIRST)
        return int(max(SLICE_LEAST, min(most, seconds / self.cost / max(1, len(self.rings)))))

    def backlog_work(self, fullest: int) -> float:
        """Seconds a drain of *fullest* bytes of records would take (0 while
        no drain taught the cost)."""
        return fullest * self.cost

    def pending(self) -> bool:
        """Time for the server loop's drain: a ring holds DRAIN_AT bytes
        (or a whole slice, when :meth:`slice_bytes` is smaller), or records
        have waited DRAIN_EVERY seconds since the last drain, or draining
        them would take DRAIN_WORK seconds (:meth:`backlog_work`: a
        command's system calls the function tracers expand into call
        trees are fired while it runs, as the kernel writes them, not all
        at the next request, which would wait for them).  Fewer, bigger
        drains: a drain's fixed cost (numpy's calls, the engine's batch) is
        paid per slice, not per event, and a FUSE request drains what it
        needs itself (:meth:`sync`)."""
        if self.reader_behind():
            return False
        fullest = max((h - t for h, t in (r.positions() for r in self.rings.values())),
                      default=0)
        return fullest >= min(DRAIN_AT, self.slice_bytes()) or (
            fullest > 0 and (time.monotonic() - self.drained_at >= DRAIN_EVERY
                             or self.backlog_work(fullest) >= DRAIN_WORK))

    def sync(self, most: int, seconds: float, hold: bool = False) -> int:
        """Drain what the rings held when called (the events that happened
        before a FUSE request), in slices of *most* bytes per ring (at most
        :meth:`slice_bytes`), for at most *seconds*; returns how many were
        fired.  *hold* (a read or poll): not while a reader is behind
        (:meth:`reader_behind`), checked before each slice: a backlog
        fired at once could overwrite events a reader of the kernel would
        have taken, and the reader takes its pages between two slices."""
        marks = self.marks()
        deadline = time.monotonic() + seconds
        most = min(most, self.slice_for(seconds))
        fired = 0
        while not (hold and self.reader_behind()):
            fired += self.drain(most)
            if self.reached(marks) or time.monotonic() >= deadline:
                break
        return fired

    def backlog(self) -> bool:
        """A ring holds records not drained yet."""
        for ring in self.rings.values():
            head, tail = ring.positions()
            if head != tail:
                return True
        return False

    def marks(self) -> dict:
        """Each ring's head now: the records of what happened until now."""
        return {cpu: ring.positions()[0] for cpu, ring in self.rings.items()}

    def reached(self, marks: dict) -> bool:
        """Every record up to *marks* (:meth:`marks`) has been drained."""
        return all(self.rings[cpu].positions()[1] >= head for cpu, head in marks.items()
                   if cpu in self.rings)

    def hold_exit(self, leave) -> None:
        """The engine's ``pid_exit_hold`` (``tree``): a task's exit came in
        (``run``'s watcher) while samples it made before may wait in the
        rings; its pid-list removal (*leave*) runs once every ring is
        drained up to now (:meth:`release_exits`, after each drain), so
        those samples meet the lists as the kernel's events did
        (``trace-cmd record -c -F sh -c 'cat X; cat X'`` lost a cat's
        openats, all or most, when its exit came first)."""
        marks = self.marks()
        if self.reached(marks):
            leave()
        else:
            self._exits.append((marks, leave))

    def release_exits(self, everything: bool = False) -> None:
        """Run the held removals whose samples are all in (*everything*:
        all of them, the mirror closing)."""
        while self._exits and (everything or self.reached(self._exits[0][0])):
            self._exits.pop(0)[1]()


__all__ = ["DrainSlices", "DRAIN_BYTES", "COST_FROM", "COST_TIME", "DRAIN_AT", "DRAIN_EVERY",
           "DRAIN_WORK"]
