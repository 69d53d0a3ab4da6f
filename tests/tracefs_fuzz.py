"""A differential fuzzer of tracefs control files: the same writes go to the
real kernel's tracefs (a scratch instance, and the top level for the files
only it has, each put back) and to a fakedebugfs mount, and each side's
answer is recorded as the errno or count of the ``write(2)`` and the file
read back afterwards (normalised where the kernel prints times).

Inputs are made from a seed: values each file takes, their neighbours, and
mutations (signs, prefixes, spaces, NULs, the 66-byte bound of
``kstrtoul_from_user``, numbers of thousands of digits, bytes that are not
UTF-8).  ``record(root)`` runs them on one tree and returns the cases;
``compare(cases, root)`` replays recorded cases on another tree and returns
the ones answered differently.  Used by tests/test_tracefs_semantics.py; run
``python tests/tracefs_fuzz.py record`` as root on a machine with tracefs to
refresh ``fixtures/tracefs/semantics.json.gz``.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

FIXTURE = Path(__file__).parent.parent / "fixtures" / "tracefs" / "semantics.json.gz"
SCRATCH = "fuzz"  # the scratch instance's name
SEED = 9

# writable file -> (kind of input, file read back after the write, where)
# "inst": in the scratch instance; "top": top level only, put back after
# each input.  Trigger and filter fuzzing use initcall events, which never
# fire after boot on the kernel nor in the fake's workloads.
EV = "events/initcall/initcall_finish"
FILES = {
    "tracing_on": ("ulong", "tracing_on", "inst"),
    "buffer_size_kb": ("size", "buffer_size_kb", "inst"),
    "per_cpu/cpu0/buffer_size_kb": ("size", "per_cpu/cpu0/buffer_size_kb", "inst"),
    "buffer_percent": ("ulong", "buffer_percent", "inst"),
    "buffer_subbuf_size_kb": ("ulong", "buffer_subbuf_size_kb", "inst"),
    "current_tracer": ("tracer", "current_tracer", "inst"),
    "trace_clock": ("clock", "trace_clock", "inst"),
    "trace_options": ("option", "trace_options", "inst"),
    "tracing_cpumask": ("cpumask", "tracing_cpumask", "inst"),
    "set_event": ("set_event", "set_event", "inst"),
    "set_event_pid": ("pids", "set_event_pid", "inst"),
    "set_event_notrace_pid": ("pids", "set_event_notrace_pid", "inst"),
    "trace_marker": ("marker", "trace", "inst"),
    "trace_marker_raw": ("raw", None, "inst"),
    "error_log": ("text", "error_log", "inst"),
    "trace": ("text", None, "inst"),
    "events/enable": ("ulong", "events/enable", "inst"),
    "events/initcall/enable": ("ulong", "events/initcall/enable", "inst"),
    "events/initcall/filter": ("filter", "events/initcall/initcall_finish/filter", "inst"),
    f"{EV}/enable": ("ulong", f"{EV}/enable", "inst"),
    f"{EV}/filter": ("filter", f"{EV}/filter", "inst"),
    f"{EV}/trigger": ("trigger", f"{EV}/trigger", "inst"),
    "options/overwrite": ("ulong", "options/overwrite", "inst"),
    "options/markers": ("ulong", "options/markers", "inst"),
    "options/irq-info": ("ulong", "options/irq-info", "inst"),
    "options/event-fork": ("ulong", "options/event-fork", "inst"),
    "options/context-info": ("ulong", "options/context-info", "inst"),
    "options/record-tgid": ("ulong", "options/record-tgid", "inst"),
    "tracing_thresh": ("ulong", "tracing_thresh", "top"),
    "saved_cmdlines_size": ("ulong", "saved_cmdlines_size", "top"),
    "dynamic_events": ("dynevent", None, "top"),
}
# the value each file is put back to before every input
BASELINE = {
    "tracing_on": b"1", "buffer_size_kb": b"1408", "per_cpu/cpu0/buffer_size_kb": b"1408",
    "buffer_percent": b"50", "buffer_subbuf_size_kb": b"4", "current_tracer": b"nop",
    "trace_clock": b"local", "tracing_cpumask": b"3", "events/enable": b"0",
    "events/initcall/enable": b"0", f"{EV}/enable": b"0", "options/overwrite": b"1",
    "options/markers": b"1", "options/irq-info": b"1", "options/event-fork": b"0",
    "options/context-info": b"1", "options/record-tgid": b"0", "tracing_thresh": b"0",
    "events/initcall/filter": b"0", f"{EV}/filter": b"0",
}
OPTIONS = ("overwrite", "markers", "irq-info", "event-fork", "context-info", "record-tgid",
           "print-parent", "sym-offset", "raw", "hex", "bin", "block", "fields", "annotate",
           "userstacktrace", "latency-format", "disable_on_free", "verbose")
PER_KIND = {  # inputs per file of each kind
    "ulong": 320, "size": 250, "tracer": 150, "clock": 200, "option": 300, "cpumask": 300,
    "set_event": 600, "pids": 400, "marker": 400, "raw": 300, "text": 120, "filter": 500,
    "trigger": 700, "dynevent": 200,
}


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


def _kind_value(kind: str, rng: random.Random) -> bytes:
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
        name = rng.choice(OPTIONS).encode()
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
        return rng.choice((
            b"ret == 0", b"ret != 1", b"ret > 1 && ret < 5", b"(ret == 1) || ret == 2",
            b"func == 0x1", b"common_pid != 1", b"nosuch == 1", b"ret ==", b"ret == abc",
            b"(ret == 1", b"ret == 1)", b"ret ~ \"a*\"", b"0", b"", b"ret", b"== 1",
            b"ret == 1 &&", b"!(ret == 1)", b"ret & 1", b"ret == -1", b"ret <= 99999999999",
            b"ret == 1 || nosuch == 2", b"common_pid == 1 && ret >= 0", b"ret=1",
            b"ret==1", b"ret === 1", b"func ~ \"x\"", b"CPU == 0", b"comm == \"bash\"",
            b"ret == 0x", b"ret == 1 ||| ret == 2", b"((((ret == 1))))", b"ret < 0 && ",
        ))
    if kind == "trigger":
        cmd = rng.choice((b"traceon", b"traceoff", b"stacktrace", b"enable_event:initcall:initcall_start",
                          b"disable_event:initcall:initcall_level", b"enable_event:initcall:nosuch",
                          b"enable_event:initcall", b"disable_event", b"snapshot", b"hist:keys=ret",
                          b"bogus"))
        tail = rng.choice((b"", b":1", b":5", b":0", b":0x10", b":", b":-1", b":abc",
                           b":99999999999999999999", b" if ret == 0", b":3 if ret > 1",
                           b" if nosuch == 1", b" if", b" ret == 1", b":2:3"))
        return rng.choice((b"", b"!")) + cmd + tail
    if kind == "dynevent":
        return rng.choice((b"", b"# comment", b"   # c", b"\n", b"-:nosuch", b"-:initcall/nosuch",
                           b"-:initcall/initcall_start", b"!x", b"#", b"   ", b"-", b"-:"))
    raise ValueError(kind)


def make_inputs(seed: int = SEED) -> list[tuple[str, bytes]]:
    """Every (file, data) pair, in a fixed order."""
    rng = random.Random(seed)
    cases = []
    for path, (kind, _, _) in FILES.items():
        for _ in range(PER_KIND[kind]):
            data = _kind_value(kind, rng)
            if rng.random() < 0.35:
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


class Tree:
    """One side: a tracing directory with a scratch instance."""

    def __init__(self, tracing: str):
        self.top = tracing
        self.inst = os.path.join(tracing, "instances", SCRATCH)
        if not os.path.isdir(self.inst):
            os.mkdir(self.inst)
        self.saved = {p: _read(os.path.join(tracing, p)).strip() for p, (_, _, where)
                      in FILES.items() if where == "top" and FILES[p][1]}
        self.options_base = _read(os.path.join(self.inst, "trace_options"))
        self.options_dirty = True

    def close(self) -> None:
        for path, value in self.saved.items():
            _write(os.path.join(self.top, path), value)
        try:
            os.rmdir(self.inst)
        except OSError:
            pass

    def path(self, rel: str, where: str) -> str:
        return os.path.join(self.top if where == "top" else self.inst, rel)

    def reset(self, rel: str, where: str) -> None:
        """Put the file back before an input."""
        if rel in BASELINE:
            _write(self.path(rel, where), BASELINE[rel])
        if rel in ("saved_cmdlines_size",):
            _write(self.path(rel, where), self.saved[rel])
        if rel in ("set_event", "set_event_pid", "set_event_notrace_pid", "error_log"):
            _truncate(self.path(rel, where))
        if rel == "trace_options" and self.options_dirty:
            self.options_dirty = False
            for name in OPTIONS:
                value = BASELINE.get(f"options/{name}")
                if value is None:
                    value = b"1" if name in ("print-parent", "annotate") else b"0"
                _write(self.path(f"options/{name}", where), value)
        if rel.endswith("trigger"):
            for line in _read(self.path(rel, where)).splitlines():
                if line and not line.startswith(b"#"):
                    cmd = line.split(b" if ", 1)[0].rsplit(b":", 1)[0]
                    _write(self.path(rel, where), b"!" + cmd)
        if rel in ("trace_marker", "trace_marker_raw", "trace", "error_log"):
            _truncate(self.path("trace", where))
            _truncate(self.path("error_log", where))

    def run(self, rel: str, data: bytes) -> dict:
        kind, back, where = FILES[rel]
        self.reset(rel, where)
        res = _write(self.path(rel, where), data)
        text = self.readback(back, where) if back else None
        if rel == "trace_options":  # options are put back only when changed
            self.options_dirty = text != self.options_base.decode(errors="backslashreplace")
        return {"res": res, "back": text}

    def readback(self, back: str, where: str) -> str:
        raw = _read(self.path(back, where))
        if back == "trace":
            lines = [m.group(1) for m in map(TRACE_LINE.match, raw.splitlines()) if m]
            raw = b"\n".join(lines)
        raw = TS.sub(b"[TS]", raw)
        return raw.decode(errors="backslashreplace")


def record(tracing: str, cases=None) -> list[dict]:
    tree = Tree(tracing)
    out = []
    try:
        prev = None
        for rel, data in cases or make_inputs():
            if rel != prev and prev is not None:
                tree.reset(prev, FILES[prev][2])  # leave nothing behind for the next file
            prev = rel
            out.append(dict(file=rel, data=data.hex(), **tree.run(rel, data)))
    finally:
        tree.close()
    return out


def compare(expected: list[dict], tracing: str) -> tuple[list[dict], int]:
    """Replays *expected* on *tracing*: (mismatches, cases run)."""
    tree = Tree(tracing)
    bad = []
    try:
        prev = None
        for case in expected:
            if case["file"] != prev and prev is not None:
                tree.reset(prev, FILES[prev][2])
            prev = case["file"]
            got = tree.run(case["file"], bytes.fromhex(case["data"]))
            if got["res"] != case["res"] or got["back"] != case["back"]:
                bad.append(dict(case, got=got))
    finally:
        tree.close()
    return bad, len(expected)


def load_fixture() -> list[dict]:
    with gzip.open(FIXTURE, "rt") as fp:
        return json.load(fp)


def save_fixture(cases: list[dict]) -> None:
    with gzip.open(FIXTURE, "wt") as fp:
        json.dump(cases, fp, separators=(",", ":"))


def real_tracefs():
    """A fresh mount of the real tracefs (the caller unmounts), or None."""
    if os.geteuid() != 0:
        return None
    where = tempfile.mkdtemp(prefix="rt-fuzz-")
    proc = subprocess.run(["mount", "-t", "tracefs", "nodev", where], capture_output=True)
    if proc.returncode != 0:
        os.rmdir(where)
        return None
    return where


def unmount(where: str) -> None:
    subprocess.run(["umount", where], capture_output=True)
    os.rmdir(where)


if __name__ == "__main__":
    if sys.argv[1:] == ["record"]:
        mnt = real_tracefs()
        if mnt is None:
            sys.exit("no real tracefs here (root needed)")
        try:
            cases = record(mnt)
        finally:
            unmount(mnt)
        save_fixture(cases)
        print(f"{len(cases)} cases recorded in {FIXTURE}")
