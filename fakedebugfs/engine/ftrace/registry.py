"""The event registry of a kernel profile (``ftrace_events``, the list of
every ``trace_event_call``): every event the profile's kernel has, shared by
the top-level tracing directory and its instances.

The fake's own events (:mod:`.events`, :mod:`.events_sched`: hand-written
codecs the workloads feed) keep their objects; every other event of the
profile is a :class:`~.format_text.FormatEvent` built from its format text
the first time it is looked up, and its engine tracepoint (arguments: the
field names) is made the first time it is asked for.  Mounting stays fast:
nothing of an event is parsed until a tool reads its format, enables it or
a workload fires it.
"""

from __future__ import annotations

import dataclasses

import functools
import hashlib
import marshal
import os
import sys
import zlib
from collections.abc import MutableMapping
from pathlib import Path
from typing import Optional

from fakedebugfs.native import cache_base
from fakedebugfs.engine.ftrace.events import OWN_TYPES, TRACE_EVENT_TYPE_MAX, EventType
# .format_text (format parsing, print fmts: ~10 ms of imports) is imported
# when a profile event is first built, not at a mount's start
from fakedebugfs.engine.ftrace.profile import DEFAULT_PROFILE, Profile
from fakedebugfs.engine.ftrace.stacks import STACK_FUNCTIONS, show_stack
from fakedebugfs.engine.core.tracepoint import Tracepoint


# ftrace entries printed by trace_output.c's own functions, not their print fmt
SHOW = {"ftrace:kernel_stack": show_stack}


