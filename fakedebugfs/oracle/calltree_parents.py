"""The parents of a ``function_graph`` recording's calls, from the
``function`` tracer of a second instance that traced the same tasks at
the same time (``python -m fakedebugfs.oracle.calltrees``; the words are
described in docs/function-tracing.md).

6.12's ``function_graph`` text has no parent (``funcgraph-retaddr``
came in 6.13), so the recorder runs the ``function`` tracer beside it,
with ``sym-offset``: each call is then in both texts, in the same order
per task, a few microseconds apart.  :func:`graph_parents` pairs them:

* a call's parent is what the ``function`` tracer printed after ``<-``
  (``symbol+0xoffset``);
* while the graph tracer runs, a hooked call's return address is
  ``return_to_handler``, so a call that finds it as its own return
  address reached its callee by a jump: a tail call.  Its parent, as a
  kernel without the graph tracer shows it (and as the fake prints it),
  is its caller's own; for a tree's outermost call the caller is the
  enclosing call of the graph text, outside the tree.

Calls in hard interrupts are left out of the function text (flag ``h``,
``H``, ``z``, ``Z``), as ``funcgraph-irqs`` off leaves them out of the
graph (``ftrace_graph_ignore_irqs``).
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from fakedebugfs.engine.ftrace.calltree import graph_entries

# "  rec-123  [001] d..1.   123.456789: func+0x4/0x30 [mod] <-caller+0x87/0x100 [mod]"
_FUNCTION_LINE = re.compile(r"^\s*.*?-(\d+)\s+\[\d+\]\s+(\S+)\s+(\d+)\.(\d+): "
                            r"(\S+?)\+0x[0-9a-f]+/0x[0-9a-f]+(?: \[\w+\])? "
                            r"<-(\S+?\+0x[0-9a-f]+)/0x[0-9a-f]+(?: \[\w+\])?$")
_HARDIRQ = frozenset("hHzZ")  # trace_output.c's irq flag of a hard interrupt or an NMI
RETURN_TO_HANDLER = "return_to_handler"
# how far after the graph tracer's record of a call (whose ops comes
# first) the function tracer's may be, in us (an interrupt in between)
WINDOW_US = 50


class Parent(NamedTuple):
    """A graph call's parent: ``symbol+0xoffset`` as a kernel without the
    graph tracer shows it (None: not known), and whether it was a tail call."""
    caller: Optional[str]
    tail: bool


def function_entries(text: str) -> dict:
    """``{pid: [(us, name, parent), ...]}`` of a ``function`` trace with
    ``sym-offset``, in order, hard interrupts left out."""
    out: dict = {}
    for line in text.splitlines():
        m = _FUNCTION_LINE.match(line)
        if m is None or len(m[2]) > 2 and m[2][2] in _HARDIRQ:
            continue
        out.setdefault(int(m[1]), []).append((int(m[3]) * 1_000_000 + int(m[4]), m[5], m[6]))
    return out


def graph_parents(graph: str, functions: str) -> tuple[dict, int, int]:
    """``({graph line index: Parent}, calls paired, calls of the graph)``:
    each entry of the graph text paired with the first function entry of
    its task, after the last paired one, of its name, from its time (to
    the microsecond) to :data:`WINDOW_US` after."""
    fns = function_entries(functions)
    out: dict = {}
    at: dict = {}  # pid -> the next function entry to look at
    stacks: dict = {}  # pid -> the resolved parents of the open calls, by depth
    total = 0
    for index, pid, us, depth, name in graph_entries(graph):
        total += 1
        seq = fns.get(pid, ())
        j = at.get(pid, 0)
        while j < len(seq) and seq[j][0] < us - 1:
            j += 1
        found = None
        for k in range(j, len(seq)):
            if seq[k][0] > us + WINDOW_US:
                break
            if seq[k][1] == name:
                found = k
                break
        stack = stacks.setdefault(pid, [])
        del stack[depth:]
        enclosing = stack[-1] if len(stack) == depth and depth else None
        if found is None:
            at[pid] = j
            caller, tail = None, False
        else:
            at[pid] = found + 1
            raw = seq[found][2]
            tail = raw.partition("+")[0] == RETURN_TO_HANDLER
            caller = enclosing if tail else raw
            out[index] = Parent(caller, tail)
        stack.extend([None] * (depth - len(stack)))
        stack.append(caller)
    return out, len(out), total


__all__ = ["Parent", "function_entries", "graph_parents", "RETURN_TO_HANDLER"]
