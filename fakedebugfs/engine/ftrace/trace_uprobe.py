"""Uprobe events (kernel/trace/trace_uprobe.c, 6.18).

``p|r[:[GRP/][EVENT]] PATH:OFFSET[%return][(REF_CTR_OFFSET)] [FETCHARGS]``
written to ``uprobe_events`` or ``dynamic_events`` (``__trace_uprobe_create``):
group ``uprobes`` by default, the event name ``p_<basename up to . - _>_0x<offset>``
by default; the path must name a regular file (looked up by the tree's
``stat_path``: the engine does no I/O), the offset is ``kstrtoul`` base 0.
A second definition of an existing group/event with the same arguments
is another probe of that event (``append_trace_uprobe``); the same place
again is EEXIST "There is already the exact same probe event".

The event's format is ``__probe_ip`` (``__probe_func``, ``__probe_ret_ip``
for a return probe) then the arguments packed after it, and its text is
``(0x<ip>)`` or ``(0x<ret_ip> <- 0x<func>)`` then ``name=value`` for
each argument (``print_uprobe_event``).  The fake places no breakpoint:
a uprobe's hits are the events injected on it (``fakedebugfs emit``), and
under ``fakedebugfs run`` one hit of each enabled entry probe on a binary
each time a watched task execs that binary (:func:`exec_hits`, fired by
the server's process watcher), each counted in ``uprobe_profile``.
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod

from fakedebugfs.engine.ftrace.kstrto import kstrtoull
from fakedebugfs.engine.ftrace.trace_probe import (FL_RETURN, FL_USER, MAX_EVENT_NAME_LEN,
    MAX_TRACE_ARGS, ProbeError, ProbeLog, parse_event_name)
from fakedebugfs.engine.ftrace.trace_probe_parse import parse_probe_arg, same_args
from fakedebugfs.engine.ftrace.trace_probe_tmpl import make_probe_event

UPROBE_EVENT_SYSTEM = "uprobes"


class TraceUprobe:
    """``struct trace_uprobe``: one probe (a place and its arguments) of an event."""

    kind = "uprobe"

    def __init__(self, group, event, filename, offset, ref_ctr, is_return, args, inode):
        self.group, self.event, self.filename = group, event, filename
        self.offset, self.ref_ctr, self.is_return = offset, ref_ctr, is_return
        self.args, self.inode = args, inode
        self.nhits = 0

    @property
    def key(self) -> str:
        return f"{self.group}:{self.event}"

    def show(self) -> str:
        """``trace_uprobe_show``: one line of ``uprobe_events``."""
        line = (f"{'r' if self.is_return else 'p'}:{self.group}/{self.event} "
                f"{self.filename}:0x{self.offset:016x}")
        if self.ref_ctr:
            line += f"(0x{self.ref_ctr:x})"
        return line + "".join(f" {a.name}={a.comm}" for a in self.args) + "\n"

    def profile(self) -> str:
        """``probes_profile_seq_show``: one line of ``uprobe_profile``."""
        return f"  {self.filename} {self.event:<44} {self.nhits:15}\n"

    def match(self, system, event: str, argv: list) -> bool:
        """``trace_uprobe_match``: the name, the group if given, and the
        command head (``PATH:0x%016lx[(0xREF)]``, then ``NAME=FETCH`` words)."""
        if event and event != self.event or system and system != self.group:
            return False
        if not argv:
            return True
        head = f"{self.filename}:0x{self.offset:016x}" + (
            f"(0x{self.ref_ctr:x})" if self.ref_ctr else "")
        if argv[0] != head:
            return False
        words = [f"{a.name}={a.comm}" for a in self.args]
        return len(argv) - 1 <= len(words) and words[:len(argv) - 1] == argv[1:]

    def make_event(self, event_id: int):
        if self.is_return:
            head = [("unsigned long", "__probe_func", 8), ("unsigned long", "__probe_ret_ip", 8)]
            label = lambda r: f"(0x{r.get('__probe_ret_ip', 0):x} <- 0x{r.get('__probe_func', 0):x})"
        else:
            head = [("unsigned long", "__probe_ip", 8)]
            label = lambda r: f"(0x{r.get('__probe_ip', 0):x})"
        return make_probe_event(self.group, self.event, event_id, head, self.args,
                                "return" if self.is_return else "normal", label)


def exec_hits(dyn, inode: tuple) -> list:
    """The probes one exec of the binary *inode* (``(st_dev, st_ino)``)
    hits in the fake: every entry probe on it whose event is enabled in a
    trace array, once (``uprobe_dispatcher`` as if the probed instruction
    ran once after ``begin_new_exec``).  Return probes are never hit so."""
    return [p for p in dyn.list if isinstance(p, TraceUprobe) and not p.is_return
            and p.inode == inode and dyn.busy(p.key)]


def hit_fields(probe: TraceUprobe, ip: int, comm: str) -> dict:
    """The fields of one such hit: ``__probe_ip``, ``$comm`` args the
    task's name, immediate values (``\\IMM``, ``\\"STR"``) theirs; the
    fetch args the fake cannot evaluate (registers, memory) stay 0."""
    fields = {"__probe_ip": ip}
    for arg in probe.args:
        op = arg.ops[0] if arg.ops else ""
        fetch = arg.comm.split(":", 1)[0]  # without its type (parse_probe_arg_type)
        if op == "COMM":
            fields[arg.name] = comm
        elif op == "DATA" and arg.type.is_string:
            fields[arg.name] = fetch[2:-1]
        elif op == "IMM" and fetch.startswith("\\") and not arg.count \
                and not arg.type.is_string:
            try:
                value = int(fetch[1:], 0)
            except ValueError:
                continue
            bits = 8 * arg.type.size
            value &= (1 << bits) - 1
            if arg.type.signed and value >> (bits - 1):
                value -= 1 << bits
            fields[arg.name] = value
    return fields


def _kstrtoul(text: str) -> int:
    return kstrtoull(text.encode(), 0)


def create(argv: list, dyn) -> TraceUprobe:
    """``__trace_uprobe_create``: the new probe, not yet registered;
    ProbeError ``ECANCELED`` where the command is not a uprobe's."""
    if argv[0][:1] not in ("p", "r") or len(argv) < 2:
        raise ProbeError(errno.ECANCELED)
    is_return = argv[0][0] == "r"
    log = ProbeLog("trace_uprobe", argv)
    if len(argv) - 2 > MAX_TRACE_ARGS:
        log.index = 2
        raise log.err(0, "TOO_MANY_ARGS", errno.E2BIG)
    event = argv[0][2:] if argv[0][1:2] == ":" else None
    if "/" not in argv[1]:
        raise ProbeError(errno.ECANCELED)
    filename = argv[1]
    colon = filename.rfind(":")
    if colon < 0 or not filename[colon + 1:colon + 2].isdigit():
        raise ProbeError(errno.ECANCELED)
    log.index = 1
    arg, filename = filename[colon + 1:], filename[:colon]
    arg_at = colon + 1
    st = dyn.stat_path(filename)
    if st is None:
        raise log.err(0, "FILE_NOT_FOUND", errno.ENOENT)
    if not stat_mod.S_ISREG(st.st_mode):
        raise log.err(0, "NO_REGULAR_FILE")
    ref_ctr = 0
    rctr = arg.find("(")
    if rctr >= 0:
        close = arg.find(")", rctr)
        if close < 0:
            raise log.err(arg_at + len(arg), "REFCNT_OPEN_BRACE")
        if arg[close + 1:]:
            raise log.err(arg_at + close + 1, "BAD_REFCNT_SUFFIX")
        try:
            ref_ctr = _kstrtoul(arg[rctr + 1:close])
        except OSError as err:
            raise log.err(arg_at + rctr + 1, "BAD_REFCNT", err.errno) from None
        arg = arg[:rctr]
    pct = arg.find("%")
    if pct >= 0:
        if arg[pct:] != "%return":
            raise log.err(arg_at + pct, "BAD_ADDR_SUFFIX")
        is_return, arg = True, arg[:pct]
    try:
        offset = _kstrtoul(arg)
    except OSError as err:
        raise log.err(arg_at, "BAD_UPROBE_OFFS", err.errno) from None
    log.index = 0
    group = UPROBE_EVENT_SYSTEM
    if event is not None:
        g, event = parse_event_name(event, log, 2)
        group = g or group
    if not event:
        tail = os.path.basename(filename)
        for i, c in enumerate(tail):
            if c in ".-_":
                tail = tail[:i]
                break
        event = f"p_{tail}_0x{offset:x}"[:MAX_EVENT_NAME_LEN - 1]
    flags = (FL_RETURN if is_return else 0) | FL_USER
    args, size = [], 0
    for i, word in enumerate(argv[2:]):
        log.index = i + 2
        parg = parse_probe_arg(args, i, word, flags, log, size)
        args.append(parg)
        size += parg.size
    return TraceUprobe(group, event, filename, offset, ref_ctr, is_return, args,
                       (st.st_dev, st.st_ino))


