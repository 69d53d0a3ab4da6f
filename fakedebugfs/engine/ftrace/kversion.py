"""Behaviours that follow the kernel's version rather than its files.

A profile's captured files say what a kernel has (its events, tracers,
options, README); they do not say how its parsers answer the same bytes
when a fix changed that between releases.  Those differences are listed
here, once, as data: each behaviour with the first release that has it in
each stable branch it reached.  The engine asks ``has(profile, NAME)``
with the profile whose ``uname`` gives the release; without a profile
(the fake's built-in 6.18) every behaviour listed is there.

Each entry names what was checked, on which kernel: the fuzz of
tests/tracefs_fuzz.py records both reference kernels (this host's 6.18 and
the oracle guest's Debian 6.12), and the behaviour's tests write the same
bytes to both.
"""

from __future__ import annotations

import re

# behaviour -> the first release with it in each stable branch, (major,
# minor, patch).  A release of a branch listed has it from that patch on;
# of a branch newer than all listed, has it; of an older one, has not.
VERSION_GATED = {
    # predicate_parse: "Only the inner loop can complete a non-empty
    # expression" -- a filter that ends after '&&', '||' or '!' (or after
    # a closing parenthesis followed by one) is EINVAL with "Meaningless
    # filter expression" under the end of the text.  Debian's 6.12.113
    # (the oracle guest) accepts 'common_pid == 1 &&' as a complete
    # filter; 6.12.118's source and this host's 6.18.44 refuse it.
    "filter_rejects_incomplete": ((6, 12, 118), (6, 18, 0)),
    # tracing_mark_raw_write sizes the raw_data event as the entry and the
    # bytes after the id: a write of 4,064 bytes fits a 4 KiB sub-buffer.
    # 6.12 (the guest's 6.12.113, and 6.12.118's source) adds the whole
    # count to sizeof(struct raw_data_entry), the id counted twice: 4,061
    # bytes are EINVAL there.  First seen here in 6.18.
    "raw_marker_id_counted_once": ((6, 18, 0),),
    # tracing_mark_write / tracing_mark_raw_write take the entry's context
    # (tracing_gen_ctx) with preemption disabled, while the write is copied
    # into a per-CPU buffer: trace_marker's and trace_marker_raw's entries
    # carry common_preempt_count 1 (``...1.`` in trace).  6.12 takes it
    # preemptible: 0 (the guest's 6.12.113 shows ``.....``); this host's
    # 6.18.44 shows 1.  6.13 to 6.17 not checked: first taken as 6.18.
    "marker_preempt_disabled": ((6, 18, 0),),
    # trace_probe.h's error texts as 6.18 has them: "Invalid $-valiable
    # specified" (the typo), "Forgot '>''?", no "Event too big" (6.12's
    # guest answers a probe event over MAX_PROBE_EVENT_SIZE with it), and
    # too many arguments logged ("Too many arguments are specified",
    # E2BIG) where 6.12's guest answers a bare E2BIG.  6.12.113 (the
    # guest) has 6.12's texts; 6.13 is the first release taken to have
    # 6.18's (the fake's built-in set, this host's 6.18.44 build has no
    # kprobe_events to check them on).
    "probe_errors_logged_6_13": ((6, 13, 0),),
    # is_good_system_name: a probe group is a C identifier that may have
    # '.' after its first byte; 6.12's __is_good_name(name, true) takes '-'
    # anywhere instead (the guest's 6.12.113 takes "p:a-b/e vfs_read").
    "probe_group_dots": ((6, 13, 0),),
}


def kernel_version(release: str) -> tuple[int, int, int]:
    """``(major, minor, patch)`` of a ``uname -r`` text; (0, 0, 0) if none."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release or "")
    return (int(m[1]), int(m[2]), int(m[3] or 0)) if m else (0, 0, 0)


def has(profile, name: str) -> bool:
    """Whether the kernel of *profile* (a Profile, a ``uname -r`` text, or
    None for the fake's built-in 6.18) has the behaviour *name*."""
    release = profile if isinstance(profile, str) or profile is None else profile.release
    if not release:
        return True
    firsts = VERSION_GATED[name]
    version = kernel_version(release)
    for first in firsts:
        if first[:2] == version[:2]:
            return version >= first
    return version[:2] > max(firsts)[:2]


__all__ = ["VERSION_GATED", "has", "kernel_version"]
