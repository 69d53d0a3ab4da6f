"""The simulated kernel: one engine and the tracers the three trees show.

``Kernel`` is what a mount serves, booted from a :class:`KernelConfig`.  It
owns the :class:`Engine` (CPUs, clock, tracepoints, symbols) and the tracers
attached to it: ktrace (the 2009 ktrace RFC), ftrace (tracefs, with the 2009
kmemtrace ftrace plugin as a tracer) and kmemtrace (the 2008 kmemtrace relay
patch and its later ABI).  Modules (``insmod``/``rmmod``) bring ktrace events
and go, as the RFC's module notifier has them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Optional, Union

from fakedebugfs.engine.core.clock import make_clock
from fakedebugfs.engine.core.engine import Engine
from fakedebugfs.engine.core.kallsyms import module_functions
from fakedebugfs.engine.core.layouts import PAGE_SIZE
from fakedebugfs.engine.ftrace.profile import Profile
from fakedebugfs.engine.ftrace.tracer import Ftrace, FtraceConfig
from fakedebugfs.engine.kmemtrace.tracer import Kmemtrace
from fakedebugfs.engine.ktrace.tracer import DEFAULT_BUF_SIZE, Ktrace
from fakedebugfs.engine.ktrace.sites import DEFAULT_SITES, check_module, parse_event_file, user_site


def same_definition(old, new, print_fmt=None) -> bool:
    """Whether defining *new* over *old* changes nothing
    (:func:`~fakedebugfs.engine.ftrace.define.same_definition`; .define is
    imported when first defining, not at a mount's start)."""
    from fakedebugfs.engine.ftrace.define import same_definition as same

    return same(old, new, print_fmt)


TREES = ("ktrace", "tracing", "kmemtrace")  # what --enable-all turns on (api.options.TREES)


@dataclass(frozen=True)
class KernelConfig:
    """How the simulated kernel boots (what ``fakedebugfs mount`` options
    say of it, :mod:`fakedebugfs.api.options`)."""

    cpus: int = 2
    buffer_size: int = DEFAULT_BUF_SIZE  # ktrace's per-CPU buffer, bytes
    clock: str = "monotonic"  # the engine clock: monotonic or virtual
    seed: int = 0
    enable_all: bool = False  # every event of every tree on at boot
    enable: tuple = ()  # the trees whose events are on at boot
    events_file: Optional[str] = None  # ktrace events declared as a module "events"
    kmemtrace_abi: str = "2008-08"
    kmemtrace_subbufs: int = 20
    kmemtrace_subbuf_events: int = 8192
    raw_one_page: bool = False  # trace_pipe_raw answers one page per read, as the kernel
    kmemtrace_tracer: bool = False  # the 2009 kmemtrace ftrace plugin in available_tracers
    # the kernel whose tracefs events tracing/ serves: a profile directory or
    # Profile, None for the shipped 6.18 one, False for the fake's own only
    profile: Union[None, bool, str, os.PathLike, Profile] = None

    def __post_init__(self):
        object.__setattr__(self, "enable", tuple(self.enable or ()))


class Kernel:
    """The engine and its three tracers, booted from *config* (or from the
    same fields as keyword arguments: ``Kernel(cpus=2, clock="virtual")``;
    an unknown one is a TypeError)."""

    def __init__(self, config: Optional[KernelConfig] = None, **fields):
        config = dataclasses.replace(config, **fields) if config is not None \
            else KernelConfig(**fields)
        self.config = config
        self.engine = Engine(config.cpus, make_clock(config.clock), config.seed)
        self.ktrace = Ktrace(self.engine, config.buffer_size)
        for site in DEFAULT_SITES:
            self.ktrace.add_site(site)
        self.kmemtrace = Kmemtrace(self.engine, config.kmemtrace_abi, config.kmemtrace_subbufs,
                                   config.kmemtrace_subbuf_events)
        self.ftrace = Ftrace(self.engine, FtraceConfig(profile=config.profile,
                                                        kmemtrace_tracer=config.kmemtrace_tracer))  # tracing/
        self.modules: dict[str, list[str]] = {}
        if config.events_file:
            with open(config.events_file) as fp:
                try:
                    self.insmod("events", parse_event_file(fp.read()))
                except ValueError as err:
                    raise ValueError(f"{config.events_file}: {err}") from None
        if config.enable_all or config.enable:
            self.enable_all(TREES if config.enable_all else config.enable)

    def enable_all(self, trees=TREES) -> None:
        """Boot with tracing on: every event of the tracers behind *trees*
        enabled (``ktrace/``, ``tracing/``, ``kmemtrace/``)."""
        if "ktrace" in trees:
            for entry in list(self.ktrace.order):
                self.ktrace.set_event_enabled(entry.name, True)
            self.ktrace.set_enabled(True)
        if "tracing" in trees:
            for key in self.ftrace.event_keys():
                self.ftrace.set_event(key, True)
            self.ftrace.tracing_on = True
        if "kmemtrace" in trees:
            self.kmemtrace.set_enabled(True)

    def warm(self) -> "Kernel":
        """Fill the caches a mount's first look at ``events/`` fills (the
        events with tracepoints, each system's events), changing nothing a
        reader sees: a fork server does it once for the kernels its forks
        take over (a fresh fake's first ``trace-cmd record``: ~5 ms)."""
        self.ftrace.event_keys_by_system()
        self.ftrace.events.system_keys("")
        return self

    # --- the instrument's view -------------------------------------------------

    def define_event(self, system: str, name: str, fields, print_fmt=None):
        """A new tracefs event ``events/<system>/<name>/`` whose fields are C
        declarations (:func:`~fakedebugfs.engine.ftrace.define.define_event`):
        on the top level and every instance."""
        return self.ftrace.define_event(system, name, list(fields), print_fmt)

    def check_define(self, system: str, name: str, fields, print_fmt=None):
        """What :meth:`define_event` would make, made but not registered
        (nothing changes): ValueError for a name, declaration or print fmt
        it refuses, or an event of that name with another format."""
        from fakedebugfs.engine.ftrace.define import check_definition

        return check_definition(self.ftrace, system, name, fields, print_fmt)

    def published(self) -> bool:
        """Every finished ktrace page is visible to readers (GET_PRODUCED)."""
        kt = self.ktrace
        return all(kt.visible_produced(cpu) >= buf.produced for cpu, buf in enumerate(kt.buffers))

    def unread(self, tracers=None, complete_pages: bool = False) -> dict:
        """What readers have not taken yet, per tracer and CPU (nothing
        listed: all consumed).  *tracers*: a subset of ftrace, ktrace,
        kmemtrace (default: the enabled ones).  *complete_pages*: count only
        what a page reader can take now (whole pages, finished sub-buffers);
        for ftrace, only once the buffer reaches ``buffer_percent`` (or with
        the ``block`` option), since below that mark the kernel's poll of
        ``trace_pipe_raw`` does not wake a recorder such as trace-cmd's: it
        takes the rest when it stops."""
        wanted = set(tracers or ("ftrace", "ktrace", "kmemtrace"))
        unknown = wanted - {"ftrace", "ktrace", "kmemtrace"}
        if unknown:
            raise ValueError(f"unknown tracer {sorted(unknown)[0]!r} (ftrace, ktrace, kmemtrace)")
        out = {}
        if "ftrace" in wanted:
            ft = self.ftrace
            out["ftrace"] = {cpu: ft.entries(cpu) for cpu, buf in enumerate(ft.buffers)
                             if (buf.has_pages() and ft.poll_ready(cpu) if complete_pages
                                 else not buf.empty())}
        if "ktrace" in wanted and (tracers or self.ktrace.enabled):
            out["ktrace"] = {cpu: (self.ktrace.visible_produced(cpu) - buf.consumed) // PAGE_SIZE
                             for cpu, buf in enumerate(self.ktrace.buffers)
                             if self.ktrace.visible_produced(cpu) > buf.consumed}
        if "kmemtrace" in wanted and (tracers or self.kmemtrace.enabled):
            out["kmemtrace"] = {cpu: n for cpu, n in enumerate(self.kmemtrace.unread(complete_pages))
                                if n}
        return {name: cpus for name, cpus in out.items() if cpus}

    def insmod(self, module: str, events) -> list[str]:
        """Load a module declaring ktrace events ``[(name, format)]``."""
        events = check_module(module, events)  # names, shapes: nothing half loaded
        if module in self.modules:
            raise ValueError(f"module {module!r} is already loaded")
        # refuse the whole module before anything changes (nothing half loaded)
        if not module.replace("-", "_").isidentifier():
            raise ValueError(f"bad module name {module!r} (letters, digits, _ and -)")
        names = [name for name, _ in events]
        if len(set(names)) != len(names):
            raise ValueError(f"module {module!r} declares an event twice")
        for name, fmt in events:
            entry = self.ktrace.entries.get(name)
            if entry is not None and entry.format != fmt:
                raise ValueError(f"the format of tracepoint '{name}' changes from "
                                 f"'{entry.format}' to '{fmt}'")
        keys = []
        for name, fmt in events:
            site = user_site(self.engine, module, name, fmt)
            self.ktrace.add_site(site)
            keys.append(site.tracepoint)
        self.modules[module] = keys
        self.engine.kallsyms.add_module(module, module_functions(names))
        return [key.split(":", 1)[1] for key in keys]

    def rmmod(self, module: str) -> None:
        """Unload a module: its events stop and their files go."""
        keys = self.modules.pop(module, None)
        if keys is None:
            raise KeyError(f"module {module!r} is not loaded")
        self.ktrace.remove_sites(keys)
        for key in keys:
            self.engine.remove(key)
        self.engine.kallsyms.remove_module(module)