def register(tu: TraceUprobe, dyn) -> None:
    """``register_trace_uprobe``: a new event, or one more probe of the
    event of that name (same type and arguments, another place)."""
    log = ProbeLog("trace_uprobe", dyn.argv)
    old = [p for p in dyn.probes_of(tu.key)]
    if old:
        if not all(isinstance(p, TraceUprobe) for p in old):
            raise log.err(0, "EVENT_EXIST", errno.EEXIST)
        if old[0].is_return != tu.is_return:
            raise log.err(0, "DIFF_PROBE_TYPE", errno.EEXIST)
        diff = same_args(tu.args, old[0].args)
        if diff:
            log.index = diff + 1
            raise log.err(0, "DIFF_ARG_TYPE", errno.EEXIST)
        for p in old:
            if p.inode == tu.inode and p.offset == tu.offset and \
                    [a.comm for a in p.args] == [a.comm for a in tu.args]:
                raise log.err(0, "SAME_PROBE", errno.EEXIST)
        dyn.append(tu)
        return
    dyn.add(tu, tu.make_event, lambda: log.err(0, "EVENT_EXIST", errno.EEXIST))


__all__ = ["TraceUprobe", "create", "register", "exec_hits", "hit_fields", "UPROBE_EVENT_SYSTEM"]
