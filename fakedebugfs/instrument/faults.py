"""Scripted faults: lost events, failing, stalled and short operations.

A fault is a JSON-able dict (:func:`parse_fault` checks it).  Two families:

* **engine faults** lose events exactly as the kernel loses them, so that
  events emitted = read + still buffered + overrun + dropped holds per
  tracer, to the event:

  ``{"kind": "overrun", "cpu": N, "events": M, "tracer": T}``
      the next M events tracer T records on CPU N are lost as an overrun
      (``CpuBuffer.lose_events``: ``stats`` overrun and ktrace ``overflow``
      grow by M, the page after the gap carries ``RB_MISSED_EVENTS`` with the
      count stored; kmemtrace: ``total_overruns`` grows by M).
  ``{"kind": "overrun", "cpu": N, "pages": K, "tracer": T}``
      the K oldest unread complete pages are dropped now, as the writer's
      overwrite drops them (ring buffers only: the kmemtrace relay channel
      never overwrites).

  T is ``ftrace`` (the default), ``ktrace``, ``kmemtrace`` or ``all`` (each
  of the three loses its own next M events).

* **file faults** act on FUSE requests for the files whose path (relative to
  the mount root, no leading ``/``) matches a glob (:func:`fnmatch.fnmatchcase`;
  ``*`` also matches ``/``), each for the next ``count`` (default 1) matching
  requests:

  ``errno``       ``{"path", "op", "errno", "count"}``: fail with that errno
  ``stall``       ``{"path", "op", "ms", "count"}``: wait ms, then serve
  ``short_read``  ``{"path", "bytes", "count"}``: read at most bytes; the rest
                  is served by the next read (nothing is lost)
  ``poll_delay``  ``{"path", "ms", "count"}``: a poll wake-up is sent ms late

  ``op`` is ``open``, ``read``, ``write``, ``poll``, ``ioctl`` or ``any``
  (the default).  :class:`FaultTable` keeps them; the FUSE adapter asks
  :meth:`FaultTable.take` on each request, which costs one attribute test
  (:attr:`FaultTable.active`) while no file fault is set.

Plain synchronous Python: no trio, no pyfuse3.
"""

from __future__ import annotations

import errno as errno_mod
import fnmatch
import re
from dataclasses import dataclass, field
from numbers import Real
from typing import Callable, Optional

TRACERS = ("ftrace", "ktrace", "kmemtrace")
OPS = ("open", "read", "write", "poll", "ioctl", "any")
FILE_KINDS = ("errno", "stall", "short_read", "poll_delay")
KINDS = ("overrun",) + FILE_KINDS

# the keys each kind accepts (kind itself aside)
_KEYS = {
    "overrun": {"cpu", "events", "pages", "tracer"},
    "errno": {"path", "op", "errno", "count"},
    "stall": {"path", "op", "ms", "count"},
    "short_read": {"path", "bytes", "count"},
    "poll_delay": {"path", "ms", "count"},
}


@dataclass
class Fault:
    """One parsed fault; ``remaining`` counts the requests a file fault
    still acts on."""

    kind: str
    id: int = 0
    # overrun
    cpu: int = 0
    events: int = 0
    pages: int = 0
    tracer: str = "ftrace"
    # file faults
    path: str = ""
    op: str = "any"
    errno: int = 0
    ms: float = 0.0
    bytes: int = 0
    count: int = 1
    remaining: int = 0
    match: Optional[re.Pattern] = field(default=None, repr=False, compare=False)

    @property
    def tracers(self) -> tuple:
        return TRACERS if self.tracer == "all" else (self.tracer,)

    def matches(self, path: str, op: str, kind: str) -> bool:
        return (self.kind == kind and (self.op == op or self.op == "any")
                and self.match.match(path) is not None)

    def spec(self) -> dict:
        """The fault as a JSON-able dict, ``parse_fault`` of which gives it back."""
        if self.kind == "overrun":
            size = {"pages": self.pages} if self.pages else {"events": self.events}
            return {"kind": "overrun", "cpu": self.cpu, **size, "tracer": self.tracer}
        out = {"kind": self.kind, "path": self.path}
        if self.kind in ("errno", "stall"):
            out["op"] = self.op
        if self.kind == "errno":
            out["errno"] = errno_mod.errorcode[self.errno]
        if self.kind in ("stall", "poll_delay"):
            out["ms"] = self.ms
        if self.kind == "short_read":
            out["bytes"] = self.bytes
        out["count"] = self.count
        return out


# --- parsing --------------------------------------------------------------------


def _int(spec: dict, key: str, minimum: int, default=None) -> int:
    value = spec.get(key, default)
    if value is None:
        raise ValueError(f"{key!r} is required for kind {spec['kind']!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key!r} must be an integer, not {value!r}")
    if value < minimum:
        raise ValueError(f"{key!r} must be >= {minimum}, not {value}")
    return value


