"""Injected events: exactly the events a test asks for, through the same
engine path as a workload's (every tracer with the event enabled records it).

An injection names an event (``system:name``, as ``available_events`` lists
it, or ``ftrace:print`` for a ``trace_marker`` entry), a CPU, a task (pid and
comm, which ``saved_cmdlines`` then shows), optionally a timestamp, and field
values.  Everything is checked before anything is fired, so a batch with one
bad event fires nothing:

* a field the event does not have, a value out of the field's range (as its
  C type in the ``format`` file gives it) or of the wrong type is an
  :class:`InjectError` naming the field;
* a missing field is 0 (or the empty string), unless ``strict``;
* a timestamp before the CPU's last event is refused: the kernel's trace
  clock never goes back.  With the virtual clock an event without ``ts`` is
  stamped with the clock, which then moves on by :data:`VIRTUAL_STEP_NS`; a
  given ``ts`` ahead of the virtual clock moves the clock there.

Field types come from the tracefs ``format`` of the event (for the fields
that tracepoint arguments fill), from the printf-style format of a ktrace
event, and are ``unsigned long`` otherwise (the page events' ``call_site``
and ``ptr``, which only 2008-2009 views show).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from fakedebugfs.engine.core.engine import Pending
from fakedebugfs.engine.ftrace.ctype import is_char, lookup

VIRTUAL_STEP_NS = 1000  # an un-stamped injected event moves the virtual clock on
MARKER_EVENT = "ftrace:print"
TASK_COMM_LEN = 16
TS_MAX = (1 << 64) - 1  # the trace clock is a u64 of nanoseconds


class InjectError(ValueError):
    """An injection that cannot be done; the message names what is wrong."""


@dataclass(frozen=True)
class FieldSpec:
    """What one tracepoint argument accepts."""

    name: str
    kind: str  # "int", "str" (string or char array), "ints" (fixed array)
    size: int = 8  # bytes of an int (or of each element of "ints")
    signed: bool = False
    length: int = 0  # max bytes of a char array including its NUL; elements of "ints"
    ctype: str = "unsigned long"

    def default(self):
        return "" if self.kind == "str" else [0] * self.length if self.kind == "ints" else 0

    def check(self, event: str, value):
        """The value the tracepoint gets, or InjectError naming the field."""
        if self.kind == "str":
            return self._check_str(event, value)
        if self.kind == "ints":
            return self._check_ints(event, value)
        return self._check_int(event, value, self.name)

    def _check_str(self, event, value) -> str:
        if not isinstance(value, str):
            raise InjectError(f"{event}: field {self.name} ({self.ctype}) takes a string, "
                              f"got {value!r}")
        limit = self.length - 1 if self.length else None
        if limit is not None and len(value.encode()) > limit:
            raise InjectError(f"{event}: field {self.name} ({self.ctype}) holds at most "
                              f"{limit} bytes, got {len(value.encode())}")
        if "\0" in value:
            raise InjectError(f"{event}: field {self.name}: a string cannot hold NUL")
        return value

    def _check_ints(self, event, value) -> tuple:
        """A fixed array (``length`` elements, missing ones 0) or a dynamic
        one (``length`` 0: as many as given)."""
        if isinstance(value, str):
            value = [v for v in value.replace(",", " ").split()]
        if not isinstance(value, (list, tuple)) or (self.length and len(value) > self.length):
            raise InjectError(f"{event}: field {self.name} ({self.ctype}) takes "
                              f"{f'up to {self.length}' if self.length else 'a list of'} "
                              f"integers, got {value!r}")
        items = [self._check_int(event, v, f"{self.name}[{i}]") for i, v in enumerate(value)]
        return tuple(items) + (0,) * max(0, self.length - len(items))

    def _check_int(self, event, value, label) -> int:
        if isinstance(value, str):
            try:
                value = int(value.strip(), 0)
            except ValueError:
                raise InjectError(f"{event}: field {label} ({self.ctype}) takes an integer, "
                                  f"got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise InjectError(f"{event}: field {label} ({self.ctype}) takes an integer, "
                              f"got {value!r}")
        bits = 8 * self.size
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if self.signed else (0, (1 << bits) - 1)
        if not lo <= value <= hi:
            raise InjectError(f"{event}: field {label} ({self.ctype}) must be in "
                              f"[{lo}, {hi}], got {value}")
        return value


# --- where the types come from ------------------------------------------------

def _from_format_field(name: str, ctype: str, size: int, signed: int) -> FieldSpec:
    """A scalar or dynamic-array line of a tracefs ``format`` file
    (``__data_loc char[]`` is a string, ``__data_loc u32[]`` a list of ints)."""
    if ctype.startswith("__data_loc") or ctype.startswith("__rel_loc"):
        elem = ctype.split(None, 1)[1].split("[", 1)[0].strip()
        if is_char(elem):
            return FieldSpec(name, "str", ctype=ctype)
        info = lookup(elem)
        return FieldSpec(name, "ints", size=info.size if info else 8,
                         signed=bool(info.signed) if info else False, length=0, ctype=ctype)
    if ctype == "bool":
        return FieldSpec(name, "int", size=1, signed=False, ctype=ctype)
    return FieldSpec(name, "int", size=size or 8, signed=bool(signed), ctype=ctype)


def _from_ktrace(name: str, tp, index: int) -> FieldSpec:
    """An argument of a ktrace event, typed by its format's conversion
    (``%d`` 4 bytes signed, ``%lu`` 8 unsigned, ``%s`` a string ...)."""
    from fakedebugfs.engine.ktrace.format import parse_format

    convs = parse_format(tp.format)
    if index >= len(convs):
        return FieldSpec(name, "int", ctype="unsigned long")
    conv = convs[index]
    if conv.is_string:
        return FieldSpec(name, "str", ctype="%s")
    return FieldSpec(name, "int", size=conv.size, signed=conv.signed, ctype=f"%{conv.conv}")


def _array_spec(name: str, ctype: str, decl: str, size: int, signed: int) -> FieldSpec:
    """``char prev_comm[16]``, ``unsigned long args[6]``, ``char buf[]``."""
    count = decl.split("[", 1)[1].split("]", 1)[0]
    n = int(count) if count else 0
    if is_char(ctype):
        return FieldSpec(name, "str", length=n, ctype=f"{ctype} {decl}")
    elem = size // n if n else 8
    return FieldSpec(name, "ints", size=elem, signed=bool(signed), length=n,
                     ctype=f"{ctype} {decl}")


def field_specs(kernel, key: str) -> tuple[FieldSpec, ...]:
    """What each argument of tracepoint *key* accepts, in argument order."""
    tp = kernel.engine.tracepoints.get(key)
    if tp is None:
        raise InjectError(f"unknown event {key!r} (see available_events, or define it)")
    ft_event = kernel.ftrace.events.get(key) if kernel.ftrace is not None else None
    fields = {}
    if ft_event is not None:
        for ctype, decl, _off, size, signed in ft_event.fields:
            name = decl.split("[", 1)[0]
            fields[name] = _array_spec(name, ctype, decl, size, signed) if "[" in decl \
                else _from_format_field(name, ctype, size, signed)
    specs = []
    for i, arg in enumerate(tp.args):
        spec = fields.get(arg)
        if spec is None and getattr(tp, "format", None):
            spec = _from_ktrace(arg, tp, i)
        specs.append(spec or FieldSpec(arg, "int", ctype="unsigned long"))
    return tuple(specs)


# --- preparing and firing -------------------------------------------------------

@dataclass
class Prepared:
    """One checked injection, ready to fire."""

    key: str
    cpu: int
    pid: int
    comm: Optional[str]
    ts: Optional[int]
    values: Any  # the tracepoint's values, or the marker's bytes


class Injector:
    """Checks and fires injected events on one :class:`~fakedebugfs.engine.kernel.Kernel`."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.injected = 0
        self._specs: dict[str, tuple] = {}  # key -> (tracepoint, event, specs)

    def specs(self, key: str) -> tuple[FieldSpec, ...]:
        """The field types of *key*, kept while its tracepoint and tracefs
        event stay the same objects (``define`` and a replay that adopts a
        recording's layout install new ones)."""
        tp = self.kernel.engine.tracepoints.get(key)
        ev = self.kernel.ftrace.events.get(key)
        cached = self._specs.get(key)
        if cached is None or cached[0] is not tp or cached[1] is not ev:
            cached = self._specs[key] = (tp, ev, field_specs(self.kernel, key))
        return cached[2]

    def prepare(self, event: str, cpu: int = 0, pid: int = 0, comm: Optional[str] = None,
                ts: Optional[int] = None, fields: Optional[dict] = None,
                strict: bool = False) -> Prepared:
        """Check one injection without firing it (InjectError)."""
        fields = dict(fields or {})
        cpu = self.check_task(event, cpu, pid, comm, ts)
        if event == MARKER_EVENT:
            return Prepared(event, cpu, pid, comm, ts, self._marker_bytes(fields, strict))
        specs = self.specs(event)
        known = {s.name for s in specs}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise InjectError(f"{event} has no field {unknown[0]!r} "
                              f"(fields: {', '.join(s.name for s in specs) or 'none'})")
        values = []
        for spec in specs:
            if spec.name in fields:
                values.append(spec.check(event, fields[spec.name]))
            elif strict:
                raise InjectError(f"{event}: field {spec.name} is missing (strict)")
            else:
                values.append(spec.check(event, spec.default()))
        return Prepared(event, cpu, pid, comm, ts, tuple(values))

    def check_task(self, event, cpu, pid, comm, ts) -> int:
        """The CPU, task and timestamp of an injection checked (InjectError)."""
        nr = self.kernel.engine.nr_cpus
        for label, value in (("cpu", cpu), ("pid", pid)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InjectError(f"{event}: {label} must be an integer, got {value!r}")
        if not 0 <= cpu < nr:
            raise InjectError(f"{event}: cpu {cpu} does not exist (CPUs 0-{nr - 1})")
        if not 0 <= pid <= 0x3FFFFF:  # PID_MAX_LIMIT
            raise InjectError(f"{event}: pid {pid} is out of range (0-{0x3FFFFF})")
        if comm is not None and (not isinstance(comm, str) or "\0" in comm
                                 or len(comm.encode()) >= TASK_COMM_LEN):
            raise InjectError(f"{event}: comm must be a string of at most "
                              f"{TASK_COMM_LEN - 1} bytes, got {comm!r}")
        if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int)
                               or not 0 <= ts <= TS_MAX):
            raise InjectError(f"{event}: ts must be an integer from 0 to {TS_MAX} (ns, a u64), "
                              f"got {str(ts)[:40]}")
        return cpu

    @staticmethod
    def _marker_bytes(fields: dict, strict: bool) -> bytes:
        unknown = sorted(set(fields) - {"buf"})
        if unknown:
            raise InjectError(f"{MARKER_EVENT} has no field {unknown[0]!r} (fields: buf)")
        if strict and "buf" not in fields:
            raise InjectError(f"{MARKER_EVENT}: field buf is missing (strict)")
        buf = fields.get("buf", "")
        if not isinstance(buf, str):
            raise InjectError(f"{MARKER_EVENT}: field buf takes a string, got {buf!r}")
        return buf.encode()

    def fire(self, batch: Iterable[Prepared], stamps: Optional[list] = None) -> int:
        """Fire checked injections in order; timestamps are checked against
        each CPU's last event first, so a bad one fires nothing.  *stamps*:
        their timestamps, planned already (:meth:`plan`: a long batch fired
        in parts, the clock advanced once at its end)."""
        batch = list(batch)
        stamped = self._stamp(batch) if stamps is None else stamps
        engine = self.kernel.engine
        for p in batch:
            if p.comm is not None and p.pid:
                engine.set_comm(p.pid, p.comm)
        run: list[Pending] = []
        for p, ts in zip(batch, stamped):
            if p.key == MARKER_EVENT:
                engine.emit_batch(run)
                run = []
                self.kernel.ftrace.marker(p.pid, p.values, cpu=p.cpu, ts=ts)
                engine.last_ts[p.cpu] = ts
                continue
            run.append(Pending(engine.tracepoints[p.key], p.cpu, p.pid, ts, p.values))
        engine.emit_batch(run)
        self.injected += len(batch)
        engine.batch_done()
        return len(batch)

    def _stamp(self, batch: list[Prepared]) -> list[int]:
        """The timestamp of each event (the virtual clock moved past them);
        raises InjectError (nothing fired) if one would go back in time on
        its CPU."""
        stamps, (_, now) = self.plan(batch)
        self.advance(now)
        return stamps

    def advance(self, now: int) -> None:
        """The virtual clock moved on to *now* (after a planned batch)."""
        clock = self.kernel.engine.clock
        if clock.deterministic and now > clock.now():
            clock.advance(now - clock.now())

    def plan(self, batch: list[Prepared], state: Optional[tuple] = None) -> tuple[list, tuple]:
        """The timestamp of each event, and the state after them (each
        CPU's last time, where the virtual clock goes: :meth:`advance`
        takes the second), nothing changed; InjectError if one would go
        back in time on its CPU.  *state*: where a plan of the events
        before these left off (a long batch planned in parts)."""
        clock = self.kernel.engine.clock
        virtual = clock.deterministic
        if state is None:
            last, now = list(self.kernel.engine.last_ts), clock.now()
        else:
            last, now = state
        out = []
        for p in batch:
            if p.ts is not None:
                ts = p.ts
            elif virtual:
                ts = max(now, last[p.cpu])
                now = ts + VIRTUAL_STEP_NS
            else:
                ts = max(clock.now(), last[p.cpu])
            if ts < last[p.cpu]:
                raise InjectError(f"{p.key}: ts {ts} is before CPU {p.cpu}'s last event "
                                  f"({last[p.cpu]}): the trace clock never goes back")
            if ts > TS_MAX - VIRTUAL_STEP_NS:
                raise InjectError(f"{p.key}: ts {ts} leaves the u64 trace clock no room "
                                  f"(at most {TS_MAX - VIRTUAL_STEP_NS})")
            last[p.cpu] = ts
            if virtual:
                now = max(now, ts)
            out.append(ts)
        return out, (last, now)
