"""What a return probe's ``$retval`` is in a system call's call tree.

A tree runs when its system call enters (``raw_syscalls:sys_enter``),
before the call's return value exists; the fake learns it when the call
returns (``raw_syscalls:sys_exit``: the workload's, or ``--mirror``'s
real one).  The functions that return the system call's value are its
*spine*: from the tree's outermost call, each time the call that takes
most of its caller's time (at least half), as long as BTF says it returns
an integer (``do_sys_openat2`` under ``__x64_sys_openat``; not
``do_filp_open``, a ``struct file *``).

:class:`SyscallReturns` holds the return hits of such a tree (all of
them, so their order stays the guest's) until the task's ``sys_exit``,
then records them at its time, the spine's ``$retval`` (and ``%ax``) the
call's return value.  A task's next tree, or the probes going, flushes
what is held with the value unknown (0).
"""

from __future__ import annotations

from fakedebugfs.engine.ftrace.probe_fetch import probe_values

SYS_EXIT = "raw_syscalls:sys_exit"
SPINE_SHARE = 0.5  # a callee on the spine takes at least this share of its caller's time


_SPINES: dict = {}  # id(tree) -> (tree, its spine): the profile's trees, a few dozen


def spine(btf, tree) -> frozenset:
    """The node indices of *tree* that return what its outermost call returns."""
    cached = _SPINES.get(id(tree))
    if cached is not None and cached[0] is tree:
        return cached[1]
    out = set()
    nodes = tree.nodes
    if nodes and btf is not None:
        k = 0
        while k is not None and _returns_integer(btf, nodes[k][3]):
            out.add(k)
            kids = [j for j in range(k + 1, len(nodes)) if nodes[j][4] == k]
            best = max(kids, key=lambda j: nodes[j][2], default=None)
            k = best if best is not None and nodes[best][2] >= SPINE_SHARE * nodes[k][2] \
                else None
    _SPINES[id(tree)] = (tree, frozenset(out))
    return _SPINES[id(tree)][1]


def _returns_integer(btf, name: str) -> bool:
    from fakedebugfs.engine.ftrace.trace_btf import KIND_ENUM, KIND_INT

    if "." in name:
        return False
    try:
        proto = btf.func_proto(name)
    except (OSError, ValueError):
        return False
    if proto is None or not proto[4]:
        return False
    t, _ = btf.skip_modifiers(proto[4])
    return t is not None and t[0] in (KIND_INT, KIND_ENUM)


def wants_retval(probe) -> bool:
    """A return probe that fetches the returned value."""
    return probe.is_return and any("$retval" in a.comm or "%ax" in a.comm for a in probe.args)


class SyscallReturns:
    """Return hits held per task until its system call returns."""

    def __init__(self, engine, tell):
        self.engine = engine
        self.tell = tell  # the sources' on_enable_change (the mirror opens sys_exit)
        self.pending: dict = {}  # pid -> [(order, tracepoint, probe, head, ctx, on_spine)]
        self.floors: dict = {}  # pid -> the earliest time they may be recorded at
        self._attached = None

    def start(self) -> None:
        tp = self.engine.tracepoints.get(SYS_EXIT)
        if tp is None or self._attached is not None:
            return
        ret_at = tp.index("ret")

        def on_exit(cpu, pid, ts, values):
            if pid in self.pending:
                self.flush(pid, cpu, ts, values[ret_at])
        tp.register(on_exit)
        self._attached = (tp, on_exit)
        self.tell(SYS_EXIT, True)

    def stop(self) -> None:
        self.pending.clear()
        self.floors.clear()
        if self._attached is not None:
            tp, probe = self._attached
            tp.unregister(probe)
            self._attached = None
            self.tell(SYS_EXIT, False)

    def hold(self, pid: int, items: list, floor: int) -> None:
        """Keep *items* for *pid*; *floor*: the time of the tree's last hit
        recorded, before which none of them is recorded (times stay in order)."""
        self.pending.setdefault(pid, []).extend(items)
        self.floors[pid] = max(floor, self.floors.get(pid, 0))

    def flush(self, pid: int, cpu: int, ts: int, retval=None) -> None:
        """Record what *pid* held, at *ts* on *cpu*, the spine's value *retval*."""
        ts = max(ts, self.floors.pop(pid, 0))
        for _, tp, probe, head, ctx, on_spine in sorted(self.pending.pop(pid, ()),
                                                       key=lambda h: h[0]):
            ctx.retval = retval if on_spine else None
            vals = probe_values(probe, ctx, head)
            tp.fire(cpu, pid, ts, tuple(vals.get(a, 0) for a in tp.args))


__all__ = ["SyscallReturns", "spine", "wants_retval"]
