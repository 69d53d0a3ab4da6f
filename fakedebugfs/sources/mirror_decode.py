"""A mirrored sample -> the fake's tracepoint arguments, across kernels.

The running kernel writes each sample's entry in its own layout (its
``events/<system>/<name>/format``); the fake serves its profile's layout
(another kernel's: Debian's 6.12 on this 6.18 host).  The fake IS the
profile's kernel, the host only supplies the activity, so a sample is
translated field by field, by name, into the tracepoint's arguments, and
the engine packs them in the profile's layout and prints them with the
profile's ``print fmt``:

* an integer field is read with the host's offset, size and signedness
  and stored in the profile's (a narrower one keeps the low bits, as a C
  assignment does; a wider one is sign- or zero-extended);
* a string (``char name[N]`` or ``__data_loc char[] name``, either way
  on either side) is read up to its NUL and written as the profile's
  field (cut to a fixed array's size);
* another array's bytes are copied (cut or padded with zeros to a fixed
  size of the profile's), ``__data_loc`` / ``__rel_loc`` data included;
* a field the host's entry lacks is zero (an empty string, zero bytes).

What cannot be translated (an integer on one side, an array or string
on the other) is named by :func:`untranslatable`; the mirror refuses
that event (EINVAL).  One :class:`Decoder` is made per event when it is
first opened, and kept.
"""

from __future__ import annotations

from typing import Optional

from fakedebugfs.engine.core.batch import Strings
from fakedebugfs.engine.core.lazynp import np
from fakedebugfs.engine.ftrace.events import field_key
from fakedebugfs.engine.ftrace.formatfile import EventFormat, Field
from fakedebugfs.engine.ftrace.trace_events_pid import PID_PAIR_EVENTS

_INT_SIZES = (1, 2, 4, 8)


def _fake_kind(f: tuple, is_str: bool) -> str:
    """What the engine takes for the profile's field *f* (``(c type, decl,
    offset, size, signed)``): "int", "str" or "bytes"."""
    ctype, decl, _, size, _ = f
    if ctype.startswith("__data_loc") or ctype.startswith("__rel_loc"):
        return "str" if is_str else "bytes"
    if "[" in decl:
        return "str" if ctype.split()[-1] == "char" else "bytes"
    return "int" if size in _INT_SIZES else "bytes"


def _host_kind(h: Field) -> str:
    """What the host's field holds: "int", "str" or "bytes"."""
    if h.data_loc or h.rel_loc or h.array_len is not None or "[" in h.type:
        return "str" if h.is_string else "bytes"
    return "int" if h.size in _INT_SIZES else "bytes"


def _plan_of(f: tuple, is_str: bool, h: Optional[Field]):
    """How to get the profile's field *f* from the host's field *h*: a
    plan step ``(kind, host offset, info, fake size)``, or a string
    saying why it cannot be had."""
    want = _fake_kind(f, is_str)
    fixed = f[3] if want == "bytes" and not f[0].startswith(("__data_loc", "__rel_loc")) \
        else None
    if h is None:
        return ("zero", 0, want, fixed)
    have = _host_kind(h)
    loc = h.data_loc or h.rel_loc
    if want == "int":
        if have != "int":
            return f"{f[1]} is an integer in the profile, {h.type} on this kernel"
        return ("int", h.offset, np.dtype(f"<{'i' if h.signed else 'u'}{h.size}"), None)
    if have == "int":
        return f"{f[1]} is {f[0]} in the profile, an integer ({h.type}) on this kernel"
    if want == "str":
        if loc:
            return ("loc", h.offset, (True, h.rel_loc), None)
        return ("chars", h.offset, h.size, None)
    if loc:
        return ("loc", h.offset, (False, h.rel_loc), fixed)
    return ("bytes", h.offset, h.size, fixed)


def untranslatable(ev, host: EventFormat) -> Optional[str]:
    """Why the host's entries of *ev* (the profile's event type) cannot be
    translated into its layout, or None."""
    plan = _plan(ev, host)
    return plan if isinstance(plan, str) else None


def not_integers(ev) -> Optional[str]:
    """Why the profile's event *ev* cannot take an integer in each field,
    or None: a syscalls event fanned out of ``raw_syscalls``
    (:mod:`~fakedebugfs.sources.mirror_syscalls`), whose number and
    arguments the running kernel stores as a long and unsigned longs."""
    for f in ev.fields:
        if _fake_kind(f, field_key(f[1]) not in ev.dyn_arrays) != "int":
            return f"{f[1]} is {f[0]} in the profile, an integer (long) on this kernel"
    return None


