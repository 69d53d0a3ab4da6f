"""The package's architecture, checked from its source: imports go one way.

Every ``import`` and ``from ... import`` of a ``fakedebugfs`` module is read
with :mod:`ast` (those inside functions too, where a lazy import would hide
a circle), each module is placed in its layer by its folder, and:

* no module imports from a layer above its own (the engine imports nothing
  but itself, the errors and the native helpers; the FUSE layer never
  imports the server; the API is above the server ...);
* the module graph has no circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "fakedebugfs"

# bottom first; a module may import from its own layer and those below
LAYERS = [
    {"fakedebugfs.version", "fakedebugfs.errors", "fakedebugfs.native"},
    {"fakedebugfs.engine"},
    {"fakedebugfs.instrument"},
    {"fakedebugfs.sources"},
    {"fakedebugfs.fs"},
    {"fakedebugfs.trees"},
    {"fakedebugfs.control"},
    {"fakedebugfs.server"},
    {"fakedebugfs.api"},
    {"fakedebugfs.sandbox"},
    # the package itself is a facade over the API (``from fakedebugfs import Fake``)
    {"fakedebugfs", "fakedebugfs.replay", "fakedebugfs.clients", "fakedebugfs.cli", "fakedebugfs.__main__",
     "fakedebugfs.oracle",
     "fakedebugfs.pytest_plugin"},
]


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {module_name(p): p for p in PKG.rglob("*.py")}
    found.update({module_name(p): p for p in PKG.rglob("*.pyx")})
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The fakedebugfs modules *name* imports (the most specific module named)."""
    if path.suffix == ".pyx":  # Cython: only its plain ``from fakedebugfs... cimport`` lines
        out = set()
        for line in path.read_text().splitlines():
            words = line.split()
            if len(words) > 1 and words[0] == "from" and words[1].startswith("fakedebugfs"):
                out.add(words[1])
        return out & known
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    # a module imported through its package counts as the module, not the package
    return {m for m in out if not any(o.startswith(m + ".") for o in out)}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def layer(name: str) -> int:
    best, level = -1, None
    for i, members in enumerate(LAYERS):
        for m in members:
            if (name == m or name.startswith(m + ".")) and len(m) > best:
                best, level = len(m), i
    assert level is not None, f"{name}: in no layer (add its folder to LAYERS)"
    return level


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_module_is_in_a_layer():
    for name in modules():
        layer(name)


def test_imports_go_down_the_layers():
    upward = []
    for name, deps in graph().items():
        for dep in deps:
            if layer(dep) > layer(name):
                upward.append(f"{name} -> {dep}")
    assert upward == [], "imports from a higher layer:\n" + "\n".join(sorted(upward))


def test_engine_imports_only_itself_and_the_bottom():
    for name, deps in graph().items():
        if name.startswith("fakedebugfs.engine"):
            for dep in deps:
                assert layer(dep) <= layer("fakedebugfs.engine"), f"{name} imports {dep}"


def test_no_import_circle():
    assert cycles(graph()) == []


def test_the_checker_sees_a_circle_and_an_upward_import():
    """The checks above can fail: a made-up graph with both faults."""
    g = {"fakedebugfs.engine.a": {"fakedebugfs.engine.b"},
         "fakedebugfs.engine.b": {"fakedebugfs.engine.a", "fakedebugfs.server.server"}}
    assert cycles(g) == [["fakedebugfs.engine.a", "fakedebugfs.engine.b"]]
    assert layer("fakedebugfs.server.server") > layer("fakedebugfs.engine.b")


def test_tests_do_not_import_each_other():
    """Shared test helpers live in ``tests/support/``; a test file imports
    no other test file (``conftest`` is pytest's, and allowed)."""
    here = Path(__file__).resolve().parent
    found = []
    for path in sorted(here.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            mods = []
            if isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            found += [f"{path.name} imports {m}" for m in mods if m.split(".")[0].startswith("test_")]
    assert found == []


if __name__ == "__main__":  # python tests/test_layering.py: the circles, one a line
    found = cycles(graph())
    print(f"{len(found)} import circles")
    for comp in found:
        print("  " + " <-> ".join(comp))
