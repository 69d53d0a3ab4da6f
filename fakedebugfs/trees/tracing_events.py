"""``tracing/events/`` and the files over the event registry, as the
kernel's ``trace_events.c`` makes them: ``event_trace_add_tracer`` /
``event_create_dir`` (eventfs: a system's and an event's directory made
the first time it is looked into), ``event_add_file`` /
``trace_remove_event_call`` for events defined or removed while mounted,
and the writes of ``enable`` (``event_enable_write``,
``system_enable_write``), ``filter`` (``event_filter_write``),
``set_event`` (``ftrace_event_write``) and ``set_event_pid`` /
``set_event_notrace_pid`` (``ftrace_event_pid_write``); an event's
``trigger`` is ``trace_events_trigger.c``'s ``event_trigger_fops``.

:class:`EventsDir` is one of :class:`~fakedebugfs.trees.tracing.TracingTree`'s
bases: it uses the tree's ``ft`` (the trace array) and sets ``events_dir``.
"""

from __future__ import annotations

import errno
import os

from fakedebugfs.engine.core.layouts import PAGE_SIZE
from fakedebugfs.engine.ftrace import trigger_cmds
from fakedebugfs.engine.ftrace.control import EVENT_BUF_SIZE, bool_write, pid_write, trace_get_user
from fakedebugfs.fs.fops import FileOperations, OpenFile, SeqFile, ValueFile, fail, read_from_buffer
from fakedebugfs.fs.tree import Dir
from fakedebugfs.trees.tracing_hist import HistFile

RW, RO = 0o640, 0o440


def format_records(text: str) -> list[str]:
    """The records ``f_show`` (trace_events.c, walked by ``f_start`` /
    ``f_next``) prints for an event's ``format`` *text*: the header
    (``name:``, ``ID:``, ``format:`` lines) as one, one per field line, the
    ``\\n`` between the common and the event's fields, and
    ``\\nprint fmt: ...\\n`` as one; joined they are *text* again.  The
    ``seq_file`` reads stop at these boundaries (a long print fmt comes
    alone in a later read)."""
    head = text.find("\nformat:\n")
    if head < 0:
        return [text]
    records, pos = [text[:head + 9]], head + 9
    while pos < len(text):
        if text.startswith("\nprint fmt:", pos):
            records.append(text[pos:])
            break
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end + 1
        records.append(text[pos:end])
        pos = end
    return records

# ring_buffer_print_page_header and ring_buffer_print_entry_header: events/header_page
# (its data size that of the trace array's sub-buffers) and events/header_event
HEADER_PAGE = (
    "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
    "\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
    "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
    "\tfield: char data;\toffset:16;\tsize:{data_size};\tsigned:0;\n"
)
HEADER_EVENT = (
    "# compressed entry header\n"
    "\ttype_len    :    5 bits\n"
    "\ttime_delta  :   27 bits\n"
    "\tarray       :   32 bits\n"
    "\n"
    "\tpadding     : type == 29\n"
    "\ttime_extend : type == 30\n"
    "\ttime_stamp : type == 31\n"
    "\tdata max type_len  == 28\n"
)


