"""Reading a trace.dat, whatever its version: a cursor over the file that
raises ReplayFormatError with the offset where a read failed, and the
decompressor of v7's compressed sections and of both versions' compressed
buffers (zlib, zstd)."""

from __future__ import annotations

import zlib

from construct import ConstructError, StreamError

from fakedebugfs.sources.replay.errors import ReplayFormatError


class Cursor:
    """Parses layouts from a stream, naming the section and offset of any break.

    *base* is the file offset of the stream's start; for a decompressed
    section *packed_at* is the file offset of the compressed block instead.
    """

    def __init__(self, source: str, section: str, stream, size: int, base: int = 0,
                 packed_at: int | None = None):
        self.source, self.section = source, section
        self.stream, self.size, self.base, self.packed_at = stream, size, base, packed_at

    @property
    def pos(self) -> int:
        return self.stream.tell()

    def left(self) -> int:
        return self.size - self.pos

    def seek(self, pos: int, what: str) -> None:
        if not 0 <= pos <= self.size:
            raise self.error(pos, f"{what} at 0x{pos:x} is past the end (0x{self.size:x})",
                             truncated=pos > self.size)
        self.stream.seek(pos)

    def error(self, pos: int, message: str, truncated: bool = False,
              section: str | None = None) -> ReplayFormatError:
        section = section or self.section
        if self.packed_at is not None:
            return ReplayFormatError(self.source, f"{section} (byte 0x{pos:x} of the section "
                                     f"compressed at 0x{self.packed_at:x})", None, message,
                                     truncated)
        return ReplayFormatError(self.source, section, self.base + pos, message, truncated)

    def parse(self, layout, what: str):
        """*layout* parsed at the current position."""
        start = self.pos
        try:
            return layout.parse_stream(self.stream)
        except StreamError:
            raise self.error(start, f"{what} runs past the end ({self.size - start} bytes "
                             "left)", truncated=True) from None
        except (ConstructError, UnicodeDecodeError) as err:
            raise self.error(start, f"bad {what}: {_one_line(err)}") from None

    def blob(self, size_layout, what: str) -> bytes:
        """A size-prefixed block (the size checked before anything is read)."""
        size = self.parse(size_layout, f"size of {what}")
        start = self.pos
        if size > self.left():
            raise self.error(start, f"{what} of {size} bytes runs past the end "
                             f"({self.left()} bytes left)", truncated=True)
        return self.stream.read(size)

    def take(self, size: int, what: str) -> bytes:
        start = self.pos
        if size > self.left():
            raise self.error(start, f"{what} of {size} bytes runs past the end "
                             f"({self.left()} bytes left)", truncated=True)
        return self.stream.read(size)

    def sub(self, section: str) -> "Cursor":
        return Cursor(self.source, section, self.stream, self.size, self.base, self.packed_at)


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class Decompressor:
    """The file's compression (v7.5 "INITIAL FORMAT": ``name\\0version\\0``)."""

    def __init__(self, name: str, version: str):
        self.name, self.version = name, version
        if name == "zstd":
            try:
                import zstandard
            except ImportError:  # pragma: no cover - a dependency in pyproject.toml
                raise RuntimeError("reading zstd trace.dat files needs the zstandard "
                                   "package") from None
            self._zstd = zstandard.ZstdDecompressor()
        elif name != "zlib":
            raise ValueError(f"compression {name!r} {version!r} is not supported "
                             "(none, zlib and zstd are)")

    def __call__(self, data: bytes, size: int) -> bytes:
        """*data* uncompressed; it must give exactly *size* bytes."""
        if self.name == "zstd":
            out = self._zstd.decompress(data, max_output_size=size)
        else:
            out = zlib.decompress(data)
        if len(out) != size:
            raise ValueError(f"uncompressed to {len(out)} bytes, the header says {size}")
        return out
