"""The ftrace tracer behind ``tracing/`` (kernel/trace/trace.c, trace_events.c).

One overwrite-mode :class:`CpuBuffer` per CPU (``buffer_size_kb`` 1408 KiB
as on the real kernel once expanded), ``tracing_on``, the tracefs events with
per-event enable and filters, the current tracer (``nop`` or seed 000's
``kmemtrace``), trace options, ``trace_marker``, and the text of ``trace``
and ``trace_pipe`` merged across CPUs by timestamp.  Plain synchronous
Python: the ``tracing/`` tree wraps it in file operations.

Errors are raised as ``OSError`` with the errno the kernel returns; the
tree passes them on.
"""

from __future__ import annotations

import errno
import heapq
from typing import Iterator, Optional

from fakedebugfs.engine.core.lazynp import np

from fakedebugfs.engine.ftrace.events import (FTRACE_EVENTS, KMEM_EVENTS, TRACE_PRINT,
    TRACE_RAW_DATA, EventType, field_key)
from fakedebugfs.engine.ftrace.events_sched import SCHED_EVENTS
from fakedebugfs.engine.ftrace.ctype import SPACES, TEXT_SPACES
from fakedebugfs.engine.ftrace.control import (DEFAULT_SAVED_CMDLINES, PAGE_SIZE, buffer_kb_shown,
    buffer_pages, marker_count, raw_marker_ok, subbuf_pages)
from fakedebugfs.engine.ftrace.trigger import (KERNEL_STACK, EventTriggers, parse as parse_trigger,
    run_trigger)
from fakedebugfs.engine.ftrace.kmemtrace_plugin import KmemTracer, NopTracer
from fakedebugfs.engine.ftrace.cmdlines import SavedCmdlines
from fakedebugfs.engine.ftrace.registry import LazyProbes, engine_profile, install_registry
from fakedebugfs.engine.ftrace.stacks import stack_payload
from fakedebugfs.engine.ftrace.output import OutputContext, context, timestamp, trace_header
from fakedebugfs.engine.core import fast
from fakedebugfs.engine.core.batch import split_per_cpu
from fakedebugfs.engine.core.errors import einval
from fakedebugfs.engine.core.layouts import BUF_PAGE_HDR_SIZE
from fakedebugfs.engine.core.ringbuffer import MAX_BUFFER_BYTES, CpuBuffer, Event, event_length

DEFAULT_BUFFER_KB = 1408  # buffer_size_kb of an expanded buffer on 6.18 (x86_64)
TRACE_CLOCKS = ("local", "global", "counter", "uptime", "perf", "mono", "mono_raw",
                "boot", "tai", "x86-tsc")
TRACE_MARKER_MAX_SIZE = 4096
TRACE_STACK = 4  # enum trace_type: kernel_stack
# events whose pid filtering also looks at another task (pid fields)
PID_PAIR_EVENTS = {"sched:sched_switch": ("prev_pid", "next_pid"),
                   "sched:sched_wakeup": ("pid",), "sched:sched_wakeup_new": ("pid",),
                   "sched:sched_waking": ("pid",)}
MARKER_IP_NAME = "tracing_mark_write"

# trace_options (TRACE_ITER_*), in the order 6.18 prints them, with defaults
TRACE_OPTIONS = (
    ("print-parent", True), ("sym-offset", False), ("sym-addr", False), ("verbose", False),
    ("raw", False), ("hex", False), ("bin", False), ("block", False), ("fields", False),
    ("trace_printk", True), ("annotate", True), ("userstacktrace", False),
    ("sym-userobj", False), ("printk-msg-only", False), ("context-info", True),
    ("latency-format", False), ("record-cmd", True), ("record-tgid", False),
    ("overwrite", True), ("disable_on_free", False), ("irq-info", True), ("markers", True),
    ("event-fork", False), ("trace_printk_dest", True), ("copy_trace_marker", True),
    ("pause-on-trace", False), ("hash-ptr", True), ("function-trace", True),
    ("function-fork", False), ("stacktrace", False),
)


