"""``tracing/options/``: a file per trace flag of the trace array and per
flag of its current tracer, as the kernel's ``trace.c`` makes them
(``create_trace_options_dir``; ``trace_options_write`` / ``trace_options_core_write``:
0 or 1, no call when the value does not change), the tracer's coming and
going with it (2.6.29's ``create_trace_option_files`` /
``destroy_trace_option_files``); an instance has no file for the
top-level-only flags (``TOP_LEVEL_TRACE_FLAGS``).

:class:`OptionsDir` is one of :class:`~fakedebugfs.trees.tracing.TracingTree`'s
bases: it uses the tree's ``ft``, ``is_instance`` and ``options`` (the
directory ``create_tree`` makes).
"""

from __future__ import annotations

import errno

from fakedebugfs.engine.ftrace.kstrto import kstrtoul_from_user
from fakedebugfs.fs.fops import ValueFile, fail

RW = 0o640
# TOP_LEVEL_TRACE_FLAGS: options an instance has no file for
TOP_LEVEL_TRACE_FLAGS = ("trace_printk", "printk-msg-only", "record-cmd")


class OptionsDir:
    """``options/`` of one trace array."""

    def _add_option_files(self) -> None:
        for name in self.ft.option_names():
            if self.is_instance and name in TOP_LEVEL_TRACE_FLAGS:
                continue
            if name not in self.options.children:
                self.options.file(name, RW, ValueFile(
                    lambda name=name: f"{int(self._option(name))}\n", self._option_write(name)))

    def _option(self, name: str) -> bool:
        ft = self.ft
        if name in ft.options:
            return ft.options[name]
        if name in ft.tracer.flags:
            return ft.tracer.flags[name]
        owner = ft._flag_owner(name)  # another tracer's option (the top level lists them all)
        if owner is not None:
            return owner[name]
        raise fail(errno.EINVAL)

    def _option_write(self, name):
        def store(data: bytes) -> None:
            value = kstrtoul_from_user(data)
            if value > 1:
                raise fail(errno.EINVAL)
            if bool(value) != self._option(name):  # trace_options_write: no change, no call
                self.ft.set_option_file(name, bool(value))
        return store

    def _tracer_changed(self) -> None:
        """Tracer flags' files come and go with their tracer (2.6.29's
        ``create_trace_option_files``/``destroy_trace_option_files``)."""
        wanted = set(self.ft.option_names())
        for name in list(self.options.children):
            if name not in wanted:
                self.options.remove(name)
        self._add_option_files()
