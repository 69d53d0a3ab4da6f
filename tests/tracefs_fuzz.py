"""A differential fuzzer of tracefs control files: the same writes go to a
real kernel's tracefs (a scratch instance, and the top level for the files
only it has, each put back) and to a fakedebugfs mount of that kernel's
profile, and each side's answer is recorded as the errno or count of the
``write(2)`` and the file read back afterwards (normalised where the kernel
prints times).

Inputs are made from a seed: values each file takes, their neighbours, and
mutations (signs, prefixes, spaces, NULs, the 66-byte bound of
``kstrtoul_from_user``, numbers of thousands of digits, bytes that are not
UTF-8).  ``record(root)`` lists the writable files of a scratch instance of
one tree, reads what the inputs depend on there (read_tree), runs the
inputs and returns the fixture; ``compare(fixture, root)`` replays its cases
on another tree and returns the ones answered differently.  Used by
tests/test_tracefs_semantics.py.  One fixture per profile (fixture_path):

    python tests/tracefs_fuzz.py record            # as root: this host's kernel (linux-6.18)
    python tests/tracefs_fuzz.py --profile debian-6.12 record --tracing /sys/kernel/tracing \
        --out WORK/semantics-debian-6.12.json.gz   # in the oracle guest
    python tests/tracefs_fuzz.py [--profile P] compare MNT/tracing   # a fake's figures
    python tests/tracefs_fuzz.py [--profile P] check TRACING         # still the kernel's?
"""

from __future__ import annotations

import argparse
import fnmatch
import gzip
import json
import os
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from support import realtracefs

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tracefs"
DEFAULT_PROFILE = "linux-6.18"
SCRATCH = f"fuzz{os.getpid()}"  # the scratch instance: one per process
SEED = 9


def fixture_path(profile: str = DEFAULT_PROFILE) -> Path:
    """The recorded answers of *profile*'s kernel: this host's 6.18 for
    linux-6.18, the oracle guest's kernel for the others."""
    if profile == DEFAULT_PROFILE:
        return FIXTURES / "semantics.json.gz"
    return FIXTURES / f"semantics-{profile}.json.gz"


FIXTURE = fixture_path()

# The files fuzzed are every writable file (mode & 0222) of a fresh instance
# of the real tracefs, listed when recording and kept in the fixture
# ("writable"), plus three top-level files put back after each input.  Each
# file gets a kind of input, a count, the file read back after the write,
# and where it is ("inst": the scratch instance; "top": the top level).
#
# Most files get hundreds of inputs; every event's enable, filter and
# trigger file and every system's enable and filter get a sweep of one to
# three inputs each, so every one is answered once.  Trigger and filter
# fuzzing in depth uses three events that exist in the kernel and do not
# fire (DEEP_CANDIDATES, checked when recording): a trigger's count then
# stays as written.
#
# What depends on the kernel is read from its tree when recording and kept
# in the fixture ("tree": see read_tree): the CPUs, the values of a fresh
# instance (the baseline every input starts from), the deep events and
# their fields, the options.
DEEP_CANDIDATES = (  # events that fire at boot only, on a hung task, or on acct(2)
    "events/initcall/initcall_finish", "events/sched/sched_process_hang",
    "events/syscalls/sys_enter_acct", "events/initcall/initcall_start",
    "events/initcall/initcall_level", "events/syscalls/sys_exit_acct",
)
INT_TYPES = {"int", "long", "short", "pid_t", "size_t", "u8", "u16", "u32", "u64",
             "s8", "s16", "s32", "s64", "__u32", "__u64", "__s32", "__s64"}
# the files a fresh instance's value is read from, and put back to before every input
BASELINE_FILES = ("tracing_on", "buffer_size_kb", "buffer_percent", "buffer_subbuf_size_kb",
                  "current_tracer", "trace_clock", "tracing_cpumask", "events/enable")
TOP_BASELINE = ("tracing_thresh",)


