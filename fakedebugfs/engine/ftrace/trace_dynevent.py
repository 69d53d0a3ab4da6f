"""Dynamic events (kernel/trace/trace_dynevent.c, trace.c's
``trace_parse_run_command``, 6.18).

:class:`DynEvents` is ``dyn_event_list`` of the top-level trace array with
the ``dyn_event_operations`` the profile's kernel registered (6.18 here:
uprobes only, and it refuses the other commands with EINVAL as
``create_dyn_event`` does when every type answered ECANCELED; Debian
6.12: eprobes, kprobes, fprobes and uprobes, :mod:`.trace_kprobe`,
:mod:`.trace_fprobe`, :mod:`.trace_eprobe`).

* :meth:`DynEvents.write` is ``trace_parse_run_command``: the bytes line
  by line, ``#`` comments cut, blank lines skipped, each line run (a
  failure stops there, the lines before it done); a line of 4096 bytes or
  more is EINVAL.
* ``-:[GRP/]EVENT [ARGS]`` and ``!...`` remove (``dyn_event_release``:
  ENOENT when nothing matched, EBUSY when the event is enabled in any
  trace array); opening the file with O_TRUNC removes all
  (``dyn_events_release_all``: EBUSY and nothing removed if one is busy).
* A new event is registered as ``trace_probe_register_event_call``:
  EEXIST (with "Given group/event name is already used by another event")
  when any event has the name, else the id after the highest and
  :meth:`Ftrace.add_event` (every trace array gets its directory).
* Errors a type logs go to the top-level ``error_log`` (``tracing_log_err``
  with no trace array).
"""

from __future__ import annotations

import dataclasses
import errno
from typing import Callable, Optional

from fakedebugfs.engine.ftrace import (trace_eprobe, trace_events_synth, trace_fprobe,
    trace_kprobe, trace_uprobe)
from fakedebugfs.engine.ftrace.events import next_event_type
from fakedebugfs.engine.ftrace.trace_btf import btf_of
from fakedebugfs.engine.ftrace.trace_probe import ProbeError, ProbeFacts

WRITE_BUFSIZE = 4096
# the dyn_event_operations of each kind, in registration order (initcall
# level, then link order: eprobe, [synth], kprobe, fprobe at core_initcall,
# uprobe at fs_initcall)
TYPES = {"eprobe": trace_eprobe, "synth": trace_events_synth, "kprobe": trace_kprobe,
         "fprobe": trace_fprobe, "uprobe": trace_uprobe}


def removed_listeners(tr) -> list:
    """Callables(key) told when a dynamic event leaves *tr* (its tree
    removes the event's directory)."""
    return tr.__dict__.setdefault("on_event_removed", [])


