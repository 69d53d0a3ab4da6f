"""Kprobe, kretprobe, fprobe, tracepoint probe and event probe events on
the Debian 6.12 profile (``fakedebugfs/profiles/debian-6.12``), through a
mounted fake: ``kprobe_events``, ``kprobe_profile``, ``dynamic_events``,
the events they define, ``error_log`` with its caret, and the profile's
symbols as ``/proc/kallsyms`` under ``fakedebugfs run``.

The expected texts follow the 6.12 kernel (kernel/trace/trace_kprobe.c,
trace_fprobe.c, trace_eprobe.c, trace_probe.c) over the symbols the
profile captured from the guest; the syntax-error rows are ftracetest's
kprobe_syntax_errors.tc, whose carets only depend on the command.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakedebugfs import Fake
from fakedebugfs.engine.core.profile_files import has_profile_file, read_profile_text

PROFILE = Path(__file__).resolve().parents[1] / "fakedebugfs" / "profiles" / "debian-6.12"
pytestmark = pytest.mark.skipif(not has_profile_file(PROFILE, "kallsyms"),
                                reason="the debian-6.12 profile has no kallsyms")


def append(path, line: str):
    """One ``echo line >> path``: None, or the errno."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line.encode() + b"\n")
    except OSError as err:
        return err.errno
    finally:
        os.close(fd)
    return None


def gone(path) -> bool:
    for _ in range(100):
        if not os.path.exists(path):
            return True
        time.sleep(0.01)
    return False


def symbol(name: str):
    """``(address, size)`` of a function in the profile's kallsyms."""
    lines = read_profile_text(PROFILE, "kallsyms").splitlines()
    for i, line in enumerate(lines):
        parts = line.split()
        if parts[2] == name and len(parts) == 3:
            addr = int(parts[0], 16)
            nxt = next(int(l.split()[0], 16) for l in lines[i + 1:] if int(l.split()[0], 16) > addr)
            return addr, nxt - addr
    raise LookupError(name)


@pytest.fixture(scope="module")
def fk():
    with Fake(profile=str(PROFILE), clock="virtual", cpus=2, workload="none") as fake:
        yield fake


@pytest.fixture
def t(fk):
    """The fake's tracing/ with no probe events and an empty error_log after the test."""
    yield fk.tracing
    for name in os.listdir(fk.tracing / "events"):
        d = fk.tracing / "events" / name
        if (d / "enable").exists() and name in ("kprobes", "fprobes", "tracepoints", "eprobes",
                                                 "g", "foo"):
            (d / "enable").write_text("0")
    open(fk.tracing / "dynamic_events", "w").close()
    open(fk.tracing / "error_log", "w").close()


