"""C helpers shipped as source and compiled on this machine with gcc.

``build(name)`` compiles ``<name>.c`` from this folder into the build cache
(``$FAKEDEBUGFS_BUILD`` or ``~/.cache/fakedebugfs``) when the source is
newer than the binary, and returns the path.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

HERE = Path(__file__).parent

# name -> (output file, gcc flags)
TARGETS: dict[str, tuple[str, list[str]]] = {}

# LD_PRELOAD library of `fakedebugfs run`: splice() from fakedebugfs files
TARGETS["splice_preload"] = ("splice_preload.so", ["-shared", "-fPIC", "-ldl"])


def cache_base() -> Path:
    """Where fakedebugfs keeps what it builds or parses once: the C helpers
    and the parsed kernel profiles (``$FAKEDEBUGFS_BUILD`` or
    ``~/.cache/fakedebugfs``); not made here."""
    return Path(os.environ.get("FAKEDEBUGFS_BUILD") or Path.home() / ".cache" / "fakedebugfs")


def cache_dir() -> Path:
    d = cache_base()
    d.mkdir(parents=True, exist_ok=True)
    return d


def build(name: str, quiet: bool = True) -> Path:
    out_name, flags = TARGETS[name]
    src = HERE / f"{name}.c"
    out = cache_dir() / out_name
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        tmp = out.with_suffix(out.suffix + ".tmp")
        subprocess.run(["gcc", "-O2", "-Wall", "-o", str(tmp), str(src), *flags],
                       check=True, capture_output=quiet)
        tmp.replace(out)
    return out


def build_all(quiet: bool = True) -> list[Path]:
    return [build(name, quiet) for name in TARGETS]
