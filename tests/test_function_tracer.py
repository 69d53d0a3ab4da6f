"""Function tracing as the Debian 6.12 profile's kernel has it (issue 32):
the function filter files, the function commands, the pid files,
``enabled_functions``, and the ``function``/``function_graph`` tracers fed
by call trees, on real mounts read and written as ``cat``/``echo`` and
trace-cmd do.  The call trees are the tests' own (``CALLTREES``: a profile
made of the shipped one plus a ``calltrees`` file), not the engine's."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS, errno_of, read, run_cli
from fakedebugfs.engine.core.profile_files import read_profile_text

PROFILE = Path(__file__).resolve().parent.parent / "fakedebugfs" / "profiles" / "debian-6.12"
DEFAULT_PROFILE = PROFILE.parent / "linux-6.18"  # this machine's kernel: no function tracer
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "functions"

# read(2) and openat(2), as function_graph shows them on the profile's kernel
# (functions the kernel cannot trace, such as __fdget_pos, are left out by it)
CALLTREES = """\
### raw_syscalls:sys_enter id=0
0 0 5200 __x64_sys_read
1 100 5000 ksys_read
2 200 400 __fdget_pos
2 700 4400 vfs_read
3 800 600 rw_verify_area
4 900 200 security_file_permission
3 1500 3500 seq_read
4 1600 3300 seq_read_iter
5 1700 250 mutex_lock
5 4600 200 mutex_unlock
### raw_syscalls:sys_enter id=257
0 0 9000 __x64_sys_openat
1 100 8800 do_sys_openat2
2 200 1200 getname
3 300 1000 getname_flags
2 1500 7000 do_filp_open
3 1600 6800 path_openat
"""


def write(path, data: str, append: bool = False) -> None:
    with open(path, "a" if append else "w") as fp:
        fp.write(data)


def lines(path) -> list[str]:
    return read(path).splitlines()


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """The shipped 6.12 profile with the tests' call trees."""
    if not (PROFILE / "available_filter_functions").is_file():
        pytest.skip("no debian-6.12 profile with function records")
    out = tmp_path_factory.mktemp("profile")
    for f in PROFILE.iterdir():
        if f.name != "calltrees":  # (the profile's own, recorded in the guest)
            (out / f.name).symlink_to(f)
    (out / "calltrees").write_text(CALLTREES)
    return out


@pytest.fixture
def tracing(fake, profile):
    mnt = fake("--workload", "none", "--clock", "virtual", "--cpus", "2", "--profile", profile)
    return mnt / "tracing"


def emit_syscall(tracing, nr: int, pid: int = 42, comm: str = "cat", cpu: int = 1) -> None:
    run_cli("emit", tracing.parent, "raw_syscalls:sys_enter", f"id={nr}", "--pid", pid,
            "--comm", comm, "--cpu", cpu)


# --- the lists ------------------------------------------------------------------------------

def test_available_filter_functions_are_the_profiles(tracing):
    assert (tracing / "available_filter_functions").read_bytes() == \
        (PROFILE / "available_filter_functions").read_bytes()
    assert (tracing / "available_filter_functions_addrs").read_bytes() == \
        read_profile_text(PROFILE, "available_filter_functions_addrs").encode()
    n = len((PROFILE / "available_filter_functions").read_text().splitlines())
    assert read(tracing / "dyn_ftrace_total_info").startswith(f"{n} pages:")
    assert read(tracing / "available_tracers").split()[-3:] == ["function_graph", "function", "nop"]


def test_linux_6_18_has_no_function_tracing(fake):
    """This machine's 6.18 refuses the function tracer: its profile has no
    ``available_filter_functions``, and the fake none of the files."""
    tracing = fake("--profile", DEFAULT_PROFILE, "--workload", "none") / "tracing"
    for name in ("set_ftrace_filter", "available_filter_functions", "set_graph_function",
                 "max_graph_depth", "enabled_functions"):
        assert not (tracing / name).exists(), name
    assert "function" not in read(tracing / "available_tracers").split()


# --- set_ftrace_filter / set_ftrace_notrace ---------------------------------------------------

def test_filter_globs_append_negation_and_truncation(tracing):
    f = tracing / "set_ftrace_filter"
    assert lines(f) == ["#### all functions enabled ####"]
    assert lines(tracing / "set_ftrace_notrace") == ["#### no functions disabled ####"]
    write(f, "vfs_rea*\n")
    assert lines(f) == ["vfs_readv", "vfs_read", "vfs_readlink"]  # record order
    write(f, "*sys_openat2\n", append=True)
    assert {"vfs_read", "do_sys_openat2", "__x64_sys_openat2"} <= set(lines(f))
    write(f, "!vfs_readv\n", append=True)
    assert "vfs_readv" not in lines(f) and "vfs_read" in lines(f)
    write(f, "vfs_r?ad vfs_write\n")  # two words, one write: both applied, truncated first
    assert lines(f) == ["vfs_read", "vfs_write"]
    # a name that matches no function is EINVAL (and the truncation stays)
    assert errno_of(write, f, "no_such_function_xyz\n") == errno.EINVAL
    assert lines(f) == ["#### all functions enabled ####"]
    write(tracing / "set_ftrace_notrace", "rcu_*\n")
    assert lines(tracing / "set_ftrace_notrace")[0].startswith("rcu_")


