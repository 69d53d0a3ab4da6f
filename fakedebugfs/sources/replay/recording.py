"""What a reader makes of a recording: a :class:`Recording` of
:class:`Buffer` s (the top instance and the others), each with per-CPU ring
buffer pages, and the events and lost-event markers in them.

A recording is validated whole when it is built (:meth:`Recording.validate`
walks every page of every CPU), so iterating never meets a broken page.
"""

from __future__ import annotations

import heapq
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

from fakedebugfs.sources.replay.errors import ReplayFormatError
from fakedebugfs.engine.ftrace.formatfile import EventFormat, EventHeader, Kallsyms, PageHeader
from fakedebugfs.sources.replay.ringpages import PageDecoder, PageError


@dataclass(frozen=True, slots=True)
class Event:
    """One event as the ring buffer held it: *payload* starts with
    ``struct trace_entry`` (common_type = *id*, ..., common_pid = *pid*),
    byte for byte as recorded (with the ring buffer's 4-byte alignment)."""

    cpu: int
    ts: int  # ring-buffer time, before any trace.dat OFFSET/DATE/TSC2NSEC
    id: int
    key: str | None  # "system:event" of *id* in the recording's formats
    pid: int
    payload: bytes
    position: int  # of the payload in the per-CPU data

    lost = False


@dataclass(frozen=True, slots=True)
class LostEvents:
    """Events the kernel dropped before a page (``RB_MISSED_EVENTS``);
    *count* is None when the kernel did not store it (no ``RB_MISSED_STORED``),
    as trace-cmd's ``[LOST EVENTS]``; *ts* is the time of the page after them."""

    cpu: int
    ts: int
    count: int | None
    position: int  # of the page in the per-CPU data

    lost = True


class CpuData:
    """The pages one CPU recorded in one buffer.

    *data* is the (uncompressed) bytes; *file_offset* where they start in the
    file, or, for compressed data, *chunks* maps each chunk's position in
    *data* to its file offset, so errors name a place in the file.
    """

    def __init__(self, cpu: int, data, file_offset: int, source: str, section: str,
                 chunks: list[tuple[int, int]] | None = None):
        self.cpu = cpu
        self.data = data
        self.file_offset = file_offset
        self.source = source
        self.section = section
        self.chunks = chunks  # [(start in data, file offset of the chunk)]
        self.pages = 0
        self.events = 0
        self.lost_markers = 0
        self.lost_events = 0

    def __len__(self) -> int:
        return len(self.data)

    def error(self, pos: int, message: str, truncated: bool = False) -> ReplayFormatError:
        if self.chunks is None:
            return ReplayFormatError(self.source, self.section, self.file_offset + pos, message,
                                     truncated)
        start, offset = max((c for c in self.chunks if c[0] <= pos), default=(0, 0))
        return ReplayFormatError(
            self.source, f"{self.section} (byte 0x{pos:x} of the uncompressed data, "
            f"chunk at 0x{offset:x})", None, message, truncated)