def _ms(spec: dict) -> float:
    value = spec.get("ms")
    if value is None:
        raise ValueError(f"'ms' is required for kind {spec['kind']!r}")
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= value < 1e9:
        raise ValueError(f"'ms' must be a number of milliseconds >= 0, not {value!r}")
    return float(value)


def _choice(spec: dict, key: str, choices, default: str) -> str:
    value = spec.get(key, default)
    if value not in choices:
        raise ValueError(f"{key!r} must be one of {', '.join(choices)}, not {value!r}")
    return value


def _path(spec: dict) -> str:
    value = spec.get("path")
    if not isinstance(value, str) or not value.lstrip("/"):
        raise ValueError(f"'path' must be a non-empty glob, not {value!r}")
    return value.lstrip("/")


def _errno(spec: dict) -> int:
    value = spec.get("errno")
    if isinstance(value, str):
        name = value.strip().upper()
        value = int(name) if name.isdigit() else getattr(errno_mod, name, None)
    if isinstance(value, bool) or not isinstance(value, int) or value not in errno_mod.errorcode:
        raise ValueError(f"'errno' must be an errno name (EINTR) or number, "
                         f"not {spec.get('errno')!r}")
    if value == errno_mod.ENOSYS:
        # FUSE takes ENOSYS as "not implemented": the kernel would stop
        # sending that request (poll, flush, ...) for the rest of the mount
        raise ValueError("'errno' ENOSYS is refused: FUSE would disable the "
                         "operation for the whole mount")
    return value


def parse_fault(spec: dict) -> Fault:
    """Check *spec* and return its :class:`Fault`; raises ValueError with
    one line naming the bad key."""
    if not isinstance(spec, dict):
        raise ValueError(f"a fault is an object with a 'kind', not {type(spec).__name__}")
    kind = spec.get("kind")
    if kind not in KINDS:
        raise ValueError(f"'kind' must be one of {', '.join(KINDS)}, not {kind!r}")
    unknown = sorted(set(spec) - _KEYS[kind] - {"kind"})
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} for kind {kind!r} "
                         f"(keys: {', '.join(sorted(_KEYS[kind]))})")
    if kind == "overrun":
        return _parse_overrun(spec)
    path = _path(spec)
    fault = Fault(kind, path=path, count=_int(spec, "count", 1, 1),
                  match=re.compile(fnmatch.translate(path)))
    fault.remaining = fault.count
    if kind in ("errno", "stall"):
        fault.op = _choice(spec, "op", OPS, "any")
    if kind == "errno":
        fault.errno = _errno(spec)
    elif kind in ("stall", "poll_delay"):
        fault.ms = _ms(spec)
        fault.op = "poll" if kind == "poll_delay" else fault.op
    else:
        fault.bytes = _int(spec, "bytes", 1)
        fault.op = "read"
    return fault


def _parse_overrun(spec: dict) -> Fault:
    if ("events" in spec) == ("pages" in spec):
        raise ValueError("an overrun takes exactly one of 'events' and 'pages'")
    fault = Fault("overrun", cpu=_int(spec, "cpu", 0),
                  tracer=_choice(spec, "tracer", TRACERS + ("all",), "ftrace"))
    if "events" in spec:
        fault.events = _int(spec, "events", 1)
    else:
        fault.pages = _int(spec, "pages", 1)
        if fault.tracer == "kmemtrace":
            raise ValueError("'pages' needs a ring buffer (ftrace, ktrace): "
                             "the kmemtrace relay channel never overwrites; use 'events'")
    return fault


# --- the table ------------------------------------------------------------------


