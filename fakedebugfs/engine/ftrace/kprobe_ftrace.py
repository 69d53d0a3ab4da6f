"""Kprobes on a function's entry, fired by the call trees
(arch/x86/kernel/kprobes/ftrace.c: a kprobe on a function's ftrace
location is an ``ftrace_ops``, ``kprobe_ftrace_handler``).

While some trace array has a kprobe event enabled whose probe sits at a
traceable function (its symbol, offset 0), a return probe on one, or an
fprobe (trace_fprobe.c: an ``ftrace_ops`` on the function, entry and
exit), this ops is registered with the call trees
(:class:`~.calltree.FunctionCalls`): each call of the function fires the
probe's event at the call's time, a return probe's at its return (at one
time, kprobe before fprobe at an entry, fprobe before kretprobe at a
return, as the guest records them).  In a system call's tree whose return
probes fetch ``$retval`` on the call's spine, the return hits wait for the
call's ``sys_exit`` and its value (:mod:`.probe_retval`).  ``__probe_ip`` (``__probe_func``
and ``__probe_ret_ip`` for a return probe) are the call's addresses; the
other arguments are what the fake knows of the call
(:mod:`.probe_fetch`: the parameters the tree's event gives by name,
``$comm``, immediates), else 0 or a faulted string.
"""

from __future__ import annotations

from fakedebugfs.engine.ftrace.kernel_data import kernel_data
from fakedebugfs.engine.ftrace.probe_fetch import (CallContext, call_params, event_values,
    probe_values)
from fakedebugfs.engine.ftrace.probe_retval import SyscallReturns, spine, wants_retval

# the kinds of probe this ops fires, and their order at one time (entry, return)
KINDS = {"kprobe": (0, 1), "fprobe": (1, 0)}
FORK = "sched:sched_process_fork"
TRAMPOLINE = "arch_rethook_trampoline"  # x86's rethook return (kretprobe_trampoline_addr)


def _on_function(p, kp=None) -> bool:
    """A probe the call trees fire: a kprobe at a function's entry (+0, or
    +4 after an ``endbr64``), an fprobe."""
    kind = getattr(p, "kind", "")
    if kind == "kprobe":
        if not p.symbol or p.offset not in (0, 4):
            return False
        return not p.offset or kp is None or kp.on_func_entry(p.symbol, p.offset) == 0
    return kind == "fprobe" and not p.is_tracepoint


