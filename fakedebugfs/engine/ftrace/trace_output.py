"""A trace array's text: ``trace``, ``trace_pipe``, ``saved_cmdlines``
(kernel/trace/trace.c's ``s_show``/``print_trace_line``/
``tracing_read_pipe``, 6.18).

:class:`TraceOutput`, mixed into :class:`~.trace.TraceArray`: the events
of every CPU merged by timestamp, read in place (``trace``) or taken
(``trace_pipe``), each line the tracer's own ``print_line`` or the context
columns and the event's print fmt (:mod:`.output`).

Lines are made a run at a time (:meth:`TraceOutput.format_lines`, what
``trace`` reads in :data:`CHUNK_LINES` steps): within a run nothing else
runs, so each event type, comm column and (in :class:`~.output.OutputContext`)
symbol is looked up once, and the text is byte for byte the per-event
``print_trace_line``'s (tests/test_trace_text.py).
"""

from __future__ import annotations

import heapq
from itertools import islice
from typing import Iterator, Optional

from fakedebugfs.engine.core.ringbuffer import CpuBuffer
from fakedebugfs.engine.core.ringbuffer_read import Event
from fakedebugfs.engine.ftrace.events import ENTRY
from fakedebugfs.engine.ftrace.kmemtrace_plugin import NopTracer
from fakedebugfs.engine.ftrace.marker_ip import MARKER_FUNCTION, marker_site
from fakedebugfs.engine.ftrace.output import context_head, timestamp, trace_header
from fakedebugfs.engine.ftrace.output_formats import (LAT_HELP_HEADER, latency_header, plain,
                                                      print_lines)

MARKER_IP_NAME = MARKER_FUNCTION
CHUNK_LINES = 128  # lines per step of text_chunks (under a slicer turn)