class DynEvents:
    """``dyn_event_list`` and the commands of ``dynamic_events``,
    ``uprobe_events`` (and ``kprobe_events`` where a kernel has them)."""

    def __init__(self, ft, kinds=("uprobe",), stat_path: Optional[Callable] = None,
                 facts: Optional[ProbeFacts] = None):
        self.ft = ft
        prof = getattr(ft, "profile", None)
        if prof is not None and "synthetic_events" in prof.modes():  # trace_events_synth.c's
            kinds = (*kinds, "synth")
        self.kinds = [k for k in TYPES if k in kinds]
        self.facts = facts or ProbeFacts()  # the kernel's probe code (.trace_probe)
        if self.facts.btf_args and self.facts.btf is None and prof is not None:
            # its functions' BTF: the profile's btf file, read when first asked
            self.facts = dataclasses.replace(self.facts, btf=btf_of(prof))
        self.list: list = []  # every probe, in creation order
        self.stat_path = stat_path or (lambda path: None)
        self.argv: list = []  # the command being run (its error log)
        if "eprobe" in self.kinds and hasattr(ft, "on_enable_change"):
            self.eprobe_hits = trace_eprobe.EprobeHits(self)
        if "fprobe" in self.kinds and hasattr(ft, "on_enable_change"):
            self.tprobe_hits = trace_fprobe.TprobeHits(self)

    # --- the files ------------------------------------------------------------------

    def show(self, kind: Optional[str] = None) -> str:
        return "".join(p.show() for p in self.list if kind is None or p.kind == kind)

    def profile(self, kind: str) -> str:
        return "".join(p.profile() for p in self.list if p.kind == kind)

    def write(self, data: bytes, kind: Optional[str] = None) -> int:
        """``trace_parse_run_command`` with ``create_dyn_event`` (*kind*
        None) or one type's ``create_or_delete``."""
        if b"\0" in data:
            raise OSError(errno.EINVAL, "NUL in a command")
        done = 0
        for raw in data.split(b"\n"):
            if len(raw) >= WRITE_BUFSIZE - 1:
                raise OSError(errno.EINVAL, "Line length is too long")
            text = raw.split(b"#", 1)[0]
            line = text.strip(b" \t\n\v\f\r").decode(errors="surrogateescape")
            if line:
                # a removal is told by the command's very first byte: " -:x" is
                # parsed as a definition (and refused), as create_dyn_event does
                self.run(line, kind, removal=text[:1] in (b"-", b"!"))
            done += len(raw) + 1
        return len(data)

    def run(self, line: str, kind: Optional[str] = None, removal: bool = True) -> None:
        """One command; errors logged in ``error_log``, then raised.  *removal*
        False: the raw command did not begin with its ``-`` (leading spaces)."""
        try:
            if removal and (line[0] in "-!" if kind is None else line[0] == "-"):
                self.release(line, kind)
            else:
                self.create(line, kind)
        except ProbeError as err:
            for entry in [*getattr(err, "before", ()), err.log]:  # an eprobe logs two
                if entry is not None:
                    loc, cmd, text, pos = entry
                    self.ft.log_err(loc, cmd.encode(errors="surrogateescape"), text, pos)
            raise OSError(err.errno, err.strerror) from None

    def create(self, line: str, kind: Optional[str]) -> None:
        """``create_dyn_event``: each type in turn until one does not answer ECANCELED."""
        argv = line.split()
        self.argv = argv
        for name in ([kind] if kind else self.kinds):
            try:
                probe = TYPES[name].create(argv, self)
            except ProbeError as err:
                if err.errno == errno.ECANCELED:
                    continue
                raise
            TYPES[name].register(probe, self)
            return
        raise ProbeError(errno.EINVAL)

    def release(self, line: str, kind: Optional[str]) -> None:
        """``dyn_event_release``."""
        argv = line.split()
        word = argv[0]
        if word[0] == "-":
            if word[1:2] != ":":
                raise ProbeError(errno.EINVAL)
            event = word[2:]
        else:
            at = word.find(":")
            if at < 0:
                raise ProbeError(errno.EINVAL)
            event = word[at + 1:]
        system = None
        if "/" in event:
            system, event = event.split("/", 1)
        if system is None and not event:
            raise ProbeError(errno.EINVAL)
        ret = errno.ENOENT
        for probe in list(self.list):
            if kind and probe.kind != kind or not probe.match(system, event, argv[1:]):
                continue
            ret = self.free(probe)
            if ret:
                break
        if ret:
            raise ProbeError(ret)

    def release_all(self, kind: Optional[str] = None) -> None:
        """``dyn_events_release_all`` (an O_TRUNC open)."""
        mine = [p for p in self.list if kind is None or p.kind == kind]
        if any(self.busy(p.key) or getattr(p, "in_use", False) for p in mine):
            raise OSError(errno.EBUSY, "a dynamic event is enabled")
        for probe in mine:
            self.free(probe)

    # --- registration ------------------------------------------------------------------

    def probes_of(self, key: str) -> list:
        return [p for p in self.list if p.key == key]

    def exists(self, key: str) -> bool:
        """An event of that name, of any kind (``trace_probe_register_event_call``'s EEXIST)."""
        return key in self.ft.events or key in self.ft.engine.tracepoints

    def kprobes(self):
        """Where kprobes may go (:mod:`fakedebugfs.engine.core.kprobes`), over
        the engine's symbols, made when first needed."""
        from fakedebugfs.engine.core.kprobes import kprobes_of

        return kprobes_of(self.ft.engine, self.ft.profile)

    def busy(self, key: str) -> bool:
        """``trace_probe_is_enabled``: enabled in any trace array."""
        return any(key in tr.enabled for tr in self.ft.arrays())

    def add(self, probe, make_event, exists) -> None:
        """``trace_probe_register_event_call`` + ``dyn_event_add``."""
        ft = self.ft
        if probe.key in ft.events or probe.key in ft.engine.tracepoints:
            raise exists()
        ev = make_event(next_event_type(ft.by_id))
        ft.add_event(ev)
        tp = ft.engine.tracepoints.get(probe.key)
        if tp is not None:
            tp.register(self._counter(probe.key))
        self.list.append(probe)

    def append(self, probe) -> None:
        """Another probe of an existing event (``trace_probe_append``)."""
        self.list.append(probe)

    def free(self, probe) -> int:
        """``unregister_trace_uprobe``: 0, or EBUSY while enabled (the last
        probe of an event takes the event away)."""
        own = getattr(probe, "release", None)
        if own is not None:  # a type with its own free (synthetic events)
            return own()
        siblings = self.probes_of(probe.key)
        if len(siblings) > 1:
            self.list.remove(probe)
            return 0
        if self.busy(probe.key):
            return errno.EBUSY
        self.list.remove(probe)
        self._remove_event(probe.key)
        return 0

    def _remove_event(self, key: str) -> None:
        """``trace_remove_event_call``: out of the registry, every trace
        array (probe, filter, triggers) and the engine."""
        ft = self.ft
        ev = ft.events.get(key)
        for tr in ft.arrays():
            tr.probes.pop(key, None)
            tr.filters.pop(key, None)
            tr.filter_preds.pop(key, None)
            tr.triggers.pop(key, None)
        if ev is not None:
            if ev.id in ft.by_id:
                del ft.by_id[ev.id]
            del ft.events[key]
        ft.engine.remove(key)
        for tr in ft.arrays():
            for callback in removed_listeners(tr):
                callback(key)

    def _counter(self, key: str):
        """Counts each hit in its probes' ``nhits`` (``uprobe_profile``)."""
        def count(cpu, pid, ts, values):
            for p in self.probes_of(key):
                p.nhits += 1
                break
        return count


def dyn_events(ft, kinds=("uprobe",), stat_path=None, facts=None) -> DynEvents:
    """The :class:`DynEvents` of the top-level trace array *ft* (made once)."""
    dyn = ft.__dict__.get("dyn_events")
    if dyn is None:
        dyn = ft.__dict__["dyn_events"] = DynEvents(ft, kinds, stat_path, facts)
    elif stat_path is not None:
        dyn.stat_path = stat_path
    return dyn


def is_dynamic(ft, key: str) -> bool:
    """*key* ("group:name") is a dynamic event defined in the fake
    (``uprobe_events``/``dynamic_events``): the kernel the fake runs on has
    no such event, its hits come from injection (a mirror leaves it be)."""
    dyn = ft.__dict__.get("dyn_events")
    return dyn is not None and bool(dyn.probes_of(key))


__all__ = ["DynEvents", "dyn_events", "is_dynamic", "removed_listeners", "WRITE_BUFSIZE"]
