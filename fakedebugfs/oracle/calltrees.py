"""``python -m fakedebugfs.oracle.calltrees [--profile DIR] [--guest NAME]
[--graph FILE]``: record the call trees a profile ships (its ``calltrees``
file, docs/function-tracing.md) in the profile's oracle guest.

``calltrees_rec.c`` (beside this module), built static on the host, runs
in the guest pinned to CPU 1: a round of system calls (openat, read,
close, write, mmap with a page fault, munmap, brk, futex, clock_gettime,
newfstatat, getpid, getppid, epoll_create1 and epoll_wait, mkdir, rmdir,
pipe2, lseek, nanosleep, clone, execve of itself, wait4, exit_group),
then the same round traced: it adds itself to ``set_ftrace_pid`` and
``set_event_pid`` of an instance running ``function_graph``
(``funcgraph-abstime``, ``funcgraph-proc``, no ``funcgraph-irqs``;
``function-fork``, ``event-fork``) with the events that start trees
enabled and ``sys_exit`` to end a system call's.  A second instance
runs ``function`` (``sym-offset``) at the same time, for every task (a
pid list of its own would add its probes' calls to the switches' trees):
its ``<-`` parents (oracle/calltree_parents.py) give the trees' fifth
words, an outermost call's caller and a tail call's ``^``.  Its files are on the guest's tmpfs
(the guest's root is the host's over 9p, which a distro machine's is
not).  The graph instance's ``trace`` goes through
:func:`~fakedebugfs.engine.ftrace.calltree.calltrees_from_graph`; the
durations are the guest's own (emulated by TCG: some 20 times a real
machine's).  The top level is left alone; the instances are removed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "calltrees_rec.c"
DEFAULT_PROFILE = HERE.parent / "profiles" / "debian-6.12"
EVENTS = ("raw_syscalls/sys_enter", "raw_syscalls/sys_exit", "sched/sched_switch",
          "sched/sched_wakeup", "sched/sched_process_fork", "sched/sched_process_exec",
          "sched/sched_process_exit", "exceptions/page_fault_user")

SCRIPT = """\
d=/sys/kernel/tracing/instances/calltrees
f=/sys/kernel/tracing/instances/calltrees-parents
rmdir $d $f 2>/dev/null; mkdir $d $f || exit 1
cd $f
echo 0 > tracing_on
echo 16384 > buffer_size_kb
echo 1 > options/sym-offset
echo function > current_tracer || exit 1
cd $d
echo 0 > tracing_on
echo 8192 > buffer_size_kb
echo 2 > set_ftrace_pid; echo 2 > set_event_pid  # (kthreadd) until the program adds itself
echo 1 > options/function-fork; echo 1 > options/event-fork
echo function_graph > current_tracer || exit 1
echo 1 > options/funcgraph-abstime; echo 1 > options/funcgraph-proc
echo 0 > options/funcgraph-irqs
for e in {events}; do echo 1 > events/$e/enable; done
rm -rf /tmp/calltrees; mkdir /tmp/calltrees; cp {binary} /tmp/calltrees/rec
echo 1 > $f/tracing_on; echo 1 > tracing_on
taskset -c 1 /tmp/calltrees/rec $d /tmp/calltrees > /dev/null
echo 0 > tracing_on; echo 0 > $f/tracing_on
cat trace > {graph}
cat $f/trace > {functions}
lost=$(cat per_cpu/cpu*/stats $f/per_cpu/cpu*/stats | awk '/^overrun:/ {{s += $2}} END {{print s}}')
echo nop > current_tracer; echo 0 > events/enable; echo nop > $f/current_tracer
cd /; rmdir $d $f; rm -rf /tmp/calltrees
echo "overrun $lost"
"""

HEADER = """\
# Call trees recorded on this profile's kernel in its oracle guest with
# function_graph (python -m fakedebugfs.oracle.calltrees; how:
# docs/function-tracing.md#recording-them).  Durations are the guest's
# (TCG-emulated: slower than a real machine's).
"""


def record(profile: Path, guest_name: str = "calltrees") -> tuple[str, str]:
    """The ``function_graph`` and ``function`` texts of the traced round,
    from the guest."""
    from fakedebugfs.oracle.guest import Guest

    guest = Guest(profile, name=guest_name)
    guest.start()
    work = guest.work / "calltrees"
    work.mkdir(parents=True, exist_ok=True)
    binary, graph = work / "rec", work / "graph.txt"
    functions = work / "functions.txt"
    subprocess.run(["gcc", "-O2", "-static", "-o", str(binary), str(SOURCE)], check=True)
    res = guest.run(SCRIPT.format(events=" ".join(EVENTS), binary=binary, graph=graph,
                                  functions=functions),
                    timeout=600, check=True)
    if "overrun 0" not in res.text:
        raise RuntimeError(f"the recording lost entries: {res.text.strip()}")
    return graph.read_text(), functions.read_text()


def main(argv=None) -> int:
    from fakedebugfs.engine.ftrace.calltree import calltrees_from_graph, parse_calltrees
    from fakedebugfs.oracle.calltree_parents import graph_parents

    p = argparse.ArgumentParser(prog="python -m fakedebugfs.oracle.calltrees",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    p.add_argument("--guest", default="calltrees", help="the guest's name (its own state)")
    p.add_argument("--graph", type=Path, help="convert this function_graph text instead of "
                   "recording one")
    p.add_argument("--functions", type=Path, help="with --graph: the function tracer's text "
                   "of the same run (sym-offset), for the parents")
    p.add_argument("--keep", type=Path, help="also write the recorded texts into this folder "
                   "(graph.txt, functions.txt)")
    p.add_argument("--out", type=Path, help="where to write (default: the profile's calltrees)")
    args = p.parse_args(argv)
    if args.graph:
        text = args.graph.read_text()
        functions = args.functions.read_text() if args.functions else ""
    else:
        text, functions = record(args.profile, args.guest)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        (args.keep / "graph.txt").write_text(text)
        (args.keep / "functions.txt").write_text(functions)
    parents, paired, calls = graph_parents(text, functions)
    trees = calltrees_from_graph(text, parents)
    parse_calltrees(trees)  # (it reads back)
    out = args.out or args.profile / "calltrees"
    out.write_text(HEADER + trees)
    print(f"{out}: {trees.count('### ')} trees, {len(trees.splitlines())} lines; "
          f"parents of {paired} of the graph's {calls} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