def test_definitions_listings_and_formats(t):
    assert append(t / "kprobe_events", "p vfs_read") is None
    assert append(t / "kprobe_events", "r:myr do_sys_openat2 $retval") is None
    assert append(t / "kprobe_events", "p:g/e vfs_read+4 a=%di:u32 s=+0(%si):string") is None
    assert append(t / "kprobe_events", "r5 vfs_write%return") is None
    assert append(t / "dynamic_events", "f vfs_write") is None
    assert append(t / "dynamic_events", "t sched_switch") is None
    assert append(t / "dynamic_events", "e:ep sched.sched_switch pid=$prev_pid") is None
    listing = (t / "kprobe_events").read_text()
    # register_kretprobe sets maxactive to max(10, 2 x CPUs) when none is given
    assert listing == ("p:kprobes/p_vfs_read_0 vfs_read\n"
                       "r10:kprobes/myr do_sys_openat2 arg1=$retval\n"
                       "p:g/e vfs_read+4 a=%di:u32 s=+0(%si):string\n"
                       "r5:kprobes/r_vfs_write_0 vfs_write\n")
    assert (t / "dynamic_events").read_text() == listing + (
        "f:fprobes/vfs_write__entry vfs_write\n"
        "t:tracepoints/sched_switch sched_switch\n"
        "e:eprobes/ep sched.sched_switch pid=$prev_pid\n")
    assert (t / "kprobe_profile").read_text() == "".join(
        f"  {name:<44} {0:15} {0:15}\n" for name in ("p_vfs_read_0", "myr", "e", "r_vfs_write_0"))
    # $retval takes do_sys_openat2's return type from the profile's BTF (long)
    fmt = (t / "events/kprobes/myr/format").read_text()
    assert fmt.split("\n\n", 1)[1] == (
        "\tfield:unsigned long __probe_func;\toffset:8;\tsize:8;\tsigned:0;\n"
        "\tfield:unsigned long __probe_ret_ip;\toffset:16;\tsize:8;\tsigned:0;\n"
        "\tfield:s64 arg1;\toffset:24;\tsize:8;\tsigned:1;\n\n"
        'print fmt: "(%lx <- %lx) arg1=%Ld", REC->__probe_func, REC->__probe_ret_ip, '
        "REC->arg1\n")
    fmt = (t / "events/g/e/format").read_text()
    assert fmt.split("\n\n", 1)[1] == (
        "\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;\n"
        "\tfield:u32 a;\toffset:16;\tsize:4;\tsigned:0;\n"
        "\tfield:__data_loc char[] s;\toffset:20;\tsize:4;\tsigned:1;\n\n"
        'print fmt: "(%lx) a=%u s=\\"%s\\"", REC->__probe_ip, REC->a, __get_str(s)\n')
    fmt = (t / "events/eprobes/ep/format").read_text()
    assert fmt.endswith("\tfield:u64 pid;\toffset:8;\tsize:8;\tsigned:0;\n\n"
                        'print fmt: " pid=0x%Lx", REC->pid\n')
    assert sorted(os.listdir(t / "events/kprobes")) == ["enable", "filter", "myr",
                                                         "p_vfs_read_0", "r_vfs_write_0"]
    events = (t / "available_events").read_text().split()
    assert {"kprobes:myr", "fprobes:vfs_write__entry", "tracepoints:sched_switch",
            "eprobes:ep"} <= set(events)


@pytest.mark.parametrize("command", [
    "p^100 vfs_read", "r^1a111 vfs_read", "r^100000 vfs_read",
    "p ^non_exist_func", "p ^hoge-fuga", "p ^hoge+1000-1000", "r ^vfs_read+10",
    "p:^/bar vfs_read",
    "p:^12345678901234567890123456789012345678901234567890123456789012345/bar vfs_read",
    "p:^foo.1/bar vfs_read", "p:^ vfs_read",
    "p:foo/^12345678901234567890123456789012345678901234567890123456789012345 vfs_read",
    "p:foo/^bar.1 vfs_read", "p vfs_read ^$retval", "p vfs_read ^$stack10000",
    "p vfs_read ^$arg10000", "p vfs_read ^$none_var", "p vfs_read ^%none_reg",
    "p vfs_read ^@12345678abcde", "p vfs_read ^@+10", "p vfs_read arg1=\\^x",
    'p vfs_read arg1=\\"abcd^', "p vfs_read ^+0@0)", "p vfs_read ^+0ab1(@0)",
    "p vfs_read +0(+0(@0^)", "p vfs_read +0(^$comm)", "p vfs_read ^&1",
    "p vfs_read +0(^+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(@0))))))))))))))",
    "p vfs_read +0(@11):u8[10^", "p vfs_read +0(@11):u8[10]^a", "p vfs_read +0(@11):u8[^10a]",
    "p vfs_read +0(@11):u8[^256]", "p vfs_read @11:^unknown_type",
    "p vfs_read $stack0:^string", "p vfs_read @11:^b10@a/16",
    "p vfs_read ^arg123456789012345678901234567890=@11", "p vfs_read ^=@11",
    "p vfs_read ^var.1=@11", "p vfs_read var1=@11 ^var1=@12",
    "p vfs_read ^+1234567(+1234567(+1234567(+1234567(+1234567(+1234567(@1234))))))",
    "p vfs_read arg1=^", "p vfs_read^%hoge", "p ^vfs_read+10%return",
    "p vfs_read $arg* ^$arg*", "p vfs_read+20 ^$arg*",
])
def test_kprobe_syntax_errors(t, command):
    """kprobe_syntax_errors.tc: refused, and the caret where 6.12 puts it."""
    pos = command.index("^")
    cmd = command.replace("^", "")
    assert append(t / "kprobe_events", cmd) is not None
    log = (t / "error_log").read_text().splitlines()
    assert re.fullmatch(r"\[ *\d+\.\d{6}\] trace_kprobe: error: .+", log[-3])
    assert log[-2] == f"  Command: {cmd}"
    assert log[-1] == " " * (11 + pos) + "^"
    assert (t / "kprobe_events").read_text() == ""


