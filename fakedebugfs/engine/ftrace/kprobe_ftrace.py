"""Kprobes on a function's entry, fired by the call trees
(arch/x86/kernel/kprobes/ftrace.c: a kprobe on a function's ftrace
location is an ``ftrace_ops``, ``kprobe_ftrace_handler``).

While some trace array has a ``kprobe_events`` event enabled whose probe
sits at a traceable function (its symbol, offset 0), or a return probe on
one, this ops is registered with the call trees
(:class:`~.calltree.FunctionCalls`): each call of the function fires the
probe's event at the call's time, a return probe's at its return.  The
fake has no registers to fetch: ``__probe_ip`` (``__probe_func`` and
``__probe_ret_ip`` for a return probe) are the call's addresses, other
arguments are 0 (or empty strings).
"""

from __future__ import annotations


class KprobeFtrace:
    """The kprobes of one kernel fired by its call trees."""

    def __init__(self, fn):
        self.fn = fn
        self.top = fn.top
        self.enabled: set = set()  # kprobe event keys enabled somewhere
        self._user = None
        self.top.on_enable_change.append(self.enable_change)

    def _probes(self) -> dict:
        """``{function: [probe, ...]}`` of the enabled kprobes at a
        function's start."""
        dyn = self.top.__dict__.get("dyn_events")
        out: dict = {}
        if dyn is None:
            return out
        for p in dyn.list:
            if getattr(p, "kind", "") == "kprobe" and p.key in self.enabled \
                    and p.symbol and not p.offset:
                out.setdefault(p.symbol, []).append(p)
        return out

    def enable_change(self, key: str, on: bool) -> None:
        """``on_enable_change``: called before an array starts or stops
        recording *key*."""
        dyn = self.top.__dict__.get("dyn_events")
        if dyn is None or not any(getattr(p, "kind", "") == "kprobe" and p.key == key
                                  for p in dyn.list):
            return
        if on:
            self.enabled.add(key)
        elif sum(key in tr.enabled for tr in self.top.arrays()) <= 1:
            self.enabled.discard(key)
        if self.enabled and self._user is None:
            self._user = self._make_user()
            self.fn.register(None, self._user, "kprobe_ftrace_handler")
        elif not self.enabled and self._user is not None:
            self.fn.unregister(self._user)
            self._user = None

    def _make_user(self):
        engine = self.top.engine

        def user(tree, cpu, pid, ts):
            probes = self._probes()
            if not probes:
                return
            fired = []
            for k, node in enumerate(tree.nodes):
                for p in probes.get(node[3], ()):
                    tp = engine.tracepoints.get(p.key)
                    ev = self.top.events.get(p.key)
                    if tp is None or ev is None:
                        continue
                    start = tree.addrs[k] - 4  # the function's address (symbol+0)
                    if p.is_return:
                        parent = node[4]
                        ret = tree.rets[parent] if parent >= 0 else \
                            (tree.tail[0] if tree.tail else 0)
                        vals = {"__probe_func": start, "__probe_ret_ip": ret}
                        at = ts + node[1] + node[2]
                    else:
                        vals, at = {"__probe_ip": start}, ts + node[1]
                    values = tuple(vals.get(a, "" if a in ev.dyn else 0) for a in tp.args)
                    fired.append((at, k, p, tp, values))
            for at, _, _, tp, values in sorted(fired, key=lambda f: (f[0], f[1])):
                tp.fire(cpu, pid, at, values)  # (kprobe_profile counts the hit)
        user.hooks = lambda: set()
        return user


def attach(fn) -> KprobeFtrace:
    have = fn.__dict__.get("kprobe_ftrace")
    if have is None:
        have = fn.kprobe_ftrace = KprobeFtrace(fn)
    return have


__all__ = ["KprobeFtrace", "attach"]