def fixed(tree: dict) -> dict:
    """file -> (kind, read back, where, inputs) of the files fuzzed in depth."""
    ev = next(iter(tree["deep"]))
    system = ev.rsplit("/", 1)[0]
    table = {
        "tracing_on": ("ulong", "tracing_on", "inst", 320),
        "buffer_size_kb": ("size", "buffer_size_kb", "inst", 250),
        "per_cpu/cpu0/buffer_size_kb": ("size", "per_cpu/cpu0/buffer_size_kb", "inst", 250),
        "per_cpu/cpu1/buffer_size_kb": ("size", "per_cpu/cpu1/buffer_size_kb", "inst", 80),
        "per_cpu/cpu0/trace": ("text", "trace", "inst", 30),
        "per_cpu/cpu1/trace": ("text", "trace", "inst", 30),
        "free_buffer": ("text", "buffer_size_kb", "inst", 40),
        "buffer_percent": ("ulong", "buffer_percent", "inst", 320),
        # the instance's header_page shows the data size of its sub-buffers
        "buffer_subbuf_size_kb": ("ulong", ("buffer_subbuf_size_kb", "events/header_page"),
                                  "inst", 320),
        "current_tracer": ("tracer", "current_tracer", "inst", 150),
        "trace_clock": ("clock", "trace_clock", "inst", 200),
        "trace_options": ("option", "trace_options", "inst", 300),
        "tracing_cpumask": ("cpumask", "tracing_cpumask", "inst", 300),
        "set_event": ("set_event", "set_event", "inst", 600),
        "set_event_pid": ("pids", "set_event_pid", "inst", 400),
        "set_event_notrace_pid": ("pids", "set_event_notrace_pid", "inst", 400),
        "trace_marker": ("marker", "trace", "inst", 400),
        "trace_marker_raw": ("raw", None, "inst", 300),
        "error_log": ("text", "error_log", "inst", 120),
        "trace": ("text", None, "inst", 120),
        "events/enable": ("ulong", "events/enable", "inst", 120),
        f"{system}/enable": ("ulong", f"{system}/enable", "inst", 320),
        f"{system}/filter": ("filter", f"{ev}/filter", "inst", 500),
        "tracing_thresh": ("ulong", "tracing_thresh", "top", 320),
        "saved_cmdlines_size": ("ulong", "saved_cmdlines_size", "top", 320),
        "dynamic_events": ("dynevent", None, "top", 200),
    }
    for cpu in range(2, tree["cpus"]):  # the CPUs past the first two: fewer inputs
        table[f"per_cpu/cpu{cpu}/buffer_size_kb"] = (
            "size", f"per_cpu/cpu{cpu}/buffer_size_kb", "inst", 40)
        table[f"per_cpu/cpu{cpu}/trace"] = ("text", "trace", "inst", 10)
    return table


TOP = ("tracing_thresh", "saved_cmdlines_size", "dynamic_events")
# Writable instance files (shell patterns) the fake does not serve yet, and
# why: they get no inputs; the test checks that the kernel's files the fake
# lacks are among these, and prints them.
ABSENT = {
    "set_ftrace_*": "the function tracer's filters: function tracing is issue 32",
    "options/func_stack_trace": "an option of the function tracer (issue 32)",
    "options/func-no-repeats": "an option of the function tracer (issue 32)",
    "options/funcgraph-*": "an option of the function_graph tracer (issue 32)",
    "options/display-graph": "an option of the function_graph tracer (issue 32)",
    "options/sleep-time": "an option of the function_graph tracer (issue 32)",
    "options/graph-time": "an option of the function_graph profiler (issue 32)",
    "snapshot": "the snapshot buffer: snapshot is issue 33",
    "per_cpu/cpu*/snapshot": "the snapshot buffer: snapshot is issue 33",
    "tracing_max_latency": "the max-latency buffer beside the snapshot's (issue 33)",
}


def is_absent(rel: str) -> bool:
    return any(fnmatch.fnmatchcase(rel, pat) for pat in ABSENT)


class Known(NamedTuple):
    """Answers that differ from the kernel's for a reason given here: the
    inputs to the files *file* (a shell pattern) whose data matches *data*
    (a regular expression on bytes), under the profiles named (all: None),
    and where *fake_res* is given, only if the fake answered that.  Their
    mismatches are printed by the test (a warning), not failed."""
    file: str
    data: bytes
    reason: str
    profiles: tuple | None = None
    fake_res: int | None = None

    def covers(self, case: dict, profile: str) -> bool:
        return ((self.profiles is None or profile in self.profiles)
                and fnmatch.fnmatchcase(case["file"], self.file)
                and re.search(self.data, bytes.fromhex(case["data"])) is not None
                and (self.fake_res is None or case.get("got", {}).get("res") == self.fake_res))


