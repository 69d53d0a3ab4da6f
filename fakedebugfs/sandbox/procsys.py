"""The fake's sysctls inside ``run``: ``kernel.stack_tracer_enabled``.

A kernel built with ``CONFIG_STACK_TRACER`` has the sysctl
``/proc/sys/kernel/stack_tracer_enabled`` (kernel/trace/trace_stack.c's
``stack_trace_sysctl``): writing 1 registers the stack tracer's ops,
which ``trace-cmd stack --start`` and ftracetest's stack-tracer rows do.
A fake whose profile has the stack tracer serves that switch as a hidden
file of its ``tracing/`` (``trees/tracing_functions.py``,
``STACK_SYSCTL``); here it is bound over the sysctl in the command's
mount namespace, after the namespace's own /proc is mounted (a nested
run mounts a second one: each binds it again).

Where the host's kernel lacks the sysctl (this machine's 6.18 refuses
function tracing) there is no file to bind over, and procfs makes none:
``/proc/sys/kernel`` is then covered by a tmpfs holding each of its
entries, bound from the original directory, and an empty file for the
switch, bound from the fake.  The sysctls stay the kernel's (the same
inodes, read and written through the binds); ``confine.read_only_tree``
makes them read-only to a sealed command afterwards, the fake's switch
excepted (a mount of the fake).
"""

from __future__ import annotations

import logging
import os

from fakedebugfs.native import libc

log = logging.getLogger(__name__)

MS_BIND = 0x1000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
# the hidden file of tracing/ trees/tracing_functions.py serves (its
# STACK_SYSCTL; not imported: the trees cost run's init 0.1 s to import)
STACK_SYSCTL = ".stack_tracer_enabled"
PROC_SYS_KERNEL = "/proc/sys/kernel"
STACK_TRACER_ENABLED = PROC_SYS_KERNEL + "/stack_tracer_enabled"


def bind_stack_tracer(mnt: str) -> bool:
    """The fake's ``kernel.stack_tracer_enabled`` over the sysctl, when
    the fake has it; whether it is bound.  Where the directory cannot be
    covered (a container's masked /proc), the command goes without it."""
    source = os.path.join(mnt, "tracing", STACK_SYSCTL)
    if not os.path.exists(source):  # the profile's kernel has no stack tracer
        return False
    try:
        if not os.path.exists(STACK_TRACER_ENABLED):
            _cover_with_entry(PROC_SYS_KERNEL, os.path.basename(STACK_TRACER_ENABLED))
        libc.mount(source, STACK_TRACER_ENABLED, None, MS_BIND)
    except OSError as err:
        log.debug("kernel.stack_tracer_enabled not bound: %s", err)
        return False
    return True


def _cover_with_entry(folder: str, name: str) -> None:
    """*folder* covered by a tmpfs holding its entries, each the original
    bound over an empty file or directory of the same name, and an empty
    file *name* (to bind something over)."""
    fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in os.scandir(folder)]
        libc.mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for entry, is_dir in entries:
            path = os.path.join(folder, entry)
            if is_dir:
                os.mkdir(path)
            else:
                open(path, "w").close()
            libc.mount(f"/proc/self/fd/{fd}/{entry}", path, None, MS_BIND)
        open(os.path.join(folder, name), "w").close()
        os.chmod(folder, 0o555)  # as procfs shows it
    finally:
        os.close(fd)


__all__ = ["bind_stack_tracer"]
