"""The options of a fake, one table for the CLI and the Python API.

Each option is a field of :class:`MountOptions` whose metadata gives its
help text and how a command-line string becomes its value; the CLI's
``--name`` flags and the API's keyword arguments are made from the same
fields, and :meth:`MountOptions.check` refuses bad values the same way for
both (before anything is mounted).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES, shipped_profiles
from fakedebugfs.errors import MountError

#: what --enable names (kernel.TREES; not imported from there: every CLI
#: command would load the whole engine for this tuple)
TREES = ("ktrace", "tracing", "kmemtrace")

MAX_CPUS = 256


MAX_BUFFER_BYTES = 256 << 20  # engine.core.ringbuffer's (not imported: the CLI starts faster)


def size_value(value) -> int:
    """Bytes, an int or a string with an optional K/M/G suffix (powers of 1024):
    a multiple of 4096, at least 8192."""
    if isinstance(value, str):
        units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
        t = value.strip().lower().rstrip("b")
        mult = units.get(t[-1:], 1)
        try:
            value = int(t[:-1] if mult != 1 else t) * mult
        except ValueError:
            raise ValueError(f"not a size: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 8192 or value % 4096:
        raise ValueError(f"{value}: a multiple of 4096 bytes, at least 8192")
    if value > MAX_BUFFER_BYTES:
        raise ValueError(f"{value}: at most {MAX_BUFFER_BYTES} bytes (a buffer per CPU the "
                         f"fake holds)")
    return value


def count_value(value) -> int:
    """A whole number >= 0."""
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise ValueError(f"not a whole number: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"must be a whole number >= 0, got {value!r}")
    return value


def cpus_value(value) -> int:
    value = count_value(value)
    if not 1 <= value <= MAX_CPUS:
        raise ValueError(f"must be between 1 and {MAX_CPUS}, got {value}")
    return value


def rate_value(value) -> float:
    """Events per second: a finite number >= 0 (0: as fast as possible)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"not a number: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a finite number of events/s >= 0 (0: flat out), got {value!r}")
    return float(value)


def batch_ms_value(value) -> float:
    """Milliseconds, a finite number from 0.1 to 100."""
    value = rate_value(value) if not isinstance(value, bool) else value
    if isinstance(value, bool) or not 0.1 <= value <= 100:
        raise ValueError(f"must be between 0.1 and 100 ms, got {value!r}")
    return float(value)


def int_value(value) -> int:
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            raise ValueError(f"not an integer: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {value!r}")
    return value


def id_value(value) -> int:
    """A user or group id, as tracefs' ``uid=``/``gid=`` take them
    (``tracefs_parse_param``: decimal, below 2**32 - 1)."""
    value = count_value(value)
    if value >= 2**32 - 1:
        raise ValueError(f"not a user or group id: {value}")
    return value


def choice(*names: str) -> Callable[[Any], str]:
    def check(value) -> str:
        if value not in names:
            raise ValueError(f"{value!r}: choose from {', '.join(names)}")
        return value
    check.choices = names  # type: ignore[attr-defined]
    return check


def workload_value(value) -> str:
    if value == "default":  # always there: every command's default, checked without
        return value        # importing the workloads (~0.2 s: `run --attach`, `status`)
    from fakedebugfs.sources.workloads import WORKLOADS

    if value not in WORKLOADS:
        raise ValueError(f"unknown workload {value!r} (choose from {', '.join(WORKLOADS)})")
    return value


def file_value(value) -> Optional[str]:
    if value is None:
        return None
    value = os.fspath(value)
    if not os.path.isfile(value):
        raise ValueError(f"{value}: no such file")
    return value


def recording_value(value) -> Optional[str]:
    """A trace.dat file or a raw capture directory (or .tar), made absolute."""
    if value is None:
        return None
    value = os.path.abspath(os.fspath(value))
    if not os.path.exists(value):
        raise ValueError(f"{value}: no such file or directory")
    return value


def profile_value(value) -> Optional[str]:
    """A kernel profile: the name of a shipped one (``debian-6.12``,
    ``linux-6.18``: a folder of ``fakedebugfs/profiles``) or a directory
    (``fakedebugfs capture-profile``); returned absolute."""
    if value is None:
        return None
    value = os.fspath(value)
    shipped = SHIPPED_PROFILES / value
    if "/" not in value and value not in (".", "..") and shipped.is_dir():
        return str(shipped)
    value = os.path.abspath(value)
    if not os.path.isfile(os.path.join(value, "formats")):
        raise ValueError(f"{value}: not a kernel profile (no 'formats' file; "
                         "make one with `fakedebugfs capture-profile DIR`)")
    return value