class KprobeFtrace:
    """The kprobes of one kernel fired by its call trees."""

    def __init__(self, fn):
        self.fn = fn
        self.top = fn.top
        self.enabled: set = set()  # kprobe event keys enabled somewhere
        self._user = None
        self.top.on_enable_change.append(self.enable_change)
        # return hits of a system call's tree wait for its sys_exit ($retval)
        self.returns = SyscallReturns(self.top.engine, self.fn.calls._tell)

    def _probes(self) -> dict:
        """``{function: [(probe, address), ...]}`` of the enabled probes on
        a function (a ``MOD:`` prefix dropped), each with the address it
        sits at (``kp.addr``: the function's entry, past its ``endbr64``)."""
        dyn = self.top.__dict__.get("dyn_events")
        out: dict = {}
        if dyn is None:
            return out
        kp = dyn.kprobes()
        for p in dyn.list:
            if p.key in self.enabled and _on_function(p, kp):
                name = p.symbol.rpartition(":")[2]
                try:
                    addr = kp.kprobe_addr(name, 0)[0]
                except OSError:
                    addr = 0
                out.setdefault(name, []).append((p, addr))
        return out

    def enable_change(self, key: str, on: bool) -> None:
        """``on_enable_change``: called before an array starts or stops
        recording *key*."""
        dyn = self.top.__dict__.get("dyn_events")
        if dyn is None or not any(p.key == key and _on_function(p) for p in dyn.list):
            return
        if on:
            self.enabled.add(key)
        elif sum(key in tr.enabled for tr in self.top.arrays()) <= 1:
            self.enabled.discard(key)
        if self.enabled and self._user is None:
            self._user = self._make_user()
            self.fn.register(None, self._user, "kprobe_ftrace_handler")
            self.returns.start()
        elif not self.enabled and self._user is not None:
            self.fn.unregister(self._user)
            self._user = None
            self.returns.stop()

    def _make_user(self):
        engine = self.top.engine
        calls = self.fn.calls

        returns = self.returns

        def user(tree, cpu, pid, ts):
            if pid in returns.pending:  # the task's last call never told its return
                returns.flush(pid, cpu, ts)
            probes = self._probes()
            if not probes:
                return
            known = None
            fired = []
            fork_ret, on_spine = self._fork_return(tree, calls.firing)
            for k, node in enumerate(tree.nodes):
                on = probes.get(node[3], ())
                last_ret = max((i for i, (p, _) in enumerate(on)
                                if p.is_return and p.kind == "kprobe"), default=None)
                for i, (p, addr) in enumerate(on):
                    tp = engine.tracepoints.get(p.key)
                    if tp is None or p.key not in self.top.events:
                        continue
                    if known is None:
                        known = self._known(tree, calls.firing)
                    start = addr or tree.starts[k]  # where the probe sits
                    if p.is_return and k in tree.never_returns():
                        continue
                    if p.is_return:
                        ret_ip = tree.pips[k]
                        if p.kind == "kprobe" and i != last_ret:
                            ret_ip = self._trampoline() or ret_ip
                        head = {"__probe_func": start, "__probe_ret_ip": ret_ip}
                        at, rank = ts + node[2] + node[1], KINDS[p.kind][1]
                    else:
                        head, at = {"__probe_ip": start}, ts + node[1]
                        rank = KINDS[p.kind][0]
                    # kprobes at one address run newest first (add_new_kprobe
                    # adds at the list's head); their returns come back in the
                    # other order, each kretprobe's return address taken
                    # after the newer ones' had put the trampoline there
                    tie = -i if p.kind == "kprobe" and not p.is_return else i
                    ctx = self._context(known[k], engine.comms.get(pid, ""), start)
                    ctx.data = kernel_data(self.top)  # (@SYM)
                    if p.is_return and k in on_spine:
                        ctx.retval = fork_ret
                    fired.append(((at, rank, k, tie), tp, p, head, ctx, k))
            held = self._hold(tree, fired, calls.firing)
            if held:
                returns.hold(pid, held, max(f[0][0] for f in fired if not f[2].is_return)
                             if any(not f[2].is_return for f in fired) else ts)
            for order, tp, p, head, ctx, _ in sorted(fired, key=lambda f: f[0]):
                if held and p.is_return:
                    continue
                vals = probe_values(p, ctx, head)
                # (kprobe_profile counts the hit)
                tp.fire(cpu, pid, order[0], tuple(vals.get(a, 0) for a in tp.args))
        user.hooks = lambda: set()
        return user

    def _fork_return(self, tree, firing) -> tuple:
        """``(child pid, spine)`` of a fork's tree (``sched_process_fork``
        fires inside ``kernel_clone``, which then returns the child's pid to
        the parent, as every integer-returning call above it does); ``(None,
        ())`` for another tree."""
        if firing is None or firing[0] != FORK:
            return None, ()
        child = event_values(self.top, *firing).get("child_pid")
        if child is None:
            return None, ()
        dyn = self.top.__dict__.get("dyn_events")
        return child, spine(dyn.facts.btf if dyn is not None else None, tree)

    def _trampoline(self) -> int:
        """Where a kretprobe sends its function's return (``arch_rethook_trampoline``:
        what an older kretprobe of the same function sees as the return
        address when a newer one's is there), 0 where the table lacks it."""
        have = self.__dict__.get("_tramp")
        if have is None:
            dyn = self.top.__dict__.get("dyn_events")
            have = self._tramp = dyn.kprobes().ksyms.kallsyms_lookup_name(TRAMPOLINE) \
                if dyn is not None else 0
        return have

    def _hold(self, tree, fired: list, firing) -> list:
        """The return hits to hold until the system call returns (all of a
        system call's tree when one fetches ``$retval`` on its spine),
        each marked whether it is on the spine: []."""
        if firing is None or firing[0] != "raw_syscalls:sys_enter":
            return []
        dyn = self.top.__dict__.get("dyn_events")
        on = spine(dyn.facts.btf if dyn is not None else None, tree)
        if not any(f[2].is_return and f[5] in on and wants_retval(f[2]) for f in fired):
            return []
        return [(*f[:5], f[5] in on) for f in fired if f[2].is_return]

    def _known(self, tree, firing) -> list:
        """What each call of *tree* gets from the event that started it (a
        tree of the fake's own calls says it: :mod:`.eventfs_calls`)."""
        own = getattr(tree, "known", None)
        if own is not None:
            return own
        if firing is None:
            return [None] * len(tree.nodes)
        dyn = self.top.__dict__.get("dyn_events")
        btf = dyn.facts.btf if dyn is not None else None
        return call_params(btf, tree, event_values(self.top, *firing))

    @staticmethod
    def _context(known, comm: str, ip: int) -> CallContext:
        if known is None:
            return CallContext(comm=comm, ip=ip)
        params, names, strings = known
        return CallContext(params, names, strings, comm, ip)


def attach(fn) -> KprobeFtrace:
    have = fn.__dict__.get("kprobe_ftrace")
    if have is None:
        have = fn.kprobe_ftrace = KprobeFtrace(fn)
    return have


__all__ = ["KprobeFtrace", "attach"]
