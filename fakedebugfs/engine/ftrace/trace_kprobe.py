"""Kprobe events (kernel/trace/trace_kprobe.c, 6.12).

``p[:[GRP/][EVENT]] [MOD:]SYM[+OFFS]|ADDR [FETCHARGS]`` and
``r[MAXACTIVE][:[GRP/][EVENT]] [MOD:]SYM[+0] [FETCHARGS]`` (or ``p ...%return``)
written to ``kprobe_events`` or ``dynamic_events`` (``__trace_kprobe_create``):
group ``kprobes``, event ``p_SYM_OFFS``/``r_SYM_OFFS`` (``p_0x<hashed
address>`` for an address) by default.  The symbol is checked against the
profile's kallsyms (:mod:`fakedebugfs.engine.core.kallsyms_profile`): a
name no symbol has is "Invalid probed address or symbol", a name two
symbols share is "The symbol is not unique", a return probe not at a
function's entry "Retprobe address must be an function entry"; then
``register_kprobe``'s answer (:mod:`fakedebugfs.engine.core.kprobes`):
blacklisted, not text, no ftrace site ("Failed to register probe event").
A probe on a module that is not loaded (``nosuchmod:sym``) is accepted and
waits for it, as the kernel's does.

The event's fields are ``__probe_ip`` (``__probe_func``, ``__probe_ret_ip``
for a return probe), its text ``(SYM+0xOFF/0xSIZE)`` or ``(SYM+0xOFF/0xSIZE
<- FUNC)`` then the arguments (``print_kprobe_event``,
``print_kretprobe_event``).  ``kprobe_profile`` shows each probe's hits and
misses: the events injected on it (``fakedebugfs emit``) and those the
fake's drivers reach.
"""

from __future__ import annotations

import errno
import zlib

from fakedebugfs.engine.ftrace.kstrto import kstrtoull
from fakedebugfs.engine.ftrace.trace_btf import expand_dentry_args, expand_meta_args
from fakedebugfs.engine.ftrace.trace_probe import (FL_FENTRY, FL_KERNEL, FL_RETURN,
    MAX_EVENT_NAME_LEN, MAX_TRACE_ARGS, ProbeError, parse_event_name)
from fakedebugfs.engine.ftrace.trace_probe_parse import _Ctx, parse_probe_arg, same_args
from fakedebugfs.engine.ftrace.trace_probe_tmpl import make_probe_event

KPROBE_EVENT_SYSTEM = "kprobes"
KRETPROBE_MAXACTIVE_MAX = 4096
UINT_MAX = 0xFFFFFFFF


def sanitize_event_name(name: str) -> str:
    """``sanitize_event_name``: ``:``, ``.`` and ``*`` after the first byte become ``_``."""
    return name[:1] + "".join("_" if c in ":.*" else c for c in name[1:])


def hashed_pointer(addr: int) -> str:
    """``%p`` of *addr*: the kernel prints a keyed hash, 32 bits, zero-padded."""
    return f"{zlib.crc32(addr.to_bytes(8, 'little')):016x}"


def kstrtol(text: str) -> int:
    """``kstrtol`` base 0 (a sign first)."""
    neg = text.startswith("-")
    value = kstrtoull((text[1:] if neg else text).encode(), 0)
    if value > (1 << 63) - (0 if neg else 1):
        raise OSError(errno.ERANGE, text)
    return -value if neg else value


def split_symbol_offset(symbol: str):
    """``traceprobe_split_symbol_offset``: ``(symbol, offset)``; OSError."""
    for i, c in enumerate(symbol):
        if c in "+-":
            return symbol[:i], kstrtol(symbol[i:])
    return symbol, 0


