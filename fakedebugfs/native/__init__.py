"""C helpers shipped as source, compiled into the wheel, and with gcc on
this machine when the wheel's copy does not match the source.

``build(name)`` returns the helper built from ``<name>.c`` of this folder:
the copy an install built into the package (``setup.py`` runs
:func:`build_prebuilt`; its file name carries :func:`source_key`, so a
changed source or flag never picks a stale one), else one compiled into the
build cache (``$FAKEDEBUGFS_BUILD`` or ``~/.cache/fakedebugfs``) when the
source is newer than the binary.  An installed package thus needs no gcc.

``setup.py`` loads this file by its path, before the package is importable:
it imports nothing of fakedebugfs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).parent

# name -> (output file, gcc flags)
TARGETS: dict[str, tuple[str, list[str]]] = {}

# LD_PRELOAD library of `fakedebugfs run`: splice() from fakedebugfs files
TARGETS["splice_preload"] = ("splice_preload.so", ["-shared", "-fPIC", "-ldl"])
# --mirror's walk over perf records (sources/mirror.py), loaded with ctypes
TARGETS["perf_records"] = ("perf_records.so", ["-shared", "-fPIC"])
# the launcher of a command joining a fake's held namespace (api.commands.Keeper)
TARGETS["join"] = ("join.bin", [])


def cache_base() -> Path:
    """Where fakedebugfs keeps what it builds or parses once: the C helpers
    and the parsed kernel profiles (``$FAKEDEBUGFS_BUILD`` or
    ``~/.cache/fakedebugfs``); not made here."""
    return Path(os.environ.get("FAKEDEBUGFS_BUILD") or Path.home() / ".cache" / "fakedebugfs")


def cache_dir() -> Path:
    d = cache_base()
    d.mkdir(parents=True, exist_ok=True)
    return d


_KEYS: dict[str, tuple] = {}  # source_key's: name -> ((mtime_ns, size) of the source, key)


def source_key(name: str) -> str:
    """What a helper is built from (its source and its gcc flags), hashed:
    the mark of the package's prebuilt copy.  Hashed again only when the
    source's mtime or size changed (a fake's first command looks up two
    helpers)."""
    _, flags = TARGETS[name]
    src = HERE / f"{name}.c"
    st = src.stat()
    stamp = (st.st_mtime_ns, st.st_size)
    kept = _KEYS.get(name)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    digest = hashlib.sha256(src.read_bytes())
    digest.update("\0".join(flags).encode())
    key = digest.hexdigest()[:16]
    _KEYS[name] = (stamp, key)
    return key


def prebuilt_name(name: str) -> str:
    """``splice_preload.so`` -> ``splice_preload-<source key>.so``."""
    stem, dot, suffix = TARGETS[name][0].rpartition(".")
    return f"{stem}-{source_key(name)}{dot}{suffix}"


def prebuilt(name: str) -> Path | None:
    """The copy built into the package for the current source, if any."""
    path = HERE / prebuilt_name(name)
    return path if path.exists() else None


def compile_c(name: str, out: Path, quiet: bool = True) -> Path:
    """gcc of ``<name>.c`` into *out* (through a temporary file, so a
    reader never sees half a library)."""
    _, flags = TARGETS[name]
    tmp = out.with_name(out.name + ".tmp")
    subprocess.run(["gcc", "-O2", "-Wall", "-o", str(tmp), str(HERE / f"{name}.c"), *flags],
                   check=True, capture_output=quiet)
    tmp.replace(out)
    return out


def build_prebuilt(dest: Path) -> list[Path]:
    """Every helper compiled into *dest* (a package's ``native`` folder)
    under its :func:`prebuilt_name`; copies of other sources go."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name, (out_name, _) in TARGETS.items():
        stem, dot, suffix = out_name.rpartition(".")
        keep = prebuilt_name(name)
        for old in dest.glob(f"{stem}-*{dot}{suffix}"):
            if old.name != keep:
                old.unlink()
        out.append(compile_c(name, dest / keep))
    return out


def build(name: str, quiet: bool = True) -> Path:
    found = prebuilt(name)
    if found is not None:
        return found
    out_name, _ = TARGETS[name]
    src = HERE / f"{name}.c"
    out = cache_dir() / out_name
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        compile_c(name, out, quiet)
    return out


def build_all(quiet: bool = True) -> list[Path]:
    return [build(name, quiet) for name in TARGETS]
