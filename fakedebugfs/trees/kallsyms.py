"""``/proc/kallsyms`` of the simulated kernel, served by the fake itself.

The kernel's symbol table changes while it runs (a module loads, and for
the fake: a replay brings the recording's symbols, ``insmod`` its
module's), and ``/proc/kallsyms`` shows it as it is at each open
(``kallsyms_open``: a seq_file).  ``fakedebugfs run`` binds this file over
the command's ``/proc/kallsyms``, so a tool opening it after a replay or
an ``insmod`` reads the symbols as they are then.

Debugfs has no such file: it is a hidden entry of the mount's root, found
by name (lookup) but never listed (readdir), so ``ls`` of the root stays
as the kernel's.
"""

from __future__ import annotations

from fakedebugfs.engine.core.kallsyms import PROC_FILE
from fakedebugfs.fs.fops import SeqFile
from fakedebugfs.fs.tree import File

NAME = PROC_FILE


def create_file(kernel) -> File:
    """The file, mode 0444 as ``proc_create("kallsyms", 0444, ...)``."""
    node = File(NAME, 0o444, SeqFile(lambda: kernel.engine.kallsyms.proc_kallsyms()))
    node.hidden = True
    return node


__all__ = ["NAME", "create_file"]