def test_symbols_modules_and_refusals(t):
    """What kallsyms and the kprobe rules decide: an unknown symbol, a
    name two functions share, a module's function (loaded or not), a
    function with no ftrace site, a blacklisted area."""
    log = t / "error_log"
    assert append(t / "kprobe_events", "p no_such_function_here") == errno.EINVAL
    assert log.read_text().splitlines()[-3].endswith("Invalid probed address or symbol")
    lines = read_profile_text(PROFILE, "kallsyms").splitlines()
    counts = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tT":
            counts[parts[2]] = counts.get(parts[2], 0) + 1
    dup = next(n for n, c in sorted(counts.items()) if c > 1 and not n.startswith("__"))
    assert append(t / "kprobe_events", f"p {dup}") == errno.EINVAL
    assert log.read_text().splitlines()[-3].endswith("The symbol is not unique")
    # a loaded module's function, where the profile lists one (the oracle's
    # captures leave out the 9p modules it loads itself; __builtin__ftrace
    # is the ftrace trampoline, no module)
    mod_line = next((l for l in lines if l.endswith("]") and l.split()[1] in "tT"
                     and not l.split()[2].startswith("__") and "[__builtin" not in l), None)
    listed = []
    if mod_line is not None:
        mod_sym, mod = mod_line.split()[2], mod_line.split()[3][1:-1]
        assert append(t / "kprobe_events", f"p {mod}:{mod_sym}") is None
        listed.append(f"p:kprobes/p_{mod}_{mod_sym}_0 {mod}:{mod_sym}\n")
    assert append(t / "kprobe_events", "p nosuchmodule:nosuchfunc") is None  # waits for it
    assert append(t / "kprobe_events", "p nosuchmodule:nosuchfunc") == errno.EEXIST
    listed.append("p:kprobes/p_nosuchmodule_nosuchfunc_0 nosuchmodule:nosuchfunc\n")
    assert (t / "kprobe_events").read_text() == "".join(listed)
    # entry code (x86's __entry_text) is never probed
    entry = next(l.split()[2] for l in lines[lines.index(next(
        l for l in lines if l.endswith(" __entry_text_start"))) + 1:]
        if l.split()[1] in "tT" and not l.split()[2].startswith("__"))
    assert append(t / "kprobe_events", f"p {entry}") == errno.EINVAL
    assert log.read_text().splitlines()[-3].endswith("Failed to register probe event")


def test_hits_trace_text_and_profile(fk, t):
    """An injected hit prints as ``print_kprobe_event`` does (``%pS`` of
    the profile's symbols) and counts in ``kprobe_profile``; enabled, the
    probe cannot go (EBUSY) and O_TRUNC removes nothing."""
    addr, size = symbol("vfs_read")
    ret_addr, _ = symbol("ksys_read")
    append(t / "kprobe_events", "p:myp vfs_read cnt=%dx:u32")
    append(t / "kprobe_events", "r:myr vfs_read ret=$retval:s64")
    (t / "events/kprobes/enable").write_text("1")
    (t / "trace").write_text("")
    fk.emit("kprobes:myp", pid=7, comm="cat", __probe_ip=addr, cnt=128)
    fk.emit("kprobes:myr", pid=7, comm="cat", __probe_func=addr, __probe_ret_ip=ret_addr + 0x4a,
            ret=-14)
    lines = [l for l in (t / "trace").read_text().splitlines() if not l.startswith("#")]
    assert lines[0].endswith(f"myp: (vfs_read+0x0/0x{size:x}) cnt=128")
    assert re.search(r"myr: \(ksys_read\+0x4a/0x[0-9a-f]+ <- vfs_read\) ret=-14$", lines[1])
    assert re.search(r"  myp +1 +0\n", (t / "kprobe_profile").read_text())
    assert append(t / "kprobe_events", "-:myp") == errno.EBUSY
    with pytest.raises(OSError) as err:
        open(t / "kprobe_events", "w").close()
    assert err.value.errno == errno.EBUSY
    assert len((t / "kprobe_events").read_text().splitlines()) == 2
    (t / "events/kprobes/enable").write_text("0")
    assert append(t / "kprobe_events", "-:kprobes/myp") is None
    assert gone(t / "events/kprobes/myp")


