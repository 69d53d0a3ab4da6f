"""A kernel profile captured from this machine's tracefs (the host side of
``fakedebugfs capture-profile``): :func:`capture` reads a mounted tracefs,
never writing to it, into the files :class:`~fakedebugfs.engine.ftrace.profile.Profile`
reads back; :func:`capture_here` finds one mounted (``/proc/self/mounts``)
or mounts one for the capture (``mount -t tracefs``).  The engine keeps
only the reading of a profile directory; finding, mounting and walking a
real tracefs is host I/O and lives here.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from fakedebugfs.engine.ftrace.profile import COPIED, HEADERS, ID_LINE, OPTIONAL, ProfileError
from fakedebugfs.engine.core.profile_files import write_profile_file


def _read(path) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as fp:
        return fp.read()


def _write(path: Path, text: str) -> None:
    """One file of the profile (the big symbol tables as ``NAME.xz``:
    :mod:`~fakedebugfs.engine.core.profile_files`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_profile_file(path.parent, path.name, text)


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
    _write(out / "options", "".join(
        f"{name} {_read(root / 'options' / name).strip()}\n"
        for name in sorted(os.listdir(root / "options"))))
    for name in OPTIONAL:
        try:
            _write(out / name, _read(root / name))
        except (FileNotFoundError, PermissionError):  # none, or a kernel that refuses it
            continue  # (this host's locked-down 6.18: EPERM even to root)
    _write_kallsyms(out / "kallsyms")
    return len(chunks)


def _write_kallsyms(path: Path) -> None:
    """``/proc/kallsyms`` as the kernel lists it: text and data symbols
    (``CONFIG_KALLSYMS_ALL``: ``@SYM`` fetches of kernel probes name data),
    module ones included; nothing when addresses are hidden (every text
    symbol at zero: ``kptr_restrict``, or not root; the per-CPU ``A``
    symbols are near zero anyway)."""
    try:
        text = _read("/proc/kallsyms")
    except OSError:
        return
    lines = text.splitlines(True)
    funcs = [ln for ln in lines if ln[17:19] in ("t ", "T ")]
    if funcs and not all(ln.startswith("0000000000000000") for ln in funcs[:100]):
        _write(path, text)


def _check_id(edir: Path, text: str) -> None:
    """The ``id`` file is the format's ID line (the profile keeps one)."""
    if (edir / "id").is_file():
        m = ID_LINE.search(text)
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


__all__ = ["capture", "capture_here", "find_tracefs", "ProfileError"]