class EventRegistry(MutableMapping):
    """``system:name`` -> :class:`EventType`, in ``available_events`` order."""

    def __init__(self, profile: Optional[Profile], builtins=()):
        self.profile = profile
        self.version = 0  # bumped when an event comes or goes (what caches of the keys follow)
        self._systems: Optional[dict[str, list[str]]] = None  # system_keys' index
        self._built: dict[str, EventType] = {}
        # format texts by key: str, or bytes packed by load_profile (_unpack)
        self._texts: dict = dict(profile.formats) if profile else {}
        self._order: dict[str, None] = {}
        if profile:
            self._order.update(dict.fromkeys(profile.available_events()))
            self._order.update(dict.fromkeys(k for k in profile.formats if k.startswith("ftrace:")))
        for ev in builtins:
            self._builtin(ev)
        self.ids: dict[int, str] = {}
        if profile:
            self.ids.update((i, k) for k, i in profile.ids.items())
        self.ids.update((ev.id, ev.key) for ev in self._built.values())

    def _builtin(self, ev: EventType) -> None:
        """One of the fake's own events: kept as it is when the profile has
        it with the same format (or has no profile; ``ftrace`` entries are
        always kept: the tracers write them, in the profile's layout where
        its format differs, printed by the fake's own code); left out when
        the profile's kernel lacks it; the profile's layout when its format
        differs, the fake's firings filling the fields they share by name."""
        text = self.text(ev.key)
        if ev.system == "ftrace" and text is not None and ev.id != self.profile.ids[ev.key]:
            # an entry's id is its enum trace_type value, which moves between
            # kernels (bputs: 14 in 6.12, 15 in 6.18): the profile's
            ev = dataclasses.replace(ev, id=self.profile.ids[ev.key])
        elif text is None and self.profile and ev.id in self.profile.ids.values():
            # an entry of the fake's own (kmemtrace's, 17 and 18 in 2.6.29)
            # whose number the profile's kernel gives another (raw_data is 18
            # in 6.12): a free number from the top down (events.OWN_TYPES),
            # so that the events a user defines take the kernel's numbers
            taken = set(self.profile.ids.values()) | {e.id for e in self._built.values()}
            ev = dataclasses.replace(ev, id=next(i for i in range(TRACE_EVENT_TYPE_MAX,
                                                                  OWN_TYPES, -1)
                                                 if i not in taken))
        if ev.system == "ftrace" and text is not None and text != ev.format():
            # the entry as the profile's kernel lays it out (6.12's function
            # has no args[]: 6.18's does), printed by the fake's own code
            from fakedebugfs.engine.ftrace.format_text import event_from_format

            theirs = event_from_format(text, ev.system)
            self[ev.key] = dataclasses.replace(ev, fields=theirs.fields,
                                               print_fmt=theirs.print_fmt, size=0,
                                               data_offset=None)
        elif self.profile is None or ev.system == "ftrace" or text == ev.format():
            self[ev.key] = ev
        elif text is not None:
            from fakedebugfs.engine.ftrace.format_text import by_name_columns, event_from_format

            other = event_from_format(text, ev.system)
            own, theirs = ev.encode_values, other.encode_values
            if own is not None:
                other.encode_values = lambda values: theirs(own(values))
                # the batch path's columns the same way (format_text.by_name_columns)
                other.encode_columns = by_name_columns(other, ev.encode_columns) \
                    or other.encode_columns
            self[ev.key] = other

    def __getitem__(self, key: str) -> EventType:
        ev = self._built.get(key)
        if ev is None:
            text = self.text(key)
            if text is None:
                raise KeyError(key)
            from fakedebugfs.engine.ftrace.format_text import event_from_format

            ev = self._built[key] = event_from_format(text, key.split(":", 1)[0])
            if key in SHOW:  # entries the kernel prints with their own code
                ev.show = SHOW[key]
        return ev

    def __contains__(self, key) -> bool:
        return key in self._built or key in self._texts

    def __setitem__(self, key: str, ev: EventType) -> None:
        self._built[key] = ev
        self._systems = None
        self.version += 1
        self._order.setdefault(key, None)
        if hasattr(self, "ids"):
            self.ids[ev.id] = key

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._built.pop(key, None)
        self._texts.pop(key, None)
        self._order.pop(key, None)
        self._systems = None
        self.version += 1

    def __iter__(self):
        return iter([k for k in self._order if k in self])

    def __len__(self) -> int:
        return sum(1 for k in self._order if k in self)

    def system_keys(self, system: str) -> list[str]:
        """The keys of *system*'s events, in order: the kernel keeps each
        subsystem's events together (``event_subsystem``'s list), so its
        ``enable`` and ``filter`` files do not walk every event.  An index
        made at the first call, made again after an event is added or
        removed."""
        if self._systems is None:
            index: dict[str, list[str]] = {}
            for key in self:
                index.setdefault(key.partition(":")[0], []).append(key)
            self._systems = index
        return self._systems.get(system, [])

    def with_tracepoints(self, tracepoints) -> tuple[list[str], dict[str, list[str]]]:
        """The keys of the events that have a tracepoint in *tracepoints*
        (``ftrace`` entries left out), in order, and the same by system.
        Kept until an event or a tracepoint comes or goes (this registry
        and :class:`LazyTracepoints` count their changes, ``version``):
        ``events/enable``, a ``set_event`` read or a wildcard walk them, and
        each walk of 2,305 keys cost some 3.6 ms.  Tracepoints that do not
        count their changes (a kernel without a profile) are walked each time."""
        version = getattr(tracepoints, "version", None)
        stamp = (id(tracepoints), self.version, version)
        kept = self.__dict__.get("_with_tracepoints")
        if kept is None or kept[0] != stamp or version is None:
            keys = [key for key in self if not key.startswith("ftrace:") and key in tracepoints]
            by_system: dict[str, list[str]] = {}
            for key in keys:
                by_system.setdefault(key.split(":", 1)[0], []).append(key)
            kept = self._with_tracepoints = (stamp, keys, by_system)
        return kept[1], kept[2]

    def text(self, key: str) -> Optional[str]:
        """The profile's format text of *key* (None for the fake's own)."""
        return _unpack(self._texts.get(key))

    def has_text(self, key: str) -> bool:
        """The profile has a format text for *key* (none unpacked)."""
        return key in self._texts

    def event_id(self, key: str) -> int:
        """The id without building the event."""
        ev = self._built.get(key)
        return ev.id if ev is not None else self.profile.ids[key]

    def format_text(self, key: str) -> str:
        """The event's ``format`` file without building the event: the
        profile's text (what the kernel printed, which the event built from
        it prints again), else the built event's; KeyError for no event."""
        ev = self._built.get(key)
        if ev is not None:
            return ev.format()
        kept = self.__dict__.get("_shown")
        if kept is None or kept[0] != self.version:  # an event came or went: none kept
            kept = self._shown = (self.version, {})
        text = kept[1].get(key)
        if text is None:
            # unpacked once (zlib: 9 us, half of a format's four requests
            # in the server): trace-cmd stream and record read every
            # format twice at start; at most the profile's formats
            # (1.1 MB for debian-6.12), kept only once read
            text = self.text(key)
            if text is None:
                raise KeyError(key)
            kept[1][key] = text
        return text


