"""Dump files of a tracing tree as text, the same way on any side: the
fake (through a mount or under ``fakedebugfs run``), this host's tracefs,
or the oracle guest (run there with the host's own python).

    python treedump.py ROOT PATTERN...

prints, for each file matched by the glob patterns (relative to ROOT, in
name order), ``### <path> <mode>`` then its content (read whole, or
``!errno <name>`` when the read fails); directories matched print their
line with no content.  ``ls:<pattern>`` prints the names and modes of the
directory's entries instead.
"""

from __future__ import annotations

import errno
import glob
import os
import stat
import sys


def dump(root: str, patterns) -> str:
    out = []
    for pattern in patterns:
        listing = pattern.startswith("ls:")
        pattern = pattern[3:] if listing else pattern
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            rel = os.path.relpath(path, root)
            if listing:
                for name in sorted(os.listdir(path)):
                    st = os.lstat(os.path.join(path, name))
                    kind = "d" if stat.S_ISDIR(st.st_mode) else "f"
                    out.append(f"{stat.S_IMODE(st.st_mode):04o} {kind} {rel}/{name}\n")
                continue
            st = os.lstat(path)
            out.append(f"### {rel} {stat.S_IMODE(st.st_mode):04o}\n")
            if stat.S_ISDIR(st.st_mode):
                continue
            try:
                with open(path, "rb") as fp:
                    out.append(fp.read().decode(errors="backslashreplace"))
            except OSError as e:
                out.append(f"!errno {errno.errorcode.get(e.errno, e.errno)}\n")
    return "".join(out)


if __name__ == "__main__":
    sys.stdout.write(dump(sys.argv[1], sys.argv[2:]))