KNOWN: list[Known] = [
    Known("events/*filter", rb"\|\|[^|]*&&\s*$",
          "6.12 answers 'a || b &&' at random: its predicate_parse reads prog[-1] (before "
          "the program it allocated) when the text ends in '&&' after '||', and accepts or "
          "refuses by what lies there (EINVAL, 'Error: (0)', 9 times in 10 in the guest, "
          "which the fake answers); the incomplete-filter fix (kversion.py) removed the read",
          ("debian-6.12",)),
    Known("*buffer_size_kb", rb"^\s*0*[1-9][0-9]{5}",
          "the fake's buffers stop at 256 MiB per CPU (MAX_BUFFER_BYTES: ENOMEM past it); "
          "the kernel allocates what its memory allows", None, -12),
    Known("buffer_subbuf_size_kb", rb"",
          "this host's 6.18.44 build (6.18.44-fc-v1300) refuses every write to "
          "buffer_subbuf_size_kb with EPERM, before reading the number; the build the "
          "linux-6.18 profile was first captured on (fc-v769) and Debian's 6.12 resize the "
          "sub-buffers, as the fake does (no issue: a restriction of this host's build)",
          ("linux-6.18",)),
]


def known_reason(case: dict, profile: str) -> str | None:
    return next((k.reason for k in KNOWN if k.covers(case, profile)), None)


SWEEP = {"enable": 1, "filter": 1, "trigger": 1}  # inputs per event file


def file_table(writable, tree: dict) -> dict:
    """file -> (kind, read back, where, inputs, fields) for every file fuzzed."""
    table = {}
    for rel in list(writable) + list(TOP):
        if is_absent(rel):
            continue
        table[rel] = _classify(rel, tree)
    return table


def _classify(rel: str, tree: dict) -> tuple:
    table = fixed(tree)
    deep = tree["deep"]
    if rel in table:
        kind, back, where, count = table[rel]
        return kind, back, where, count, tuple(f.encode() for f in next(iter(deep.values())))
    parts = rel.split("/")
    if parts[0] == "options" and len(parts) == 2:
        return "ulong", rel, "inst", 60, None
    if parts[0] == "events" and len(parts) == 4:
        event, name = "/".join(parts[:3]), parts[3]
        if event in deep:
            count = {"enable": 150, "filter": 400, "trigger": 600}[name]
            return (name if name != "enable" else "ulong", rel, "inst", count,
                    tuple(f.encode() for f in deep[event]))
        return "ev_" + name, rel, "inst", SWEEP[name], None
    if parts[0] == "events" and len(parts) == 3:
        return "sys_" + parts[2], rel, "inst", 3, None
    raise ValueError(f"no input kind for the writable file {rel}: add it to fixed()")


def _format_fields(fmt: str) -> list[tuple[str, str]]:
    """(declaration, name) of an event's own fields (after the common ones)."""
    out = []
    for line in fmt.split("\n\n", 1)[-1].splitlines():
        m = re.match(r"\s*field:(.*?);", line)
        if m:
            decl = m.group(1).strip()  # 'char comm[16]', '__data_loc char[] comm'
            name = re.sub(r"\[[^\]]*\]", "", decl).replace("*", " ").split()[-1]
            out.append((decl, name))
    return out


def _deep_fields(fmt: str) -> tuple[str, str] | None:
    """An integer field of an event and another field, from its format."""
    fields = _format_fields(fmt)
    ints = [name for decl, name in fields if "*" not in decl and "[" not in decl
            and decl.split()[-2:-1] and decl.split()[-2] in INT_TYPES]
    if not ints:
        return None
    other = next((name for _, name in fields if name != ints[0]), None)
    return (ints[0], other) if other else None


def read_tree(tracing: str, inst: str) -> dict:
    """What the inputs and the baseline depend on in this kernel, read from
    its tree (*inst*: a fresh instance of it): the CPUs, the value of each
    BASELINE_FILES in a fresh instance, the deep events (the first three of
    DEEP_CANDIDATES that exist and record nothing while enabled for a second)
    with their fields, and the options."""
    cpus = len([d for d in os.listdir(os.path.join(inst, "per_cpu")) if d.startswith("cpu")])
    baseline = {}
    for rel in BASELINE_FILES:
        value = _read(os.path.join(inst, rel)).strip()
        if rel == "trace_clock":
            value = re.search(rb"\[(\S+)\]", value).group(1)
        baseline[rel] = value.split()[0].decode()
    for cpu in range(cpus):
        baseline[f"per_cpu/cpu{cpu}/buffer_size_kb"] = baseline["buffer_size_kb"]
    for rel in TOP_BASELINE:
        baseline[rel] = _read(os.path.join(tracing, rel)).strip().decode()
    deep = {}
    for ev in DEEP_CANDIDATES:
        fmt = _read(os.path.join(inst, ev, "format")).decode(errors="replace")
        fields = None if fmt.startswith("<errno") else _deep_fields(fmt)
        if fields and _does_not_fire(inst, ev):
            deep[ev] = list(fields)
        if len(deep) == 3:
            break
    options = sorted(name for name in os.listdir(os.path.join(inst, "options"))
                     if not is_absent(f"options/{name}"))
    return {"cpus": cpus, "baseline": baseline, "deep": deep, "options": options}