class IdIndex(MutableMapping):
    """``id`` -> :class:`EventType` over a registry (``ftrace_find_event``)."""

    def __init__(self, events: EventRegistry):
        self.events = events

    def __getitem__(self, ident: int) -> EventType:
        return self.events[self.events.ids[ident]]

    def __contains__(self, ident) -> bool:
        return ident in self.events.ids and self.events.ids[ident] in self.events

    def __setitem__(self, ident: int, ev: EventType) -> None:
        self.events.ids[ident] = ev.key
        if ev.key not in self.events or self.events._built.get(ev.key) is not ev:
            self.events[ev.key] = ev

    def __delitem__(self, ident: int) -> None:
        del self.events.ids[ident]

    def __iter__(self):
        return iter([i for i, k in self.events.ids.items() if k in self.events])

    def __len__(self) -> int:
        return len(list(iter(self)))


class LazyTracepoints(dict):
    """The engine's tracepoints, with the profile's generic events' made
    when first asked for (their arguments: the format's field names)."""

    def __init__(self, base: dict, events: EventRegistry):
        super().__init__(base)
        self.events = events
        self.version = 0  # bumped when a tracepoint is added or removed

    def __setitem__(self, key, tp) -> None:
        dict.__setitem__(self, key, tp)
        self.version += 1

    def __delitem__(self, key) -> None:
        dict.__delitem__(self, key)
        self.version += 1

    def pop(self, key, *default):
        self.version += 1
        return dict.pop(self, key, *default)

    def _lazy(self, key) -> Optional[Tracepoint]:
        if not isinstance(key, str) or key.startswith("ftrace:"):
            return None
        text = self.events.text(key)  # (unpacked only for a key it will use)
        if text is None:
            return None
        from fakedebugfs.engine.ftrace.format_text import tracepoint_args

        system, name = key.split(":", 1)
        tp = Tracepoint(sys.intern(system), name, tracepoint_args(text))
        dict.__setitem__(self, key, tp)
        return tp

    def __missing__(self, key):
        tp = self._lazy(key)
        if tp is None:
            raise KeyError(key)
        return tp

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, key) or (
            isinstance(key, str) and not key.startswith("ftrace:")
            and self.events.has_text(key))

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default


def install_registry(engine, profile: Optional[Profile], builtins):
    """The registry and id index of *profile* with *builtins*; the engine's
    tracepoints become lazy over it.  Returns ``(events, by_id)``."""
    events = EventRegistry(profile, builtins)
    engine.kallsyms.extend(STACK_FUNCTIONS)  # the frames of kernel_stack entries
    if profile is not None and not isinstance(engine.tracepoints, LazyTracepoints):
        engine.tracepoints = LazyTracepoints(engine.tracepoints, events)
    return events, IdIndex(events)




class LazyProbes(dict):
    """A trace array's probes (``trace_event_raw_event_<call>`` bound to its
    buffer), made when an event is first enabled there; the event itself
    is built when the probe first fires (``TraceEvents.make_probe``)."""

    def __init__(self, tr):
        super().__init__()
        self.tr = tr

    def __missing__(self, key: str):
        if key not in self.tr.events:
            raise KeyError(key)
        probe = self[key] = self.tr.make_probe(key)
        return probe


CACHE_VERSION = 2  # of the saved form below (2: texts packed)