def test_filter_by_index_and_module(tracing):
    f = tracing / "set_ftrace_filter"
    first = (PROFILE / "available_filter_functions").read_text().splitlines()[0]
    write(f, "1\n")
    assert lines(f) == [first]
    mods = [ln for ln in (PROFILE / "available_filter_functions").read_text().splitlines()
            if ln.endswith("]")]
    if mods:
        name, mod = mods[0].split()
        write(f, f"*:mod:{mod[1:-1]}\n")
        assert all(ln.endswith(mod) for ln in lines(f))
    # a module not loaded: the command is kept for when it loads
    write(f, "foo:mod:no_such_module\n")
    assert lines(f)[-1] == "foo:mod:no_such_module"


def test_function_commands_with_counts(tracing):
    f = tracing / "set_ftrace_filter"
    write(f, "schedule:traceoff:3\n")
    write(f, "vfs_read:enable_event:sched:sched_switch\n", append=True)
    write(f, "vfs_write:stacktrace\n", append=True)
    assert lines(f) == ["#### all functions enabled ####",
                        "vfs_write:stacktrace:unlimited",
                        "vfs_read:enable_event:sched:sched_switch:unlimited",
                        "schedule:traceoff:count=3"]
    assert read(tracing / "events/sched/sched_switch/enable") == "0*\n"  # soft mode
    # the same probe on the same function again adds nothing: EINVAL
    assert errno_of(write, f, "vfs_write:stacktrace\n", True) == errno.EINVAL
    # the unlimited traceoff was never set: ENODEV; the counted one is removed with a count
    assert errno_of(write, f, "!schedule:traceoff\n", True) == errno.ENODEV
    write(f, "!schedule:traceoff:0\n", append=True)
    write(f, "!vfs_read:enable_event:sched:sched_switch\n", append=True)
    assert read(tracing / "events/sched/sched_switch/enable") == "0\n"
    assert errno_of(write, f, "vfs_read:no_such_command\n", True) == errno.EINVAL
    assert errno_of(write, tracing / "set_ftrace_notrace", "vfs_read:traceoff\n") == errno.EINVAL


def test_probes_are_listed_in_the_kernels_hash_order(tracing):
    """``set_ftrace_filter`` after ``vfs_*:stacktrace``, byte for byte as the
    Debian 6.12 guest listed it (fixtures/functions: a probe's functions
    come in the order of its hash's buckets)."""
    guest = Path(__file__).resolve().parent.parent / "fixtures" / "functions" / \
        "debian-6.12-vfs-stacktrace-probes.txt"
    write(tracing / "set_ftrace_filter", "vfs_*:stacktrace\n")
    assert read(tracing / "set_ftrace_filter") == guest.read_text()


def test_graph_functions_are_listed_in_the_kernels_hash_order(tracing):
    """``set_graph_function`` after ``vfs_r*`` then ``>> do_sys_open*``, as
    the Debian 6.12 guest listed it (fixtures/functions)."""
    guest = Path(__file__).resolve().parent.parent / "fixtures" / "functions" / \
        "debian-6.12-set-graph-function.txt"
    write(tracing / "set_graph_function", "vfs_r*\n")
    write(tracing / "set_graph_function", "do_sys_open*\n", append=True)
    assert read(tracing / "set_graph_function") == guest.read_text()
    assert errno_of(write, tracing / "set_graph_function", "!no_such_fn\n", True) == errno.EINVAL
    write(tracing / "set_graph_function", "\n")
    assert read(tracing / "set_graph_function") == "#### all functions enabled ####\n"


def test_traceoff_fires_on_the_call(tracing):
    write(tracing / "set_ftrace_filter", "vfs_read:traceoff:1\n")
    assert read(tracing / "tracing_on") == "1\n"
    emit_syscall(tracing, 0)
    assert read(tracing / "tracing_on") == "0\n"
    assert lines(tracing / "set_ftrace_filter")[-1] == "vfs_read:traceoff:count=0"
    write(tracing / "tracing_on", "1\n")
    emit_syscall(tracing, 0)
    assert read(tracing / "tracing_on") == "1\n"


# --- pid files, enabled_functions -------------------------------------------------------------

def test_pid_files(tracing):
    for name in ("set_ftrace_pid", "set_ftrace_notrace_pid"):
        p = tracing / name
        assert read(p) == "no pid\n"
        write(p, "7 3\n")
        assert lines(p) == ["3", "7"]
        write(p, "9\n", append=True)
        assert lines(p) == ["3", "7", "9"]
        write(p, "\n")
        assert read(p) == "no pid\n"