def _does_not_fire(inst: str, ev: str) -> bool:
    enable = os.path.join(inst, ev, "enable")
    _truncate(os.path.join(inst, "trace"))
    _write(enable, b"1")
    time.sleep(1)
    _write(enable, b"0")
    quiet = not trace_entries(_read(os.path.join(inst, "trace")))
    _truncate(os.path.join(inst, "trace"))
    return quiet


# --- inputs ---------------------------------------------------------------------

def mutate(rng: random.Random, data: bytes) -> bytes:
    """One of the edits the kernel's parsers must survive."""
    choice = rng.randrange(14)
    if choice == 0:
        return data + b"\n"
    if choice == 1:
        return b" " + data
    if choice == 2:
        return data + b" "
    if choice == 3:
        return data + b"\0" + bytes(rng.randrange(256) for _ in range(3))
    if choice == 4:
        return data + b"\n\n"
    if choice == 5:
        return b"+" + data
    if choice == 6:
        return b"-" + data
    if choice == 7 and data:
        i = rng.randrange(len(data))
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
    if choice == 8:
        return data * rng.randint(2, 3)
    if choice == 9:
        return data + b"\t" + data
    if choice == 10:
        return data[: rng.randrange(len(data) + 1)]
    if choice == 11:
        return data + b"\n" + data
    if choice == 12:
        return b"0x" + data
    return data


def numbers(rng: random.Random) -> bytes:
    pick = rng.randrange(12)
    if pick == 0:
        return str(rng.randrange(3)).encode()
    if pick == 1:
        return str(rng.randrange(200)).encode()
    if pick == 2:
        return str(rng.randrange(1 << 64)).encode()
    if pick == 3:
        return str((1 << 64) + rng.randrange(1 << 70)).encode()
    if pick == 4:
        return b"9" * rng.choice((19, 20, 21, 64, 65, 66, 67, 300, 4400))
    if pick == 5:
        return b"0" * rng.choice((60, 64, 65, 66, 67)) + str(rng.randrange(10)).encode()
    if pick == 6:
        return b"0" * 64 + b"1" + bytes([rng.choice(b"x \n\0a")])
    if pick == 7:
        return hex(rng.randrange(1 << 16)).encode()
    if pick == 8:
        return b"0" + oct(rng.randrange(64))[2:].encode()
    if pick == 9:
        return b"1" * 66 + b"\n"
    if pick == 10:
        return bytes(rng.choice(b"0123456789 \nx-+") for _ in range(rng.randrange(1, 8)))
    return str(rng.choice((100, 101, 127, 128, 511, 512, 513, 6552, 6553, 19659, 19660,
                           32768, 32769, 1 << 54, (1 << 54) + 1, 1 << 63))).encode()


