"""ktrace's default event catalogue: the ``DO_TRACE`` sites of the simulated
kernel.

The kmemtrace markers of the July 2008 kmemtrace RFC (``kmemtrace_alloc``/``kmemtrace_free``
with their original format strings) sit on the kmem tracepoints, with the
``type_id`` of that patch's ``enum kmemtrace_type_id`` (0 kmalloc, 1 cache,
2 pages).  Syscall entry/exit, sched_switch and process fork/exit/exec are the
set the RFC's author benchmarked; ``process_exec`` has a ``%s`` argument.
"""

from __future__ import annotations

import shlex

from fakedebugfs.engine.ktrace.tracer import KtraceSite
from fakedebugfs.engine.ktrace.format import parse_format

KMEMTRACE_ALLOC_FORMAT = ("type_id %d call_site %lu ptr %lu "
                          "bytes_req %lu bytes_alloc %lu gfp_flags %lu node %d")
KMEMTRACE_FREE_FORMAT = "type_id %d call_site %lu ptr %lu"

KMEMTRACE_TYPE_KMALLOC, KMEMTRACE_TYPE_CACHE, KMEMTRACE_TYPE_PAGES = 0, 1, 2


def _alloc(type_id):
    return lambda v: (type_id, v[0], v[1], v[2], v[3], v[4], v[5])


def _page_alloc(v):
    pfn, order, gfp, _migratetype, call_site, ptr = v
    size = 4096 << order
    return (KMEMTRACE_TYPE_PAGES, call_site, ptr, size, size, gfp, -1)


DEFAULT_SITES = (
    KtraceSite("kmemtrace_alloc", KMEMTRACE_ALLOC_FORMAT, "kmem:kmalloc",
               _alloc(KMEMTRACE_TYPE_KMALLOC), columnar=True),
    KtraceSite("kmemtrace_alloc", KMEMTRACE_ALLOC_FORMAT, "kmem:kmem_cache_alloc",
               _alloc(KMEMTRACE_TYPE_CACHE), columnar=True),
    KtraceSite("kmemtrace_alloc", KMEMTRACE_ALLOC_FORMAT, "kmem:mm_page_alloc", _page_alloc,
               columnar=True),
    KtraceSite("kmemtrace_free", KMEMTRACE_FREE_FORMAT, "kmem:kfree",
               lambda v: (KMEMTRACE_TYPE_KMALLOC, v[0], v[1]), columnar=True),
    KtraceSite("kmemtrace_free", KMEMTRACE_FREE_FORMAT, "kmem:kmem_cache_free",
               lambda v: (KMEMTRACE_TYPE_CACHE, v[0], v[1]), columnar=True),
    KtraceSite("kmemtrace_free", KMEMTRACE_FREE_FORMAT, "kmem:mm_page_free",
               lambda v: (KMEMTRACE_TYPE_PAGES, v[2], v[3]), columnar=True),
    KtraceSite("syscall_entry", "nr %d arg0 %lx arg1 %lx arg2 %lx", "raw_syscalls:sys_enter",
               lambda v: (v[0], v[1][0], v[1][1], v[1][2])),
    KtraceSite("syscall_exit", "nr %d ret %ld", "raw_syscalls:sys_exit", lambda v: v,
               columnar=True),
    KtraceSite("sched_switch", "prev_pid %d next_pid %d prev_state %ld", "sched:sched_switch",
               lambda v: (v[1], v[5], v[3]), columnar=True),
    KtraceSite("process_fork", "parent_pid %d child_pid %d", "sched:sched_process_fork",
               lambda v: (v[1], v[3]), columnar=True),
    KtraceSite("process_exit", "pid %d", "sched:sched_process_exit", lambda v: (v[1],),
               columnar=True),
    KtraceSite("process_exec", "filename %s pid %d", "sched:sched_process_exec",
               lambda v: (v[0], v[1])),
)

USER_SYSTEM = "ktrace"  # tracepoints of user-declared events: ktrace.<module>:<name>


def parse_event_file(text: str) -> list[tuple[str, str]]:
    """``(name, format)`` pairs from an events file.

    One event a line: a C identifier, then its format string (quoted or
    not); blank lines and ``#`` comments are skipped.  Raises ValueError
    with the line number for a malformed line.
    """
    events = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        if not name.isidentifier() or not rest:
            raise ValueError(f"line {lineno}: expected 'NAME FORMAT', got {line!r}")
        if rest[0] in "'\"":
            try:
                parts = shlex.split(rest)
            except ValueError as err:
                raise ValueError(f"line {lineno}: {err}") from None
            if len(parts) != 1:
                raise ValueError(f"line {lineno}: text after the quoted format")
            rest = parts[0]
        if not parse_format(rest):
            raise ValueError(f"line {lineno}: format {rest!r} has no argument")
        events.append((name, rest))
    return events


NAME_MAX = 255  # a name is a file of ktrace/events/
FORMAT_MAX = 4096


def check_module(module, events) -> list[tuple[str, str]]:
    """A module's ``[(name, format)]`` before anything is loaded: the module
    a name of letters, digits, ``_`` and ``-``; each event a C identifier (it
    names the event's file in ``ktrace/events/``, as the module's
    ``DEFINE_KTRACE`` names it) and a format string.  ValueError (one line,
    nothing loaded) otherwise."""
    if not isinstance(module, str) or not module.replace("-", "_").isidentifier() \
            or len(module) > NAME_MAX:
        raise ValueError(f"bad module name {str(module)[:80]!r} (letters, digits, _ and -)")
    if not isinstance(events, (list, tuple)):
        raise ValueError("events must be a list of [name, format] pairs")
    out = []
    for item in events:
        if not isinstance(item, (list, tuple)) or len(item) != 2 \
                or not all(isinstance(x, str) for x in item):
            raise ValueError(f"an event is a [name, format] pair of strings, "
                             f"got {str(item)[:80]}")
        name, fmt = item
        if not name.isidentifier() or not name.isascii() or len(name) > NAME_MAX:
            raise ValueError(f"bad event name {name[:80]!r}: a C identifier (it names "
                             f"a file of ktrace/events/)")
        if len(fmt) > FORMAT_MAX or "\0" in fmt:
            raise ValueError(f"event {name}: a format is at most {FORMAT_MAX} "
                             f"characters, without NUL")
        out.append((name, fmt))
    return out


def user_site(engine, module: str, name: str, fmt: str) -> KtraceSite:
    """Define tracepoint ``ktrace.<module>:<name>`` for a user event and its
    site: each module's ``DO_TRACE`` is a call site of its own, so two modules
    declaring one event share its entry but each fires only its own."""
    nargs = len(parse_format(fmt))
    tp = engine.define(f"{USER_SYSTEM}.{module}", name, tuple(f"arg{i}" for i in range(nargs)),
                       fmt)
    return KtraceSite(name, fmt, tp.key)