class Buffer:
    """One trace instance of a recording (``""`` is the top instance)."""

    def __init__(self, recording: "Recording", name: str, page_size: int,
                 clock: str | None = None, latency_text: str | None = None):
        self.recording = recording
        self.name = name
        self.page_size = page_size
        self.clock = clock
        self.latency_text = latency_text  # a "latency" recording's trace text
        self.cpus: dict[int, CpuData] = {}
        self.decoder: PageDecoder | None = None

    def __repr__(self) -> str:
        return f"<Buffer {self.name!r}: cpus {sorted(self.cpus)}, {self.page_size}-byte pages>"

    # --- validation ---------------------------------------------------------------

    def validate(self) -> None:
        """Walk every page of every CPU; raise :class:`ReplayFormatError` at the first break."""
        rec = self.recording
        self.decoder = PageDecoder(rec.endian, rec.page_header, rec.event_header, self.page_size)
        for cpu in sorted(self.cpus):
            self._validate_cpu(self.cpus[cpu])

    def _validate_cpu(self, cd: CpuData) -> None:
        dec, psize = self.decoder, self.page_size
        if len(cd) % psize:
            raise cd.error(len(cd) - len(cd) % psize,
                           f"{len(cd)} bytes of pages is not a multiple of the "
                           f"{psize}-byte page", truncated=True)
        common = self.recording.common_size
        for pos in range(0, len(cd), psize):
            try:
                info = dec.header(cd.data, pos)
                records = dec.records(cd.data, info)
            except PageError as err:
                raise cd.error(err.pos, err.message, err.truncated) from None
            cd.pages += 1
            if info.missed:
                cd.lost_markers += 1
                cd.lost_events += info.lost or 0
            for _, start, end in records:
                if end - start < common:
                    raise cd.error(start, f"event of {end - start} bytes is shorter than "
                                   f"its {common}-byte common fields")
            cd.events += len(records)

    # --- events -------------------------------------------------------------------

    def cpu_events(self, cpu: int) -> Iterator[Event | LostEvents]:
        """The events of one CPU in recorded order, with a :class:`LostEvents`
        before the first event of each page the kernel marked."""
        cd = self.cpus.get(cpu)
        if cd is None:
            return
        dec, data = self.decoder, cd.data
        ident = self.recording.identify
        for pos in range(0, len(cd), self.page_size):
            info = dec.header(data, pos)
            if info.missed:
                yield LostEvents(cpu, info.time_stamp, info.lost, pos)
            for ts, start, end in dec.records(data, info):
                payload = bytes(data[start:end])
                key, eid, pid = ident(payload)
                yield Event(cpu, ts, eid, key, pid, payload, start)

    def events(self) -> Iterator[Event | LostEvents]:
        """Every CPU's events merged by timestamp (ties: the lower CPU first,
        as trace-cmd report orders them)."""
        return heapq.merge(*(self.cpu_events(c) for c in sorted(self.cpus)),
                           key=lambda e: e.ts)

    def per_cpu_events(self) -> Iterator[Event | LostEvents]:
        """CPU after CPU, each in recorded order."""
        for cpu in sorted(self.cpus):
            yield from self.cpu_events(cpu)


