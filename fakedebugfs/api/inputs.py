"""Bounded reads of the files the command line takes (``insmod``'s events
file, a scenario): read up to a limit, never to the end of whatever the
path gives (``/dev/zero``, a pipe whose writer never stops), and decoded
as UTF-8, each problem one line naming the file."""

from __future__ import annotations

import os


class InputError(ValueError):
    """A file the CLI was given cannot be taken; one line, naming it.
    *line*: the line at fault, when there is one; *unreadable*: it could
    not be opened or read at all (the others are bad input)."""

    def __init__(self, message: str, line: int | None = None, unreadable: bool = False):
        super().__init__(message)
        self.line = line
        self.unreadable = unreadable


def read_text(path, limit: int, what: str) -> str:
    """The text of *path* (at most *limit* bytes: InputError past it, with
    only *limit* + 1 bytes read); *what* names the kind of file in the
    message (``an events file``)."""
    name = os.fspath(path)
    try:
        with open(path, "rb") as fp:
            data = fp.read(limit + 1)
    except OSError as err:
        raise InputError(f"{name}: {err.strerror}", unreadable=True) from None
    if len(data) > limit:
        raise InputError(f"{name}: longer than {limit} bytes (the limit of {what})")
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InputError(f"{name}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x})",
                         line) from None


__all__ = ["InputError", "read_text"]
