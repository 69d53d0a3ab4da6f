"""``python -m fakedebugfs.oracle.ftrace_events [--profile DIR] [--guest NAME]``:
record a profile's ``ftrace_events`` file, the kernel's list of event types
(trace_events.c's ``ftrace_events``) in its own order, in the profile's
oracle guest.

A new instance's ``mkdir`` walks that list (``__trace_add_event_dirs``)
and calls ``eventfs_create_dir`` for each event's system the first time,
then for the event; the fake replays those calls
(:mod:`fakedebugfs.engine.ftrace.instance_calls`), so it needs the order,
which no tracefs file shows: ``available_events`` lists the boot's events
in the opposite order (the top level's ``tr->events`` was made by adding
each of the list's events at its head), but the events of modules loaded
later in the same order, and nothing says which are which.  The guest
shows it with a kprobe on ``eventfs_create_dir`` fetching the name and its
parent's name (``parent->name``, BTF), enabled in a scratch instance while
a second instance is made; the recorder's own probe (the list's newest)
is left out.  One ``system:event`` a line, the list's head first.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from fakedebugfs.engine.ftrace.profile import DEFAULT_PROFILE

NAME = "ftrace_events"
PROBE = "ftrace_events_rec"
SCRIPT = """\
set -e
cd /sys/kernel/tracing
mkdir instances/{probe}_buf
echo 'p:{probe} eventfs_create_dir n=name:string p=parent->name:string' >> dynamic_events
echo 1 > instances/{probe}_buf/events/kprobes/{probe}/enable
mkdir instances/{probe}_new
echo 0 > instances/{probe}_buf/events/kprobes/{probe}/enable
rmdir instances/{probe}_new
grep -a ': {probe}: ' instances/{probe}_buf/trace
rmdir instances/{probe}_buf
echo '-:kprobes/{probe}' >> dynamic_events
"""
_HIT = re.compile(r' n="([^"]*)" p="([^"]*)"$')


def parse(text: str) -> list[str]:
    """``system:event`` keys of the hits' text, in call order: a call whose
    parent is ``events`` makes a system's directory (skipped), the others
    an event's; the recorder's own probe is dropped."""
    out = []
    for line in text.splitlines():
        m = _HIT.search(line)
        if m is None:
            raise ValueError(f"not a hit of the recorder: {line!r}")
        name, parent = m[1], m[2]
        if parent != "events" and f"{parent}:{name}" != f"kprobes:{PROBE}":
            out.append(f"{parent}:{name}")
    return out


def record(profile: Path, guest_name: str = NAME) -> list[str]:
    from fakedebugfs.oracle.guest import Guest

    guest = Guest(profile, name=guest_name)
    guest.start()
    res = guest.run(SCRIPT.format(probe=PROBE), timeout=600, check=True)
    return parse(res.text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fakedebugfs.oracle.ftrace_events",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    p.add_argument("--guest", default=NAME, help="the guest's name (its own state)")
    p.add_argument("--hits", type=Path, help="parse this text of the probe's hits instead "
                   "of recording one")
    p.add_argument("--out", type=Path, help=f"where to write (default: the profile's {NAME})")
    args = p.parse_args(argv)
    keys = parse(args.hits.read_text()) if args.hits else record(args.profile, args.guest)
    out = args.out or args.profile / NAME
    out.write_text("".join(k + "\n" for k in keys))
    print(f"{out}: {len(keys)} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