class EventsDir:
    """``events/`` of one trace array, and the stores of the event files."""

    def create_events(self) -> Dir:
        """``event_trace_add_tracer``: ``events/`` and one directory per
        event, made the first time ``events/`` is looked into (eventfs; its
        ~100 systems took ~15 ms of a mount's start)."""
        self.events_dir = Dir("events", populate=self._events_files)
        return self.events_dir

    def _events_files(self, events: Dir) -> None:
        ft = self.ft
        events.file("enable", RW, ValueFile(lambda: ft.enable_state(ft.event_keys()) + "\n",
                                            self._enable(None, None)))
        # ring_buffer_print_page_header(buffer, s): the data size of this
        # trace array's sub-buffers
        events.file("header_page", RO, HeaderFile(
            lambda: HEADER_PAGE.format(data_size=ft.subbuf_data_size)), static=True)
        events.file("header_event", RO, HeaderFile(lambda: HEADER_EVENT), static=True)
        ftrace_dir = events.mkdir("ftrace")
        for key in ft.events:
            if key.startswith("ftrace:"):
                self._ftrace_entry_dir(ftrace_dir, key)
        by_system = ft.event_keys_by_system()  # 2,305 events in ~100 systems
        for system in sorted(by_system):  # eventfs: made when first looked into
            self._system_dir(events, system, by_system[system])

    def _ftrace_entry_dir(self, ftrace_dir: Dir, key: str) -> None:
        """``events/ftrace/<entry>/``: ``format``, and the ``id`` (and
        ``trigger``) the profile's kernel shows for it (6.18: ``function``
        has an id, ``print`` an id and a trigger)."""
        ft, name = self.ft, key[7:]
        edir = ftrace_dir.mkdir(name)
        # (as an event's: the profile's text and id, the entry not built)
        edir.file("format", RO, SeqFile(lambda: ft.events.format_text(key), format_records),
                  static=True)
        prof = ft.top.profile
        modes = prof.modes() if prof is not None else {}
        if f"events/ftrace/{name}/id" in modes:
            edir.file("id", RO, SeqFile(lambda: f"{ft.events.event_id(key)}\n"), static=True)
        if f"events/ftrace/{name}/trigger" in modes:
            edir.file("trigger", RW, TriggerFile(ft, key))  # trace_marker's triggers
        if f"events/ftrace/{name}/hist" in modes:
            edir.file("hist", RO, HistFile(ft, key))

    def _system_dir(self, events: Dir, system: str, keys=()) -> Dir:
        """``event_subsystem_dir``: ``enable`` and ``filter`` over the
        system's events, whichever exist when they are read or written, and
        a directory for each of *keys*: all made when the directory is first
        looked into (eventfs)."""
        def event_dirs(sdir: Dir) -> None:
            for key in keys:
                self._event_dir(sdir, key)

        # in two stages: a lookup of the system's enable or filter (trace-cmd
        # record resets every system's filter) does not make its event
        # directories (syscalls: ~700)
        return events.mkdir(system, populate=[lambda sdir: self._system_files(sdir, system),
                                              event_dirs], subdirs=len(keys))

    def _system_files(self, sdir: Dir, system: str) -> None:
        ft = self.ft
        sdir.file("enable", RW, ValueFile(
            lambda: ft.enable_state(ft.keys_matching(system, None)) + "\n",
            self._enable(system, None)))
        sdir.file("filter", RW, ValueFile(
            lambda: "### global filter ###\n# Use this to set filters for multiple events.\n"
                    "# Only events with the given fields will be affected.\n"
                    "# If no events are modified, an error message will be displayed here\n",
            self._system_filter(system)))

    def _event_added(self, ev) -> None:
        """A dynamic event (``Ftrace.define_event``): its directory, and its
        system's if new, appear while mounted (``event_add_file``)."""
        sdir = self.events_dir.children.get(ev.system)
        if sdir is None:
            sdir = self._system_dir(self.events_dir, ev.system)
        if ev.name not in sdir.children:
            self._event_dir(sdir, ev.key)

    def _event_removed(self, key: str) -> None:
        """A dynamic event removed (``trace_remove_event_call``): its
        directory goes, and its system's once no event is left there."""
        events = vars(self).get("events_dir")
        if events is None or events._populate is not None:
            return  # events/ not looked into yet: made from the registry then
        system, name = key.split(":", 1)
        sdir = events.children.get(system)
        if sdir is None:
            return
        left = self.ft.keys_matching(system, None)
        if sdir._populate is not None or not left:  # not looked into: made anew
            events.remove(system)
            if left:
                self._system_dir(events, system, left)
        elif name in sdir.children:
            sdir.remove(name)

    def _event_dir(self, sdir: Dir, key: str) -> None:
        # the event (profile events are parsed on first use) is looked up
        # when a file is read, never while the tree is built
        system, name = key.split(":", 1)
        sdir.mkdir(name, populate=lambda edir: self._event_files(edir, key), subdirs=0)

    def _event_files(self, edir: Dir, key: str) -> None:
        """An event's files (``event_create_dir``), made on first look."""
        ft = self.ft
        system, name = key.split(":", 1)
        edir.file("enable", RW, ValueFile(lambda: ft.event_enable_show(key),
                                          self._enable(system, name)))
        edir.file("filter", RW, ValueFile(
            lambda: (ft.filters.get(key, "none") + "\n").encode(errors="surrogateescape"),
            self._filter([key])))
        # neither builds the event (parsing its format: ~0.5 ms each, the most
        # of reading every format, as trace-cmd record and stream first do)
        edir.file("format", RO, SeqFile(lambda: ft.events.format_text(key), format_records),
                  static=True)
        edir.file("id", RO, SeqFile(lambda: f"{ft.events.event_id(key)}\n"), static=True)
        edir.file("trigger", RW, TriggerFile(ft, key))
        if trigger_cmds.has_hist(ft):  # trace_events_hist.c's event_hist_fops
            edir.file("hist", RO, HistFile(ft, key))

    # --- writes ---------------------------------------------------------------

    def _enable(self, system, name):
        """``event_enable_write``/``system_enable_write``: 0 or 1, else EINVAL."""
        def store(data: bytes) -> None:
            value = bool_write(data)
            keys = self.ft.keys_matching(system, name) if value \
                else self.ft.keys_to_disable(system, name)  # (the others are off)
            for key in keys:
                self.ft.set_event(key, value)
        return store

    def _system_filter(self, system: str):
        def store(data: bytes) -> None:
            if len(data) >= PAGE_SIZE:
                raise fail(errno.EINVAL)
            self.ft.set_system_filter(system, data)
        return store

    def _filter(self, keys, system=False):
        """``event_filter_write``: under a page, the rest in the engine."""
        def store(data: bytes) -> None:
            if len(data) >= PAGE_SIZE:
                raise fail(errno.EINVAL)
            self.ft.set_filter(keys, data, system)
        return store

    def _set_event(self, data: bytes) -> int:
        """``ftrace_event_write``: one word per write (``trace_get_user``),
        the count consumed answered; ``[!][system:]event``."""
        used, token = trace_get_user(data, EVENT_BUF_SIZE + 1)
        if token is not None:
            line = token.decode(errors="surrogateescape")
            on = not line.startswith("!")
            system, sep, name = (line if on else line[1:]).partition(":")
            # one event named in full: its key, not a walk of 2,305 events
            # (set_event_line would find the same one, ~5 ms later)
            named = sep and system not in ("", "*") and name not in ("", "*")
            keys = self.ft.keys_matching(system, name) if named else []
            if keys:
                self.ft.set_event(keys[0], on)
            else:
                self.ft.set_event_line(line)
        return used

    def _pid_write(self, attr: str):
        """``ftrace_event_pid_write``/``ftrace_event_npid_write``."""
        def store(data: bytes) -> int:
            used, pids = pid_write(data, getattr(self.ft, attr))
            target = getattr(self.ft, attr)
            target.clear()
            target.update(pids)
            return used
        return store