class TraceOutput:
    """The text files of a trace array.  Needs ``buffers``, ``cpu_list``,
    ``entries``, ``by_id``, ``tracer``, ``options``, ``out`` (the
    :class:`~.output.OutputContext`) and ``top`` (``saved_cmdlines``)."""

    def iter_events(self, cpus=None) -> Iterator[tuple[int, Event]]:
        """Every unread event, merged across CPUs by timestamp (``trace``)."""
        streams = [_stamped(cpu, self.buffers[cpu]) for cpu in self.cpu_list(cpus)]
        for ts, cpu, ev in heapq.merge(*streams, key=lambda t: (t[0], t[1])):
            yield cpu, ev

    def consume(self, cpus=None) -> Optional[tuple[int, Event]]:
        """The oldest unread event of *cpus*, taken (``trace_pipe``)."""
        best = None
        for cpu in self.cpu_list(cpus):
            ev = self.buffers[cpu].peek()
            if ev is not None and (best is None or ev.ts < best[1].ts):
                best = (cpu, ev)
        if best is not None:
            self.buffers[best[0]].consume()
            self.pipe_idx = getattr(self, "pipe_idx", 0) + 1  # iter->idx (verbose latency lines)
        return best

    def empty(self, cpus=None) -> bool:
        return all(self.buffers[cpu].empty() for cpu in self.cpu_list(cpus))

    def format_line(self, cpu: int, ev: Event) -> str:
        """``print_trace_line``: the tracer's ``print_line`` first, else the
        context and the event's own output; a tracer that prints from
        more than one entry (``function_graph``) reads on by itself."""
        own = getattr(self.tracer, "format_event", None)
        if own is not None:
            return own(self, cpu, ev)
        return self.format_lines(((ev.ts, cpu, ev.payload),))

    def format_lines(self, events) -> str:
        """:meth:`format_line` of each ``(ts, cpu, payload)`` of *events*,
        joined.  Nothing may change between them (one step of a reader):
        the event types, the tracer, the options and the comms are looked up
        once per type or task for the whole run, and an event's text (what
        follows the context) is kept across runs by the payload after its
        ``struct trace_entry`` (:meth:`~.output.OutputContext.texts`) when
        it depends on nothing else (:func:`_pure`)."""
        if not plain(self.options):  # raw, hex, bin, fields, latency-format
            return print_lines(self, events)
        out = self.out
        # the nop tracer prints no line of its own (it has no print_line in the kernel)
        tracer_line = None if type(self.tracer) is NopTracer else self.tracer.print_line
        context_info = self.options["context-info"]
        types: dict = {}  # common_type -> _kind()
        heads: dict = {}  # (cpu, flags/preempt_count/pid bytes) -> context before the timestamp
        lines = []
        out.hold()
        try:
            for ts, cpu, payload in events:
                if len(payload) < 8:  # shorter than struct trace_entry
                    lines.append(self._line(None, tracer_line, heads, ts, cpu, payload))
                    continue
                ident = payload[0] | payload[1] << 8
                kind = types.get(ident)
                if kind is None:
                    kind = types[ident] = self._kind(ident, tracer_line)
                texts = kind[4]
                if texts is None:  # the per-event path
                    lines.append(self._line(kind, tracer_line, heads, ts, cpu, payload))
                    continue
                key = payload[8:]
                text = texts.get(key)
                if text is None:
                    etype, label, show, arg, _ = kind
                    text = label + show(etype.decode(payload), arg)
                    out.keep_text(texts, key, text)
                if not context_info:
                    lines.append(text + "\n")
                    continue
                head = heads.get((cpu, payload[2:8]))
                if head is None:
                    head = self._head(heads, cpu, payload)
                lines.append(f"{head}{timestamp(ts)}: {text}\n")
        finally:
            out.release()
        return "".join(lines)

    def _kind(self, ident: int, tracer_line) -> tuple:
        """``(etype, text before the fields, show, what it prints with,
        kept texts or None)`` of the entries of type *ident*."""
        etype = self.by_id.get(ident)
        if etype is None:
            return (None, "", None, None, None)
        if etype.system == "ftrace" or etype.bare:
            # internal entries and syscall events print no event name
            label, arg = "", self
        else:
            label, arg = f"{etype.name}: ", self.out
        texts = self.out.texts(etype, _pure) if tracer_line is None else None
        return (etype, label, etype.show, arg, texts)

    def _head(self, heads: dict, cpu: int, payload) -> str:
        """``trace_print_context`` up to the timestamp, kept in *heads*."""
        _, flags, preempt, pid = ENTRY.unpack_from(payload)
        tgid = self.top.tgids.find(pid) if self.options.get("record-tgid") else None
        head = heads[(cpu, payload[2:8])] = context_head(
            self.top.cmdlines, cpu, pid, flags, preempt, self.options["irq-info"], tgid)
        return head

    def _line(self, kind, tracer_line, heads: dict, ts: int, cpu: int, payload) -> str:
        """One line the per-event way: decoded, offered to the tracer's
        ``print_line``, its text made now."""
        if kind is None:
            kind = self._kind(int.from_bytes(payload[:2], "little"), tracer_line)
        etype, label, show, arg, _ = kind
        if etype is None:
            return ""
        rec = etype.decode(payload)
        if tracer_line is not None:
            self.iter_ts = ts  # iter->ts, for a print_line that prints it (mmiotrace)
            line = tracer_line(self, etype, rec)
            if line is not None:
                return line
        if not self.options["context-info"]:
            return f"{label}{show(rec, arg)}\n"
        padded = payload if len(payload) >= 8 else payload.ljust(8, b"\0")
        head = heads.get((cpu, padded[2:8])) or self._head(heads, cpu, padded)
        return f"{head}{timestamp(ts)}: {label}{show(rec, arg)}\n"

    def text_chunks(self, events: Iterator[tuple], lines: int = CHUNK_LINES) -> Iterator[str]:
        """The lines of *events* (``(ts, cpu, payload)``, merged), *lines*
        at a time (:meth:`format_lines`): one ``next`` is one short step;
        a tracer with its own ``text_chunks`` makes them."""
        if self.options.get("latency-format"):  # each entry with the next one's time
            events = _with_next(events)
        own = getattr(self.tracer, "text_chunks", None)
        if own is not None:
            yield from own(self, events, lines)
            return
        events = iter(events)
        while True:
            run = list(islice(events, lines))
            if not run:
                return
            yield self.format_lines(run)

    def ptr(self, addr: int) -> str:
        return self.out.ptr(addr)

    def sym_offset(self, addr: int) -> str:
        site = marker_site(self.top)
        if site is not None and addr == site.addr:  # (the profile's kallsyms not read for it)
            return site.sym_offset
        return self.out.sym_offset(addr)

    def sym(self, addr: int) -> str:
        """``%ps`` for ``ftrace:print``: a marker entry's ip is the profile's
        ``marker_ip`` (engine/ftrace/marker_ip.py), or 0 without one, which
        prints as the kernel's ``tracing_mark_write``."""
        if addr == 0:
            return MARKER_IP_NAME
        site = marker_site(self.top)
        return site.name if site is not None and addr == site.addr else self.out.sym(addr)

    def header(self, cpus=None) -> str:
        """The header of ``trace``: ``# tracer:`` then the tracer's own
        ``print_header`` or the default one."""
        own = self.tracer.print_header(self)
        head = f"# tracer: {self.tracer.name}\n#\n"
        if own is not None:
            return head + own
        opts = self.options  # trace_default_header
        if not opts["context-info"]:
            return head
        if opts.get("latency-format"):
            if self.empty(cpus):
                return head
            return head + latency_header(self, self.tracer.name) + (
                "" if opts.get("verbose") else LAT_HELP_HEADER)
        if opts.get("verbose"):
            return head
        entries = sum(self.entries(c) for c in range(len(self.buffers)))
        written = entries + sum(b.overrun for b in self.buffers)
        online = getattr(self.tracer, "online_cpus", None) or len(self.buffers)  # #P
        return trace_header(self.tracer.name, entries, written, online,
                            self.options["irq-info"], self.options.get("record-tgid"))

    def trace_text(self, cpus=None) -> Iterator[str]:
        """``trace`` / ``per_cpu/cpuN/trace``: the header, then every event's
        line, one at a time (the file's reader takes the chunks whole)."""
        yield self.header(cpus)
        for chunk in self.text_chunks((ev.ts, cpu, ev.payload) for cpu, ev in self.iter_events(cpus)):
            yield from chunk.splitlines(keepends=True)

    def saved_cmdlines(self) -> str:
        """Comms of the tasks whose entries were recorded (.cmdlines)."""
        return self.top.cmdlines.show()

    @property
    def cmdlines_size(self) -> int:
        """``saved_cmdlines_size``."""
        return self.top.cmdlines.num

    @cmdlines_size.setter
    def cmdlines_size(self, size: int) -> None:
        """``tracing_resize_saved_cmdlines``: a new buffer, empty."""
        self.top.cmdlines.resize(size)