def test_enabled_and_touched_functions(tracing):
    assert read(tracing / "enabled_functions") == ""
    write(tracing / "set_ftrace_filter", "vfs_read\n")
    write(tracing / "current_tracer", "function\n")
    got = lines(tracing / "enabled_functions")
    assert len(got) == 1 and got[0].startswith("vfs_read (1)           \ttramp: 0x")
    assert "(function_trace_call+0x0/0x" in got[0]
    write(tracing / "set_ftrace_filter", "vfs_read:traceon\n", append=True)
    assert lines(tracing / "enabled_functions")[0].startswith(
        "vfs_read (2)            ->arch_ftrace_ops_list_func+0x0/0x")
    write(tracing / "current_tracer", "nop\n")
    write(tracing / "set_ftrace_filter", "!vfs_read:traceon\n", append=True)
    assert read(tracing / "enabled_functions") == ""
    # as the guest prints a record no ops hooks any more: what ftrace_caller calls
    assert lines(tracing / "touched_functions")[0] == \
        "vfs_read (0)            ->ftrace_stub+0x0/0x20"


# --- the tracers -----------------------------------------------------------------------------

def test_function_tracer_text(tracing):
    write(tracing / "set_ftrace_filter", "vfs_* seq_read*\n")
    write(tracing / "current_tracer", "function\n")
    emit_syscall(tracing, 0)
    text = read(tracing / "trace")
    assert text.startswith("# tracer: function\n#\n# entries-in-buffer/entries-written: 3/3   #P:2\n")
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert [ln.split(": ", 1)[1] for ln in body] == [
        "vfs_read <-ksys_read", "seq_read <-vfs_read", "seq_read_iter <-seq_read"]
    assert all(ln.split()[0] == "cat-42" and ln.split()[1] == "[001]" for ln in body)
    write(tracing / "options/print-parent", "0\n")
    assert read(tracing / "trace").splitlines()[-1].endswith(": seq_read_iter")


def test_function_pid_filter_and_notrace(tracing):
    write(tracing / "current_tracer", "function\n")
    write(tracing / "set_ftrace_pid", "42\n")
    write(tracing / "set_ftrace_notrace", "*verify* security_*\n")
    emit_syscall(tracing, 0, pid=42)
    emit_syscall(tracing, 0, pid=43, comm="other")
    body = [ln for ln in lines(tracing / "trace") if not ln.startswith("#")]
    assert body and all("-42 " in ln for ln in body)
    assert not any("rw_verify_area" in ln or "security_file_permission" in ln for ln in body)


def test_function_graph_text_depth_and_graph_function(tracing):
    write(tracing / "current_tracer", "function_graph\n")
    emit_syscall(tracing, 0)
    text = read(tracing / "trace")
    assert text.startswith("# tracer: function_graph\n#\n"
                           "# CPU  DURATION                  FUNCTION CALLS\n"
                           "# |     |   |                     |   |   |   |\n")
    body = text.splitlines()[4:]
    assert body[0] == " 1)               |  __x64_sys_read() {"
    assert " 1)   0.200 us    |          security_file_permission();" in body
    assert body[-1] == " 1)   5.200 us    |  }"
    # set_graph_function and max_graph_depth: the graph starts at the function
    write(tracing / "trace", "")
    write(tracing / "set_graph_function", "do_sys_openat2\n")
    write(tracing / "max_graph_depth", "2\n")
    emit_syscall(tracing, 257)
    body = read(tracing / "trace").splitlines()[4:]
    assert body == [" 1)               |  do_sys_openat2() {",
                    " 1)   1.200 us    |    getname();",
                    " 1)   7.000 us    |    do_filp_open();",
                    " 1)   8.800 us    |  }"]
    write(tracing / "options/funcgraph-proc", "1\n")
    assert read(tracing / "trace").splitlines()[2] == \
        "# CPU  TASK/PID         DURATION                  FUNCTION CALLS"


def test_instances_trace_functions_too(tracing):
    inst = tracing / "instances" / "fn"
    inst.mkdir()
    try:
        assert "function" in read(inst / "available_tracers").split()
        write(inst / "set_ftrace_filter", "getname*\n")
        write(inst / "current_tracer", "function\n")
        emit_syscall(tracing, 257)
        body = [ln for ln in lines(inst / "trace") if not ln.startswith("#")]
        assert [ln.split(": ", 1)[1] for ln in body] == [
            "getname <-do_sys_openat2", "getname_flags <-getname"]
        assert [ln for ln in lines(tracing / "trace") if not ln.startswith("#")] == []
    finally:
        inst.rmdir()