class HeaderFile(FileOperations):
    """``show_header_page_file`` / ``show_header_event_file``: the text made
    on each read, and ``if (*ppos) return 0``: a read at any offset but 0
    returns nothing, so a reader with a buffer smaller than the text gets
    its first part only, then EOF (as 6.18 does)."""

    def __init__(self, show):
        self.show = show

    def read_nowait(self, f: OpenFile, off: int, size: int) -> bytes:
        return b"" if off else read_from_buffer(self.show(), 0, size)


class TriggerFile(FileOperations):
    """``event_trigger_fops``: the trigger list (newest first) or the
    available commands; a write of one command (``event_trigger_regex_write``:
    EINVAL from PAGE_SIZE bytes on, the buffer ``strim``-ed; 0 bytes: 0)."""

    def __init__(self, tr, key: str):
        self.tr, self.key = tr, key

    def open(self, f: OpenFile) -> None:
        f.private = trigger_cmds.show(self.tr, self.key).encode() if f.readable else b""

    def truncate(self, f) -> None:
        """O_TRUNC: the triggers of the commands with ``unreg_all`` go."""
        if f is None or not f.flags & os.O_APPEND:
            trigger_cmds.truncate(self.tr, self.key)

    def read_nowait(self, f: OpenFile, off: int, size: int) -> bytes:
        return f.private[off:off + size]

    def write_nowait(self, f: OpenFile, off: int, data: bytes) -> int:
        if not data:
            return 0
        if len(data) >= PAGE_SIZE:
            raise fail(errno.EINVAL)
        trigger_cmds.write(self.tr, self.key, data.split(b"\0", 1)[0])
        return len(data)
