"""The debugfs trees, one module each, read like the kernel's
``create_debugfs()``: a table of files with their modes and operations."""

from __future__ import annotations

from fakedebugfs.fs.tree import Dir
from fakedebugfs.trees import kallsyms, ktrace, proc_version


def build_root(kernel) -> Dir:
    """The mount's root: debugfs as a 2009 kernel with these tracers shows it."""
    root = Dir("", 0o755)
    root.add(ktrace.create_tree(kernel))
    for name in ("tracing", "kmemtrace"):
        module = _optional(name)
        if module is not None:
            root.add(module.create_tree(kernel))
    root.add(kallsyms.create_file(kernel))  # hidden: for `run`'s /proc/kallsyms
    version = proc_version.create_file(kernel)  # hidden: for `run`'s /proc/version
    if version is not None:
        root.add(version)
    return root


def _optional(name):
    """Trees still being built are served once their module exists."""
    import importlib

    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
        return None