@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="needs trace-cmd")
def test_trace_cmd_records_function_entries(profile, tmp_path):
    """``trace-cmd record -p function -l 'vfs_*'`` reads the entries from
    trace_pipe_raw; ``trace-cmd report`` prints them."""
    from fakedebugfs import Fake

    with Fake(profile=str(profile), clock="virtual", cpus=2) as fk:
        out = str(tmp_path / "t.dat")
        rec = fk.popen(["trace-cmd", "record", "-p", "function", "-l", "vfs_*", "-o", out],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fk.wait_readers()
        for _ in range(3):
            fk.emit("raw_syscalls:sys_enter", cpu=1, pid=42, comm="cat", id=0)
        rec.send_signal(signal.SIGINT)
        rec.wait(timeout=60)
        report = fk.run(["trace-cmd", "report", "-O", "parent=1", "-i", out], capture_output=True, text=True)
    calls = [ln for ln in report.stdout.splitlines() if "function:" in ln]
    assert len(calls) == 3, report.stdout + report.stderr
    assert all("vfs_read" in ln and "ksys_read" in ln and "cat-42" in ln for ln in calls), calls


@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="needs trace-cmd")
def test_trace_cmd_records_a_function_graph(profile, tmp_path):
    """``trace-cmd record -p function_graph -g do_sys_openat2
    --max-graph-depth 3``: the graph from the function down, two levels."""
    from fakedebugfs import Fake

    with Fake(profile=str(profile), clock="virtual", cpus=2) as fk:
        out = str(tmp_path / "g.dat")
        rec = fk.popen(["trace-cmd", "record", "-p", "function_graph", "-g", "do_sys_openat2",
                        "--max-graph-depth", "3", "-o", out],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fk.wait_readers()
        fk.emit("raw_syscalls:sys_enter", cpu=1, pid=42, comm="cat", id=257)
        rec.send_signal(signal.SIGINT)
        rec.wait(timeout=60)
        report = fk.run(["trace-cmd", "report", "-i", out], capture_output=True, text=True)
    graph = [ln.split("|", 1)[1] for ln in report.stdout.splitlines() if "funcgraph_" in ln]
    assert graph == ["  do_sys_openat2() {", "    getname() {", "      getname_flags();",
                     "    }", "    do_filp_open() {", "      path_openat();", "    }", "  }"], \
        report.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="--mirror needs root (CAP_PERFMON)")
@pytest.mark.skipif(shutil.which("perf") is None, reason="needs perf")
def test_mirrored_syscalls_expand_into_call_trees(profile):
    """``run --mirror tree``: the command's real openat(2) calls reach the
    call trees (the mirror opens the tracepoints the trees start at), and
    ``perf ftrace -G do_sys_openat2`` shows their graphs."""
    out = run_cli("run", "--mirror", "tree", "--profile", profile, "--", "perf", "ftrace",
                  "-G", "do_sys_openat2", "cat", "/proc/version", timeout=120).stdout
    graph = [ln for ln in out.splitlines() if ")" in ln and "|" in ln]
    assert any(ln.endswith("|  do_sys_openat2() {") for ln in graph), out
    assert any(ln.endswith("|      getname_flags();") for ln in graph), out


def _first_graph(text: str, func: str) -> list:
    """The first call of *func* in a function_graph text (``trace``,
    ``perf ftrace``, ``trace-cmd report``): the function column's lines,
    durations left out."""
    out: list = []
    for ln in text.splitlines():
        body = ln.split("|")[-1] if "|" in ln else ""
        if not out and body.strip() != f"{func}() {{":
            continue
        out.append(body.rstrip())
        if body.startswith("  }"):
            break
    return out


def test_the_profiles_call_trees_are_the_guests():
    """The call trees the debian-6.12 profile ships, recorded in the
    guest: ``perf ftrace -G do_sys_openat2`` of ``cat /proc/version``
    under ``run --mirror`` draws the calls the guest's own
    ``trace-cmd record -p function_graph -g do_sys_openat2
    --max-graph-depth 3`` recorded (fixtures/functions)."""
    guest = _first_graph((FIXTURES / "debian-6.12-openat2-graph-depth3.txt").read_text(),
                         "do_sys_openat2")
    assert len(guest) > 10
    out = run_cli("run", "--mirror", "tree", "--profile", "debian-6.12", "--", "perf",
                  "ftrace", "-G", "do_sys_openat2", "--graph-opts", "depth=3", "cat",
                  "/proc/version", timeout=120).stdout
    assert _first_graph(out, "do_sys_openat2") == guest, out


@pytest.mark.parametrize("tracer", ["function", "function_graph"])
def test_the_batch_path_writes_what_one_by_one_writes(profile, tracer):
    """A batch of events (a workload's, the mirror's) expanded at once
    gives the bytes, counters, saved_cmdlines and clock of the same events
    fired one by one: overlapping trees, a filter, a CPU masked out."""
    import random

    from fakedebugfs.engine.core.batch import from_pending
    from fakedebugfs.engine.core.engine import Pending
    from fakedebugfs.engine.kernel import Kernel, KernelConfig

    def kernel():
        k = Kernel(KernelConfig(profile=str(profile), clock="virtual", cpus=3))
        from fakedebugfs.trees.tracing import TracingTree

        TracingTree(k, k.ftrace)
        k.ftrace.set_tracer(tracer)
        k.ftrace.function_trace.ops(k.ftrace).process_regex("getname*", False)  # notrace
        k.ftrace.function_trace.max_graph_depth = 3
        k.ftrace.cpumask = 0b011
        return k

    def events(k):
        rnd, last, out = random.Random(7), [10**9] * 3, []
        tps = k.engine.tracepoints
        for _ in range(400):
            c = rnd.randrange(3)
            last[c] += rnd.randrange(0, 12000)  # often closer than a tree lasts
            if rnd.random() < 0.85:
                out.append(Pending(tps["raw_syscalls:sys_enter"], c, 40 + rnd.randrange(4),
                                   last[c], (rnd.choice([0, 1, 257, 999]), 0)))
            else:
                out.append(Pending(tps["sched:sched_process_exit"], c, 41, last[c],
                                   ("x", 41, 120)))
        return out

    one, many = kernel(), kernel()
    taken = []
    calls = many.ftrace.function_trace.calls
    real = calls.write_batch
    calls.write_batch = lambda batch, kinds: (taken.append(len(batch)), real(batch, kinds))
    for p in events(one):
        one.engine._fire_each([p])
    many.engine.emit_batch(from_pending(events(many)))
    assert taken == [400]
    for a, b in zip(one.ftrace.buffers, many.ftrace.buffers):
        assert bytes(a.mem) == bytes(b.mem) and a.entries == b.entries
    assert one.ftrace.written == many.ftrace.written > 500
    assert one.ftrace.cmdlines.show() == many.ftrace.cmdlines.show()
    assert one.engine.clock.now() == many.engine.clock.now()