def trees_value(value) -> Optional[tuple[str, ...]]:
    """Tree names, comma-separated (or a sequence): ktrace, tracing, kmemtrace."""
    if value is None:
        return None
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [str(n).strip() for n in names if str(n).strip()]
    bad = [n for n in names if n not in TREES]
    if bad or not names:
        raise ValueError(f"{bad[0] if bad else value!r}: choose from {', '.join(TREES)}")
    return tuple(dict.fromkeys(names))


def flag(value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be True or False, got {value!r}")
    return value


def _opt(default, convert, help: str, metavar: Optional[str] = None):
    return field(default=default, metadata={"convert": convert, "help": help, "metavar": metavar})


@dataclass
class MountOptions:
    """Everything a fake can be started with (the CLI's mount options)."""

    cpus: int = _opt(2, cpus_value, "number of CPUs (default 2)", "N")
    buffer_size: int = _opt(65536, size_value,
                            "ktrace per-CPU buffer size (default 65536, the RFC's)", "BYTES")
    workload: str = _opt("default", workload_value,
                         "default, classic, kmem, kmem-faults or none (default: default)", "NAME")
    rate: float = _opt(30000.0, rate_value,
                       "workload pace in events/s; 0 means as fast as possible (default 30000)",
                       "EVENTS_PER_S")
    count: Optional[int] = _opt(None, count_value, "emit exactly N events in total, then stop", "N")
    batch_ms: float = _opt(1.2, batch_ms_value,
                           "how long one batch of the workload may keep FUSE requests waiting "
                           "(default 1.2 ms; more records faster, control files answer slower)",
                           "MS")
    seed: int = _opt(0, int_value, "workload seed (default 0)", "S")
    clock: str = _opt("monotonic", choice("monotonic", "virtual"),
                      "trace clock; virtual is deterministic (default monotonic)")
    enable_all: bool = _opt(False, flag, "start with tracing and every event enabled")
    enable: Optional[tuple] = _opt(None, trees_value,
                                   "start with tracing and every event enabled in these trees "
                                   "only (comma-separated: ktrace, tracing, kmemtrace)", "TREES")
    events: Optional[str] = _opt(None, file_value,
                                 "extra ktrace events, one 'NAME FORMAT' a line", "FILE")
    kmemtrace_abi: str = _opt("2008-08", choice("2008-08", "2008-07"),
                              "kmemtrace relay layout: August 2008 (default) or July 2008")
    kmemtrace_subbufs: int = _opt(20, count_value,
                                  "relay sub-buffers per CPU (kmemtrace.subbufs, default 20)", "N")
    kmemtrace_subbuf_events: int = _opt(8192, count_value,
                                        "events per relay sub-buffer (default 8192)", "N")
    kmemtrace_tracer: bool = _opt(False, flag,
                                  "register the 2009 kmemtrace ftrace plugin: tracing/'s "
                                  "current_tracer takes 'kmemtrace' (2.6.29-2.6.34; no "
                                  "profile's available_tracers lists it)")
    raw_one_page: bool = _opt(False, flag,
                              "trace_pipe_raw hands out one page per read(), as the kernel "
                              "does (default: as many whole pages as the read asks for)")
    replay: Optional[str] = _opt(None, recording_value,
                                 "replay this trace.dat or raw capture (fakedebugfs.sources.replay) "
                                 "once tracing is on with one of its events enabled", "FILE")
    profile: Optional[str] = _opt(None, profile_value,
                                  "serve this kernel profile: a shipped one by name (" +
                                  ", ".join(shipped_profiles()) + ") or a folder made by "
                                  "fakedebugfs capture-profile (default: debian-6.12)",
                                  "NAME|DIR")
    uid: Optional[int] = _opt(None, id_value,
                              "owner of the files, as tracefs' uid= mount option (default: "
                              "the user who mounts)", "UID")
    gid: Optional[int] = _opt(None, id_value,
                              "group of the files, as tracefs' gid= mount option (default: "
                              "the mounting user's group)", "GID")
    mirror: Optional[str] = _opt(None, choice("tree", "system", "none"),
                                 "feed the fake with the running kernel's real events: those "
                                 "of run's COMMAND and its descendants (tree) or of every task "
                                 "(system); only the events enabled in the fake, read with "
                                 "perf_event_open (root); the workload then defaults to none. "
                                 "run mirrors tree by default where perf allows it (the "
                                 "workload as given); none: no mirror")
    verbose: bool = _opt(False, flag, "log requests and errors")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def make(cls, **values) -> "MountOptions":
        """Options from keyword arguments, checked (ValueError naming the option)."""
        unknown = sorted(set(values) - set(cls.names()))
        if unknown:
            raise TypeError(f"unknown option {unknown[0]!r} (options: {', '.join(cls.names())})")
        opts = cls(**values)
        opts.check()
        return opts

    def check(self) -> None:
        """Convert and check every value in place."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue
            try:
                setattr(self, f.name, f.metadata["convert"](value))
            except ValueError as err:
                raise ValueError(f"--{f.name.replace('_', '-')}: {err}") from None

    def argv(self) -> list[str]:
        """The same options as command-line arguments (defaults left out)."""
        out = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            flag_name = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                out.append(flag_name)
            elif isinstance(value, tuple):
                out += [flag_name, ",".join(value)]
            else:
                out += [flag_name, str(value)]
        return out

    def enabled_trees(self) -> tuple:
        """The trees that start with everything enabled (``--enable-all``: all)."""
        return TREES if self.enable_all else (self.enable or ())

    def kernel_kwargs(self) -> dict:
        """Arguments of :class:`fakedebugfs.engine.kernel.Kernel`."""
        return dict(cpus=self.cpus, buffer_size=self.buffer_size, clock=self.clock,
                    seed=self.seed, enable=self.enabled_trees(), events_file=self.events,
                    kmemtrace_abi=self.kmemtrace_abi, kmemtrace_subbufs=self.kmemtrace_subbufs,
                    kmemtrace_subbuf_events=self.kmemtrace_subbuf_events,
                    raw_one_page=self.raw_one_page, profile=self.profile,
                    kmemtrace_tracer=self.kmemtrace_tracer)


def build_server(options: MountOptions, mountpoint: str, implicit: bool = False):
    """The server of a mount with *options* (kernel and workload made).
    *implicit*: the mirror is ``run``'s default, not asked for: the
    workload stays as given, and a mirror that cannot start is left out
    (logged) instead of failing the mount."""
    from fakedebugfs.engine.kernel import Kernel
    from fakedebugfs.server.forkserver import prebuilt_kernel
    from fakedebugfs.server.server import Server
    from fakedebugfs.sources.workloads import make_workload

    mirror, name = None, options.workload
    if options.mirror == "none":
        options = dataclasses.replace(options, mirror=None)
    if options.mirror and not implicit:
        from fakedebugfs.sources.mirror import privilege_problem

        problem = privilege_problem()  # refused before anything is mounted
        if problem:
            raise MountError(problem)
        if options.mirror == "tree" and options.clock == "virtual":
            raise MountError("--mirror tree follows run's command in real time: not with "
                             "--clock virtual (use --mirror system, or --clock monotonic)")
        if name == "default":  # the kernel's events, not the synthetic ones
            name = "none"
    try:
        # (the one a fork server made before forking this server, if it has
        # these options: server/forkserver.py)
        kernel = prebuilt_kernel(options.kernel_kwargs()) or Kernel(**options.kernel_kwargs())
        workload = make_workload(name, kernel, seed=options.seed, count=options.count)
        if options.mirror:
            from fakedebugfs.sources.mirror import Mirror

            try:
                mirror = Mirror(kernel, options.mirror)
            except OSError as err:
                if not implicit:
                    raise
                import logging

                logging.getLogger(__name__).warning("mirror: not started: %s", err)
            if implicit and mirror is not None:
                # the command's process events and context switches stay the
                # watcher's: its tasks and the CPUs' idle task, as before; so
                # do a fork's kmallocs where the profile shows them (its own
                # call sites: the running kernel's are another build's)
                from fakedebugfs.server.watch import FORK_KMALLOC, SIDEBAND
                from fakedebugfs.sources.forkallocs import shown

                mirror.leave = frozenset(SIDEBAND) | (
                    {FORK_KMALLOC} if shown(kernel.engine.kallsyms) else set())
                # the events a trace array records, not the function tracers'
                # call trees of every real system call (ftracetest's function
                # rows took 3.7 times as long): --mirror tree asks for those
                mirror.recorded_only = True
    except (ValueError, OSError) as err:
        raise MountError(str(err)) from None
    return Server(kernel, mountpoint, workload, rate=options.rate, batch_ms=options.batch_ms,
                  uid=options.uid, gid=options.gid, mirror=mirror)
