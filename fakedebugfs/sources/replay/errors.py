"""The one error a recording reader raises: where the file breaks, in one line."""

from __future__ import annotations


class ReplayFormatError(Exception):
    """A recording (trace.dat or raw capture) is corrupt, truncated or of a
    kind this reader does not know.

    ``str()`` is one line naming the file, the section and the file offset::

        x.dat: truncated in flyrecord data of CPU 1 at offset 0x12345: ...

    Readers validate a whole recording when it is opened, so this is raised
    before any event is handed out.
    """

    def __init__(self, source: str, section: str, offset: int | None, message: str,
                 truncated: bool = False):
        self.source = source
        self.section = section
        self.offset = offset
        self.message = message
        self.truncated = truncated
        where = f" at offset 0x{offset:x}" if offset is not None else ""
        what = "truncated" if truncated else "corrupt"
        super().__init__(f"{source}: {what} in {section}{where}: {message}")
