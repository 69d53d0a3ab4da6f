"""Fprobe and tracepoint probe events (kernel/trace/trace_fprobe.c, 6.12).

``f[MAXACTIVE][:[GRP/][EVENT]] [MOD:]SYM[%return] [FETCHARGS]`` and
``t[:[GRP/][EVENT]] TRACEPOINT [FETCHARGS]`` on ``dynamic_events``
(``__trace_fprobe_create``): group ``fprobes`` (event ``SYM__entry`` /
``SYM__exit``) or ``tracepoints`` (event: the tracepoint's name); a
``$retval`` argument makes an fprobe a return probe.  An fprobe is an
ftrace filter on the function (``register_fprobe``): a name no function
of the profile's ``available_filter_functions`` matches (a glob, as
ftrace takes it) is "Failed to register probe event".  A tracepoint is
found by its ``__tracepoint_<name>`` (or ``__probestub_<name>``) symbol in
the kernel's kallsyms; one
that is not there may come with a module, and is accepted (``TRACEPOINT_STUB``).
Registers are not arguments here (``BAD_VAR``); the event's fields and
text are the kprobe's (``fentry``/``fexit`` heads).
"""

from __future__ import annotations

import errno
import fnmatch

from fakedebugfs.engine.ftrace.kernel_data import kernel_data
from fakedebugfs.engine.ftrace.kstrto import kstrtoull
from fakedebugfs.engine.ftrace.trace_kprobe import (parse_args, probe_event, sanitize_event_name,
    split_symbol_offset)
from fakedebugfs.engine.ftrace.trace_probe import (FL_FENTRY, FL_FPROBE, FL_KERNEL, FL_RETURN,
    FL_TPOINT, MAX_EVENT_NAME_LEN, ProbeError, ProbeHits, parse_event_name)
from fakedebugfs.engine.ftrace.trace_probe_parse import _Ctx, same_args

FPROBE_EVENT_SYSTEM, TRACEPOINT_EVENT_SYSTEM = "fprobes", "tracepoints"
RETHOOK_MAXACTIVE_MAX = 4096


class TraceFprobe:
    """``struct trace_fprobe``."""

    kind = "fprobe"

    def __init__(self, group, event, symbol, is_tracepoint, loaded, maxactive, is_return, args):
        self.group, self.event, self.symbol = group, event, symbol
        self.is_tracepoint, self.loaded = is_tracepoint, loaded
        self.maxactive, self.is_return, self.args = maxactive, is_return, args
        self.nhits = self.nmissed = 0

    @property
    def key(self) -> str:
        return f"{self.group}:{self.event}"

    def show(self) -> str:
        """``trace_fprobe_show``."""
        head = "t" if self.is_tracepoint else "f"
        if self.is_return and self.maxactive:
            head += str(self.maxactive)
        return (f"{head}:{self.group}/{self.event} {self.symbol}"
                + ("%return" if self.is_return else "")
                + "".join(f" {a.name}={a.comm}" for a in self.args) + "\n")

    def profile(self) -> str:
        return ""

    def match(self, system, event: str, argv: list) -> bool:
        """``trace_fprobe_match``."""
        if event and event != self.event or system and system != self.group:
            return False
        if not argv:
            return True
        if argv[0] != self.symbol[:63]:
            return False
        words = [f"{a.name}={a.comm}" for a in self.args]
        return len(argv) - 1 <= len(words) and words[:len(argv) - 1] == argv[1:]

    def make_event(self, event_id: int, ksyms):
        return probe_event(self, event_id, ksyms)


