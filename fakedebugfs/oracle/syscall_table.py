"""The guest kernel's syscall names by number, as its hist triggers print them.

The kernel names a syscall number with ``syscall_nr_to_meta()``
(kernel/trace/trace_syscalls.c): at boot it walks ``sys_call_table`` and
matches each entry's symbol with the ``SYSCALL_DEFINE`` metadata, so a
number whose handler has no syscall event (``sys_ni_syscall``, past
``NR_syscalls``) has no name and a hist key ``.syscall`` prints
``unknown_syscall``.  Neither the events' formats nor ``kallsyms``' text
symbols say which number each event is, so the profile keeps the
kernel's own answer: run in the oracle guest (as root), this module sets a
``count.syscall`` hist trigger on ``syscalls/sys_enter_write`` for its own
task, writes 0 to ``LIMIT - 1`` bytes to ``/dev/null`` (each count once),
reads the table the kernel prints and writes ``<nr> <name>`` for each
number the kernel names (the profile's ``syscalls`` file)::

    python -m fakedebugfs.oracle.syscall_table /sys/kernel/tracing OUT
"""

from __future__ import annotations

import os
import re
import sys

LIMIT = 1024  # past x86-64's NR_syscalls and its x32 numbers (512 ...)
EVENT = "events/syscalls/sys_enter_write"
# ``{ count: sys_openat                    [257] } hitcount:          1``
_ENTRY = re.compile(r"^\{ count: (\S+) +\[ *(\d+)\] \}", re.M)


def read_table(tracefs: str) -> dict[int, str]:
    """Number -> name of every number below :data:`LIMIT` the kernel names."""
    ev = os.path.join(tracefs, EVENT)
    trigger = f"hist:keys=count.syscall:size=2048 if common_pid == {os.getpid()}"
    with open(os.path.join(ev, "trigger"), "w") as fp:
        fp.write(trigger)
    try:
        fd = os.open("/dev/null", os.O_WRONLY)
        try:
            buf = bytes(LIMIT)
            for n in range(LIMIT):
                os.write(fd, buf[:n])
        finally:
            os.close(fd)
        with open(os.path.join(ev, "hist")) as fp:
            text = fp.read()
    finally:
        with open(os.path.join(ev, "trigger"), "w") as fp:
            fp.write("!" + trigger)
    table = {int(nr): name for name, nr in _ENTRY.findall(text) if name != "unknown_syscall"}
    if not table:
        raise RuntimeError(f"{ev}/hist named no syscall:\n{text[:400]}")
    return table


def main(argv=None) -> int:
    tracefs, out = (argv if argv is not None else sys.argv[1:])
    table = read_table(tracefs)
    with open(out, "w") as fp:
        fp.writelines(f"{nr} {name}\n" for nr, name in sorted(table.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
