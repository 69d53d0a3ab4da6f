"""A trace array's event filters (kernel/trace/trace_events_filter.c, 6.18).

The kernel's ``trace_events_filter.c`` has two halves: the parser and the
branch program (:mod:`.filter`: ``compile_filter``), and what a write to a
``filter`` file does with them.  :class:`TraceEventFilters` is the second
half for one trace array: ``apply_event_filter`` (an event's ``filter``),
``apply_subsystem_event_filter`` (a system's), ``create_event_filter``
(a trigger's ``if`` clause) and ``append_filter_err`` (the error text the
file then shows, and its ``error_log`` entry).  :mod:`.filter` is
imported when a filter is first written: most sessions set none.
"""

from __future__ import annotations

from fakedebugfs.engine.ftrace.ctype import SPACES


def _filter_text(data) -> bytes:
    """A filter write's text: bytes up to a NUL, trailing spaces stripped
    (``strstrip``'s end; lib/ctype: 0xA0 too)."""
    if isinstance(data, str):
        data = data.encode(errors="surrogateescape")
    return data.split(b"\0", 1)[0].rstrip(SPACES)


class TraceEventFilters:
    """The ``filter`` files of one trace array's events and systems (each
    ``trace_event_file``'s ``filter``).  A base of
    :class:`~.trace_events.TraceEvents`; needs ``engine``, ``events``,
    ``top``, ``log_err`` and ``keys_matching`` of the trace array."""

    filters: dict  # key -> the filter file's text
    filter_preds: dict  # key -> compiled filter

    def _init_event_filters(self) -> None:
        self.filters = {}
        self.filter_preds = {}

    def set_filter(self, keys, data, system: bool = False) -> None:
        """``apply_event_filter``/``apply_subsystem_event_filter`` of one
        write (bytes up to a NUL, trailing spaces stripped as ``strstrip``
        leaves them): ``0`` clears.  An event filter that does not parse
        is kept as its error text (the filter file shows it, the event is
        unfiltered), logged in ``error_log`` and refused with its errno.
        A system filter goes to each event of the system, each failing
        one showing the subsystem error; the write itself succeeds."""
        text = _filter_text(data)
        if text.lstrip(SPACES) == b"0":
            for key in keys:
                self.filters.pop(key, None)
                self.filter_preds.pop(key, None)
            return
        from fakedebugfs.engine.ftrace.filter import (E_BAD_SUBSYS_FILTER, FilterError,
            compile_filter)

        shown = text.decode(errors="surrogateescape")
        for key in keys:
            try:
                pred = compile_filter(self.events[key], text, self.engine.kallsyms,
                                      self.filter_rejects_incomplete())
            except FilterError as err:
                self.filter_preds.pop(key, None)
                if system:
                    err = FilterError(err.errno, E_BAD_SUBSYS_FILTER, 0)
                self.log_filter_error(text, err)
                self.filters[key] = err.filter_text(text).decode(errors="surrogateescape")
                if not system:
                    raise
                continue
            self.filters[key] = shown
            self.filter_preds[key] = pred

    def set_system_filter(self, system: str, data) -> None:
        """``apply_subsystem_event_filter``: :meth:`set_filter` over the
        system's events.  A ``0`` while no event has a filter changes
        nothing, and walks none (``trace-cmd record`` and ``reset`` clear
        every system's)."""
        if not self.filters and not self.filter_preds and \
                _filter_text(data).lstrip(SPACES) == b"0":
            return
        self.set_filter(self.keys_matching(system, None), data, True)

    def compile_event_filter(self, key: str, text: str):
        """``create_event_filter`` with ``set_str``: errors are logged."""
        from fakedebugfs.engine.ftrace.filter import FilterError, compile_filter

        raw = text.encode(errors="surrogateescape")
        try:
            return compile_filter(self.events[key], raw, self.engine.kallsyms,
                                  self.filter_rejects_incomplete())
        except FilterError as err:
            self.log_filter_error(raw, err)
            raise

    def filter_rejects_incomplete(self) -> bool:
        """Whether the profile's kernel refuses a filter ending in '&&',
        '||' or '!' (a version-gated behaviour: kversion.py)."""
        from fakedebugfs.engine.ftrace.kversion import has

        return has(getattr(self.top, "profile", None), "filter_rejects_incomplete")

    def log_filter_error(self, text: bytes, err) -> None:
        """``append_filter_err``'s ``tracing_log_err``."""
        if err.lasterr > 0:
            self.log_err("event filter parse error", text, err.log_text(), err.pos)
        else:
            self.log_err("event filter parse error", text, "Error", 0)


__all__ = ["TraceEventFilters"]