@functools.lru_cache(maxsize=8)
def load_profile(path=None) -> Profile:
    """A profile loaded once per process (its texts are only read).  What
    :class:`Profile` makes of the directory is also saved in the build
    cache (``$FAKEDEBUGFS_BUILD`` or ``~/.cache/fakedebugfs``, marshal),
    keyed by the directory's files (names, sizes, mtimes): loading that
    takes a few ms where splitting 6.18's 2 MB of formats takes ~15 ms of
    every mount's start.  The format texts stay packed in memory
    (:class:`PackedTexts`: ~2 MB less of a server's memory), each unpacked
    when an event is built.  Any trouble with the cache: the directory is
    read as it is."""
    directory = Path(path) if path else DEFAULT_PROFILE
    stamp, cache = _profile_stamp(directory), _profile_cache(directory)
    if stamp is not None:
        try:
            with open(cache, "rb") as fp:
                saved = marshal.load(fp)
            if saved[0] == stamp:
                return _packed_profile(directory, saved[1])
        except (OSError, EOFError, ValueError, TypeError, IndexError, KeyError):
            pass
    prof = Profile(path)
    if stamp is None:
        return prof
    state = {k: v for k, v in vars(prof).items() if k != "path"}
    state["formats"] = {k: _pack(v) for k, v in prof.formats.items()}
    _save_profile(cache, stamp, state)
    return _packed_profile(directory, state)


class PackedTexts(dict):
    """A profile's format texts kept packed (zlib: 6.18's 2 MB of text in
    ~0.4 MB of a mount's memory), each unpacked when read; a plain
    ``dict()`` copy keeps them packed (:class:`EventRegistry`)."""

    def __getitem__(self, key):
        return _unpack(dict.__getitem__(self, key))

    def get(self, key, default=None):
        value = dict.get(self, key)
        return default if value is None else _unpack(value)

    def values(self):
        return [_unpack(v) for v in dict.values(self)]

    def items(self):
        return [(k, _unpack(v)) for k, v in dict.items(self)]

    def __eq__(self, other):
        return dict(self.items()) == (dict(other.items()) if isinstance(other, dict) else other)

    __hash__ = None


def _pack(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8", "surrogateescape"), 1)


def _unpack(text):
    """A format text as :class:`Profile` reads it, from packed bytes or as it is."""
    if type(text) is bytes:
        return zlib.decompress(text).decode("utf-8", "surrogateescape")
    return text


def _packed_profile(directory: Path, state: dict) -> Profile:
    """A :class:`Profile` of *directory* from its saved state, texts packed."""
    prof = Profile.__new__(Profile)
    prof.__dict__.update(state, path=directory)
    prof.formats = PackedTexts(state["formats"])
    return prof


def _cachable(directory: Path) -> bool:
    """Only the profiles shipped with the package are cached (a user's,
    or a test's in a temporary directory, would leave a file each)."""
    try:
        return directory.resolve().parent == DEFAULT_PROFILE.resolve().parent
    except OSError:
        return False


def _profile_stamp(directory: Path):
    """What the cache of *directory* is valid for (None: not cachable)."""
    if not _cachable(directory):
        return None
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
        return (CACHE_VERSION, sys.version_info[:2], str(directory.resolve()),
                tuple((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in entries
                      if e.is_file()))
    except OSError:
        return None


def _profile_cache(directory: Path) -> Path:
    base = cache_base()
    digest = hashlib.sha1(str(directory.resolve()).encode(errors="surrogateescape")).hexdigest()
    return base / "profiles" / f"{digest[:16]}.marshal"


def _save_profile(cache: Path, stamp, state: dict) -> None:
    try:
        data = marshal.dumps((stamp, state))
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(cache)
    except (OSError, ValueError):
        pass  # not saved: read from the directory next time too


def resolve_profile(prof) -> Optional[Profile]:
    """The profile a kernel is booted with (``FtraceConfig.profile``,
    ``Kernel(profile=...)``): a directory, a :class:`Profile`, False for
    none; None for the shipped 6.18 one."""
    if prof is False:
        return None
    if isinstance(prof, Profile):
        return prof
    return load_profile(str(prof) if prof else None)


__all__ = ["EventRegistry", "IdIndex", "LazyProbes", "LazyTracepoints", "resolve_profile",
           "install_registry", "load_profile"]