class TraceKprobe:
    """``struct trace_kprobe``: one probe (a place and its arguments) of an event."""

    kind = "kprobe"

    def __init__(self, group, event, symbol, offset, addr, maxactive, is_return, args):
        self.group, self.event, self.symbol, self.offset = group, event, symbol, offset
        self.addr, self.maxactive, self.is_return, self.args = addr, maxactive, is_return, args
        self.nhits = self.nmissed = 0
        self.registered = False

    @property
    def key(self) -> str:
        return f"{self.group}:{self.event}"

    def place(self) -> str:
        if self.symbol is None:
            return f"0x{hashed_pointer(self.addr)}"
        return f"{self.symbol}+{self.offset}" if self.offset else self.symbol

    def show(self) -> str:
        """``trace_kprobe_show``: one line of ``kprobe_events``."""
        head = "r" if self.is_return else "p"
        if self.is_return and self.maxactive:
            head += str(self.maxactive)
        return (f"{head}:{self.group}/{self.event} {self.place()}"
                + "".join(f" {a.name}={a.comm}" for a in self.args) + "\n")

    def profile(self) -> str:
        """``probes_profile_seq_show``: one line of ``kprobe_profile``."""
        return f"  {self.event:<44} {self.nhits:15} {self.nmissed:15}\n"

    def match(self, system, event: str, argv: list) -> bool:
        """``trace_kprobe_match``."""
        if event and event != self.event or system and system != self.group:
            return False
        if not argv:
            return True
        if argv[0] != self.place()[:63]:
            return False
        words = [f"{a.name}={a.comm}" for a in self.args]
        return len(argv) - 1 <= len(words) and words[:len(argv) - 1] == argv[1:]

    def make_event(self, event_id: int, ksyms):
        return probe_event(self, event_id, ksyms)


def probe_event(probe, event_id: int, ksyms):
    """The event of a kernel function probe (``kprobe_event_define_fields``
    and ``print_kprobe_event``; the return probe's and fprobe's are alike)."""
    def ip(v, offset=True, out=None) -> str:  # seq_print_ip_sym
        v = int(v or 0)
        if not v:
            return "0"
        if v == trampoline():  # trace_seq_print_sym's kretprobed()
            text = "[unknown/kretprobe'd]"
        else:
            text = ksyms.sym_offset(v) if offset else ksyms.sym(v)
        if (getattr(out, "options", None) or {}).get("sym-addr"):
            text += f" <{v:016x}>"
        return text

    def trampoline() -> int:
        lookup = getattr(ksyms, "kallsyms_lookup_name", None)
        return lookup("arch_rethook_trampoline") if lookup is not None else 0
    if probe.is_return:
        head = [("unsigned long", "__probe_func", 8), ("unsigned long", "__probe_ret_ip", 8)]
        label = lambda r, out=None: f"({ip(r.get('__probe_ret_ip'), True, out)} <- " \
                                    f"{ip(r.get('__probe_func'), False, out)})"
    else:
        head = [("unsigned long", "__probe_ip", 8)]
        label = lambda r, out=None: f"({ip(r.get('__probe_ip'), True, out)})"
    label.takes_output = True  # (the trace's options: sym-addr)
    return make_probe_event(probe.group, probe.event, event_id, head, probe.args,
                            "return" if probe.is_return else "normal", label)


def _maxactive(argv0: str, event_at: int, log) -> int:
    """``r<N>``: kstrtouint of what is before ``:``."""
    text = argv0[1:event_at - 1] if event_at else argv0[1:]
    if len(text) > MAX_EVENT_NAME_LEN - 1:
        raise log.err(1, "BAD_MAXACT")
    try:
        value = kstrtoull(text.encode(), 0)
    except OSError:
        value = 0
    if not value or value > UINT_MAX:
        raise log.err(1, "BAD_MAXACT")
    if value > KRETPROBE_MAXACTIVE_MAX:
        raise log.err(1, "MAXACT_TOO_BIG")
    return value


