"""The simulated kernel (``fakedebugfs/engine``) is sans-I/O: no module of
it imports a way to run processes, talk over sockets or serve FUSE.  What
reaches the host (mounting a tracefs for ``capture-profile``, the server's
trio loop, the FUSE adapter) lives in the layers above
(``fakedebugfs/sources/hostprofile.py``, ``server/``, ``fs/``).

Every ``import`` of every engine module is read with :mod:`ast`, those
inside functions too (a lazy import would hide one)."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "fakedebugfs" / "engine"
# host I/O an engine module must not reach for
FORBIDDEN = {"subprocess", "socket", "trio", "pyfuse3", "asyncio", "multiprocessing", "select",
             "selectors", "signal", "shutil", "tempfile"}


def host_imports(source: str) -> set[str]:
    """The FORBIDDEN top-level modules *source* imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(n.split(".")[0] for n in names if n.split(".")[0] in FORBIDDEN)
    return found


def test_engine_modules_import_no_host_io():
    offenders = {str(p.relative_to(ENGINE)): sorted(host_imports(p.read_text()))
                 for p in sorted(ENGINE.rglob("*.py"))}
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}, offenders


def test_the_checker_sees_a_lazy_import():
    """A subprocess imported inside a function is found (so the test above can fail)."""
    assert host_imports("def f():\n    import subprocess\n    return subprocess") == \
        {"subprocess"}
    assert host_imports("from trio import sleep\nimport os, json\n") == {"trio"}
    assert host_imports("import os\nfrom . import subprocess\n") == set()
