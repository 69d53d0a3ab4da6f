"""Dynamic events through a mounted fake: ``uprobe_events``,
``dynamic_events``, ``uprobe_profile`` and the events they define.

The expected texts (formats, listings, ``error_log`` entries and carets)
are what this machine's 6.18 kernel wrote for the same commands (a private
tracefs mount, every definition removed afterwards).  That kernel has
uprobe events only (no kprobes, no CONFIG_EPROBE_EVENTS): ``e`` commands
are EINVAL with no log there, as here.
"""

from __future__ import annotations

import errno
import os
import re
import time

import pytest

from fakedebugfs import Fake

PROFILE = "linux-6.18"  # the kernel that wrote the expected texts

FULL = (r'p:h7grp/h7up /bin/sh:0x10 a=%ax:u8 b=+0(%sp):string c=$stack1:s16 d=@+0x10:x32[2] '
        r'e=$comm f=\1:x8 g=%di:b3@2/8 h=%si:x64 i=\"hi\" j=+0(%di):ustring k=%cx:char')
FULL_FORMAT = """\
	field:unsigned long __probe_ip;	offset:8;	size:8;	signed:0;
	field:u8 a;	offset:16;	size:1;	signed:0;
	field:__data_loc char[] b;	offset:17;	size:4;	signed:1;
	field:s16 c;	offset:21;	size:2;	signed:1;
	field:u32 d[];	offset:23;	size:8;	signed:0;
	field:__data_loc char[] e;	offset:31;	size:4;	signed:1;
	field:u8 f;	offset:35;	size:1;	signed:0;
	field:u8 g;	offset:36;	size:1;	signed:0;
	field:u64 h;	offset:37;	size:8;	signed:0;
	field:__data_loc char[] i;	offset:45;	size:4;	signed:1;
	field:__data_loc char[] j;	offset:49;	size:4;	signed:1;
	field:u8 k;	offset:53;	size:1;	signed:0;

print fmt: "(%lx) a=%u b=\\"%s\\" c=%d d={0x%x,0x%x} e=\\"%s\\" f=0x%x g=%u h=0x%Lx i=\\"%s\\" \
j=\\"%s\\" k='%c'", REC->__probe_ip, REC->a, __get_str(b), REC->c, REC->d[0], REC->d[1], \
__get_str(e), REC->f, REC->g, REC->h, __get_str(i), __get_str(j), REC->k
"""


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
    """*path* disappears (the server invalidates the kernel's cached
    entry asynchronously: allow it a second)."""
    for _ in range(100):
        if not os.path.exists(path):
            return True
        time.sleep(0.01)
    return False


def test_uprobe_definitions_formats_and_listings():
    with Fake(profile=PROFILE, clock="virtual") as fk:
        t = fk.tracing
        assert append(t / "uprobe_events", FULL) is None
        assert append(t / "uprobe_events", "r:h7grp/h7ret /bin/sh:0x20 rv=$retval:s64 cm=$comm") \
            is None
        assert append(t / "uprobe_events", "p /bin/sh:0x30") is None
        assert append(t / "dynamic_events", "p:h7grp/h7pct /bin/sh:0x40%return") is None
        assert (t / "dynamic_events").read_text() == (
            FULL.replace(":0x10", ":0x0000000000000010") + "\n"
            "r:h7grp/h7ret /bin/sh:0x0000000000000020 rv=$retval:s64 cm=$comm\n"
            "p:uprobes/p_sh_0x30 /bin/sh:0x0000000000000030\n"
            "r:h7grp/h7pct /bin/sh:0x0000000000000040\n")
        assert (t / "uprobe_events").read_text() == (t / "dynamic_events").read_text()
        assert (t / "uprobe_profile").read_text().splitlines()[1] == \
            "  /bin/sh h7ret" + " " * 54 + "0"
        fmt = (t / "events/h7grp/h7up/format").read_text()
        assert fmt.split("\n\n", 1)[1] == FULL_FORMAT
        assert (t / "events/h7grp/h7pct/format").read_text().endswith(
            "\tfield:unsigned long __probe_func;\toffset:8;\tsize:8;\tsigned:0;\n"
            "\tfield:unsigned long __probe_ret_ip;\toffset:16;\tsize:8;\tsigned:0;\n\n"
            'print fmt: "(%lx <- %lx)", REC->__probe_func, REC->__probe_ret_ip\n')
        assert sorted(os.listdir(t / "events/h7grp")) == ["enable", "filter", "h7pct", "h7ret",
                                                          "h7up"]
        assert sorted(os.listdir(t / "events/h7grp/h7up")) == ["enable", "filter", "format",
                                                               "id", "trigger"]
        assert "uprobes:p_sh_0x30" in (t / "available_events").read_text().split()