def _plan(ev, host: EventFormat):
    by_host = {f.name: f for f in host.fields}
    steps = {}
    for f in ev.fields:
        name = field_key(f[1])
        step = _plan_of(f, name not in ev.dyn_arrays, by_host.get(name))
        if isinstance(step, str):
            return step
        steps[name] = step
    return steps


class Decoder:
    """One event type's samples -> the tracepoint's argument columns.

    *tp*: the fake's tracepoint, *ev*: its event type (the profile's
    layout), *host*: the running kernel's ``format`` of it, parsed.
    Integer fields are read column-wise (numpy over all the samples of
    the drain); strings become :class:`Strings`, other arrays bytes."""

    def __init__(self, tp, ev, host: EventFormat):
        self.tp, self.ev = tp, ev
        self.paired = ev.key in PID_PAIR_EVENTS  # set_event_pid looks at another task too
        steps = _plan(ev, host)
        if isinstance(steps, str):
            raise ValueError(f"{ev.key}: {steps}")
        # per argument: (kind, host offset, info, fixed size of the profile's or None)
        self.plan = [steps.get(arg, ("zero", 0, "int", None)) for arg in tp.args]
        # the arguments that hold a task's pid (pid_t: the kernel's numbering,
        # translated to the command's: sources/mirror_pids.py)
        types = {f.name: f.type.replace("const", "").strip() for f in host.fields}
        self.pid_args = tuple(i for i, (arg, step) in enumerate(zip(tp.args, self.plan))
                              if step[0] == "int" and types.get(arg) == "pid_t")

    def columns(self, entries) -> tuple:
        """The argument columns of these samples' *entries*
        (:class:`~fakedebugfs.sources.mirror_drain.Entries`)."""
        cols = []
        m = len(entries.at)
        for kind, off, info, fixed in self.plan:
            if kind == "int":
                cols.append(entries.integers(off, info))
            elif kind == "zero":
                cols.append(_zeros(m, info, fixed))
            elif kind == "chars":
                cols.append(entries.chars(off, info))
            elif kind == "bytes":
                cols.append(_objects([_fit(bytes(r[off:off + info]), fixed)
                                      for r in entries.raws()]))
            else:
                cols.append(self._loc(entries, off, info, fixed))
        return tuple(cols)

    @staticmethod
    def _loc(entries, off: int, info: tuple, fixed: Optional[int]):
        """A ``__data_loc``/``__rel_loc`` field (u32 of ``len << 16 |
        offset``, from the entry's start, or from the field's end for
        ``__rel_loc``): strings gathered at once where short enough."""
        is_str, rel = info
        if is_str and not rel:
            col = entries.loc_strings(off)
            if col is not None:
                return col
        vals = []
        base = off + 4 if rel else 0
        for r in entries.raws():
            loc = int.from_bytes(r[off:off + 4], "little")
            start = base + (loc & 0xFFFF)
            data = bytes(r[start:start + (loc >> 16)])
            vals.append(data.split(b"\0", 1)[0].decode(errors="replace") if is_str
                        else _fit(data, fixed))
        return _strings(vals) if is_str else _objects(vals)


def _fit(data: bytes, size: Optional[int]) -> bytes:
    """*data* cut or padded with zeros to *size* (None: as it is)."""
    return data if size is None else data[:size].ljust(size, b"\0")


def _zeros(m: int, kind: str, fixed: Optional[int]):
    """A field the host's entry lacks: zero, an empty string, zero bytes."""
    if kind == "int":
        return np.zeros(m, np.int64)
    if kind == "str":
        return Strings(np.zeros(m, np.int64), ("",))
    return _objects([bytes(fixed or 0)] * m)


def _objects(values: list):
    col = np.empty(len(values), object)
    col[:] = values
    return col


def _strings(values: list) -> Strings:
    table = tuple(dict.fromkeys(values))
    code = {s: i for i, s in enumerate(table)}
    return Strings(np.fromiter((code[v] for v in values), np.int64, len(values)), table)


__all__ = ["Decoder", "not_integers", "untranslatable"]