def _kind_value(kind: str, rng: random.Random, fields=None, options=()) -> bytes:
    if kind == "ulong":
        return numbers(rng)
    if kind == "size":
        if rng.random() < 0.5:
            return str(rng.choice((1, 2, 3, 4, 7, 8, 100, 1408, 1410, 2000, 4096))).encode()
        v = numbers(rng)
        return v if not (v.isdigit() and len(v) < 17 and 8192 < int(v) < (1 << 52)) else b"8192"
    if kind == "tracer":
        return rng.choice((b"nop", b"nop\n", b"", b"no", b"nopx", b"kmemtrace", b"blk",
                           b"NOP", b" nop", b"nop ", numbers(rng)))
    if kind == "clock":
        return rng.choice((b"local", b"global", b"counter", b"uptime", b"perf", b"mono",
                           b"mono_raw", b"boot", b"tai", b"x86-tsc", b"loc", b"",
                           b"[local]", b"Local", b"local global"))
    if kind == "option":
        name = rng.choice(options).encode()
        return rng.choice((name, b"no" + name, b"nono" + name, name[:-1], b"no", b""))
    if kind == "cpumask":
        return rng.choice((b"1", b"2", b"3", b"0", b"ff", b"0x3", b"3,", b",3", b"00000003",
                           b"0,00000003", b"g", b"-1", b"1" * rng.randrange(1, 40), b"3 ",
                           b"00000000,00000001", b"1,2", b"F" * 9, hex(rng.randrange(16)).encode()))
    if kind == "set_event":
        ev = rng.choice((b"sched:sched_switch", b"initcall:initcall_level", b"initcall",
                         b"initcall:*", b"*:initcall_start", b"sched:", b":sched_switch",
                         b"nosuch", b"nosys:nosuch", b"initcall_finish", b"*:nosuch",
                         b"irq:irq_handler_entry", b"initcall:initcall_finish:x",
                         b"a" * rng.choice((126, 127, 128, 200))))
        return rng.choice((b"", b"!")) + ev
    if kind == "pids":
        return rng.choice((b"1", b"+1", b"0x1", b"1-3", b"-1", b"0", b"1 2", b"1,2", b"a",
                           b"99999999", b"4194304", b"4194303", b"32768", b"  7", b"7\n8",
                           b"!1", b"1 ", str(rng.randrange(1 << 33)).encode(), numbers(rng)))
    if kind == "marker":
        n = rng.choice((1, 5, 100, 1000, 4000, 4052, 4053, 4054, 4055, 4056, 4091, 4095,
                        4096, 4097, 5000, 8192, 9000))
        body = bytes(rng.choice(b"abcxyz 0123\t") for _ in range(n))
        return rng.choice((body, body + b"\n", body + b"\0tail", b"\n" + body))
    if kind == "raw":
        n = rng.choice((1, 3, 4, 5, 8, 100, 4000, 4056, 4058, 4059, 4060, 4061, 4062, 4064,
                        4068, 4080, 4096, 5000))
        return bytes(rng.randrange(256) for _ in range(n))
    if kind == "text":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
    if kind == "filter":
        num, other = fields
        return rng.choice((
            b"ret == 0", b"ret != 1", b"ret > 1 && ret < 5", b"(ret == 1) || ret == 2",
            b"func == 0x1", b"common_pid != 1", b"nosuch == 1", b"ret ==", b"ret == abc",
            b"(ret == 1", b"ret == 1)", b"ret ~ \"a*\"", b"0", b"", b"ret", b"== 1",
            b"ret == 1 &&", b"!(ret == 1)", b"ret & 1", b"ret == -1", b"ret <= 99999999999",
            b"ret == 1 || nosuch == 2", b"common_pid == 1 && ret >= 0", b"ret=1",
            b"ret==1", b"ret === 1", b"func ~ \"x\"", b"CPU == 0", b"comm == \"bash\"",
            b"ret == 0x", b"ret == 1 ||| ret == 2", b"((((ret == 1))))", b"ret < 0 && ",
            b"func == \"x\"", b"func != 0", b"func ~ \"*x*\"", b"func & 3",
            # incomplete: refused since a fix some kernels have (kversion.py)
            b"ret == 1 ||", b"!ret == 1 &&", b"ret == 1 && !", b"ret == 1 || ret == 2 &&",
            b"(ret == 1) &&", b"ret == 1 && ret == 2 ||", b"ret == 1 && (",
        )).replace(b"ret", num).replace(b"func", other)
    if kind == "trigger":
        cmd = rng.choice((b"traceon", b"traceoff", b"stacktrace", b"enable_event:initcall:initcall_start",
                          b"disable_event:initcall:initcall_level", b"enable_event:initcall:nosuch",
                          b"enable_event:initcall", b"disable_event", b"snapshot", b"hist:keys=ret",
                          b"bogus")).replace(b"initcall:initcall_level", b"sched:sched_process_hang")
        tail = rng.choice((b"", b":1", b":5", b":0", b":0x10", b":", b":-1", b":abc",
                           b":99999999999999999999", b" if ret == 0", b":3 if ret > 1",
                           b" if nosuch == 1", b" if", b" ret == 1", b":2:3", b" if common_pid == 1",
                           b":2 if common_pid > 1 && common_pid < 9", b" if ret == 1 &&",
                           b":1 if !ret == 1 ||"))
        return (rng.choice((b"", b"!")) + cmd + tail).replace(b"ret", fields[0])
    if kind == "dynevent":
        return rng.choice((b"", b"# comment", b"   # c", b"\n", b"-:nosuch", b"-:initcall/nosuch",
                           b"-:initcall/initcall_start", b"!x", b"#", b"   ", b"-", b"-:"))
    return _sweep_value(kind, rng)