def _pure(etype) -> bool:
    """An event whose text is a function of its payload after ``struct
    trace_entry`` (and of the symbols and ``hash-ptr``, which
    :class:`~.output.OutputContext` watches): not one whose print fmt
    reads ``jiffies`` (the time it is printed) or a ``common_`` field, nor
    a marker's ``ftrace:print``, whose ip follows ``sym-offset`` and
    ``sym-addr`` (``seq_print_ip_sym``), nor a kernel probe's, whose
    addresses follow ``sym-addr``."""
    if etype.system == "ftrace" and etype.name == "print":
        return False
    if getattr(etype.show, "reads_options", False):
        return False
    fmt = etype.print_fmt or ""
    return "jiffies" not in fmt and "common_" not in fmt


def _with_next(events) -> Iterator[tuple]:
    """``(ts, cpu, payload, next ts, index)`` of each of *events*: the time
    of the entry after it (its own for the last), as
    ``trace_print_lat_context`` finds it, and ``iter->idx``."""
    events = iter(events)
    prev = next(events, None)
    idx = 0
    for item in events:
        yield (prev[0], prev[1], prev[2], item[0], idx)
        prev = item
        idx += 1
    if prev is not None:
        yield (prev[0], prev[1], prev[2], prev[0], idx)


def _stamped(cpu: int, buf: CpuBuffer):
    for ev in buf.iter_unread():
        yield ev.ts, cpu, ev


__all__ = ["TraceOutput", "MARKER_IP_NAME"]