class FaultTable:
    """The faults of one :class:`~fakedebugfs.engine.kernel.Kernel`.

    Engine faults are applied to the tracers at :meth:`add`; what is left of
    them is read back from the tracers' pending counts.  File faults wait
    here for the FUSE adapter's :meth:`take`.
    """

    def __init__(self, kernel=None):
        self.kernel = kernel
        self._next_id = 1
        self._file: list[Fault] = []  # active file faults, oldest first
        self._overruns: list[Fault] = []  # events overruns, oldest first
        self._lost: dict[int, dict] = {}  # pages overruns: id -> {tracer: events}
        #: True while a file fault is active: the adapter's only test otherwise
        self.active = False
        #: once mounted, why a file fault's path glob names no file of the
        #: mount (None: it names one), so that a typo is refused, not a fault
        #: that never fires (set by the server: fs/pathglob.py unmatched)
        self.paths: Optional[Callable[[str], Optional[str]]] = None

    # --- control ----------------------------------------------------------------

    def check(self, spec: dict) -> Fault:
        """Parse *spec* against this kernel (its CPUs) without applying it;
        ValueError naming the bad key."""
        fault = parse_fault(spec)
        ncpus = self.kernel.engine.nr_cpus if self.kernel is not None else None
        if fault.kind == "overrun" and ncpus is not None and fault.cpu >= ncpus:
            raise ValueError(f"'cpu' {fault.cpu} does not exist "
                             f"(the fake has {ncpus} CPUs: 0-{ncpus - 1})")
        if fault.kind != "overrun" and self.paths is not None:
            problem = self.paths(fault.path)
            if problem:
                raise ValueError(problem)
        return fault

    def add(self, spec: dict) -> dict:
        """Parse *spec*, apply it, and describe it (with its integer ``id``)."""
        fault = self.check(spec)
        if fault.kind == "overrun":
            self._apply_overrun(fault)
        fault.id = self._next_id
        self._next_id += 1
        if fault.kind != "overrun":
            self._file.append(fault)
            self.active = True
        elif fault.events:
            self._overruns.append(fault)
        return self.describe(fault)

    def list(self) -> list[dict]:
        """The faults still to act, oldest first, with what remains of each."""
        self._overruns = [f for f in self._overruns if any(self._remaining(f).values())]
        faults = sorted(self._overruns + self._file, key=lambda f: f.id)
        return [self.describe(f) for f in faults]

    def clear(self, id: Optional[int] = None) -> int:
        """Remove fault *id* (every fault when None): what it had not done yet
        is not done.  Returns how many were removed; ValueError for an id
        that is not active."""
        gone = [f for f in self._overruns + self._file if id is None or f.id == id]
        if id is not None and not gone:
            raise ValueError(f"no active fault with id {id!r}")
        for fault in gone:
            if fault.kind == "overrun":
                for tracer, left in self._remaining(fault).items():
                    self._lose(tracer, fault.cpu, -left)
                self._overruns.remove(fault)
            else:
                self._file.remove(fault)
        self.active = bool(self._file)
        return len(gone)

    def describe(self, fault: Fault) -> dict:
        out = {"id": fault.id, **fault.spec()}
        if fault.kind != "overrun":
            out["remaining"] = fault.remaining
        elif fault.events:
            left = self._remaining(fault)
            out["remaining"] = max(left.values())
            out["remaining_by_tracer"] = left
        else:
            out["lost"] = self._lost.get(fault.id, {})
        return out

    # --- the FUSE adapter's side --------------------------------------------------

    def take(self, path: str, op: str, kind: str) -> Optional[Fault]:
        """The oldest active *kind* fault matching *op* on *path* (relative to
        the mount root), one of its counts used up; None if there is none."""
        if not self.active:
            return None
        for fault in self._file:
            if fault.matches(path, op, kind):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._file.remove(fault)
                    self.active = bool(self._file)
                return fault
        return None

    def peek(self, path: str, op: str, kind: str) -> Optional[Fault]:
        """Like :meth:`take`, without using a count up."""
        if not self.active:
            return None
        return next((f for f in self._file if f.matches(path, op, kind)), None)

    # --- engine faults ------------------------------------------------------------

    def _buffers(self, tracer: str):
        return getattr(self.kernel, tracer).buffers

    def _apply_overrun(self, fault: Fault) -> None:
        if fault.events:
            for tracer in fault.tracers:
                self._lose(tracer, fault.cpu, fault.events)
            return
        lost = {}
        for tracer in fault.tracers:
            if tracer != "kmemtrace":  # "all": the ring buffers only
                lost[tracer] = self._buffers(tracer)[fault.cpu].drop_pages(fault.pages)
        self._lost[self._next_id] = lost

    def _pending(self, tracer: str, cpu: int) -> int:
        if tracer == "kmemtrace":
            return self.kernel.kmemtrace.lose_next[cpu]
        return self._buffers(tracer)[cpu].lose_next

    def _lose(self, tracer: str, cpu: int, count: int) -> None:
        """Add *count* (may be negative: a cleared fault) to the pending losses."""
        if tracer == "kmemtrace":
            kmt = self.kernel.kmemtrace
            kmt.lose_next[cpu] = max(0, kmt.lose_next[cpu] + count)
        else:
            buf = self._buffers(tracer)[cpu]
            buf.lose_next = max(0, buf.lose_next + count)

    def _remaining(self, fault: Fault) -> dict:
        """Events *fault* has still to lose per tracer: the tracers use up
        pending losses oldest fault first."""
        out = {}
        for tracer in fault.tracers:
            later = sum(f.events for f in self._overruns
                        if f.id > fault.id and f.cpu == fault.cpu and tracer in f.tracers)
            out[tracer] = max(0, min(fault.events, self._pending(tracer, fault.cpu) - later))
        return out