def test_fprobe_tprobe_and_eprobe_rules(t):
    assert append(t / "dynamic_events", "f vfs_read%return $retval") is None
    assert append(t / "dynamic_events", "f:fp2 vfs_read $retval") is None  # $retval: a return probe
    assert append(t / "dynamic_events", "f no_such_function_here") == errno.EINVAL
    assert append(t / "dynamic_events", "f vfs_read %ax") == errno.EINVAL  # no registers
    assert append(t / "dynamic_events", "t sched_switch $retval") == errno.EINVAL
    assert append(t / "dynamic_events", "t not_loaded_yet_tp") is None  # may come with a module
    assert append(t / "dynamic_events", "e:ep1 sched.nosuch") == errno.ENODEV
    assert append(t / "dynamic_events", "e:ep2 fprobes.vfs_read__exit") == errno.ENODEV
    assert append(t / "dynamic_events", "e:ep3 sched.sched_switch x=$nosuchfield") == errno.EINVAL
    assert append(t / "dynamic_events",
                  "e:ep4 sched.sched_switch c=$next_comm:string if next_pid > 1") is None
    assert (t / "dynamic_events").read_text() == (
        "f:fprobes/vfs_read__exit vfs_read%return arg1=$retval\n"
        "f:fprobes/fp2 vfs_read%return arg1=$retval\n"
        "t:tracepoints/not_loaded_yet_tp not_loaded_yet_tp\n"
        "e:eprobes/ep4 sched.sched_switch c=$next_comm:string\n")
    log = (t / "error_log").read_text()
    assert "trace_fprobe: error: Failed to register probe event" in log
    assert "trace_fprobe: error: Invalid $-variable specified" in log
    assert "trace_fprobe: error: $retval is not available on probe" in log
    assert "event_probe: error: Attached event does not exist" in log
    assert append(t / "dynamic_events", "-:eprobes/ep4") is None
    assert gone(t / "events/eprobes")


def test_linux_6_18_has_no_kprobes():
    """The shipped 6.18 profile has no kprobe_events: nothing of this appears."""
    with Fake(profile="linux-6.18") as fake:
        names = os.listdir(fake.tracing)
        assert "kprobe_events" not in names and "kprobe_profile" not in names
        assert append(fake.tracing / "dynamic_events", "p vfs_read") == errno.EINVAL
        assert append(fake.tracing / "dynamic_events", "e sched.sched_switch") == errno.EINVAL


