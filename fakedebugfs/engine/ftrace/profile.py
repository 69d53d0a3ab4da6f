"""Kernel profiles: what the fake needs to look like one kernel's tracefs.

``fakedebugfs capture-profile OUTDIR``
(:func:`fakedebugfs.sources.hostprofile.capture`, the host side) reads a
real tracefs, never writing to it, and saves plain text files a user can
commit next to their tool's tests; this module reads them back:

    uname             ``uname -r`` of the kernel
    preempt_model     the preemption model the latency format's header
                      names after ``M:`` (``desktop`` for 6.12's voluntary,
                      ``PREEMPT(none)`` on 6.18), read off that header in a
                      new instance by the oracle's capture
                      (:mod:`fakedebugfs.oracle.preempt_model`: a write)
    marker_ip         where a ``trace_marker`` entry's ip points, as the kernel
                      prints it with ``sym-offset`` and ``sym-addr``
                      (``tracing_mark_write+0xdf/0x280 <ffffffff8123600f>``),
                      recorded the same way (:mod:`fakedebugfs.oracle.marker_ip`)
    formats           every ``events/<system>/<event>/format``, each after a
                      line ``### <system>/<event>`` (systems and events in
                      name order); the ``id`` file is the format's ``ID:``
                      line (checked while capturing)
    available_events  as the kernel lists them (registration order)
    available_tracers, trace_clock, trace_options, README
    available_filter_functions(_addrs)   when the kernel has them
    kallsyms          ``/proc/kallsyms``'s text symbols, when readable
    options           ``<name> <0|1>``: the value of each ``options/`` file
    kprobes_blacklist, btf    the oracle's captures only: debugfs'
                      ``kprobes/blacklist`` and ``/sys/kernel/btf/vmlinux``
    syscalls          the oracle's captures only: ``<nr> <name>`` of each
                      syscall number the kernel names (``sys_openat``), as
                      its hist triggers' ``.syscall`` print them
                      (:mod:`fakedebugfs.oracle.syscall_table`)
    pci_devices       the oracle's captures only: the machine's PCI devices,
                      one ``PCIDEV`` line each, as the ``mmiotrace``
                      tracer's ``trace_pipe`` lists them
                      (:mod:`fakedebugfs.oracle.pci_devices`)
    instance_modes    the oracle's captures only: ``modes`` of a new
                      instance's files and ``options/``
    text_insns        the oracle's profiles only: the instruction lengths of
                      each text symbol, from the kernel package's image
                      (:mod:`fakedebugfs.oracle.text_insns`), for kprobes'
                      instruction boundaries
    oracle            the Debian kernel package that boots this kernel under
                      QEMU (``python -m fakedebugfs.oracle``), for profiles
                      captured there
    header_page, header_event   ``events/header_page``, ``events/header_event``
    modes             ``<mode> <d|f> <path>`` of the top level, ``options/``,
                      ``per_cpu/cpu0/``, ``events/``, one system and one event
                      directory, every ``events/ftrace/<entry>/`` (``instances/`` itself: its content would
                      change the kernel's state to look at)

One ``formats`` file rather than one file per event: 2,305 events of 6.18
are 2.0 MB of text in one file (git stores it as ~120 KB), where a tree of
2,305 directories takes ~19 MB on disk.  :class:`Profile` loads it with
the events' text split but not parsed: an event's codec and print fmt are
built the first time it is used (:mod:`.format_text`).

The profiles ship in ``fakedebugfs/profiles``: ``debian-6.12``, the
distro kernel users' CI runs, captured in the oracle guest, is the
default; ``linux-6.18`` is the machine this was written on
(``fixtures/profiles/linux-6.18``).
"""

from __future__ import annotations

import re
from pathlib import Path

SHIPPED_PROFILES = Path(__file__).resolve().parents[2] / "profiles"
DEFAULT_PROFILE = SHIPPED_PROFILES / "debian-6.12"
COPIED = ("available_events", "available_tracers", "trace_clock", "trace_options", "README")
HEADERS = ("header_page", "header_event")
# copied when the kernel has them (the function tracer's lists: a kernel
# without CONFIG_DYNAMIC_FTRACE has neither); ``kallsyms`` is
# ``/proc/kallsyms``'s text symbols, loaded only by what resolves symbols
OPTIONAL = ("available_filter_functions", "available_filter_functions_addrs")
# files a shipped profile may have that ``capture-profile`` does not make:
# learnt from the kernel with writes (``preempt_model``: the latency
# header's model, read with the latency-format option set, and
# ``marker_ip``, a marker entry's ip: the oracle's capture writes them in
# an instance of its own) or made from
# its package and the oracle guest (``text_insns``, ``calltrees``,
# ``ftrace_events``, ``kernel_data`` and ``proc_version``)
RECORDED = ("preempt_model", "marker_ip", "text_insns", "calltrees", "ftrace_events",
            "kernel_data", "proc_version")
# a section's head, found after a newline (a literal prefix: ~5 ms for the
# 2 MB of 6.18, where a MULTILINE ``^`` made it ~20 ms of every mount's start)
_HEAD = re.compile(r"\n### (\S+)/(\S+)(?=\n)")
ID_LINE = re.compile(r"^ID: *(\d+)", re.M)


