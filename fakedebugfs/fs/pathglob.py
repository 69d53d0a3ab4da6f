"""The files of a mount's tree a path glob names, as a file fault matches
them (:mod:`fakedebugfs.instrument.faults`: :func:`fnmatch.fnmatchcase` on
the path relative to the root, ``*`` matching ``/`` too), and, when it names
none, the paths it could have meant.

A lazy directory (eventfs: ``events/<system>/<event>/``) is made only on the
way the glob's literal start spells out (``tracing/events/kmem/kmalloc/``
for ``tracing/events/kmem/kmalloc/enable``), as a lookup of that path would
make it; past the first wildcard, only the entries made so far are looked
at, and a lazy directory not made yet may hold a match: the answer is then
"maybe", never "none".
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from typing import Optional

from fakedebugfs.fs.tree import Dir

_WILD = re.compile(r"[*?\[]")


def literal_start(pattern: str) -> str:
    """What every path the glob matches starts with."""
    m = _WILD.search(pattern)
    return pattern if m is None else pattern[:m.start()]


def _leading(root: Dir, start: str) -> tuple[Dir, str]:
    """The deepest directory whose path (with its ``/``) *start* begins
    with, made on the way, and that path ("" for the root)."""
    d, path = root, ""
    while "/" in start[len(path):]:
        name = start[len(path):].split("/", 1)[0]
        sub = d.get(name) if name else None
        if not isinstance(sub, Dir):
            break
        d, path = sub, path + name + "/"
    return d, path


def glob_files(root: Dir, pattern: str) -> tuple[list[str], bool]:
    """The files (paths relative to *root*) *pattern* matches, sorted, and
    whether that list is complete (False: a lazy directory not made yet
    may hold more)."""
    start = literal_start(pattern)
    match = re.compile(fnmatch.translate(pattern)).match
    d, path = _leading(root, start)
    rest = start[len(path):]
    if rest and not _WILD.search(pattern):  # one exact path: one lookup
        node = d.get(rest)
        return ([start] if node is not None and not isinstance(node, Dir) else []), True
    found, complete = [], True
    todo = [(d, path, True)]
    while todo:
        d, path, make = todo.pop()
        if not make and not d.made:
            complete = False
        for name, node in list(d.entries(make).items()):
            sub = path + name
            if not isinstance(node, Dir):
                if match(sub):
                    found.append(sub)
            elif (sub + "/").startswith(start) or start.startswith(sub + "/"):
                todo.append((node, sub + "/", False))
    return sorted(found), complete


def close_paths(root: Dir, pattern: str, n: int = 3) -> list[str]:
    """Files whose paths are close to *pattern* (:mod:`difflib`), among
    those made below the deepest directory its literal start names (the
    mount's root when its first name is wrong)."""
    d, path = _leading(root, literal_start(pattern))
    while True:
        paths = [node.path().lstrip("/") for node in d.walk(make=False)
                 if not isinstance(node, Dir)]
        close = difflib.get_close_matches(pattern, paths, n=n, cutoff=0.6)
        if close or d.parent is None:
            return close
        d = d.parent


def unmatched(root: Dir, pattern: str) -> Optional[str]:
    """Why *pattern* cannot name a file of the tree (it matches none, and
    no directory that could hold one is still to be made), with the close
    paths; None when it matches one (or may)."""
    found, complete = glob_files(root, pattern)
    if found or not complete:
        return None
    folder = pattern.rstrip("/") + "/"
    if _leading(root, folder)[1] == folder:
        return f"'path' {pattern!r} is a directory: a file fault acts on files " \
               f"(e.g. {folder}*)"
    close = close_paths(root, pattern)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return f"'path' {pattern!r} matches no file of the mount{hint}"