def _jiffies(engine) -> int:
    """``jiffies`` in print fmts: ticks of the engine's clock (the virtual one too)."""
    from fakedebugfs.engine.ftrace.printfmt import HZ, INITIAL_JIFFIES  # imported when first printed

    return (INITIAL_JIFFIES + engine.clock.now() // (1_000_000_000 // HZ)) & 0xFFFFFFFFFFFFFFFF


class EventProbe:
    """``trace_event_raw_event_<name>`` of one event bound to one trace
    array: reserve, fill, filter, commit.  The event (a profile's is ~5 KB
    of codec and print fmt once built) is looked up the first time the
    probe fires or its :attr:`event` is asked for (the batch path), not
    when it is enabled: ``--enable-all`` enables 2,305 events, most of
    which a workload never fires."""

    __slots__ = ("tr", "key", "_event", "batch_owner")

    def __init__(self, tr, key: str, ev: Optional[EventType] = None):
        self.tr = tr
        self.key = key
        self._event = ev
        self.batch_owner = tr  # the batch path (write_batch)

    @property
    def event(self) -> EventType:
        ev = self._event
        if ev is None:
            ev = self._event = self.tr.events[self.key]
        return ev

    def __call__(self, cpu, pid, ts, values):
        tr, key = self.tr, self.key
        ev = self._event or self.event
        tr.firing = key  # whose stack a kernel_stack entry shows (.stacks)
        trig = tr.triggers.get(key)
        if trig is not None and trig.list:
            tr._triggered(ev, trig, cpu, pid, ts, values)
            return
        if key in tr.soft_disabled or tr._ignored(key, pid, values):
            return
        match = tr.filter_preds.get(key)
        if match is None:
            if tr.commit(cpu, ts, ev.encode(pid, values)) and tr.options["stacktrace"]:
                tr.stack_entry(cpu, pid, ts)  # ftrace_trace_stack after the event
            return
        vals, rec = tr._record(ev, cpu, pid, values)
        if match(rec) and tr.commit(cpu, ts, ev.pack(pid, vals)) and tr.options["stacktrace"]:
            tr.stack_entry(cpu, pid, ts)


class TraceArray:
    """``struct trace_array``: one tracing directory's buffers, tracing_on,
    enabled events, filters, triggers, options, pid lists, cpumask and
    tracer.  The top level is :class:`Ftrace` (instance ""); ``instances/``
    directories are more of these sharing its event registry: an event
    fires into every trace array that enabled it (each registers its own
    probe on the tracepoint, as each ``trace_event_file`` does)."""

    def __init__(self, engine, buffer_kb: int = DEFAULT_BUFFER_KB, top=None, name: str = ""):
        self.engine = engine
        self.name = name
        self.top = self if top is None else top
        n = engine.nr_cpus
        pages = buffer_pages(buffer_kb)
        # an event too big for a sub-buffer is not recorded, nor counted (ring_buffer_lock_reserve)
        self.buffers = [CpuBuffer(cpu, pages * PAGE_SIZE, overwrite=True, count_oversized=False,
                                  reader_pages=True)
                        for cpu in range(n)]
        self.buffer_kb = [buffer_kb_shown(pages)] * n  # as buffer_size_kb shows them
        self.buffer_percent = 50
        self.subbuf_order = 0  # buffer_subbuf_size_kb: sub-buffers of PAGE_SIZE << order
        self.tracing_on = True
        if top is None:
            # every event of the kernel profile, built on first use (.registry)
            self.events, self.by_id = install_registry(
                engine, engine_profile(engine), KMEM_EVENTS + SCHED_EVENTS + FTRACE_EVENTS)
        else:  # an instance shares the registry (trace_events are global)
            self.events, self.by_id = top.events, top.by_id
        self.enabled: set[str] = set()
        self.filters: dict[str, str] = {}
        self.filter_preds: dict = {}
        self.probes = LazyProbes(self)  # made when an event is first enabled here
        self.options = dict(TRACE_OPTIONS)
        if top is not None:  # an instance's printk and marker copies start off
            self.options.update({"trace_printk_dest": False, "copy_trace_marker": False})
        # instances get the tracers that allow them (here only nop)
        self.tracers = {"kmemtrace": KmemTracer(), "nop": NopTracer()} if top is None \
            else {"nop": NopTracer()}
        self.tracer = self.tracers["nop"]
        self.clock = "local"
        self.event_pids: set[int] = set()
        self.notrace_pids: set[int] = set()
        self.cpumask = (1 << n) - 1
        self.triggers: dict = {}  # key -> EventTriggers (.trigger)
        self.soft_mode: dict[str, int] = {}  # key -> enable_event triggers holding it
        self.soft_disabled: set[str] = set()
        self.tm_ref: dict[str, int] = {}
        self.error_log: list[bytes] = []  # tracing_log_err entries
        self.busy = 0  # open files of this instance (rmdir answers EBUSY)
        self.written = 0  # entries offered to the buffers (wake-ups compare this)
        self.on_tracer_change: list = []
        self.on_event_added: list = []  # callables(EventType): a new events/ directory
        self.out = OutputContext(engine.kallsyms, self.options, engine.seed)
        # ``jiffies`` in print fmts: ticks of the engine's clock (the virtual one too)
        self.out.jiffies = lambda: _jiffies(engine)

    # --- events --------------------------------------------------------------

    def event_keys(self) -> list[str]:
        """``system:name`` of the events with tracepoints (``available_events``)."""
        return [key for key in self.events
                if not key.startswith("ftrace:") and key in self.engine.tracepoints]

    def systems(self) -> list[str]:
        return sorted({key.split(":")[0] for key in self.event_keys()})

    def make_probe(self, ev) -> "EventProbe":
        """``trace_event_raw_event_<name>`` bound to this trace array, for
        *ev* (an :class:`EventType`, or its key: the event is then looked
        up, which builds a profile's event, when the probe first fires)."""
        if isinstance(ev, str):
            return EventProbe(self, ev)
        return EventProbe(self, ev.key, ev)

    # --- the batch path (engine.core.batch) -----------------------------------

    def batch_ok(self, batch, kinds) -> bool:
        """Can :meth:`write_batch` take these events at once?  Not when
        anything looks at events one by one: triggers, soft-disable, pid
        lists, filters, the stacktrace option, instances (they share
        ``saved_cmdlines``), an event without a column encoder."""
        if self.top.instances or self.options["stacktrace"] or self.event_pids \
                or self.notrace_pids:
            return False
        for k, probe in kinds:
            ev = probe.event
            key = ev.key
            trig = self.triggers.get(key)
            if (trig is not None and trig.list) or key in self.soft_disabled \
                    or key in self.filter_preds or ev.encode_columns is None:
                return False
            for c in batch.cols[k]:
                if isinstance(c, np.ndarray) and c.dtype.kind == "O":
                    return False
        return True

    def write_batch(self, batch, kinds) -> None:
        """The probes of *kinds* for every event of the batch: payloads
        packed column-wise (:meth:`EventType.pack_columns`), each CPU's
        written with :meth:`CpuBuffer.write_batch`, ``saved_cmdlines``
        recorded for each entry, as :meth:`commit` of each in turn."""
        if not self.tracing_on:
            return
        groups = []
        mine = bytearray(len(batch.tps))
        for k, probe in kinds:
            pos = batch.where(k)
            mine[k] = 1
            for idx, words, length, rowsel in probe.event.pack_columns(batch.pid, batch.cols[k],
                                                                       pos=pos):
                groups.append((pos if len(idx) == len(pos) else pos[idx], words, length,
                               rowsel))
        if kinds:
            self.firing = kinds[-1][1].event.key  # the last probe run, as one by one
        cpus = bytes((self.cpumask >> c) & 1 for c in range(len(self.buffers)))
        bf = fast.load("fakedebugfs.engine.core.batch_fast")
        if bf is not None and batch.kind.dtype == batch.cpu.dtype == batch.pid.dtype == np.int64:
            done = bf.select(batch.kind, batch.cpu, mine, cpus)
        else:
            bf = None
            done = np.flatnonzero(np.frombuffer(bytes(mine), bool)[batch.kind]
                                  & np.frombuffer(cpus, bool)[batch.cpu])
        if not len(done):
            return
        split_per_cpu(self.buffers, batch, groups, done)
        self.written += len(done)
        if self.top.options["record-cmd"]:  # tracing_record_cmdline of each entry
            cmdlines = self.top.cmdlines
            if bf is None:
                cmdlines.record_many(batch.pid[done].astype(np.int32))
                return
            runs = bf.pid_runs(batch.pid, done)
            cmdlines.record_many(runs, bf.first_seen(runs))

    def _record(self, ev, cpu, pid, values):
        vals = ev.encode_values(values) if ev.encode_values else dict(values)
        comm = self.engine.comms.get(pid, "")
        return vals, dict(vals, common_pid=pid, CPU=cpu, cpu=cpu, COMM=comm, comm=comm)

    def _ignored(self, key: str, pid: int, values) -> bool:
        """The pid lists' verdict for one event: ``sched_switch`` is kept
        if its previous or next task is traced, a wake-up if the waker or
        the woken task is (``event_filter_pid_sched_switch_probe_pre``,
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
        if not hasattr(self, "_fork_probes"):
            self._fork_probes = (self._on_fork(fork), self._on_exit(exit_))
        for tp, probe in zip((fork, exit_), self._fork_probes):
            (tp.register if on else tp.unregister)(probe)

    def _on_fork(self, tp):
        parent_i, child_i = tp.index("parent_pid"), tp.index("child_pid")

        def probe(cpu, pid, ts, values):
            parent, child = values[parent_i], values[child_i]
            for pids in (self.event_pids, self.notrace_pids):
                if parent in pids:
                    pids.add(child)
        return probe

    def _on_exit(self, tp):
        pid_i = tp.index("pid")

        def probe(cpu, pid, ts, values):
            if self.event_pids or self.notrace_pids:
                self.event_pids.discard(values[pid_i])
                self.notrace_pids.discard(values[pid_i])
        return probe

    def ignore_pid(self, pid: int) -> bool:
        """``trace_event_ignore_this_pid``: set_event_notrace_pid, then
        set_event_pid."""
        if pid in self.notrace_pids:
            return True
        return bool(self.event_pids) and pid not in self.event_pids

    def _triggered(self, ev, trig, cpu, pid, ts, values) -> None:
        """``trace_trigger_soft_disabled`` + ``event_trigger_unlock_commit``:
        without TRIGGER_COND every trigger runs first, unconditionally;
        with it they run against the record (own filters), post triggers
        after the commit."""
        key = ev.key
        if not trig.cond:
            for t in list(trig.list):
                run_trigger(self, t, cpu, pid, ts)
            if key in self.soft_disabled or self._ignored(key, pid, values):
                return
            match = self.filter_preds.get(key)
            vals, rec = self._record(ev, cpu, pid, values)
            if match is None or match(rec):
                self.commit(cpu, ts, ev.pack(pid, vals))
            return
        if self._ignored(key, pid, values):
            return
        vals, rec = self._record(ev, cpu, pid, values)
        post = self._call_triggers(trig, rec, cpu, pid, ts)
        match = self.filter_preds.get(key)
        if key not in self.soft_disabled and (match is None or match(rec)):
            self.commit(cpu, ts, ev.pack(pid, vals))
        for t in post:
            run_trigger(self, t, cpu, pid, ts)

    def stack_entry(self, cpu: int, pid: int, ts: int) -> None:
        """The ``kernel_stack`` entry of the ``stacktrace`` trigger and
        option (``__trace_stack``): the fake has no kernel stack to walk, so
        the callers are the chain a 6.18 kernel shows for the event being
        recorded (:mod:`.stacks`)."""
        ev = self.by_id.get(TRACE_STACK)
        if ev is None:
            return
        self.commit(cpu, ts, stack_payload(ev, self.engine.kallsyms, pid,
                                           getattr(self, "firing", "")))

    def trigger_state(self, key: str):
        """The :class:`~.trigger.EventTriggers` of *key* (made on demand)."""
        trig = self.triggers.get(key)
        if trig is None:
            trig = self.triggers[key] = EventTriggers()
        return trig

    def compile_trigger_filter(self, key: str, text: str):
        """A trigger's ``if`` filter, for the triggering event."""
        return self.compile_event_filter(key, text)

    def compile_event_filter(self, key: str, text: str):
        """``create_event_filter`` with ``set_str``: errors are logged."""
        from fakedebugfs.engine.ftrace.filter import FilterError, compile_filter

        raw = text.encode(errors="surrogateescape")
        try:
            return compile_filter(self.events[key], raw, self.engine.kallsyms)
        except FilterError as err:
            self.log_filter_error(raw, err)
            raise

    def write_trigger(self, key: str, data: bytes) -> None:
        """``event_trigger_regex_write`` (after the size checks): one
        command, added or removed."""
        text = data.decode(errors="surrogateescape").strip(TEXT_SPACES)  # strim
        remove, new = parse_trigger(text, self, key)
        trig = self.trigger_state(key)
        old = next((t for t in trig.list if t.same(new)), None)
        if remove:
            if old is not None:
                trig.list.remove(old)
                self._trigger_mode(key, False)
                if old.target is not None:
                    self.enable_disable(old.target, False, soft=True)
            return
        if new.target is not None:
            self.enable_disable(new.target, True, soft=True)
        if old is not None:
            if new.target is not None:
                self.enable_disable(new.target, False, soft=True)
            raise OSError(errno.EEXIST, "trigger exists")
        trig.list.insert(0, new)
        self._trigger_mode(key, True)

    def _trigger_mode(self, key: str, on: bool) -> None:
        """``trace_event_trigger_enable_disable``: the triggering event is
        soft-enabled while it has triggers."""
        refs = self.tm_ref.get(key, 0) + (1 if on else -1)
        self.tm_ref[key] = refs
        if key not in self.engine.tracepoints:  # ftrace:print (trace_marker_file)
            return
        if (on and refs == 1) or (not on and refs == 0):
            self.enable_disable(key, on, soft=True)

    def clear_triggers(self) -> None:
        """``clear_event_triggers`` (instance removal)."""
        for key, trig in self.triggers.items():
            for t in list(trig.list):
                trig.list.remove(t)
                self._trigger_mode(key, False)
                if t.target is not None:
                    self.enable_disable(t.target, False, soft=True)

    def commit(self, cpu: int, ts: int, payload: bytes) -> bool:
        """Write one entry into *cpu*'s buffer if tracing is on there."""
        if not self.tracing_on or not (self.cpumask >> cpu) & 1:
            return False
        # counted even when lost: losing an event to a fault finishes the
        # tail page, which a blocked trace_pipe_raw reader must be woken for
        self.written += 1
        ok = self.buffers[cpu].write(ts, payload)
        top = self.top
        if top.options["record-cmd"]:  # tracing_record_cmdline: the entry's task
            top.cmdlines.record(int.from_bytes(payload[4:8], "little", signed=True))
        return ok

    def set_event(self, key: str, on: bool) -> None:
        """``ftrace_event_enable_disable``: a hard enable or disable."""
        self.enable_disable(key, on, soft=False)

    def enable_disable(self, key: str, on: bool, soft: bool) -> None:
        """``__ftrace_event_enable_disable``: *soft* uses of an event
        (triggers) count in ``sm_ref``; while any holds it the event stays
        registered and a disable only sets SOFT_DISABLED."""
        tp = self.engine.tracepoints[key]
        refs = self.soft_mode.get(key, 0)
        if not on:
            if soft:
                refs = max(0, refs - 1)
                self.soft_mode[key] = refs
                if refs > 0:
                    return
                disable = key in self.soft_disabled
            else:
                disable = refs == 0
            if disable and key in self.enabled:
                tp.unregister(self.probes[key])
                self.enabled.discard(key)
            if refs > 0:
                self.soft_disabled.add(key)
            else:
                self.soft_disabled.discard(key)
            return
        if not soft:
            self.soft_disabled.discard(key)
        else:
            self.soft_mode[key] = refs + 1
            if refs + 1 > 1:
                return
        if key not in self.enabled:
            if soft:
                self.soft_disabled.add(key)
            tp.register(self.probes[key])
            self.enabled.add(key)

    def event_enable_show(self, key: str) -> str:
        """``event_enable_read``: 1 if enabled and not soft-disabled, ``*``
        in soft mode."""
        on = key in self.enabled and key not in self.soft_disabled
        star = "*" if key in self.soft_disabled or self.soft_mode.get(key, 0) else ""
        return f"{int(on)}{star}\n"

    def keys_matching(self, system: Optional[str], name: Optional[str]) -> list[str]:
        """``__ftrace_set_clr_event`` matching: None or ``*`` matches all."""
        if system not in (None, "*", "") and name not in (None, "*", ""):
            key = f"{system}:{name}"  # one event's own files: no walk of the catalogue
            ok = system != "ftrace" and key in self.events and key in self.engine.tracepoints
            return [key] if ok else []
        out = []
        for key in self.event_keys():
            sys_, ev = key.split(":")
            if system not in (None, "*", "") and system != sys_:
                continue
            if name not in (None, "*", "") and name != ev:
                continue
            out.append(key)
        return out

    def enable_state(self, keys) -> str:
        """``0``, ``1`` or ``X`` (mixed), as ``events/enable`` prints it."""
        states = {key in self.enabled for key in keys}
        return "X" if len(states) > 1 else "1" if states == {True} else "0"

    def set_event_line(self, line: str) -> None:
        """``ftrace_set_clr_event`` of one ``set_event`` word:
        ``[!]match`` (an event or a system name), ``[!]sys:event`` where
        an empty part or ``*`` matches all; EINVAL if nothing matched."""
        on = not line.startswith("!")
        word = line[1:] if not on else line
        match, sep, rest = word.partition(":")
        system = name = None
        if sep:
            system = None if match in ("", "*") else match
            name = None if rest in ("", "*") else rest
            match = None
        keys = [key for key in self.event_keys()
                if _event_matches(key, match, system, name)]
        if not keys:
            raise einval(word)
        for key in keys:
            self.set_event(key, on)

    def set_filter(self, keys, data, system: bool = False) -> None:
        """``apply_event_filter``/``apply_subsystem_event_filter`` of one
        write (bytes up to a NUL, trailing spaces stripped as ``strstrip``
        leaves them): ``0`` clears.  An event filter that does not parse
        is kept as its error text (the filter file shows it, the event is
        unfiltered), logged in ``error_log`` and refused with its errno.
        A system filter goes to each event of the system, each failing
        one showing the subsystem error; the write itself succeeds."""
        if isinstance(data, str):
            data = data.encode(errors="surrogateescape")
        text = data.split(b"\0", 1)[0].rstrip(SPACES)  # strstrip's end (lib/ctype: 0xA0 too)
        if text.lstrip(SPACES) == b"0":
            for key in keys:
                self.filters.pop(key, None)
                self.filter_preds.pop(key, None)
            return
        from fakedebugfs.engine.ftrace.filter import (E_BAD_SUBSYS_FILTER, FilterError,
            compile_filter)

        shown = text.decode(errors="surrogateescape")
        for key in keys:
            try:
                pred = compile_filter(self.events[key], text, self.engine.kallsyms)
            except FilterError as err:
                self.filter_preds.pop(key, None)
                if system:
                    err = FilterError(err.errno, E_BAD_SUBSYS_FILTER, 0)
                self.log_filter_error(text, err)
                self.filters[key] = err.filter_text(text).decode(errors="surrogateescape")
                if not system:
                    raise
                continue
            self.filters[key] = shown
            self.filter_preds[key] = pred

    def log_filter_error(self, text: bytes, err) -> None:
        """``append_filter_err``'s ``tracing_log_err``."""
        if err.lasterr > 0:
            self.log_err("event filter parse error", text, err.log_text(), err.pos)
        else:
            self.log_err("event filter parse error", text, "Error", 0)

    def log_err(self, loc: str, cmd: bytes, text: str, pos: int) -> None:
        """``tracing_log_err``: one ``error_log`` entry (16 kept)."""
        ns = self.engine.clock.now()
        entry = (f"[{ns // 10**9:5d}.{ns % 10**9 // 1000:06d}] {loc}: error: {text}\n"
                 "  Command: ").encode() + cmd + b"\n" + b" " * (11 + pos) + b"^\n"
        self.error_log.append(entry)
        del self.error_log[:-16]

    # --- the tracer and options -------------------------------------------------

    def set_tracer(self, name: str) -> None:
        """``tracing_set_tracer``: reset the old one, init the new one."""
        new = self.tracers.get(name)
        if new is None:
            raise einval(name)
        if new is self.tracer:
            return
        self.tracer.reset(self)
        self.tracer = new
        new.init(self)
        for callback in self.on_tracer_change:
            callback()

    def option_names(self) -> list[str]:
        return list(self.options) + list(self.tracer.flags)

    def trace_options(self) -> str:
        """``tracing_trace_options_show``: global flags, then the tracer's."""
        lines = [("" if on else "no") + name for name, on in self.options.items()]
        lines += [("" if on else "no") + name for name, on in self.tracer.flags.items()]
        return "".join(line + "\n" for line in lines)

    def set_option(self, name: str, on: bool) -> None:
        """``trace_set_options``/``set_tracer_option``: EINVAL if unknown or
        refused by the tracer."""
        if name in self.options:
            self.options[name] = on
            if name == "overwrite":
                for buf in self.buffers:
                    buf.overwrite = on
            elif name == "event-fork":
                self.follow_fork(on)
        elif name in self.tracer.flags:
            self.tracer.set_flag(name, on)
        else:
            raise einval(name)

    def write_trace_options(self, text: str) -> None:
        """``trace_set_options``: ``name`` sets, ``noname`` clears; an empty
        word is EINVAL like any unknown one."""
        word = text.strip()
        if not word:
            raise einval("empty option")
        if word.startswith("no"):
            self.set_option(word[2:], False)
        else:
            self.set_option(word, True)

    def set_clock(self, name: str) -> None:
        """``tracing_set_clock``: the buffers are reset; the engine's clock
        keeps stamping (every clock reads the same here)."""
        if name not in TRACE_CLOCKS:
            raise einval(name)
        if name != self.clock:
            self.clock = name
            self.reset()

    def trace_clock(self) -> str:
        return " ".join(f"[{c}]" if c == self.clock else c for c in TRACE_CLOCKS) + "\n"

    # --- buffers -----------------------------------------------------------------

    def reset(self, cpus=None) -> None:
        """``tracing_reset_online_cpus`` (or one CPU)."""
        for cpu in self._cpus(cpus):
            self.buffers[cpu].reset()

    def resize(self, kb: int, cpu: Optional[int] = None) -> None:
        """``tracing_entries_write`` + ``tracing_resize_ring_buffer``: 0 is
        EINVAL; the size in sub-buffers (``val << 10`` wrapping at 64 bits,
        in their data bytes: 4080 for 4 KiB ones; at least two), shown back
        in KiB of those.  The content is dropped (the kernel keeps it; a
        deviation)."""
        if kb <= 0:
            raise einval("size")
        data = self.subbuf_data_size
        pages = buffer_pages(kb, data)
        for c in self._cpus(cpu):
            self.buffers[c].resize(pages * (data + BUF_PAGE_HDR_SIZE))  # ENOMEM: left as it was
            self.buffer_kb[c] = buffer_kb_shown(pages, data)

    def set_subbuf_order(self, order: int) -> None:
        """``buffer_subbuf_size_write`` + ``ring_buffer_subbuf_order_set``:
        every CPU's buffer is made anew of sub-buffers of ``PAGE_SIZE <<
        order`` bytes, as many as hold the data the old ones held (at
        least two); the content is dropped.  ``buffer_size_kb`` keeps
        showing the size set last (``trace_array_cpu.entries`` is not
        updated).  ENOMEM, from any CPU, leaves every buffer as it was."""
        if order == self.subbuf_order:
            return
        psize = PAGE_SIZE << order
        new = [subbuf_pages(b.nr_pages, b.data_size, psize - BUF_PAGE_HDR_SIZE)
               for b in self.buffers]
        if any(pages * psize > MAX_BUFFER_BYTES for pages in new):
            raise OSError(errno.ENOMEM, "ring buffer too large")
        for buf, pages in zip(self.buffers, new):
            buf.resize(pages * psize, psize)
        self.subbuf_order = order

    @property
    def subbuf_data_size(self) -> int:
        """``buffer->subbuf_size``: the data bytes of a sub-buffer
        (``events/header_page``'s ``data`` field)."""
        return (PAGE_SIZE << self.subbuf_order) - BUF_PAGE_HDR_SIZE

    def buffer_size_kb(self) -> str:
        sizes = set(self.buffer_kb)
        return f"{self.buffer_kb[0]}\n" if len(sizes) == 1 else "X\n"

    def _cpus(self, cpus) -> list[int]:
        if cpus is None:
            return list(range(len(self.buffers)))
        return [cpus] if isinstance(cpus, int) else list(cpus)

    def entries(self, cpu: int) -> int:
        """Unread events in *cpu*'s buffer (``ring_buffer_entries_cpu``)."""
        buf = self.buffers[cpu]
        return max(0, buf.entries - buf.overrun - buf.consumed_events)

    def stats(self, cpu: int) -> str:
        """``tracing_stats_read``: ``per_cpu/cpuN/stats``."""
        buf = self.buffers[cpu]
        oldest = next(iter(buf.iter_unread()), None)
        nbytes = sum(event_length(len(e.payload)) for e in buf.iter_unread())
        return (f"entries: {self.entries(cpu)}\noverrun: {buf.overrun}\n"
                f"commit overrun: 0\nbytes: {nbytes}\n"
                f"oldest event ts: {timestamp(oldest.ts if oldest else 0)}\n"
                f"now ts: {timestamp(self.engine.clock.now())}\n"
                f"dropped events: {buf.dropped}\nread events: {buf.consumed_events}\n")

    # --- trace_marker ----------------------------------------------------------------

    def marker(self, pid: int, data: bytes, raw: bool = False,
               cpu: Optional[int] = None, ts: Optional[int] = None) -> int:
        """``tracing_mark_write``: an ``ftrace:print`` entry (``print`` with the
        newline the kernel adds); ``trace_marker_raw``: ``raw_data``. EBADF
        while tracing is off and EINVAL without the ``markers`` option, as
        the kernel."""
        if not self.tracing_on:
            raise OSError(errno.EBADF, "tracing is off")
        if not self.options["markers"]:
            raise einval("markers option is off")
        cpu = pid % len(self.buffers) if cpu is None else cpu
        if raw:  # all or nothing: an id and what one event holds
            if not raw_marker_ok(len(data)):
                raise einval("raw marker")
            ev = self.by_id[TRACE_RAW_DATA]
            payload = ev.pack(pid, {"id": int.from_bytes(data[:4], "little")}, 0, 1) + data[4:]
            count = len(data)
        else:  # cut to TRACE_MARKER_MAX_SIZE, then to one event: the count says
            count = marker_count(len(data))
            text = data[:count]
            text = text + b"\0\0" if text.endswith(b"\n") else text + b"\n\0"
            ev = self.by_id[TRACE_PRINT]
            payload = ev.pack(pid, {"ip": 0}, 0, 1) + text  # ip 0: see sym()
        ts = self.engine.clock.now() if ts is None else ts
        post = [] if raw else self._marker_triggers(cpu, pid, ts, data[:count])
        if not self.commit(cpu, ts, payload) and not self.tracing_on:
            raise OSError(errno.EBADF, "tracing is off")
        for t in post:  # event_triggers_post_call
            run_trigger(self, t, cpu, pid, ts)
        return count

    def _marker_triggers(self, cpu: int, pid: int, ts: int, text: bytes) -> list:
        """``tracing_mark_write``'s ``event_triggers_call`` on the
        ``ftrace/print`` triggers: those whose filter matches the entry run
        now, post triggers (traceoff, stacktrace) are returned to run after
        the commit."""
        trig = self.triggers.get("ftrace:print")
        if trig is None or not trig.list:
            return []
        comm = self.engine.comms.get(pid, "")
        rec = dict(ip=0, buf=text, common_pid=pid, CPU=cpu, cpu=cpu, COMM=comm, comm=comm)
        return self._call_triggers(trig, rec, cpu, pid, ts)

    def _call_triggers(self, trig, rec: dict, cpu: int, pid: int, ts: int) -> list:
        """``event_triggers_call`` with the record: each trigger whose
        filter matches runs now, except post triggers, which are returned
        to run after the commit (``event_triggers_post_call``)."""
        post = []
        for t in list(trig.list):
            if t.pred is not None and not t.pred(rec):
                continue
            if t.post:
                post.append(t)
            else:
                run_trigger(self, t, cpu, pid, ts)
        return post

    def free_buffer(self) -> None:
        """``tracing_free_buffer_release``: tracing off with the
        ``disable_on_free`` option, then ``tracing_resize_ring_buffer(tr, 0)``:
        every CPU's buffer shrinks to the minimum of two pages."""
        if self.options.get("disable_on_free"):
            self.tracing_on = False
        data = self.subbuf_data_size
        for c in range(len(self.buffers)):
            self.buffers[c].resize(2 * (data + BUF_PAGE_HDR_SIZE))
            self.buffer_kb[c] = buffer_kb_shown(2, data)

    # --- text output ----------------------------------------------------------------

    def iter_events(self, cpus=None) -> Iterator[tuple[int, Event]]:
        """Every unread event, merged across CPUs by timestamp (``trace``)."""
        streams = [_stamped(cpu, self.buffers[cpu]) for cpu in self._cpus(cpus)]
        for ts, cpu, ev in heapq.merge(*streams, key=lambda t: (t[0], t[1])):
            yield cpu, ev

    def consume(self, cpus=None) -> Optional[tuple[int, Event]]:
        """The oldest unread event of *cpus*, taken (``trace_pipe``)."""
        best = None
        for cpu in self._cpus(cpus):
            ev = self.buffers[cpu].peek()
            if ev is not None and (best is None or ev.ts < best[1].ts):
                best = (cpu, ev)
        if best is not None:
            self.buffers[best[0]].consume()
        return best

    def empty(self, cpus=None) -> bool:
        return all(self.buffers[cpu].empty() for cpu in self._cpus(cpus))

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
        if etype.system == "ftrace" or getattr(etype, "bare", False):
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


class Ftrace(TraceArray):
    """The top-level ``tracing/`` trace array (``global_trace``), holder of
    the event registry and of the ``instances/`` trace arrays
    (``trace_array_create``/``__remove_instance``)."""

    def __init__(self, engine, buffer_kb: int = DEFAULT_BUFFER_KB):
        super().__init__(engine, buffer_kb)
        self.instances: dict[str, TraceArray] = {}
        # saved_cmdlines (global: instances record into it too)
        self.cmdlines = SavedCmdlines(engine.comms, DEFAULT_SAVED_CMDLINES)
        # saved_cmdlines (global: instances record into it too)
        self.cmdlines = SavedCmdlines(engine.comms, DEFAULT_SAVED_CMDLINES)
        if KERNEL_STACK.id not in self.by_id:  # the stacktrace trigger's entries
            self.events[KERNEL_STACK.key] = KERNEL_STACK
            self.by_id[KERNEL_STACK.id] = KERNEL_STACK

    def arrays(self) -> list:
        return [self, *self.instances.values()]

    def add_event(self, ev: EventType) -> None:
        """``trace_add_event_call``: *ev* joins the event registry
        (``ftrace_events``) and, as ``__add_event_to_tracers`` does, every
        trace array: its probe there and its ``events/`` directory
        (``on_event_added``).  Instances made later share the registry and
        see it too.  The engine gets a tracepoint for it when it has none
        (arguments: the event's field names).  EEXIST when its name or id
        is taken; EINVAL for an ``ftrace`` entry (the tracer's own)."""
        if ev.system == "ftrace":
            raise einval(f"{ev.key}: system 'ftrace' holds the tracer's own entries")
        if ev.key in self.events or ev.id in self.by_id:
            raise OSError(errno.EEXIST, f"event {ev.key} (id {ev.id}) exists")
        if ev.key not in self.engine.tracepoints:
            self.engine.define(ev.system, ev.name, tuple(field_key(f[1]) for f in ev.fields))
        self.events[ev.key] = ev
        self.by_id[ev.id] = ev
        for tr in self.arrays():
            tr.probes[ev.key] = tr.make_probe(ev)
            for callback in tr.on_event_added:
                callback(ev)

    def define_event(self, system: str, name: str, fields, print_fmt=None) -> EventType:
        """A new event from C field declarations (:func:`.define.define_event`)."""
        from fakedebugfs.engine.ftrace.define import define_event

        return define_event(self, system, name, fields, print_fmt)

    def retype_event(self, ev: EventType, change) -> None:
        """*ev* changed in place by *change()* (a replay's recording gives
        it another layout): every trace array drops its filter and probe of
        it, made anew; where it was enabled it is disabled around the change
        and enabled again."""
        on = [tr for tr in self.arrays() if ev.key in tr.enabled]
        for tr in on:
            tr.set_event(ev.key, False)
        change()
        for tr in self.arrays():
            tr.filters.pop(ev.key, None)
            tr.filter_preds.pop(ev.key, None)
            tr.probes[ev.key] = tr.make_probe(ev)
        for tr in on:
            tr.set_event(ev.key, True)

    def new_instance(self, name: str) -> TraceArray:
        """``trace_array_create``: EEXIST for a name taken."""
        if name in self.instances:
            raise OSError(errno.EEXIST, name)
        tr = TraceArray(self.engine, DEFAULT_BUFFER_KB, top=self, name=name)
        self.instances[name] = tr
        return tr

    def remove_instance(self, name: str) -> None:
        """``__remove_instance``: EBUSY while one of its files is open
        (``tr->ref``); its events are disabled and its buffers freed."""
        tr = self.instances.get(name)
        if tr is None:
            raise OSError(errno.ENOENT, name)
        if tr.busy:
            raise OSError(errno.EBUSY, name)
        tr.clear_triggers()
        if tr.options.get("event-fork"):
            tr.follow_fork(False)
        for key in list(tr.enabled):
            tr.set_event(key, False)
        for key in list(tr.probes):
            tp = self.engine.tracepoints.get(key)
            if tp is not None:
                tp.unregister(tr.probes[key])
        del self.instances[name]


def _event_matches(key: str, match, system, name) -> bool:
    """``__ftrace_set_clr_event_nolock``'s test for one event."""
    sys_, ev = key.split(":", 1)
    if match is not None and match not in (ev, sys_):
        return False
    if system is not None and system != sys_:
        return False
    return name is None or name == ev


def _stamped(cpu: int, buf: CpuBuffer):
    for ev in buf.iter_unread():
        yield ev.ts, cpu, ev


__all__ = ["Ftrace", "TraceArray", "DEFAULT_BUFFER_KB", "TRACE_CLOCKS"]
