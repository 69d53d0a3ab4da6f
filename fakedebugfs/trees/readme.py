"""``tracing/README`` (``readme_msg`` of kernel/trace/trace.c): the text of
the kernel the fake is profiled on, keeping only what the fake provides.

Tools and ftracetest look for feature lines in README (``# requires:
"...":README``), so a line must be there exactly when the feature works:
entries for files the tree does not have (function tracing...) are
dropped, as are ``set_event``'s ``:mod:`` (no modules load here) and
the event probe (``e``) lines, which 6.18's README prints whether or not
the kernel has them (docs/dynamic-events.md lists these differences).
The paragraph on the ``gid=`` mount option stays: ``mount -o
remount,gid=N`` reaches the fake through mount.fuse3
(:mod:`fakedebugfs.server.mounthelper`; ``fakedebugfs run`` makes the
helper reachable in its namespace, :mod:`fakedebugfs.sandbox.helper`), and
inside ``run`` so does ``mount -t tracefs -o remount,gid=N`` (its preload
library hands that mount(2) call to the same helper).
"""

from __future__ import annotations

import re

FALLBACK = "tracing mini-HOWTO:\n\n# echo 0 > tracing_on : quick way to disable tracing\n" \
           "# echo 1 > tracing_on : quick way to re-enable tracing\n"
ENTRY = re.compile(r"^  (\S+)")  # "  name<TAB>- what it is"
DROPPED_LINES = (
    "Can enable module events via: :mod:",
    # event probes: this kernel's README documents them, its build lacks
    # them (CONFIG_EPROBE_EVENTS off): an 'e' command is EINVAL there as here
    "e[:[<group>/][<event>]] <attached-group>.<attached-event>",
    "efield: For event probes ('e' types)", "of the <attached-group>/<attached-event>.",
)


def readme_text(kernel_readme, present) -> str:
    """*kernel_readme* without the entries of files not in *present*
    (names of the top-level directory) and the lines of features the fake
    lacks."""
    if not kernel_readme:
        return FALLBACK
    lines = kernel_readme.split("\n")
    out, keep = [], True
    # a kernel with kprobe events (6.12) has event probes: their lines stay
    dropped = DROPPED_LINES[:1] if "kprobe_events" in present else DROPPED_LINES
    for line in lines:
        m = ENTRY.match(line)
        if m:
            top = m.group(1).split("/", 1)[0]
            keep = top in present
        elif not line.startswith(("\t", "   ")):
            keep = True  # a blank line or a heading ends an entry
        if keep and not any(s in line for s in dropped):
            out.append(line)
    return "\n".join(out)


__all__ = ["readme_text"]
