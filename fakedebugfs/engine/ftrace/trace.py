"""The trace array (``struct trace_array``, kernel/trace/trace.c, 6.18).

:class:`TraceArray` is one tracing directory: the top level or one of
``instances/``.  It is made of the parts the kernel keeps in separate
files, each a mixin of its own module:

* :class:`~.trace_buffer.TraceBuffers`: the per-CPU ring buffers, commit,
  the batch path, ``buffer_size_kb`` and friends (trace.c);
* :class:`~.trace_events.TraceEvents`: enabled events, soft mode,
  ``set_event``, filters, the pid lists (trace_events.c);
* :class:`~.trigger.TraceTriggers`: the ``trigger`` files
  (trace_events_trigger.c);
* :class:`~.trace_output.TraceOutput`: the text of ``trace`` and
  ``trace_pipe`` (trace.c, trace_output.c);

and this module's own: trace options, the current tracer, ``trace_clock``,
``trace_marker``/``trace_marker_raw``, ``kernel_stack`` entries and
``error_log``.  The top level (:class:`~.tracer.Ftrace`) adds the event
registry and ``instances/``.  Plain synchronous Python; errors are raised
as ``OSError`` with the errno the kernel returns.
"""

from __future__ import annotations

import errno
from typing import Optional

from fakedebugfs.engine.core.errors import einval
from fakedebugfs.engine.ftrace.control import marker_count, raw_marker_ok
from fakedebugfs.engine.ftrace.kmemtrace_plugin import KmemTracer, NopTracer
from fakedebugfs.engine.ftrace.kversion import has
from fakedebugfs.engine.ftrace.marker_ip import marker_ip
from fakedebugfs.engine.ftrace.output import OutputContext
from fakedebugfs.engine.ftrace.register_tracer import add_profile_tracers
from fakedebugfs.engine.ftrace.stacks import stack_payload
from fakedebugfs.engine.ftrace.trace_buffer import TraceBuffers
from fakedebugfs.engine.ftrace.trace_events import TraceEvents
from fakedebugfs.engine.ftrace.trace_output import TraceOutput
from fakedebugfs.engine.ftrace.trigger import TraceTriggers, marker_triggers, run_trigger

DEFAULT_BUFFER_KB = 1408  # buffer_size_kb of an expanded buffer on 6.18 (x86_64)
TRACE_CLOCKS = ("local", "global", "counter", "uptime", "perf", "mono", "mono_raw",
                "boot", "tai", "x86-tsc")
TRACE_MARKER_MAX_SIZE = 4096
FAULT_SIZE_ID = 13  # tracing_mark_raw_write (6.12): len("<faulted>") + sizeof(int)
TRACE_STACK = 4  # enum trace_type: kernel_stack
ERROR_LOG_MAX = 8  # TRACING_LOG_ERRS_MAX (8 on 6.12 and on this host's 6.18, both seen)

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


def trace_flags(profile) -> tuple:
    """``trace_options``' global flags (``TRACE_ITER_*``) of the profile's
    kernel, in its order, with their defaults: the profile's
    ``trace_options`` less the flags of the tracer current at capture (nop's
    two test flags); 6.18's own list without a profile."""
    text = profile.files.get("trace_options") if profile is not None else None
    if not text:
        return TRACE_OPTIONS
    nop = NopTracer().flags
    out = []
    for word in text.split():
        on = not word.startswith("no")
        name = word if on else word[2:]
        if name not in nop:
            out.append((name, on))
    return tuple(out)


def profile_tracer_flags(profile, options) -> dict:
    """``options/`` files of the profile's top level that are no global
    flag and no flag of nop: other tracers' options, with the values
    captured (the profile's ``options`` file; off where it has none)."""
    if profile is None:
        return {}
    listed = [p[len("options/"):] for p in profile.modes() if p.startswith("options/")]
    values = profile.option_values()
    nop = NopTracer().flags
    return {n: values.get(n, False) for n in sorted(listed)
            if n not in options and n not in nop and n not in KmemTracer().flags}


