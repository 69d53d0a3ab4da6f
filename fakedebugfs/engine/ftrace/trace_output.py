"""A trace array's text: ``trace``, ``trace_pipe``, ``saved_cmdlines``
(kernel/trace/trace.c's ``s_show``/``print_trace_line``/
``tracing_read_pipe``, 6.18).

:class:`TraceOutput`, mixed into :class:`~.trace.TraceArray`: the events
of every CPU merged by timestamp, read in place (``trace``) or taken
(``trace_pipe``), each line the tracer's own ``print_line`` or the context
columns and the event's print fmt (:mod:`.output`).
"""

from __future__ import annotations

import heapq
from typing import Iterator, Optional

from fakedebugfs.engine.core.ringbuffer import CpuBuffer
from fakedebugfs.engine.core.ringbuffer_read import Event
from fakedebugfs.engine.ftrace.output import context, trace_header

MARKER_IP_NAME = "tracing_mark_write"


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
        return best

    def empty(self, cpus=None) -> bool:
        return all(self.buffers[cpu].empty() for cpu in self.cpu_list(cpus))

    def format_line(self, cpu: int, ev: Event) -> str:
        """``print_trace_line``: the tracer's ``print_line`` first, else the
        context and the event's own output."""
        etype = self.by_id.get(int.from_bytes(ev.payload[:2], "little"))
        if etype is None:
            return ""
        rec = etype.decode(ev.payload)
        line = self.tracer.print_line(self, etype, rec)
        if line is not None:
            return line
        pid = rec["common_pid"]
        head = ""
        if self.options["context-info"]:
            head = context(self.top.cmdlines, cpu, ev.ts, pid, rec["common_flags"],
                           rec["common_preempt_count"], self.options["irq-info"])
        if etype.system == "ftrace" or etype.bare:
            # internal entries and syscall events print no event name
            return head + etype.show(rec, self) + "\n"
        return f"{head}{etype.name}: {etype.show(rec, self.out)}\n"

    def ptr(self, addr: int) -> str:
        return self.out.ptr(addr)

    def sym_offset(self, addr: int) -> str:
        return self.out.sym_offset(addr)

    def sym(self, addr: int) -> str:
        """``%ps`` for ``ftrace:print``: marker entries carry ip 0 and print
        as the kernel's ``tracing_mark_write`` (not in the fake kallsyms)."""
        return MARKER_IP_NAME if addr == 0 else self.out.sym(addr)

    def header(self, cpus=None) -> str:
        """The header of ``trace``: ``# tracer:`` then the tracer's own
        ``print_header`` or the default one."""
        own = self.tracer.print_header(self)
        if own is not None:
            return f"# tracer: {self.tracer.name}\n#\n" + own
        entries = sum(self.entries(c) for c in range(len(self.buffers)))
        written = entries + sum(b.overrun for b in self.buffers)
        return trace_header(self.tracer.name, entries, written, len(self.buffers),
                            self.options["irq-info"])

    def trace_text(self, cpus=None) -> Iterator[str]:
        """``trace`` / ``per_cpu/cpuN/trace``: header then every event."""
        yield self.header(cpus)
        for cpu, ev in self.iter_events(cpus):
            yield self.format_line(cpu, ev)

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


def _stamped(cpu: int, buf: CpuBuffer):
    for ev in buf.iter_unread():
        yield ev.ts, cpu, ev


__all__ = ["TraceOutput", "MARKER_IP_NAME"]