def _symbol_and_return(argv: list, is_tracepoint: bool, log):
    """``parse_symbol_and_return``: ``(symbol, is_return)``."""
    word, is_return = argv[1], False
    pct = word.find("%")
    if pct >= 0:
        if is_tracepoint or word[pct:] != "%return":
            raise log.err(pct, "BAD_ADDR_SUFFIX")
        return word[:pct], True
    if is_tracepoint:
        for i, c in enumerate(word):
            if not (c.isalnum() or c == "_"):
                raise log.err(i, "BAD_TP_NAME")
    for i in range(2, len(argv)):
        at = argv[i].find("$retval")
        if at >= 0:
            after = argv[i][at + 7:at + 8]
            if not (after.isalnum() or after == "_"):
                if is_tracepoint:
                    log.index = i
                    raise log.err(at, "RETVAL_ON_PROBE")
                return word, True
    return word, is_return


def create(argv: list, dyn) -> TraceFprobe:
    """``__trace_fprobe_create``; ProbeError ``ECANCELED`` for other commands."""
    if argv[0][:1] not in ("f", "t") or len(argv) < 2:
        raise ProbeError(errno.ECANCELED)
    facts = dyn.facts
    is_tracepoint = argv[0][0] == "t"
    group = TRACEPOINT_EVENT_SYSTEM if is_tracepoint else FPROBE_EVENT_SYSTEM
    log = facts.log("trace_fprobe", argv)
    colon = argv[0].find(":", 1)
    event = argv[0][colon + 1:] if colon >= 0 else None
    maxactive = 0
    if argv[0][1:2].isdigit():
        text = argv[0][1:colon] if colon >= 0 else argv[0][1:]
        if len(text) > MAX_EVENT_NAME_LEN - 1:
            raise log.err(1, "BAD_MAXACT")
        try:
            maxactive = kstrtoull(text.encode(), 0)
        except OSError:
            maxactive = 0
        if not maxactive or maxactive > 0xFFFFFFFF:
            raise log.err(1, "BAD_MAXACT")
        if maxactive > RETHOOK_MAXACTIVE_MAX:
            raise log.err(1, "MAXACT_TOO_BIG")
    log.index = 1
    symbol, is_return = _symbol_and_return(argv, is_tracepoint, log)
    if not is_return and maxactive:
        log.index = 0
        raise log.err(1, "BAD_MAXACT_TYPE")
    log.index = 0
    if event is not None:
        g, event = parse_event_name(event, log, colon + 1, facts)
        group = g or group
    if not event:
        if is_tracepoint:
            event = ("_" if symbol[:1].isdigit() else "") + symbol
        else:
            event = f"{symbol}__{'exit' if is_return else 'entry'}"
        event = sanitize_event_name(event[:MAX_EVENT_NAME_LEN - 1])
    flags = FL_KERNEL | FL_FPROBE | (FL_RETURN if is_return else FL_FENTRY)
    funcname, loaded = symbol, True
    if is_tracepoint:
        flags |= FL_TPOINT
        ks = dyn.kprobes().ksyms
        # find_tracepoint; a text-only kallsyms shows each tracepoint by its stub function
        loaded = bool(ks.kallsyms_lookup_name(f"__tracepoint_{symbol}")
                      or ks.kallsyms_lookup_name(f"__probestub_{symbol}"))
        if loaded:
            funcname = f"__probestub_{symbol}"
    ctx = _Ctx(flags, log, facts=facts, funcname=funcname)
    args = parse_args(argv[2:], flags, ctx, log, facts)
    return TraceFprobe(group, event, symbol, is_tracepoint, loaded, maxactive, is_return, args)


def _register_probe(tf: TraceFprobe, dyn) -> int:
    """``__register_trace_fprobe``: 0 or the errno."""
    kp = dyn.kprobes()
    for arg in tf.args:  # traceprobe_update_arg: @SYM must resolve
        fetch = arg.comm.split(":", 1)[0]
        if fetch.startswith("@") and not fetch[1:2].isdigit():
            try:
                name, _ = split_symbol_offset(fetch[1:])
            except OSError:
                return errno.EINVAL
            if not kp.ksyms.kallsyms_lookup_name(name):
                return errno.ENOENT
    if tf.is_tracepoint:
        return 0
    names = kp.traceable()
    if names is not None and not _matches(tf.symbol, names):
        return errno.EINVAL  # ftrace_set_filter: no function matched
    return 0