def test_probe_event_is_an_event_like_any_other():
    """Enabled, filtered and injected: the entry prints as
    ``print_uprobe_event`` does; enabled, it cannot be removed (EBUSY);
    removal takes its directory away, O_TRUNC removes everything."""
    with Fake(profile=PROFILE, clock="virtual") as fk:
        t = fk.tracing
        append(t / "uprobe_events", "r:h7grp/h7ret /bin/sh:0x20 rv=$retval:s64 cm=$comm")
        (t / "events/h7grp/h7ret/filter").write_text("rv < 0")
        (t / "events/h7grp/h7ret/enable").write_text("1")
        for rv in (-3, 5):
            fk.emit("h7grp:h7ret", pid=5, comm="sh", __probe_func=0x1000, __probe_ret_ip=0x2000,
                    rv=rv, cm="sh")
        lines = [l for l in (t / "trace").read_text().splitlines() if not l.startswith("#")]
        assert len(lines) == 1
        assert lines[0].endswith('h7ret: (0x2000 <- 0x1000) rv=-3 cm="sh"')
        assert re.search(r"h7ret +2$", (t / "uprobe_profile").read_text())
        assert append(t / "dynamic_events", "-:h7grp/h7ret") == errno.EBUSY
        with pytest.raises(OSError) as err:
            open(t / "uprobe_events", "w").close()
        assert err.value.errno == errno.EBUSY
        (t / "events/h7grp/h7ret/enable").write_text("0")
        assert append(t / "dynamic_events", "-:h7grp/nosuch") == errno.ENOENT
        assert append(t / "dynamic_events", "-:h7grp/h7ret") is None
        assert gone(t / "events/h7grp")
        append(t / "dynamic_events", "p:a/b /bin/sh:1")
        open(t / "dynamic_events", "w").close()
        assert (t / "dynamic_events").read_text() == "" and gone(t / "events/a")


@pytest.mark.parametrize("command", [
    "p ^/non_exist_file:100", "p ^/sys:100", "p /bin/sh:^10a", "p /bin/sh:10(^1a)",
    "p /bin/sh:10(10^", "p /bin/sh:10(10)^a", "p /bin/sh:10 ^@+ab", "p /bin/sh:10 ^@symbol",
    "p /bin/sh:10^%hoge", "p /bin/sh:10(10)^%return", "p /bin/sh:10 $stack0:^symstr",
    "p /bin/sh:10 $comm:^u32", "p /bin/sh:10 a=%ax:^foo", "p /bin/sh:10 a=%ax:u8[2^",
])
def test_uprobe_syntax_errors(command):
    """uprobe_syntax_errors.tc (and type errors): the error_log entry and its
    caret, where 6.18 puts it."""
    with Fake(profile=PROFILE) as fk:
        t = fk.tracing
        pos = command.index("^")
        cmd = command.replace("^", "")
        assert append(t / "uprobe_events", cmd) in (errno.EINVAL, errno.ENOENT)
        log = (t / "error_log").read_text().splitlines()
        assert re.fullmatch(r"\[ *\d+\.\d{6}\] trace_uprobe: error: .+", log[-3])
        assert log[-2] == f"  Command: {cmd}"
        assert log[-1] == " " * (11 + pos) + "^"


def test_duplicates_limits_and_other_kinds():
    with Fake(profile=PROFILE) as fk:
        t = fk.tracing
        assert append(t / "dynamic_events", "p:g/e /bin/sh:0x10") is None
        assert append(t / "dynamic_events", "p:g/e /bin/sh:0x10") == errno.EEXIST
        assert append(t / "dynamic_events", "p:g/e /bin/sh:0x20") is None  # another place
        assert append(t / "dynamic_events", "p:g/e /bin/sh:0x20 a=%ax") == errno.EEXIST
        assert append(t / "dynamic_events", "p:sched/sched_switch /bin/sh:0x20") == errno.EEXIST
        log = (t / "error_log").read_text().splitlines()
        assert log[-9:] == [log[-9], "  Command: p:g/e /bin/sh:0x10", " " * 11 + "^",
                            log[-6], "  Command: p:g/e /bin/sh:0x20 a=%ax", " " * 30 + "^",
                            log[-3], "  Command: p:sched/sched_switch /bin/sh:0x20",
                            " " * 11 + "^"]
        assert log[-9].endswith("There is already the exact same probe event")
        assert log[-3].endswith("Given group/event name is already used by another event")
        args = " ".join(f"\\{i}" for i in range(1, 129))
        assert append(t / "dynamic_events", f"p /bin/sh:10 {args}") is None
        assert append(t / "dynamic_events", f"p:x/y /bin/sh:10 {args} \\129") == errno.E2BIG
        for cmd in ("e:foo/bar sched.sched_switch", "x:foo", "p:foo", "-:", "f vfs_read"):
            assert append(t / "dynamic_events", cmd) == errno.EINVAL, cmd
        readme = (t / "README").read_text()
        assert "uprobe_events\t\t- Create/append/remove/show" in readme
        assert "\\imm-value" in readme and "e[:[<group>/][<event>]]" not in readme