def test_proc_kallsyms_under_run():
    """``fakedebugfs run --profile`` serves the profile's kallsyms as /proc/kallsyms."""
    out = subprocess.run(
        [sys.executable, "-m", "fakedebugfs", "run", "--profile", str(PROFILE), "--",
         "sh", "-c", "wc -l < /proc/kallsyms; grep -m1 ' T vfs_read$' /proc/kallsyms"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    count, line = out.stdout.split("\n", 1)
    assert int(count) == len(read_profile_text(PROFILE, "kallsyms").splitlines())
    assert line.strip() == f"{symbol('vfs_read')[0]:016x} T vfs_read"


@pytest.mark.parametrize("command", [
    "e ^a.", "e ^.b", "e ^a.b", "e syscalls/sys_enter_openat ^foo",
    "e:^/bar syscalls/sys_enter_openat",
    "e:^foo.1/bar syscalls/sys_enter_openat", "e:^ syscalls/sys_enter_openat",
    "e:foo/^bar.1 syscalls/sys_enter_openat", "e:foo/bar syscalls/sys_enter_openat arg=^dfd",
    "e:foo/bar syscalls/sys_enter_openat arg=^$foo", "e:foo/bar syscalls/sys_enter_openat if ^",
])
def test_eprobe_syntax_errors(t, command):
    """eprobes_syntax_errors.tc: refused, the caret where 6.12 puts it."""
    pos = command.index("^")
    cmd = command.replace("^", "")
    assert append(t / "dynamic_events", cmd) is not None
    log = (t / "error_log").read_text().splitlines()
    assert re.fullmatch(r"\[ *\d+\.\d{6}\] event_probe: error: .+", log[-3])
    assert log[-2] == f"  Command: {cmd.rstrip()}"  # the words re-joined
    assert log[-1] == " " * (11 + pos) + "^"


def _entries(t) -> list:
    return [l for l in (t / "trace").read_text().splitlines() if not l.startswith("#")]


def test_calls_hit_kprobes_and_fprobes_with_their_arguments(fk, t):
    """A system call's call tree (the profile's, recorded in the guest)
    hits the kprobe, kretprobe and fprobes on do_sys_openat2 with what the
    fake knows of the call: the openat's dfd and filename reach the
    parameters of those names (BTF), so %di, $arg1 and ``$arg*``; the
    user's string and the kernel's open_how are memory it cannot read. In
    the guest's order: kprobe then fprobe at the entry, fprobe then
    kretprobe at the return; $retval typed by BTF (long), the call's
    return value, so the return hits are recorded when it returns."""
    size = symbol("do_sys_openat2")[1]
    for line in ("p:myp do_sys_openat2 dfd=%di fn=+0(%si):string flags=+0(%dx):x64 "
                 "a1=$arg1 c=$comm",
                 "r:myr do_sys_openat2 $retval"):
        assert append(t / "kprobe_events", line) is None
    for line in ("f:myf do_sys_openat2 $arg*", "f:myfr do_sys_openat2%return $retval"):
        assert append(t / "dynamic_events", line) is None
    (t / "events/kprobes/enable").write_text("1")
    (t / "events/fprobes/enable").write_text("1")
    (t / "trace").write_text("")
    fk.emit("raw_syscalls:sys_enter", cpu=1, pid=42, comm="cat", id=257,
            args=[0xFFFFFF9C, 0x7FFD1000, 0x241, 0o666, 0, 0])
    # the return probes wait for the call's return value
    assert [re.search(r" (\w+): ", l)[1] for l in _entries(t)] == ["myp", "myf"]
    fk.emit("raw_syscalls:sys_exit", cpu=1, pid=42, comm="cat", id=257, ret=3)
    lines = _entries(t)
    assert [re.search(r" (\w+): ", l)[1] for l in lines] == ["myp", "myf", "myfr", "myr"]
    assert all(l.split()[0] == "cat-42" and l.split()[1] == "[001]" for l in lines)
    assert lines[0].endswith(f"myp: (do_sys_openat2+0x0/0x{size:x}) dfd=0xffffff9c fn=(fault) "
                             'flags=0x0 a1=0xffffff9c c="cat"')
    assert lines[1].endswith(f"myf: (do_sys_openat2+0x0/0x{size:x}) dfd=-100 "
                             "filename=0x7ffd1000 how=0x0")
    for line, name in zip(lines[2:], ("myfr", "myr")):
        assert re.search(name + r": \(__x64_sys_openat\+0x[0-9a-f]+/0x[0-9a-f]+ <- "
                         r"do_sys_openat2\) arg1=3$", line)
    assert re.search(r"  myp +1 +0\n", (t / "kprobe_profile").read_text())
    # another system call's tree does not reach do_sys_openat2
    (t / "trace").write_text("")
    fk.emit("raw_syscalls:sys_enter", cpu=0, pid=42, comm="cat", id=0, args=[3, 0, 8, 0, 0, 0])
    assert _entries(t) == []


def test_exec_tree_hands_its_file_name_to_getname(fk, t):
    """An exec's tree (sched_process_exec) calls getname(filename): a
    string fetch of its first argument is the exec'd file's name.  getname
    starts with an endbr64 (its ftrace site is at +4): the probe sits
    there, and +4 is its entry too (BTF names $arg1), as in the guest."""
    assert append(t / "kprobe_events", "p:g getname name=+0(%di):string") is None
    assert append(t / "kprobe_events", "p:k4 kernel_clone+4 $arg1") is None
    assert (t / "kprobe_events").read_text().splitlines()[-1] == \
        "p:kprobes/k4 kernel_clone+4 args=args"
    (t / "events/kprobes/g/enable").write_text("1")
    (t / "trace").write_text("")
    fk.emit("sched:sched_process_exec", cpu=0, pid=43, comm="ls", filename="/usr/bin/ls",
            old_pid=43)
    lines = _entries(t)
    assert lines and all(re.search(r'g: \(getname\+0x4/0x50\) name="/usr/bin/ls"$', l)
                         for l in lines)


def test_an_enabled_eprobe_holds_its_event_in_trigger_mode(fk, t):
    """enable_eprobe adds a trigger to the attached event's file of the
    same trace array: its ``enable`` reads ``0*`` while the eprobe is
    enabled there (``1*`` when enabled too), ``0`` once it is disabled;
    an instance's eprobe holds the instance's event only.  The 6.12
    guest's answers (ftracetest's trigger-synthetic-eprobe.tc steps)."""
    wakeup = t / "events/sched/sched_wakeup/enable"
    assert append(t / "dynamic_events", "e:ept sched/sched_wakeup pid=$pid") is None
    seen = [wakeup.read_text()]
    (t / "events/eprobes/ept/enable").write_text("1")
    for value in ("", "0", "1", "0"):
        if value:
            wakeup.write_text(value)
        seen.append(wakeup.read_text())
    (t / "events/eprobes/ept/enable").write_text("0")
    seen.append(wakeup.read_text())
    assert seen == ["0\n", "0*\n", "0*\n", "1*\n", "0*\n", "0\n"]
    inst = t / "instances/ept"
    inst.mkdir()
    try:
        (inst / "events/eprobes/ept/enable").write_text("1")
        assert (wakeup.read_text(), (inst / "events/sched/sched_wakeup/enable").read_text()) \
            == ("0\n", "0*\n")
        (inst / "events/eprobes/ept/enable").write_text("0")
        assert (inst / "events/sched/sched_wakeup/enable").read_text() == "0\n"
        (inst / "events/eprobes/ept/enable").write_text("1")
    finally:
        inst.rmdir()  # the instance's events go with it, the eprobe's hold too
    assert wakeup.read_text() == "0\n"
    assert append(t / "dynamic_events", "-:ept") is None


def test_eprobes_record_their_event_fields(fk, t):
    """An event probe records an entry each time its event fires, with the
    attached fields: 6.12 stores a char array field without a string type,
    and $comm, as addresses (u64), numbers as they are; its filter is the
    attached event's."""
    assert append(t / "dynamic_events", "e:ep2 sched.sched_switch prev=$prev_comm "
                  "np=$next_pid p=$prev_comm:string c=$comm") is None
    assert append(t / "dynamic_events", "e:ep3 sched.sched_switch np=$next_pid "
                  "if next_pid == 9") is None
    (t / "events/eprobes/enable").write_text("1")
    (t / "trace").write_text("")
    for nxt in (7, 9):
        fk.emit("sched:sched_switch", cpu=1, pid=42, comm="cat", prev_comm="cat", prev_pid=42,
                prev_prio=120, prev_state=1, next_comm="sh", next_pid=nxt, next_prio=120)
    lines = _entries(t)
    assert len(lines) == 3
    assert re.search(r'ep2: \(sched\.sched_switch\) prev=0xff[0-9a-f]{14} np=0x7 p="cat" '
                     r"c=0xff[0-9a-f]{14}$", lines[0])
    assert re.search(r"ep2: .* np=0x9 ", lines[1])
    assert lines[2].endswith("ep3: (sched.sched_switch) np=0x9")
    (t / "events/eprobes/enable").write_text("0")
    (t / "trace").write_text("")
    fk.emit("sched:sched_switch", cpu=1, pid=42, comm="cat", prev_comm="cat", prev_pid=42,
            prev_prio=120, prev_state=1, next_comm="sh", next_pid=9, next_prio=120)
    assert _entries(t) == []


def test_dereference_drops_the_btf_type(t):
    """perf-tools' opensnoop defines ``r:getnameprobe getname
    +0(+0($retval)):string``: a dereference reads through the BTF type of
    what it dereferences, so the string type is not checked against
    getname's ``struct filename *`` and a bare ``+0($retval)`` is x64, as
    in the guest."""
    for line in ("r:getnameprobe getname +0(+0($retval)):string",
                 "r:g2 getname +0($retval)", "p:g3 vfs_read +0(file)"):
        assert append(t / "kprobe_events", line) is None
    assert (t / "kprobe_events").read_text() == (
        "r10:kprobes/getnameprobe getname arg1=+0(+0($retval)):string\n"
        "r10:kprobes/g2 getname arg1=+0($retval)\n"
        "p:kprobes/g3 vfs_read arg1=+0(file)\n")
    assert (t / "events/kprobes/g2/format").read_text().splitlines()[-1] == (
        'print fmt: "(%lx <- %lx) arg1=0x%Lx", REC->__probe_func, REC->__probe_ret_ip, '
        "REC->arg1")


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kprobes"


def test_btf_arguments_as_the_guest():
    """fixtures/kprobes/btf-args.sh (BTF parameters by name, ``$arg*``,
    ``$argN``, fields, typed ``$retval``, string fetches, their refusals),
    run in the Debian 6.12 guest and under ``fakedebugfs run``: the same
    acceptances, listing, ``error_log`` entries with their carets, fields
    and print fmts (the log's timestamps cut)."""
    out = subprocess.run(
        [sys.executable, "-m", "fakedebugfs", "run", "--profile", str(PROFILE), "--",
         "bash", str(FIXTURES / "btf-args.sh")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    strip = lambda text: re.sub(r"(?m)^\[ *\d+\.\d+\] ", "", text)
    assert strip(out.stdout) == strip((FIXTURES / "btf-args.debian-6.12.out").read_text())


def test_probes_inside_a_function_as_the_guest():
    """fixtures/kprobes/insn-boundary.sh (``SYM+OFFS`` at every offset of
    the first 25 bytes of four functions, a ud2, a return probe past the
    entry), run in the Debian 6.12 guest and under ``fakedebugfs run``: the
    same probes taken, each refusal with the same errno (EILSEQ off an
    instruction boundary, EINVAL at a BUG site's ud2), the same listing and
    ``error_log`` entries with their carets (timestamps cut)."""
    out = subprocess.run(
        [sys.executable, "-m", "fakedebugfs", "run", "--profile", str(PROFILE), "--workload",
         "none", "--", "bash", str(FIXTURES / "insn-boundary.sh")],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    strip = lambda text: re.sub(r"(?m)^\[ *\d+\.\d+\] ", "", text)
    guest = strip((FIXTURES / "insn-boundary.debian-6.12.out").read_text())
    assert "Invalid or incomplete multibyte" in guest and "Invalid argument" in guest
    assert strip(out.stdout) == guest


def test_tracepoint_probes_fire_with_their_tracepoint(fk, t):
    """A tracepoint probe records an entry each time its tracepoint fires:
    ``__probe_ip`` is the tracepoint's stub past its endbr64, as the
    guest's ``(__probestub_sched_switch+0x4/0x10)``; ``$argN`` are the
    TP_PROTO arguments by their BTF names, known where an event field has
    that name (prev_state), else 0 (the task pointers)."""
    assert append(t / "dynamic_events", "t:tp1 sched_switch $arg1 $arg2 $arg4") is None
    assert (t / "dynamic_events").read_text() == \
        "t:tracepoints/tp1 sched_switch preempt=preempt prev=prev prev_state=prev_state\n"
    (t / "events/tracepoints/tp1/enable").write_text("1")
    (t / "trace").write_text("")
    fk.emit("sched:sched_switch", cpu=1, pid=42, comm="cat", prev_comm="cat", prev_pid=42,
            prev_prio=120, prev_state=1, next_comm="sh", next_pid=7, next_prio=120)
    lines = _entries(t)
    assert len(lines) == 1
    assert lines[0].endswith("tp1: (__probestub_sched_switch+0x4/0x10) preempt=0 prev=0x0 "
                             "prev_state=1")
    (t / "events/tracepoints/tp1/enable").write_text("0")
    (t / "trace").write_text("")
    fk.emit("sched:sched_switch", cpu=1, pid=42, comm="cat", prev_comm="cat", prev_pid=42,
            prev_prio=120, prev_state=1, next_comm="sh", next_pid=7, next_prio=120)
    assert _entries(t) == []


MIRROR_SCRIPT = r"""
cd /sys/kernel/tracing || exit 1
echo 'p:myp do_sys_openat2 dfd=%di' > kprobe_events
echo 'p:gn getname name=+0(%di):string' >> kprobe_events
echo 'f:myf do_sys_openat2 $arg*' >> dynamic_events
echo 1 > events/kprobes/enable; echo 1 > events/fprobes/enable
/bin/cat /etc/hostname > /dev/null
echo 0 > events/kprobes/enable; echo 0 > events/fprobes/enable
cat trace
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="--mirror needs root (CAP_PERFMON)")
def test_the_commands_system_calls_and_execs_hit_kernel_probes():
    """Under ``run --mirror tree`` the command's real openat(2) calls run
    their call trees, which hit the kprobe and the fprobe on
    do_sys_openat2 with the call's dfd (AT_FDCWD: %di is the int's bits,
    $arg* prints it signed); the exec of /bin/cat (run's process watcher)
    hands its file name to getname, as in the guest."""
    out = subprocess.run(
        [sys.executable, "-m", "fakedebugfs", "run", "--mirror", "tree", "--profile", str(PROFILE),
         "--", "sh", "-c", MIRROR_SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert re.search(r" myp: \(do_sys_openat2\+0x0/0xe0\) dfd=0xffffff9c\n", text), text
    assert re.search(r" myf: \(do_sys_openat2\+0x0/0xe0\) dfd=-100 filename=0x[0-9a-f]+ "
                     r"how=0x0\n", text), text
    assert ' gn: (getname+0x4/0x50) name="/bin/cat"\n' in text, text


def _selftests() -> Path:
    env = os.environ.get("FTRACETEST_DIR")
    return Path(env) if env else \
        Path("/tmp/linux-src/linux-source-6.12/tools/testing/selftests/ftrace")


# ftracetest rows that need probe hits with their arguments (the 6.12
# guest passes them); the eprobe row's chdir is the shell's own, mirrored
FTRACETEST_HIT_ROWS = ("dynevent/add_remove_eprobe.tc", "dynevent/add_remove_btfarg.tc",
                       "kprobe/kprobe_args.tc", "kprobe/kprobe_args_comm.tc")


@pytest.mark.skipif(os.geteuid() != 0, reason="--mirror needs root (CAP_PERFMON)")
@pytest.mark.skipif(not (_selftests() / "ftracetest").is_file(),
                    reason="needs the kernel's tools/testing/selftests/ftrace (FTRACETEST_DIR)")
def test_ftracetest_probe_hit_rows(tmp_path):
    """ftracetest's probe rows that check hits (a kprobe's $comm and
    arguments, an eprobe on the shell's own chdir, BTF arguments) under
    ``fakedebugfs run --mirror tree --profile debian-6.12``."""
    import shutil

    work = tmp_path / "ftrace"
    shutil.copytree(_selftests(), work)
    rows = " ".join(f"test.d/{r}" for r in FTRACETEST_HIT_ROWS)
    out = subprocess.run(
        [sys.executable, "-m", "fakedebugfs", "run", "--mirror", "tree", "--profile",
         str(PROFILE), "--", "sh", "-c", f"cd {work} && ./ftracetest {rows}"],
        capture_output=True, text=True, timeout=600)
    results = [ln for ln in out.stdout.splitlines() if ln.startswith("[")]
    assert len(results) == len(FTRACETEST_HIT_ROWS), out.stdout + out.stderr
    assert all(r.endswith("[PASS]") for r in results), out.stdout


@pytest.mark.parametrize("remove", ["-:p{n}", "truncate"])
def test_a_removed_probes_directory_is_gone_when_the_write_returns(t, remove):
    """As on the kernel, the event's directory is gone once the write of
    ``-:NAME`` (or the O_TRUNC open of ``kprobe_events``) returns, though
    the kernel had just looked it up: the shell's ``test -d`` right after it
    (ftracetest's kprobe rows end so) finds nothing."""
    found = []
    for n in range(40):
        with open(t / "kprobe_events", "a") as f:
            f.write(f"p:p{n} kernel_clone\n")
        assert os.path.isdir(t / "events" / "kprobes" / f"p{n}")  # now in the kernel's dcache
        if remove == "truncate":
            open(t / "kprobe_events", "w").close()
        else:
            with open(t / "kprobe_events", "a") as f:
                f.write(remove.format(n=n) + "\n")
        found.append(os.path.isdir(t / "events" / "kprobes" / f"p{n}"))
    assert not any(found), f"{sum(found)} of 40 directories still there after their removal"