@pytest.mark.parametrize("tracer", ["function", "function_graph"])
def test_a_big_tree_written_at_once_is_what_call_by_call_writes(tracer, monkeypatch):
    """The per-event path writes a big tree (the profile's recorded ones:
    hundreds of calls) from its template at once: the same bytes,
    counters and saved_cmdlines as writing its calls one by one, with a
    filter and a CPU masked out."""
    from fakedebugfs.engine.ftrace import trace_functions, trace_functions_graph
    from fakedebugfs.engine.kernel import Kernel, KernelConfig
    from fakedebugfs.trees.tracing import TracingTree

    def run(whole: int):
        monkeypatch.setattr(trace_functions, "WHOLE_TREE", whole)
        monkeypatch.setattr(trace_functions_graph, "WHOLE_TREE", whole)
        k = Kernel(KernelConfig(profile=str(PROFILE), clock="virtual", cpus=3))
        TracingTree(k, k.ftrace)
        k.ftrace.set_tracer(tracer)
        k.ftrace.function_trace.ops(k.ftrace).process_regex("*spin*", False)  # notrace
        k.ftrace.cpumask = 0b011
        tp = k.engine.tracepoints["raw_syscalls:sys_enter"]
        for i, nr in enumerate((257, 0, 89, 1, 257, 61, 3, 0) * 3):
            k.engine._fire_each([(tp, i % 3, 40 + i % 4, 10**9 + 20_000 * i, (nr, (0,) * 6))])
        return k

    one, whole = run(10**9), run(48)
    for a, b in zip(one.ftrace.buffers, whole.ftrace.buffers):
        assert bytes(a.mem) == bytes(b.mem) and a.entries == b.entries
    assert one.ftrace.written == whole.ftrace.written > 1000
    assert one.ftrace.cmdlines.show() == whole.ftrace.cmdlines.show()
    assert one.engine.clock.now() == whole.engine.clock.now()


def test_calls_injected_with_fake():
    """``Fake.calls``: a tree of calls through the filters and the tracer;
    a malformed tree, or a profile without function tracing, is refused
    whole."""
    from fakedebugfs import Fake
    from fakedebugfs.errors import FakeError

    tree = [(0, 0, 900, "ksys_read"), (1, 100, 700, "vfs_read"), (2, 200, 100, "rw_verify_area")]
    with Fake(profile=str(PROFILE), clock="virtual", cpus=2) as fk:
        fk.run(["sh", "-c", "cd /sys/kernel/tracing && echo 'vfs_*' > set_ftrace_filter && "
                "echo function > current_tracer"], check=True)
        assert fk.calls(tree, cpu=1, pid=77, comm="reader") == 3
        text = fk.run(["cat", "/sys/kernel/tracing/trace"], capture_output=True, text=True).stdout
        body = [ln for ln in text.splitlines() if not ln.startswith("#")]
        assert len(body) == 1 and body[0].split()[:2] == ["reader-77", "[001]"]
        assert body[0].endswith(": vfs_read <-ksys_read")
        with pytest.raises(FakeError):
            fk.calls([(1, 0, 1, "vfs_read")])  # deeper than a caller
    with Fake(profile=str(DEFAULT_PROFILE), clock="virtual") as fk:  # no function tracing
        with pytest.raises(FakeError):
            fk.calls(tree)