def _sweep_value(kind: str, rng: random.Random) -> bytes:
    """Inputs of the sweep over every event and system: no trigger counts
    (the event may fire on the kernel, and a count would drop)."""
    if kind in ("ev_enable", "sys_enable"):
        return rng.choice((b"1", b"0", b"1\n", b"2", b"x", b"01", b"-1", b" 1"))
    if kind in ("ev_filter", "sys_filter"):
        return rng.choice((b"common_pid == 1", b"common_pid < 0 || common_pid > 99999", b"0",
                           b"nosuch == 1", b"common_pid ==", b"COMM == \"x\"", b"CPU != 0",
                           b"common_preempt_count & 1", b"common_type == 0x1",
                           b"(common_flags != 3", b"common_pid ~ \"1\"",
                           b"common_pid == 1 &&", b"!common_pid == 1 ||"))
    if kind == "ev_trigger":
        return rng.choice((b"traceoff", b"stacktrace", b"traceon if common_pid == 1", b"bogus",
                           b"traceon if common_pid == 1 &&",
                           b"!traceoff", b"traceoff if nosuch == 1", b"enable_event:nosuch:x",
                           b"disable_event:sched:sched_process_hang",
                           b"enable_event:initcall:initcall_level if common_pid < 0"))
    raise ValueError(kind)


def make_inputs(writable, tree: dict, seed: int = SEED) -> list[tuple[str, bytes]]:
    """Every (file, data) pair for the instance files *writable* of a kernel
    whose tree is *tree* (read_tree), in a fixed order made from *seed*."""
    rng = random.Random(seed)
    cases = []
    for path, (kind, _, _, count, fields) in file_table(writable, tree).items():
        for _ in range(count):
            data = _kind_value(kind, rng, fields, tree["options"])
            if rng.random() < 0.35 and not kind.startswith(("ev_", "sys_")):
                data = mutate(rng, data)
            if data:  # FUSE never passes a write of 0 bytes on
                cases.append((path, data))
    return cases


# --- running on a tree -------------------------------------------------------------

TS = re.compile(rb"^\[\s*\d+\.\d+\]", re.M)
TRACE_LINE = re.compile(rb"^\s*.*?-\d+\s+\[\d+\]\s+\S+\s+\d+\.\d+: (.*)$")


def _write(path: str, data: bytes, flags: int = 0):
    """The count or -errno of one write(2)."""
    try:
        fd = os.open(path, os.O_WRONLY | flags)
    except OSError as err:
        return -err.errno
    try:
        return os.write(fd, data)
    except OSError as err:
        return -err.errno
    finally:
        os.close(fd)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fp:
            return fp.read()
    except OSError as err:
        return f"<errno {err.errno}>".encode()


def _truncate(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    os.close(fd)


def writable_files(inst: str, skip=frozenset()) -> list[str]:
    """Every file of the instance directory *inst* with a write bit, sorted,
    but those under the directories *skip* (relative to *inst*)."""
    out = []
    for dirpath, dirs, names in os.walk(inst):
        rel_dir = os.path.relpath(dirpath, inst)
        dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel_dir, d)) not in skip]
        for name in names:
            full = os.path.join(dirpath, name)
            if os.lstat(full).st_mode & 0o222:
                out.append(os.path.relpath(full, inst))
    return sorted(out)


def dynamic_dirs(tracing: str) -> set[str]:
    """The event directories of the dynamic events someone defined
    (``dynamic_events``: synthetic events, probes), and the systems that
    hold nothing else: not the kernel's own, left out of a recording."""
    dirs = set()
    for line in _read(os.path.join(tracing, "dynamic_events")).decode(errors="replace").splitlines():
        m = re.match(r"\S+?:(?:(\S+)/)?(\S+)", line)
        if m:
            dirs.add(f"events/{m[1] or ('synthetic' if line[0] == 's' else 'kprobes')}/{m[2]}")
    for system in {d.rsplit("/", 1)[0] for d in dirs}:
        try:
            events = {f"{system}/{e}" for e in os.listdir(os.path.join(tracing, system))
                      if os.path.isdir(os.path.join(tracing, system, e))}
        except OSError:
            continue
        if events <= dirs:
            dirs.add(system)
    return dirs


