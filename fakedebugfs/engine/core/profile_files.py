"""A profile's big symbol tables, stored xz-compressed.

A distro kernel's ``kallsyms`` (4.5 MB of text), the BTF of its vmlinux
(4.8 MB) and ``available_filter_functions_addrs`` (1.6 MB) are most of
a profile's size; ``xz`` makes them about a sixth of that.  A profile
directory holds each either as ``NAME`` or as ``NAME.xz``
(``capture-profile`` writes the ``.xz``; a user may unpack one to read
it, and the plain file is then the one read).  The readers ask for a
file here and get its bytes decompressed; they read it the first time
they need it, never at mount time.
"""

from __future__ import annotations

import lzma
from pathlib import Path
from typing import Optional, Union

# written as NAME.xz by capture-profile (the files above 1 MB of a distro kernel's profile)
COMPRESSED = ("kallsyms", "btf", "available_filter_functions_addrs", "text_insns")
SUFFIX = ".xz"


def profile_file(directory, name: str) -> Optional[Path]:
    """*name* of the profile *directory*: the plain file, else ``NAME.xz``;
    None when it has neither (or there is no directory)."""
    if directory is None:
        return None
    path = Path(directory) / name
    if path.is_file():
        return path
    packed = path.with_name(name + SUFFIX)
    return packed if packed.is_file() else None


def has_profile_file(directory, name: str) -> bool:
    return profile_file(directory, name) is not None


def read_profile_file(path: Path) -> bytes:
    """The content of a file :func:`profile_file` found (decompressed
    when it is a ``.xz``)."""
    data = Path(path).read_bytes()
    return lzma.decompress(data) if Path(path).name.endswith(SUFFIX) else data


def read_profile_text(directory, name: str) -> Optional[str]:
    """*name*'s text (``surrogateescape`` for stray bytes), or None."""
    path = profile_file(directory, name)
    if path is None:
        return None
    return read_profile_file(path).decode("utf-8", errors="surrogateescape")


def write_profile_file(directory, name: str, data: Union[str, bytes]) -> Path:
    """Save *name* into the profile being captured: ``NAME.xz`` for the
    :data:`COMPRESSED` ones, the plain file otherwise; a stale file of
    the other form is removed so that the directory has one."""
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogateescape")
    path = Path(directory) / name
    packed = path.with_name(name + SUFFIX)
    if name in COMPRESSED:
        packed.write_bytes(lzma.compress(data, preset=6))
        path.unlink(missing_ok=True)
        return packed
    path.write_bytes(data)
    packed.unlink(missing_ok=True)
    return path


__all__ = ["COMPRESSED", "SUFFIX", "profile_file", "has_profile_file", "read_profile_file",
           "read_profile_text", "write_profile_file"]