def shipped_profiles() -> list[str]:
    """The names of the profiles that ship with the package (folders of
    ``fakedebugfs/profiles`` with a ``formats`` file)."""
    return sorted(p.name for p in SHIPPED_PROFILES.iterdir() if (p / "formats").is_file())


class ProfileError(ValueError):
    """A directory that is not a profile, or a tracefs that cannot be read."""


def _read(path) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as fp:
        return fp.read()


def _split(text: str) -> list:
    """``[before, system, event, body, system, event, body, ...]`` of a
    ``formats`` file: each ``### <system>/<event>`` line starts a section."""
    parts = _HEAD.split("\n" + text)
    # a piece starts with the newline ending its head line (the first: the
    # one added) and ends with the newline the next head took, unless empty
    last = len(parts) - 1
    for i in range(0, len(parts), 3):
        if parts[i]:
            parts[i] = parts[i][1:] + ("\n" if i < last else "")
    return parts


def _parse_modes(text) -> dict[str, tuple[int, str]]:
    out = {}
    for line in (text or "").splitlines():
        mode, kind, path = line.split(" ", 2)
        out[path] = (int(mode, 8), kind)
    return out


class Profile:
    """A profile directory, loaded: the events' format texts by key
    (``system:name``, parsed only when used), their ids, and the files."""

    def __init__(self, path=None):
        self.path = Path(path) if path else DEFAULT_PROFILE
        if not (self.path / "formats").is_file():
            raise ProfileError(f"{self.path}: not a kernel profile (no 'formats' file; "
                               "make one with `fakedebugfs capture-profile DIR`)")
        parts = _split(_read(self.path / "formats"))
        if parts[0].strip():
            raise ProfileError(f"{self.path}/formats: text before the first '### ' line")
        self.formats: dict[str, str] = {}
        self.ids: dict[str, int] = {}
        for i in range(1, len(parts), 3):
            key, body = f"{parts[i]}:{parts[i + 1]}", parts[i + 2]
            m = ID_LINE.search(body)
            if not m:
                raise ProfileError(f"{self.path}/formats: {key} has no ID line")
            self.formats[key] = body
            self.ids[key] = int(m[1])
        self.files = {name: self._opt(name)
                      for name in COPIED + HEADERS + ("uname", "modes", "preempt_model",
                                                      "marker_ip")}

    def _opt(self, name: str):
        p = self.path / name
        return _read(p) if p.is_file() else None

    @property
    def release(self) -> str:
        return (self.files["uname"] or "").strip()

    def available_events(self) -> list[str]:
        """``available_events`` order; events the list lacks come last."""
        listed = (self.files["available_events"] or "").split()
        seen = set(listed)
        return [k for k in listed if k in self.formats] + \
            [k for k in self.formats if k not in seen and not k.startswith("ftrace:")]

    def option_values(self) -> dict[str, bool]:
        """The ``options`` file: ``name 0|1`` of each ``options/`` file at
        capture (tracers' flags that ``trace_options`` does not show)."""
        out = {}
        for line in (self._opt("options") or "").splitlines():
            name, _, value = line.partition(" ")
            out[name] = value.strip() == "1"
        return out

    def instance_modes(self) -> dict[str, tuple[int, str]]:
        """``instance_modes``, like :meth:`modes` (empty without one)."""
        out = self.__dict__.get("_instance_modes")
        if out is None:
            out = self._instance_modes = _parse_modes(self._opt("instance_modes"))
        return out

    def syscall_names(self) -> dict[int, str]:
        """The ``syscalls`` file's ``nr -> name`` (``sys_openat``), read once;
        empty without one (every number is then ``unknown_syscall``)."""
        out = self.__dict__.get("_syscall_names")
        if out is None:
            out = {}
            for line in (self._opt("syscalls") or "").splitlines():
                nr, _, name = line.partition(" ")
                if nr.isdigit() and name:
                    out[int(nr)] = name.strip()
            self._syscall_names = out
        return out

    def ftrace_events(self) -> list[str]:
        """The ``ftrace_events`` file: the kernel's list of event types in
        its own order, the list's head first (recorded in the oracle guest:
        :mod:`fakedebugfs.oracle.ftrace_events`); empty without one."""
        return (self._opt("ftrace_events") or "").split()

    def proc_version(self):
        """The ``proc_version`` file (the kernel's ``/proc/version``), or None."""
        return self._opt("proc_version")

    def kernel_data(self) -> dict[str, bytes]:
        """The ``kernel_data`` file: ``SYMBOL HEX`` lines, the bytes of some
        constant data of the kernel (:mod:`fakedebugfs.oracle.kernel_data`);
        empty without one."""
        out = {}
        for line in (self._opt("kernel_data") or "").splitlines():
            sym, _, hexed = line.partition(" ")
            if sym and not sym.startswith("#"):
                out[sym] = bytes.fromhex(hexed.strip())
        return out

    def modes(self) -> dict[str, tuple[int, str]]:
        """The ``modes`` file's ``path -> (mode, kind)``, read once (a
        profile does not change once loaded; ``events/ftrace``'s entries
        ask for it one by one)."""
        out = self.__dict__.get("_modes")
        if out is None:
            out = self._modes = _parse_modes(self.files["modes"])
        return out


__all__ = ["SHIPPED_PROFILES", "shipped_profiles", "DEFAULT_PROFILE", "COPIED", "HEADERS", "OPTIONAL", "RECORDED", "ID_LINE", "Profile", "ProfileError"]