def parse_args(words: list, flags: int, ctx: _Ctx, log, facts) -> list:
    """The fetch args of a probe (``traceprobe_expand_meta_args``,
    ``traceprobe_expand_dentry_args``, ``traceprobe_parse_probe_arg`` each)."""
    words = expand_meta_args(words, ctx, log)
    if len(words) > MAX_TRACE_ARGS:
        if facts.log_too_many_args:
            log.index = 2
            raise log.err(0, "TOO_MANY_ARGS", errno.E2BIG)
        raise ProbeError(errno.E2BIG)
    words = expand_dentry_args(words)
    args, size = [], 0
    for i, word in enumerate(words):
        log.index = i + 2
        parg = parse_probe_arg(args, i, word, flags, log, size, facts=facts,
                               funcname=ctx.funcname)
        args.append(parg)
        size += parg.size
    return args


def create(argv: list, dyn) -> TraceKprobe:
    """``__trace_kprobe_create``: the new probe, not yet registered;
    ProbeError ``ECANCELED`` where the command is not a kprobe's."""
    if argv[0][:1] not in ("p", "r") or len(argv) < 2:
        raise ProbeError(errno.ECANCELED)
    facts, kp = dyn.facts, dyn.kprobes()
    is_return = argv[0][0] == "r"
    log = facts.log("trace_kprobe", argv)
    colon = argv[0].find(":", 1)
    event = argv[0][colon + 1:] if colon >= 0 else None
    maxactive = 0
    if argv[0][1:2].isdigit():
        if not is_return:
            raise log.err(1, "BAD_MAXACT_TYPE")
        maxactive = _maxactive(argv[0], colon + 1 if colon >= 0 else 0, log)
    flags = FL_KERNEL
    symbol, offset, addr = None, 0, 0
    try:
        addr = kstrtoull(argv[1].encode(), 0)
    except OSError:
        log.index = 1
        if "/" in argv[1] and ":" in argv[1]:
            raise ProbeError(errno.ECANCELED) from None
        symbol = argv[1]
        pct = symbol.find("%")
        if pct >= 0:
            if symbol[pct:] != "%return":
                raise log.err(pct, "BAD_ADDR_SUFFIX") from None
            symbol, is_return = symbol[:pct], True
        try:
            symbol, offset = split_symbol_offset(symbol)
        except OSError:
            offset = -1
        if offset < 0 or offset > UINT_MAX:
            raise log.err(0, "BAD_PROBE_ADDR") from None
        ret = validate_probe_symbol(symbol, kp.ksyms)
        if ret:
            raise log.err(0, "NON_UNIQ_SYMBOL" if ret == errno.EADDRNOTAVAIL
                          else "BAD_PROBE_ADDR") from None
        if is_return:
            flags |= FL_RETURN
        ret = kp.on_func_entry(symbol, offset)
        if ret == 0 and not is_return:
            flags |= FL_FENTRY
        if ret == errno.EINVAL and is_return:
            raise log.err(0, "BAD_RETPROBE") from None
    log.index = 0
    group = KPROBE_EVENT_SYSTEM
    if event is not None:
        g, event = parse_event_name(event, log, colon + 1, facts)
        group = g or group
    if not event:
        if symbol is not None:
            event = f"{'r' if is_return else 'p'}_{symbol}_{offset}"
        else:
            event = f"{'r' if is_return else 'p'}_0x{hashed_pointer(addr)}"
        event = sanitize_event_name(event[:MAX_EVENT_NAME_LEN - 1])
    ctx = _Ctx(flags, log, facts=facts, funcname=symbol)
    args = parse_args(argv[2:], flags, ctx, log, facts)
    return TraceKprobe(group, event, symbol, offset, addr, maxactive, is_return, args)


def validate_probe_symbol(symbol: str, ksyms) -> int:
    """``validate_probe_symbol``: 0, ENOENT or EADDRNOTAVAIL (a module not
    loaded: 0, the probe waits for it)."""
    mod = None
    if ":" in symbol:
        mod, symbol = symbol.split(":", 1)
        if not ksyms.module_loaded(mod):
            return 0
    count = ksyms.number_of_same_symbols(mod, symbol)
    if count > 1:
        return errno.EADDRNOTAVAIL
    return 0 if count else errno.ENOENT