class Tree:
    """One side: a tracing directory with a scratch instance."""

    def __init__(self, tracing: str, writable=None, tree=None):
        """*writable*, *tree*: a fixture's (None: read from this tree)."""
        self.top = tracing
        self.inst = os.path.join(tracing, "instances", SCRATCH)
        os.mkdir(self.inst)
        self.left_out = dynamic_dirs(tracing) if writable is None else set()
        self.writable = writable_files(self.inst, self.left_out) if writable is None else writable
        self.tree = read_tree(tracing, self.inst) if tree is None else tree
        self.baseline = {rel: v.encode() for rel, v in self.tree["baseline"].items()}
        self.files = file_table(self.writable, self.tree)
        self.saved = {p: _read(os.path.join(tracing, p)).strip() for p in TOP
                      if self.files[p][1]}
        self.options = {p: _read(os.path.join(self.inst, p)).strip()
                        for p in self.files if p.startswith("options/")}
        self.options_base = _read(os.path.join(self.inst, "trace_options"))
        self.options_dirty = True

    def close(self) -> None:
        for path, value in self.saved.items():
            _write(os.path.join(self.top, path), value)
        for _ in range(50):  # rmdir answers EBUSY while a reader still holds a file
            try:
                os.rmdir(self.inst)
                return
            except OSError:
                time.sleep(0.1)

    def path(self, rel: str, where: str) -> str:
        return os.path.join(self.top if where == "top" else self.inst, rel)

    def reset(self, rel: str, where: str) -> None:
        """Put the file back before an input."""
        value = self.baseline.get(rel, self.options.get(rel))
        if value is not None:
            _write(self.path(rel, where), value)
        elif rel.endswith(("/enable", "/filter")):
            _write(self.path(rel, where), b"0")
        if rel in ("saved_cmdlines_size",):
            _write(self.path(rel, where), self.saved[rel])
        if rel in ("set_event", "set_event_pid", "set_event_notrace_pid", "error_log"):
            _truncate(self.path(rel, where))
        if rel == "trace_options" and self.options_dirty:
            self.options_dirty = False
            for opt, value in self.options.items():
                _write(self.path(opt, where), value)
        if rel.endswith("trigger"):
            for line in _read(self.path(rel, where)).splitlines():
                if line.startswith(b"hist:"):  # matched with its filter: the whole line
                    _write(self.path(rel, where), b"!" + re.sub(rb" \[\w+\]$", b"", line))
                elif line and not line.startswith(b"#"):
                    cmd = line.split(b" if ", 1)[0].rsplit(b":", 1)[0]
                    _write(self.path(rel, where), b"!" + cmd)
            _write(self.path("tracing_on", where), b"1")  # a fired traceoff
        if rel in ("free_buffer", "per_cpu/cpu0/trace", "per_cpu/cpu1/trace"):
            _write(self.path("buffer_size_kb", where), self.baseline["buffer_size_kb"])
            _write(self.path("tracing_on", where), b"1")
        if rel in ("trace_marker", "trace_marker_raw", "trace", "error_log",
                   "per_cpu/cpu0/trace", "per_cpu/cpu1/trace"):  # what the sweep recorded
            _truncate(self.path("trace", where))
            _truncate(self.path("error_log", where))

    def run(self, rel: str, data: bytes, fresh: bool = False) -> dict:
        """One input; *fresh*: the file is untouched since the last reset."""
        kind, back, where, _, _ = self.files[rel]
        if not (fresh and kind.startswith(("ev_", "sys_"))):  # a sweep's file is clean
            self.reset(rel, where)
        res = _write(self.path(rel, where), data)
        text = self.readback(back, where) if back else None
        if rel == "trace_options":  # options are put back only when changed
            self.options_dirty = text != self.options_base.decode(errors="backslashreplace")
        return {"res": res, "back": text}

    def readback(self, back, where: str) -> str:
        if isinstance(back, tuple):
            return "\n--\n".join(self.readback(one, where) for one in back)
        raw = _read(self.path(back, where))
        if back == "trace":
            raw = trace_entries(raw)
        raw = TS.sub(b"[TS]", raw)
        return raw.decode(errors="backslashreplace")


def trace_entries(raw: bytes) -> bytes:
    """The entries of a ``trace`` text without their task, CPU, flags and
    time columns, one a line."""
    return b"\n".join(m.group(1) for m in map(TRACE_LINE.match, raw.splitlines()) if m)


def _replay(tree: Tree, cases, found) -> None:
    prev = None
    for rel, data in cases:
        if rel != prev and prev is not None:
            tree.reset(prev, tree.files[prev][2])  # leave nothing behind for the next file
        fresh, prev = rel != prev, rel
        found(rel, data, tree.run(rel, data, fresh))
    if prev is not None:
        tree.reset(prev, tree.files[prev][2])


def record(tracing: str, seed: int = SEED, progress=None) -> dict:
    """The fixture: this tree's writable instance files, what the inputs
    depend on in it (read_tree), and its answer to every input made for
    them.  *progress*: a file to note the count done every 500 inputs."""
    tree = Tree(tracing)
    out = []
    start = time.monotonic()

    def found(rel, data, got):
        out.append(dict(file=rel, data=data.hex(), **got))
        if progress is not None and len(out) % 500 == 0:
            print(f"{len(out)} inputs in {time.monotonic() - start:.0f} s", file=progress,
                  flush=True)
    try:
        _replay(tree, make_inputs(tree.writable, tree.tree, seed), found)
    finally:
        tree.close()
    return {"kernel": os.uname().release, "seed": seed, "writable": tree.writable,
            "tree": tree.tree, "absent": sorted(ABSENT), "left_out": sorted(tree.left_out),
            "cases": out,
            "seconds": round(time.monotonic() - start)}


