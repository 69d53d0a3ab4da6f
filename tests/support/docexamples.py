"""The code examples of README.md and docs/*.md: every fenced block whose
language is ``python`` or ``sh``, with the HTML comment right before its
fence that says how it runs, if any:

``<!-- example: skip (REASON) -->``
    not run here (REASON says why: it installs packages, needs Docker, ...);
``<!-- example: after: SHELL -->``
    SHELL runs first, in the same shell for a ``sh`` block and in the same
    folder before a ``python`` one (what the text around the block says was
    done before it: a mount, a recording copied in).

A comment that starts ``<!-- example:`` anywhere else, or says something
else, is an error, so a mistyped marker cannot silently change what runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent.parent
LANGUAGES = ("python", "sh")
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!-- example: (?:skip \((?P<reason>[^)]+)\)|after: (?P<after>.+?)) -->$")


@dataclass(frozen=True)
class Example:
    path: str            # relative to the checkout
    line: int            # the opening fence's line, 1-based
    lang: str
    code: str
    skip: Optional[str] = None   # the reason it is not run
    after: str = ""              # shell run before it

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


class MarkerError(ValueError):
    pass


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def examples(files: Optional[list[Path]] = None) -> list[Example]:
    """Every ``python``/``sh`` block of *files* (default: README.md and
    docs/*.md), in order."""
    out = []
    for path in files or markdown_files():
        out.extend(_examples(path.relative_to(REPO).as_posix(), path.read_text()))
    return out


def _examples(name: str, text: str) -> list[Example]:
    lines = text.split("\n")
    found, i, marker = [], 0, None
    while i < len(lines):
        line = lines[i]
        if line.startswith("<!-- example:"):
            m = MARKER.match(line)
            if not m:
                raise MarkerError(f"{name}:{i + 1}: not an example marker: {line!r}")
            marker = (m, i)
            i += 1
            continue
        fence = FENCE.match(line)
        if not fence:
            if marker and line.strip():
                raise MarkerError(f"{name}:{marker[1] + 1}: an example marker must be "
                                  "right before a fence")
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not FENCE.match(lines[end]):
            end += 1
        if end == len(lines):
            raise MarkerError(f"{name}:{i + 1}: a fence that is never closed")
        lang = fence.group(1)
        if marker and lang not in LANGUAGES:
            raise MarkerError(f"{name}:{i + 1}: an example marker before a {lang or 'plain'} "
                              f"block (only {', '.join(LANGUAGES)} blocks are run)")
        if lang in LANGUAGES:
            m = marker[0] if marker else None
            found.append(Example(name, i + 1, lang, "\n".join(lines[i + 1:end]) + "\n",
                                 skip=m and m.group("reason"),
                                 after=(m and m.group("after")) or ""))
        marker = None
        i = end + 1
    if marker:
        raise MarkerError(f"{name}:{marker[1] + 1}: an example marker at the end of the file")
    return found