def _matches(glob: str, names) -> bool:
    if not any(c in glob for c in "*?["):
        return glob in names
    return any(fnmatch.fnmatchcase(n, glob) for n in names)


def register(tf: TraceFprobe, dyn) -> None:
    """``register_trace_fprobe`` (``append_trace_fprobe`` for a second probe)."""
    log = dyn.facts.log("trace_fprobe", dyn.argv)
    old = [p for p in dyn.probes_of(tf.key) if isinstance(p, TraceFprobe)]
    if old:
        if old[0].is_return != tf.is_return or old[0].is_tracepoint != tf.is_tracepoint:
            raise log.err(0, "DIFF_PROBE_TYPE", errno.EEXIST)
        diff = same_args(tf.args, old[0].args)
        if diff:
            log.index = diff + 1
            raise log.err(0, "DIFF_ARG_TYPE", errno.EEXIST)
        for p in old:
            if p.symbol == tf.symbol and [a.comm for a in p.args] == [a.comm for a in tf.args]:
                raise log.err(0, "SAME_PROBE", errno.EEXIST)
        _check_registered(tf, dyn, log)
        dyn.append(tf)
        return
    if dyn.exists(tf.key):
        raise log.err(0, "EVENT_EXIST", errno.EEXIST)
    _check_registered(tf, dyn, log)
    ks = dyn.ft.engine.kallsyms
    dyn.add(tf, lambda event_id: tf.make_event(event_id, ks),
            lambda: log.err(0, "EVENT_EXIST", errno.EEXIST))


class TprobeHits(ProbeHits):
    """Each enabled tracepoint probe's hits (``tracepoint_probe_register``
    of ``fentry_dispatcher`` on the tracepoint): when the engine's
    tracepoint of that name fires, one entry, ``__probe_ip`` the
    tracepoint's ``__probestub_`` function (past its ``endbr64``), the
    arguments what its ``TP_PROTO`` parameters get from the event's
    fields by name (:func:`~.probe_fetch.tracepoint_context`: a
    ``prev_state`` is known, the task pointers are not)."""

    def probe_for(self, key: str):
        return next((p for p in self.dyn.probes_of(key)
                     if p.kind == "fprobe" and p.is_tracepoint), None)

    def _attach(self, tf: TraceFprobe) -> None:
        from fakedebugfs.engine.ftrace.probe_fetch import probe_values, tracepoint_context

        engine = self.ft.engine
        tp = next((t for k, t in engine.tracepoints.items()
                   if k.partition(":")[2] == tf.symbol), None)
        mine = engine.tracepoints.get(tf.key)
        if tp is None or mine is None:
            return
        try:
            ip = self.dyn.kprobes().kprobe_addr(f"__probestub_{tf.symbol}", 0)[0]
        except OSError:
            ip = 0
        btf = self.dyn.facts.btf

        def probe(cpu, pid, ts, values):
            ctx = tracepoint_context(btf, tf.symbol, dict(zip(tp.args, values)),
                                     engine.comms.get(pid, ""), ip)
            ctx.data = kernel_data(self.ft)  # (@SYM)
            vals = probe_values(tf, ctx, {"__probe_ip": ip})
            mine.fire(cpu, pid, ts, tuple(vals.get(a, 0) for a in mine.args))
        tp.register(probe)
        self.attached[tf.key] = (tp, probe)
        self._tell(tp.key, True)


def _check_registered(tf: TraceFprobe, dyn, log) -> None:
    ret = _register_probe(tf, dyn)
    if ret:
        log.index = 1
        raise log.err(0, "BAD_PROBE_ADDR" if ret == errno.ENOENT else "FAIL_REG_PROBE", ret)


__all__ = ["FPROBE_EVENT_SYSTEM", "TRACEPOINT_EVENT_SYSTEM", "TprobeHits", "TraceFprobe",
           "create", "register"]