def compare(fixture: dict, tracing: str, cases=None) -> tuple[list[dict], int]:
    """Replays the fixture's cases (or *cases*, some of them) on *tracing*:
    (mismatches, cases run)."""
    cases = fixture["cases"] if cases is None else cases
    tree = Tree(tracing, fixture["writable"], fixture["tree"])
    bad = []
    by_input = iter(cases)

    def check(rel, data, got):
        case = next(by_input)
        if got["res"] != case["res"] or got["back"] != case["back"]:
            bad.append(dict(case, got=got))
    try:
        _replay(tree, [(c["file"], bytes.fromhex(c["data"])) for c in cases], check)
    finally:
        tree.close()
    return bad, len(cases)


def load_fixture(profile: str = DEFAULT_PROFILE) -> dict:
    with gzip.open(fixture_path(profile), "rt") as fp:
        return json.load(fp)


def save_fixture(fixture: dict, path: Path | str = FIXTURE) -> None:
    with gzip.open(path, "wt") as fp:
        json.dump(fixture, fp, separators=(",", ":"))


def on_real_tracefs(story, top: bool = False):
    """What *story* (a function of a tracing directory) gives on the real
    tracefs, mounted for it in a private mount namespace; None where there
    is none.  *top*: the story writes top-level files (``record`` and
    ``compare`` do: TOP), so it holds the real top level's lock."""
    if not realtracefs.available():
        return None
    return realtracefs.call(story, lock=top)


def _main(args: list[str]) -> None:
    """``record``: refresh a profile's fixture from a kernel's tracefs (this
    machine's, mounted in a private namespace; or the tracing directory
    given, e.g. the oracle guest's /sys/kernel/tracing, with its output in
    the guest's shared folder); ``compare TRACING``: replay a profile's
    fixture on a tracing directory (a fake's ``MNT/tracing``) and print the
    figures and the mismatches by file."""
    ap = argparse.ArgumentParser(prog="tracefs_fuzz.py")
    ap.add_argument("--profile", default=DEFAULT_PROFILE,
                    help="whose fixture (default %(default)s)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--tracing", help="record on this tracing directory as it is "
                     "(default: this machine's tracefs, in a private mount namespace)")
    rec.add_argument("--out", help="where to write the fixture (default: the profile's)")
    cmp = sub.add_parser("compare")
    cmp.add_argument("tracing")
    chk = sub.add_parser("check", help="replay every Nth recorded input on a kernel's "
                         "tracing directory: does the fixture still describe it?")
    chk.add_argument("tracing")
    chk.add_argument("--every", type=int, default=20)
    chk.add_argument("--out", help="write the mismatches there (JSON)")
    opts = ap.parse_args(args)
    if opts.cmd == "check":
        fixture = load_fixture(opts.profile)
        bad, ran = compare(fixture, opts.tracing, fixture["cases"][::opts.every])
        if opts.out:
            with open(opts.out, "w") as fp:
                json.dump({"kernel": os.uname().release, "ran": ran, "bad": bad}, fp)
        print(f"{ran} inputs replayed on {os.uname().release}: {len(bad)} answered otherwise "
              f"than recorded on {fixture['kernel']}")
        sys.exit(1 if bad else 0)
    if opts.cmd == "record":
        if opts.tracing:
            fixture = record(opts.tracing, progress=sys.stderr)
        else:
            fixture = on_real_tracefs(lambda root: record(root, progress=sys.stderr), top=True)
        if fixture is None:
            sys.exit("no real tracefs here (root needed)")
        out = opts.out or fixture_path(opts.profile)
        save_fixture(fixture, out)
        cases = fixture["cases"]
        print(f"{len(cases)} inputs over {len({c['file'] for c in cases})} files "
              f"recorded in {out} in {fixture['seconds']} s")
    else:
        fixture = load_fixture(opts.profile)
        bad, ran = compare(fixture, opts.tracing)
        files = len({c["file"] for c in fixture["cases"]})
        known = [c for c in bad if known_reason(c, opts.profile)]
        print(f"{ran} inputs over {files} files (kernel {fixture['kernel']}): "
              f"{len(bad) - len(known)} mismatches, {len(known)} known differences")
        for rel, count in sorted(Counter(c["file"] for c in bad).items()):
            print(f"  {rel}: {count}")


if __name__ == "__main__":
    _main(sys.argv[1:])