@dataclass
class Recording:
    """A trace.dat or raw capture, read and validated.

    ``formats`` maps ``"system:event"`` to :class:`EventFormat` (raw text in
    ``.text``, parsed fields, id); ``buffers`` lists the instances, the top
    one (name ``""``) first when recorded; ``options`` holds trace.dat's
    options by name (``traceclock``, ``uname``, ``cpucount``, ``version``,
    ``date``, ``offset``, ``tsc2nsec``, ``time_shift``, ``cpustat`` …).
    """

    source: str
    kind: str  # "trace.dat v6", "trace.dat v7", "raw capture"
    version: int | None
    endian: str  # "little" or "big"
    long_size: int  # of the recording machine's user space (trace.dat header)
    page_size: int
    header_page: str
    header_event: str
    page_header: PageHeader
    event_header: EventHeader
    formats: dict[str, EventFormat] = field(default_factory=dict)
    kallsyms: str = ""
    printk_formats: str = ""
    cmdlines: dict[int, str] = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    buffers: list[Buffer] = field(default_factory=list)
    compression: tuple[str, str] | None = None
    cpus: int = 0  # CPUs of the recording machine (CPUCOUNT, else the CPUs with data)

    def __post_init__(self):
        self.by_id: dict[int, EventFormat] = {}
        self._idents: dict[int, tuple] = {}
        self._symbols: Kallsyms | None = None

    # --- set-up by the readers ----------------------------------------------------

    def add_format(self, fmt: EventFormat) -> None:
        self.formats[fmt.key] = fmt
        self.by_id[fmt.id] = fmt

    def finish(self) -> "Recording":
        """Index the formats, validate every buffer, count CPUs: the readers' last step."""
        e = "<" if self.endian == "little" else ">"
        sample = next(iter(self.formats.values()), None)
        common = sample.common if sample else ()
        ctype = sample.field("common_type") if sample else None
        cpid = sample.field("common_pid") if sample else None
        # struct trace_entry: u16 common_type at 0, int common_pid at 4, unless the formats say
        codes = {1: "B", 2: "H", 4: "I"}
        self._type_at = (ctype.offset, struct.Struct(e + codes[ctype.size])) \
            if ctype and ctype.size in codes else (0, struct.Struct(e + "H"))
        self._pid_at = (cpid.offset, struct.Struct(e + "i")) if cpid and cpid.size == 4 \
            else (4, struct.Struct(e + "i"))
        self.common_size = max((f.offset + f.size for f in common), default=8)
        for buf in self.buffers:
            buf.validate()
        if not self.cpus:
            self.cpus = max((max(b.cpus, default=-1) + 1 for b in self.buffers), default=0)
        return self

    def identify(self, payload: bytes) -> tuple[str | None, int, int]:
        """``(key, id, pid)`` of an event payload."""
        toff, tfmt = self._type_at
        eid = tfmt.unpack_from(payload, toff)[0]
        poff, pfmt = self._pid_at
        pid = pfmt.unpack_from(payload, poff)[0]
        fmt = self.by_id.get(eid)
        return (fmt.key if fmt else None), eid, pid

    # --- reading ------------------------------------------------------------------

    def buffer(self, name: str = "") -> Buffer:
        for buf in self.buffers:
            if buf.name == name:
                return buf
        raise KeyError(f"{self.source}: no buffer {name!r} "
                       f"(buffers: {[b.name for b in self.buffers]})")

    def events(self, buffer: str = "") -> Iterator[Event | LostEvents]:
        """The buffer's events merged by timestamp (see :meth:`Buffer.events`)."""
        return self.buffer(buffer).events()

    def decode(self, event: Event, common: bool = False) -> dict:
        """``{field: value}`` of *event* with its format in the recording."""
        fmt = self.by_id.get(event.id)
        if fmt is None:
            raise KeyError(f"event id {event.id} has no format in {self.source}")
        return fmt.decode(event.payload, self.endian, common)

    def report_ts(self, ts: int) -> int:
        """*ts* as ``trace-cmd report`` shows it (``timestamp_calc`` in
        trace-input.c): scaled by the TSC2NSEC option (``ts * mult >> shift``),
        then moved by the OFFSET option and the DATE option (microseconds).
        TIME_SHIFT (guest/host synchronisation) is not applied."""
        tsc = self.options.get("tsc2nsec")
        if tsc and tsc["multiplier"]:
            ts = (ts * tsc["multiplier"]) >> tsc["shift"]
        return ts + _number(self.options.get("offset")) + 1000 * _number(self.options.get("date"))

    def symbol(self, addr: int) -> tuple[str, int] | None:
        """``(function, offset)`` of *addr* in the recording's kallsyms."""
        if self._symbols is None:
            self._symbols = Kallsyms(self.kallsyms)
        return self._symbols.lookup(addr)

    def summary(self) -> str:
        """Some lines about the recording: CPUs, events per system, lost events."""
        lines = [f"{self.source}: {self.kind}, {self.endian} endian, long {self.long_size}, "
                 f"page {self.page_size}, commit {self.page_header.commit_size} bytes"
                 + (f", compression {self.compression[0]} {self.compression[1]}"
                    if self.compression else ""),
                 f"cpus: {self.cpus}; formats: {len(self.formats)}; cmdlines: "
                 f"{len(self.cmdlines)}; kallsyms: {len(self.kallsyms)} bytes"]
        for buf in self.buffers:
            per_sys: Counter = Counter()
            for cpu in sorted(buf.cpus):
                for ev in buf.cpu_events(cpu):
                    if not ev.lost:
                        per_sys[(ev.key or f"id {ev.id}").split(":")[0]] += 1
            cpus = ", ".join(f"cpu{c}: {cd.events} events in {cd.pages} pages, "
                             f"{cd.lost_markers} lost marks ({cd.lost_events} counted)"
                             for c, cd in sorted(buf.cpus.items()))
            lines.append(f"buffer {buf.name!r} (clock {buf.clock}): {cpus or 'no data'}")
            if per_sys:
                lines.append("  " + ", ".join(f"{s}: {n}" for s, n in sorted(per_sys.items())))
        return "\n".join(lines)


def _number(text: str | None) -> int:
    """strtoll(text, NULL, 0) of an option's text (0 when absent or not a number)."""
    if not text:
        return 0
    try:
        return int(text.strip(), 0)
    except ValueError:
        return 0
