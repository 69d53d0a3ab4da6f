"""Kernel profiles: what the fake needs to look like one kernel's tracefs.

``fakedebugfs capture-profile OUTDIR`` (:func:`capture`) reads a real
tracefs, never writing to it, and saves plain text files a user can commit
next to their tool's tests:

    uname             ``uname -r`` of the kernel
    formats           every ``events/<system>/<event>/format``, each after a
                      line ``### <system>/<event>`` (systems and events in
                      name order); the ``id`` file is the format's ``ID:``
                      line (checked while capturing)
    available_events  as the kernel lists them (registration order)
    available_tracers, trace_clock, trace_options, README
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

The 6.18 profile of the machine this was written on ships as
``fakedebugfs/profiles/linux-6.18`` (``fixtures/profiles/linux-6.18``) and
is the default.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Optional

DEFAULT_PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "linux-6.18"
COPIED = ("available_events", "available_tracers", "trace_clock", "trace_options", "README")
HEADERS = ("header_page", "header_event")
# a section's head, found after a newline (a literal prefix: ~5 ms for the
# 2 MB of 6.18, where a MULTILINE ``^`` made it ~20 ms of every mount's start)
_HEAD = re.compile(r"\n### (\S+)/(\S+)(?=\n)")
_ID = re.compile(r"^ID: *(\d+)", re.M)


class ProfileError(ValueError):
    """A directory that is not a profile, or a tracefs that cannot be read."""


def _read(path) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as fp:
        return fp.read()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as fp:
        fp.write(text)


def capture(tracefs: str, outdir: str) -> int:
    """Save the profile of the tracefs mounted at *tracefs* into *outdir*;
    returns the number of events.  Only reads (``open(O_RDONLY)``, ``lstat``)."""
    root, out = Path(tracefs), Path(outdir)
    if not (root / "events" / "header_page").is_file():
        raise ProfileError(f"{tracefs}: not a tracefs (no events/header_page)")
    chunks = []
    for system in sorted(os.listdir(root / "events")):
        sdir = root / "events" / system
        if not sdir.is_dir():
            continue
        for name in sorted(os.listdir(sdir)):
            fmt = sdir / name / "format"
            if not fmt.is_file():
                continue
            text = _read(fmt)
            _check_id(sdir / name, text)
            chunks.append(f"### {system}/{name}\n{text}")
    _write(out / "formats", "".join(chunks))
    for name in COPIED:
        _write(out / name, _read(root / name))
    for name in HEADERS:
        _write(out / name, _read(root / "events" / name))
    _write(out / "uname", os.uname().release + "\n")
    _write(out / "modes", _modes(root))
    return len(chunks)


def _check_id(edir: Path, text: str) -> None:
    """The ``id`` file is the format's ID line (the profile keeps one)."""
    if (edir / "id").is_file():
        m = _ID.search(text)
        if not m or _read(edir / "id").strip() != m[1]:
            raise ProfileError(f"{edir}: id differs from the format's ID line")


def _modes(root: Path) -> str:
    """Mode and kind of the entries the fake lays out from the profile."""
    first_system = next(s for s in sorted(os.listdir(root / "events"))
                        if (root / "events" / s).is_dir() and s != "ftrace")
    ftrace = sorted(f"events/ftrace/{e}" for e in os.listdir(root / "events" / "ftrace"))
    dirs = ["", "options", "per_cpu/cpu0", "events", f"events/{first_system}",
            "events/sched/sched_switch", *ftrace]
    lines = []
    for rel in dirs:
        path = root / rel if rel else root
        if not path.is_dir():
            continue
        for name in sorted(os.listdir(path)):
            child = f"{rel}/{name}" if rel else name
            st = os.lstat(root / child)
            kind = "d" if stat.S_ISDIR(st.st_mode) else "f"
            if rel.startswith("events") and kind == "d":
                continue  # systems and events are in `formats`
            lines.append(f"{stat.S_IMODE(st.st_mode):04o} {kind} {child}\n")
    return "".join(lines)


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
            m = _ID.search(body)
            if not m:
                raise ProfileError(f"{self.path}/formats: {key} has no ID line")
            self.formats[key] = body
            self.ids[key] = int(m[1])
        self.files = {name: self._opt(name) for name in COPIED + HEADERS + ("uname", "modes")}

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

    def modes(self) -> dict[str, tuple[int, str]]:
        out = {}
        for line in (self.files["modes"] or "").splitlines():
            mode, kind, path = line.split(" ", 2)
            out[path] = (int(mode, 8), kind)
        return out




def find_tracefs() -> Optional[str]:
    """A tracefs mounted on this machine (``/proc/self/mounts``), if any."""
    try:
        with open("/proc/self/mounts") as fp:
            for line in fp:
                parts = line.split()
                if len(parts) > 2 and parts[2] == "tracefs":
                    return parts[1].replace("\\040", " ")
    except OSError:
        pass
    return None


def capture_here(outdir: str, tracefs: Optional[str] = None) -> tuple[int, str]:
    """:func:`capture` from *tracefs*, else the one mounted, else a tracefs
    mounted for the capture (``mount -t tracefs``, read, unmounted: the
    same superblock, so still read-only).  Returns ``(events, tracefs)``."""
    import subprocess
    import tempfile

    path = tracefs or find_tracefs()
    if path:
        return capture(path, outdir), path
    tmp = tempfile.mkdtemp(prefix="fdfs-tracefs-")
    try:
        res = subprocess.run(["mount", "-t", "tracefs", "nodev", tmp], capture_output=True,
                             text=True)
        if res.returncode:
            raise ProfileError(f"no tracefs mounted and mounting one failed: "
                               f"{res.stderr.strip() or 'mount failed'} (run as root)")
        try:
            return capture(tmp, outdir), "tracefs"
        finally:
            subprocess.run(["umount", tmp], capture_output=True)
    finally:
        os.rmdir(tmp)


__all__ = ["DEFAULT_PROFILE", "Profile", "ProfileError", "capture", "capture_here", "find_tracefs"]