def _register_probe(tk: TraceKprobe, dyn) -> int:
    """``__register_trace_kprobe``: 0 or the errno (ENOENT of a module not
    loaded is 0: the probe stays unregistered until it comes)."""
    kp = dyn.kprobes()
    ks = kp.ksyms
    where = (ks.kallsyms_lookup_name(tk.symbol) + tk.offset
             if tk.symbol and ks.kallsyms_lookup_name(tk.symbol) else
             (tk.addr if tk.symbol is None else 0))
    if kp.notrace(where):
        return errno.EINVAL
    for arg in tk.args:  # traceprobe_update_arg: @SYM must resolve
        fetch = arg.comm.split(":", 1)[0]
        at = fetch.find("@")
        while at >= 0:
            sym = fetch[at + 1:].split(")", 1)[0]
            if sym and not sym[0].isdigit() and sym[0] != "+":
                try:
                    name, _ = split_symbol_offset(sym)
                except OSError:
                    return errno.EINVAL
                if not ks.kallsyms_lookup_name(name):
                    return errno.ENOENT
            at = fetch.find("@", at + 1)
    ret = kp.register(tk.symbol, tk.offset, tk.addr if tk.symbol is None else 0, tk.is_return)
    if ret == errno.ENOENT and not _module_exist(tk, ks):
        return 0
    if ret == 0:
        tk.registered = True
        if tk.is_return and not tk.maxactive:  # register_kretprobe's default
            tk.maxactive = max(10, 2 * dyn.ft.engine.nr_cpus)
    return ret


def _module_exist(tk: TraceKprobe, ks) -> bool:
    """``trace_kprobe_module_exist``."""
    if not tk.symbol:
        return False
    if ":" not in tk.symbol:
        return True
    return ks.module_loaded(tk.symbol.split(":", 1)[0])


def register(tk: TraceKprobe, dyn) -> None:
    """``register_trace_kprobe``: a new event, or one more probe of the
    event of that name (same type and arguments, another place)."""
    log = dyn.facts.log("trace_kprobe", dyn.argv)
    old = [p for p in dyn.probes_of(tk.key) if isinstance(p, TraceKprobe)]
    if old:
        if old[0].is_return != tk.is_return:
            raise log.err(0, "DIFF_PROBE_TYPE", errno.EEXIST)
        diff = same_args(tk.args, old[0].args)
        if diff:
            log.index = diff + 1
            raise log.err(0, "DIFF_ARG_TYPE", errno.EEXIST)
        for p in old:
            if p.place() == tk.place() and [a.comm for a in p.args] == [a.comm for a in tk.args]:
                raise log.err(0, "SAME_PROBE", errno.EEXIST)
        _check_registered(tk, dyn, log)
        dyn.append(tk)
        return
    if dyn.exists(tk.key):
        raise log.err(0, "EVENT_EXIST", errno.EEXIST)
    _check_registered(tk, dyn, log)
    ks = dyn.ft.engine.kallsyms
    dyn.add(tk, lambda event_id: tk.make_event(event_id, ks),
            lambda: log.err(0, "EVENT_EXIST", errno.EEXIST))


def _check_registered(tk: TraceKprobe, dyn, log) -> None:
    ret = _register_probe(tk, dyn)
    if ret:
        log.index = 1
        if ret == errno.EILSEQ:
            raise log.err(0, "BAD_INSN_BNDRY", ret)
        if ret == errno.ENOENT:
            raise log.err(0, "BAD_PROBE_ADDR", ret)
        raise log.err(0, "FAIL_REG_PROBE", ret)


__all__ = ["KPROBE_EVENT_SYSTEM", "TraceKprobe", "probe_event", "kstrtol", "hashed_pointer",
           "create", "register", "parse_args",
           "sanitize_event_name", "split_symbol_offset", "validate_probe_symbol"]
