"""The stack tracer (kernel/trace/trace_stack.c, 6.12): the deepest kernel
stack seen at a function call, and the frames on it.

While ``kernel.stack_tracer_enabled`` is set, every call its ops hooks
(all functions, or those of ``stack_trace_filter``) measures the stack
(``check_stack``); a depth over ``stack_max_size`` becomes the new maximum
and its frames are kept for ``stack_trace``.

The fake has no stack to measure: a function's frame is a size derived
from its name (16 to 200 bytes, the same on every run), and the depth at
a call is the frames of the call, its callers in the tree and the entry
code below them, over the ``pt_regs`` of the entry.
"""

from __future__ import annotations

import zlib

from fakedebugfs.engine.ftrace.ftrace import FtraceOps
from fakedebugfs.engine.ftrace.ftrace_probe import COMMANDS

PT_REGS = 168  # sizeof(struct pt_regs) on x86_64, at the top of the stack
MAX_ENTRIES = 1024  # STACK_TRACE_ENTRIES


def frame_size(name: str) -> int:
    """A function's stack frame in the fake: 16 to 200 bytes, 8-aligned."""
    return 16 + 8 * (zlib.crc32(name.encode()) % 24)


class StackTracer:
    """``stack_trace_ops`` and the maximum it keeps."""

    def __init__(self, fn):
        self.fn = fn
        self.ops = FtraceOps(fn.records, None, COMMANDS)  # no trace array: commands ENODEV
        self.enabled = False
        self.max_size = 0  # stack_max_size
        self.entries: list = []  # (depth, address) of the deepest stack, innermost first
        self._user = None

    def set_enabled(self, on: bool) -> None:
        """``stack_trace_sysctl``: register or unregister the ops."""
        on = bool(on)
        if on == self.enabled:
            return
        self.enabled = on
        if on:
            self._user = self._make_user()
            self.fn.register(self.ops, self._user, "stack_trace_call")
        else:
            self.fn.unregister(self._user)
            self._user = None

    def _make_user(self):
        ops = self.ops
        names = self.fn.calls

        def user(tree, cpu, pid, ts):
            recs, nodes = tree.recs, tree.nodes
            sizes = _frames(tree)
            tail = sum(frame_size(n) for n in _tail_names(tree)) + PT_REGS
            for k in range(len(nodes)):
                i = recs[k]
                if i is None or not ops.traces(i):
                    continue
                depth = tail
                p = k
                while p >= 0:
                    depth += sizes[p]
                    p = nodes[p][4]
                if depth > self.max_size:
                    self.max_size = depth
                    self.entries = _chain(tree, k, sizes, depth, names)
        return user

    def show(self) -> list:
        """``stack_trace`` (``t_show``)."""
        out = [f"        Depth    Size   Location    ({len(self.entries)} entries)\n"
               "        -----    ----   --------\n"]
        if not self.enabled and not self.max_size:
            out.append("#\n#  Stack tracer disabled\n#\n"
                       "# To enable the stack tracer, either add 'stacktrace' to the\n"
                       "# kernel command line\n"
                       "# or 'echo 1 > /proc/sys/kernel/stack_tracer_enabled'\n#\n")
        sym = self.fn.top.out.sym_offset
        n = len(self.entries)
        for i, (depth, addr) in enumerate(self.entries):
            size = depth if i + 1 == n else depth - self.entries[i + 1][0]
            out.append(f"{i:3d}) {depth:8d}   {size:5d}   {sym(addr)}\n")
        return out


def _frames(tree) -> list:
    return [frame_size(n[3]) for n in tree.nodes]


def _tail_names(tree) -> tuple:
    from fakedebugfs.engine.ftrace.calltree import entry_frames

    return entry_frames(tree.key)


def _chain(tree, k: int, sizes: list, depth: int, calls) -> list:
    """The frames of the deepest stack: the call (its record's ip), its
    callers' return addresses, then the entry code."""
    out = [(depth, tree.addrs[k])]
    depth -= sizes[k]
    p = tree.nodes[k][4]
    while p >= 0:
        out.append((depth, tree.rets[p]))
        depth -= sizes[p]
        p = tree.nodes[p][4]
    names = _tail_names(tree)
    for name, ret in zip(names, tree.tail):
        out.append((depth, ret))
        depth -= frame_size(name)
    return out[:MAX_ENTRIES]


__all__ = ["StackTracer", "frame_size"]
