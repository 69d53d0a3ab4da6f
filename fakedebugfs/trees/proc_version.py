"""``/proc/version`` of the profile's kernel, served by the fake itself.

The profile's ``proc_version`` (recorded in the oracle guest:
:mod:`fakedebugfs.oracle.kernel_data`) is what that kernel's
``/proc/version`` prints (``linux_proc_banner`` with its ``utsname``);
``fakedebugfs run`` binds this file over the command's ``/proc/version``,
so a tool comparing the kernel's banner with it (ftracetest's
``kprobe_args_symbol.tc`` reads ``@linux_proc_banner:string``) sees the
profile's kernel, not the host's.  A hidden entry of the mount's root, as
``/proc/kallsyms``'s (:mod:`fakedebugfs.trees.kallsyms`); absent for a
profile without the file.
"""

from __future__ import annotations

from fakedebugfs.fs.fops import SeqFile
from fakedebugfs.fs.tree import File

NAME = ".proc_version"


def create_file(kernel):
    """The file, mode 0444 as ``proc_create_single("version", 0, ...)``
    shows it; None when the profile has no ``proc_version``."""
    prof = getattr(kernel.ftrace, "profile", None) if hasattr(kernel, "ftrace") else None
    text = prof.proc_version() if prof else None
    if not text:
        return None
    node = File(NAME, 0o444, SeqFile(lambda: text), static=True)
    node.hidden = True
    return node


__all__ = ["NAME", "create_file"]