def test_calls_injected_with_the_cli(tracing, tmp_path):
    """``fakedebugfs calls MNT FILE``: the lines of a tree, as ``calltrees``
    holds them; a bad line is a one-line usage error."""
    tree = tmp_path / "tree"
    tree.write_text("# read(2)\n0 0 900 ksys_read\n1 100 700 vfs_read\n")
    write(tracing / "current_tracer", "function\n")
    run_cli("calls", tracing.parent, tree, "--cpu", 1, "--pid", 9, "--comm", "cli")
    body = [ln for ln in lines(tracing / "trace") if not ln.startswith("#")]
    assert [ln.split(": ", 1)[1] for ln in body] == ["ksys_read", "vfs_read <-ksys_read"]
    assert body[0].split()[:2] == ["cli-9", "[001]"]
    tree.write_text("0 zero 900 ksys_read\n")
    bad = run_cli("calls", tracing.parent, tree, check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_reset_clears_the_function_filters_and_commands():
    """``Fake.reset``: filters, pid lists, graph settings and the function
    commands (which an O_TRUNC of set_ftrace_filter keeps) gone."""
    from fakedebugfs import Fake

    with Fake(profile=str(PROFILE), clock="virtual", cpus=2) as fk:
        fk.run(["sh", "-c", "cd /sys/kernel/tracing && echo 'vfs_*' > set_ftrace_filter && "
                "echo 'schedule:traceoff:3' >> set_ftrace_filter && "
                "echo 'vfs_read:enable_event:sched:sched_switch' >> set_ftrace_filter && "
                "echo 'x:mod:no_such_module' >> set_ftrace_filter && "
                "echo 'rcu_*' > set_ftrace_notrace && echo 5 > max_graph_depth && "
                "echo 12 > set_ftrace_pid && echo function > current_tracer"], check=True)
        fk.reset()
        t = fk.tracing
        assert read(t / "set_ftrace_filter") == "#### all functions enabled ####\n"
        assert read(t / "set_ftrace_notrace") == "#### no functions disabled ####\n"
        assert read(t / "max_graph_depth") == "0\n" and read(t / "set_ftrace_pid") == "no pid\n"
        assert read(t / "events/sched/sched_switch/enable") == "0\n"
        assert read(t / "enabled_functions") == ""


def test_calltrees_from_a_guest_function_graph():
    """The recorder's converter on ``function_graph`` text as the Debian
    6.12 guest printed it (funcgraph-abstime, funcgraph-proc, sys_enter as
    comments): the calls after a trigger on its CPU are its tree."""
    from fakedebugfs.engine.ftrace.calltree import calltrees_from_graph, parse_calltrees

    graph = (
        "   38.922991 |   3)     sh-438     |               |  /* sys_enter: NR 3 (3, 1, 0, 0, b, 1) */\n"
        "   38.923005 |   3)     sh-438     |               |  /* sys_enter: NR 1 (1, 562634d69990, 2, 0, 2, 562634d69861) */\n"
        "   38.923023 |   3)     sh-438     |               |  rw_verify_area() {\n"
        "   38.923030 |   3)     sh-438     |   6.741 us    |    security_file_permission();\n"
        "   38.923044 |   3)     sh-438     | + 28.663 us   |  }\n"
        "   38.923050 |   3)     sh-438     |   1.000 us    |  vfs_write();\n"
        "   38.923060 |   3)     sh-438     |               |  /* sys_enter: NR 3 (3, 1, 0, 0, b, 1) */\n")
    text = calltrees_from_graph(graph)
    assert text == ("### raw_syscalls:sys_enter id=1\n"
                    "0 18000 28663 rw_verify_area\n"
                    "1 25000 6741 security_file_permission\n"
                    "0 45000 1000 vfs_write\n")
    (sel, tree), = parse_calltrees(text)["raw_syscalls:sys_enter"]
    assert sel == {"id": 1} and [n[4] for n in tree.nodes] == [-1, 0, -1]


def test_func_stack_trace_and_no_repeats(tracing):
    write(tracing / "set_ftrace_filter", "vfs_read\n")
    write(tracing / "current_tracer", "function\n")
    write(tracing / "options/func_stack_trace", "1\n")
    emit_syscall(tracing, 0)
    body = [ln for ln in lines(tracing / "trace") if not ln.startswith("#")]
    assert body[1].endswith(": <stack trace>")
    assert body[2:] == [" => [FTRACE TRAMPOLINE]", " => vfs_read", " => ksys_read",
                        " => __x64_sys_read", " => do_syscall_64",
                        " => entry_SYSCALL_64_after_hwframe"]
    write(tracing / "options/func_stack_trace", "0\n")
    write(tracing / "options/func-no-repeats", "1\n")
    write(tracing / "trace", "")
    for _ in range(3):
        emit_syscall(tracing, 0)
    write(tracing / "set_ftrace_filter", "ksys_read\n", append=True)
    emit_syscall(tracing, 0)
    body = [ln.split(": ", 1)[1] for ln in lines(tracing / "trace") if not ln.startswith("#")]
    assert body[0] == "vfs_read <-ksys_read"
    assert body[1].startswith("vfs_read <-ksys_read (repeats: 2, last_ts: ")
    write(tracing / "options/func-no-repeats", "0\n")


def test_stack_tracer(tracing):
    """``stack_trace``: disabled text, then the deepest stack once
    ``kernel.stack_tracer_enabled`` (the hidden sysctl file ``run`` binds)
    is set; ``stack_trace_filter`` limits the functions measured."""
    assert lines(tracing / "stack_trace")[3] == "#  Stack tracer disabled"
    write(tracing / ".stack_tracer_enabled", "1\n")
    emit_syscall(tracing, 0)
    got = lines(tracing / "stack_trace")
    n = len(got) - 2
    assert got[0] == f"        Depth    Size   Location    ({n} entries)"
    assert got[2].split()[3].startswith("security_file_permission+0x4/")
    assert got[-1].split()[3].startswith("entry_SYSCALL_64_after_hwframe+")
    depths = [int(ln.split()[1]) for ln in got[2:]]
    assert depths == sorted(depths, reverse=True)
    assert read(tracing / "stack_max_size") == f"{depths[0]}\n"
    write(tracing / "stack_trace_filter", "vfs_read\n")
    write(tracing / "stack_max_size", "0\n")
    emit_syscall(tracing, 0)
    assert lines(tracing / "stack_trace")[2].split()[3].startswith("vfs_read+0x4/")
    assert errno_of(write, tracing / "stack_trace_filter", "vfs_read:traceon\n") == errno.ENODEV
    write(tracing / ".stack_tracer_enabled", "0\n")


def test_stack_tracer_enabled_inside_run(profile):
    """``run`` binds the fake's switch over
    ``/proc/sys/kernel/stack_tracer_enabled`` (made where this host's
    kernel has no such sysctl): ``echo 1`` there and ``trace-cmd stack
    --start/--stop`` turn the stack tracer on and off, and ``trace-cmd
    stack`` shows the deepest stack of a system call the command makes
    the fake fire; the other sysctls stay the kernel's, read-only."""
    script = (
        "cat /proc/sys/kernel/stack_tracer_enabled\n"
        "echo 1 > /proc/sys/kernel/stack_tracer_enabled\n"
        f'{FAKEDEBUGFS} emit "$FAKEDEBUGFS_MOUNT" raw_syscalls:sys_enter id=0 --pid 42 --cpu 1\n'
        "trace-cmd stack\n"
        "echo 0 > /proc/sys/kernel/stack_tracer_enabled\n"
        "echo stopped $(cat /sys/kernel/tracing/.stack_tracer_enabled)\n"
        "trace-cmd stack --start; echo started $(cat /proc/sys/kernel/stack_tracer_enabled)\n"
        "trace-cmd stack --stop; echo stopped $(cat /proc/sys/kernel/stack_tracer_enabled)\n"
        "echo 2 > /proc/sys/kernel/stack_tracer_enabled\n"
        "echo as-written $(cat /proc/sys/kernel/stack_tracer_enabled)\n"
        "echo 0 > /proc/sys/kernel/stack_tracer_enabled\n"
        "cat /proc/sys/kernel/osrelease\n"
        # the value it has (harmless if it went through): EROFS
        "v=$(cat /proc/sys/kernel/printk_ratelimit)\n"
        "(echo $v > /proc/sys/kernel/printk_ratelimit) 2>&1 | grep -q 'Read-only' && echo refused\n")
    out = run_cli("run", "--workload", "none", "--clock", "virtual", "--profile", profile,
                  "--", "sh", "-c", script, timeout=120).stdout
    got = out.splitlines()
    assert got[0] == "0", out
    assert got[1] == "(stack tracer running)", out
    assert "Depth" in got[2] and got[4].split()[3].startswith("security_file_permission+"), out
    assert [ln for ln in got if ln.startswith(("stopped", "started"))] == \
        ["stopped 0", "started 1", "stopped 0"], out
    assert "as-written 2" in got, out  # proc_dointvec keeps the int, as the guest shows
    assert os.uname().release in got, out  # the kernel's sysctls, seen through
    assert got[-1] == "refused", out


def test_trace_cmd_records_the_default_workloads_calls_within_max_length(tmp_path):
    """trace-cmd's utest "Test max length", shortened: ``trace-cmd record
    -p function -m KB`` under ``run --profile debian-6.12`` (the default
    workload's system calls run the profile's recorded trees) records
    function entries, each CPU's data under the utest's bound."""
    dat = tmp_path / "max.dat"
    run_cli("run", "--profile", "debian-6.12", "--", "trace-cmd", "record", "-q", "-p",
            "function", "-m", "500", "-o", dat, "sleep", "1", timeout=120)
    stat = subprocess.run(["trace-cmd", "report", "-i", str(dat), "--stat"],
                          capture_output=True, text=True, check=True).stdout
    sizes = [int(ln.split()[0]) for ln in stat.splitlines() if "bytes in size" in ln]
    assert sizes and sum(sizes) > 0 and all(n < 10_000_000 for n in sizes), stat
    report = subprocess.run(["trace-cmd", "report", "-i", str(dat)], capture_output=True,
                            text=True, check=True).stdout
    assert "function:" in report and "x64_sys_call" in report, report[:2000]


FUNCGRAPH = shutil.which("funcgraph-perf") or shutil.which("funcgraph")
FUNCTRACE = shutil.which("functrace-perf") or shutil.which("functrace")


@pytest.mark.skipif(not (FUNCGRAPH and FUNCTRACE), reason="perf-tools' funcgraph and functrace "
                    "are not installed (apt-get install perf-tools-unstable)")
def test_perf_tools_funcgraph_and_functrace():
    """perf-tools' ``funcgraph -d 1 do_sys_openat2`` and ``functrace -d 1
    'vfs_*'`` under ``run --profile debian-6.12``: the default workload's
    openat(2) calls drawn from the recorded tree, and the vfs_ functions
    of its system calls with their callers."""
    out = run_cli("run", "--profile", "debian-6.12", "--", "sh", "-c",
                  f"{FUNCGRAPH} -d 1 do_sys_openat2; echo ====; {FUNCTRACE} -d 1 'vfs_*'",
                  timeout=120).stdout
    graph, _, funcs = out.partition("====")
    calls = [ln.split("|")[-1].strip() for ln in graph.splitlines() if ")" in ln and "|" in ln]
    assert "do_sys_openat2() {" in calls, graph
    assert "getname() {" in calls and "do_filp_open() {" in calls, graph
    assert any(ln.split()[-2:] == ["vfs_open", "<-path_openat"] for ln in funcs.splitlines()
               if len(ln.split()) >= 2), funcs
    assert any(ln.split()[-2:] == ["vfs_read", "<-ksys_read"] for ln in funcs.splitlines()
               if len(ln.split()) >= 2), funcs


def test_a_guest_function_graph_recording_replays_byte_for_byte(tmp_path):
    """A trace.dat recorded in the Debian 6.12 guest (``taskset -c 0,1
    trace-cmd record -M 3 -p function_graph -g do_sys_openat2
    --max-graph-depth 3 taskset -c 1 cat /proc/version``: two CPUs, as
    trace-cmd here records this host's two) replayed into the fake with
    its timestamps, while trace-cmd records the fake with the same
    tracer: ``trace-cmd report`` of the re-recording is the guest's, line
    for line (the function_graph entries are written only while that
    tracer is current, as the kernel writes them)."""
    dat = Path(__file__).resolve().parent.parent / "fixtures" / "replay" / "large" / \
        "debian-6.12-funcgraph-v7.dat"
    out = tmp_path / "re.dat"
    script = (f"trace-cmd record -q -p function_graph -g do_sys_openat2 --max-graph-depth 3 "
              f"-o {out} > /dev/null & rec=$!\n"
              f'{FAKEDEBUGFS} replay "$FAKEDEBUGFS_MOUNT" {dat} --keep-timestamps --wait-enabled\n'
              "kill -INT $rec; wait $rec\n")
    run_cli("run", "--profile", "debian-6.12", "--cpus", "2", "--workload", "none", "--clock",
            "virtual", "--", "sh", "-c", script, timeout=180)
    report = subprocess.run(["trace-cmd", "report", "-i", str(out)], capture_output=True,
                            text=True, check=True).stdout

    def events(text):
        return [ln for ln in text.splitlines() if ": funcgraph_" in ln]
    guest = events((FIXTURES / "debian-6.12-funcgraph-report.txt").read_text())
    assert len(guest) > 200 and events(report) == guest, report[:3000]


def _selftests() -> Path:
    env = os.environ.get("FTRACETEST_DIR")
    if env:
        return Path(env)
    return Path("/tmp/linux-src/linux-source-6.12/tools/testing/selftests/ftrace")


# the rows of test.d/ftrace/ that pass under the 6.12 profile with the
# sample call trees; (instance) rows run with them
FTRACETEST_ROWS = tuple(f"ftrace/{r}" for r in (
    "fgraph-filter.tc", "fgraph-multi.tc", "func-filter-glob.tc", "func-filter-notrace-pid.tc",
    "func-filter-stacktrace.tc", "func_cpumask.tc", "func_event_triggers.tc",
    "func_set_ftrace_file.tc", "func_traceonoff_triggers.tc", "func-filter-pid.tc",
    # the stack tracer's switch: /proc/sys/kernel/stack_tracer_enabled, bound by run
    "func_stack_tracer.tc", "fgraph-filter-stack.tc")) + (
    "kprobe/kprobe_ftrace.tc",)  # a kprobe at a function's entry fires from the call trees


@pytest.mark.skipif(not (_selftests() / "ftracetest").is_file(),
                    reason="needs the kernel's tools/testing/selftests/ftrace (FTRACETEST_DIR)")
def test_ftracetest_function_rows(tmp_path):
    """ftracetest's function rows under ``fakedebugfs run --profile
    debian-6.12``, with the call trees the profile ships (recorded in the
    guest): its fork tree has ``kernel_clone``, whose ``stacktrace``
    command and pid filters the rows check on real forks."""
    prof = PROFILE
    work = tmp_path / "ftrace"
    shutil.copytree(_selftests(), work)
    rows = " ".join(f"test.d/{r}" for r in FTRACETEST_ROWS)
    out = run_cli("run", "--profile", prof, "--", "sh", "-c",
                  f"cd {work} && ./ftracetest {rows}", check=False, timeout=600).stdout
    results = [ln for ln in out.splitlines() if ln.startswith("[")]
    assert len(results) >= len(FTRACETEST_ROWS), out
    bad = [r for r in results if not r.endswith("[PASS]")]
    assert not bad, out