def _jiffies(engine) -> int:
    """``jiffies`` in print fmts: ticks of the engine's clock (the virtual one too)."""
    from fakedebugfs.engine.ftrace.printfmt import HZ, INITIAL_JIFFIES  # imported when first printed

    return (INITIAL_JIFFIES + engine.clock.now() // (1_000_000_000 // HZ)) & 0xFFFFFFFFFFFFFFFF


class TraceArray(TraceBuffers, TraceEvents, TraceTriggers, TraceOutput):
    """``struct trace_array``: one tracing directory's buffers, tracing_on,
    enabled events, filters, triggers, options, pid lists, cpumask and
    tracer.  The top level is :class:`~.tracer.Ftrace` (instance ""); the
    ``instances/`` directories are more of these sharing its event registry
    (*events*, *by_id*): an event fires into every trace array that enabled
    it (each registers its own probe on the tracepoint, as each
    ``trace_event_file`` does)."""

    def __init__(self, engine, events, by_id, top=None, name: str = "",
                 buffer_kb: int = DEFAULT_BUFFER_KB):
        self.engine = engine
        self.name = name
        self.top = self if top is None else top
        self.events, self.by_id = events, by_id  # the registry (trace events are global)
        self._init_buffers(engine.nr_cpus, buffer_kb)
        self._init_events()
        self._init_triggers()
        profile = self.top.profile if top is not None else getattr(self, "profile", None)
        self.options = dict(trace_flags(profile))
        if top is not None:  # an instance's printk and marker copies start off
            self.options.update({k: False for k in ("trace_printk_dest", "copy_trace_marker")
                                 if k in self.options})
        # option files of the profile's other tracers (blk, function_graph
        # ... where the fake has no such tracer): the top level lists every
        # tracer's flags (add_tracer_options); their values are kept
        # (one value per tracer option, as the kernel's tracer_flags: an
        # instance shows those of the tracers it allows, captured in the
        # profile's instance_modes, and shares their values)
        if top is None:
            self.profile_flags = profile_tracer_flags(profile, self.options)
            self.flag_names = tuple(self.profile_flags)
        else:
            self.profile_flags = self.top.profile_flags
            listed = profile.instance_modes() if profile is not None else {}
            self.flag_names = tuple(n for n in self.profile_flags if f"options/{n}" in listed)
        # instances get the tracers that allow them (here only nop); the
        # fake's own kmemtrace plugin joins the top level when asked
        # (Ftrace, FtraceConfig.kmemtrace_tracer)
        self.tracers = {"nop": NopTracer()}
        if top is None:  # blk, mmiotrace where the profile's kernel has them
            add_profile_tracers(self, profile)
        self.tracer = self.tracers["nop"]
        self.clock = "local"
        self.firing = ""  # the event whose probe ran last (.stacks: its kernel_stack)
        self.error_log: list[bytes] = []  # tracing_log_err entries
        self.busy = 0  # open files of this instance (rmdir answers EBUSY)
        self.on_tracer_change: list = []
        self.out = OutputContext(engine.kallsyms, self.options, engine.seed)
        # ``jiffies`` in print fmts: ticks of the engine's clock (the virtual one too)
        self.out.jiffies = lambda: _jiffies(engine)

    # --- the tracer, options, clock ---------------------------------------------------

    def set_tracer(self, name: str) -> None:
        """``tracing_set_tracer``: reset the old one, init the new one
        (``tracer_init``: the buffers are reset first, nop's too)."""
        new = self.tracers.get(name)
        if new is None:
            raise einval(name)
        if new is self.tracer:
            return
        self.tracer.reset(self)
        self.tracer = new
        self.reset()
        new.init(self)
        for callback in self.on_tracer_change:
            callback()

    def option_names(self) -> list[str]:
        names = list(self.options) + list(self.tracer.flags)
        return names + [n for n in self.flag_names if n not in names]

    def _flag_owner(self, name: str):
        """The flags dict holding a tracer option that is not the current
        tracer's: another tracer's (``__set_tracer_option`` calls the
        option's own tracer), else the profile's stored ones; None."""
        if name not in self.flag_names:
            return None
        for tracer in self.tracers.values():
            if name in tracer.flags:
                return tracer.flags
        return self.profile_flags

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

    def set_option_file(self, name: str, on: bool) -> None:
        """A write to ``options/<name>`` (``trace_options_write``): a flag
        of a tracer that is not the current one goes to that tracer's
        ``set_flag`` (``__set_tracer_option``), where ``trace_options``
        would refuse it."""
        owner = None if name in self.options or name in self.tracer.flags \
            else self._flag_owner(name)
        if owner is None:
            self.set_option(name, on)
            return
        tracer = next((t for t in self.tracers.values() if t.flags is owner), None)
        if tracer is not None:  # the option's own tracer's set_flag (blk_classic's side effect)
            tracer.set_flag(name, on)
        else:
            owner[name] = on

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

    # --- trace_marker, kernel_stack, error_log ----------------------------------------

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
        pc = self.marker_preempt_count()
        if raw:  # all or nothing: an id and what one event holds
            once = has(getattr(self.top, "profile", None), "raw_marker_id_counted_once")
            if not raw_marker_ok(len(data), once):
                raise einval("raw marker")
            ev = self.events["ftrace:raw_data"]  # its id is the profile's (18 in 6.12, 19 in 6.18)
            payload = ev.pack(pid, {"id": int.from_bytes(data[:4], "little")}, 0, pc) + data[4:]
            if not once:  # 6.12 reserves sizeof(entry) + cnt, cnt at least FAULT_SIZE_ID:
                # zeros after the data, which trace prints as part of buf
                payload += bytes(4 + max(0, FAULT_SIZE_ID - len(data)))
            count = len(data)
        else:  # cut to TRACE_MARKER_MAX_SIZE, then to one event: the count says
            count = marker_count(len(data))
            text = data[:count]
            text = text + b"\0\0" if text.endswith(b"\n") else text + b"\n\0"
            ev = self.events["ftrace:print"]
            payload = ev.pack(pid, {"ip": marker_ip(self.top)}, 0, pc) + text
        ts = self.engine.clock.now() if ts is None else ts
        post = [] if raw else marker_triggers(self, cpu, pid, ts, data[:count])
        if not self.commit(cpu, ts, payload) and not self.tracing_on:
            raise OSError(errno.EBADF, "tracing is off")
        for t in post:  # event_triggers_post_call
            run_trigger(self, t, cpu, pid, ts)
        return count

    def marker_preempt_count(self) -> int:
        """The ``common_preempt_count`` of a marker's entry: 1 where the
        kernel takes its context with preemption disabled (6.18), else 0
        (6.12; kversion's ``marker_preempt_disabled``)."""
        return 1 if has(getattr(self.top, "profile", None), "marker_preempt_disabled") else 0

    def stack_entry(self, cpu: int, pid: int, ts: int) -> None:
        """The ``kernel_stack`` entry of the ``stacktrace`` trigger and
        option (``__trace_stack``): the fake has no kernel stack to walk, so
        the callers are the chain a 6.18 kernel shows for the event being
        recorded (:mod:`.stacks`)."""
        ev = self.by_id.get(TRACE_STACK)
        if ev is None:
            return
        self.commit(cpu, ts, stack_payload(ev, self.engine.kallsyms, pid, self.firing))

    def log_err(self, loc: str, cmd: bytes, text: str, pos: int) -> None:
        """``tracing_log_err``: one ``error_log`` entry (the last 8 kept:
        the kernel reuses its oldest entry once it holds 8)."""
        ns = self.engine.clock.now()
        entry = (f"[{ns // 10**9:5d}.{ns % 10**9 // 1000:06d}] {loc}: error: {text}\n"
                 "  Command: ").encode() + cmd + b"\n" + b" " * (11 + pos) + b"^\n"
        self.error_log.append(entry)
        del self.error_log[:-ERROR_LOG_MAX]


__all__ = ["TraceArray", "DEFAULT_BUFFER_KB", "TRACE_CLOCKS", "TRACE_OPTIONS"]
