"""Hist trigger strings for a differential check (issue 33): each is
written to an event's ``trigger`` file of a fresh instance; printed is one
line per write: the errno name (or OK), the trigger file's text and the
``error_log`` entries the write added (timestamps cut).  Run it as root
on a tracefs (``python3 hist_fuzz.py /sys/kernel/tracing [N] [SEED]``) in
the Debian 6.12 guest and under ``fakedebugfs run --profile debian-6.12``:
the outputs must be identical.  Standard library only (the guest runs it
with the host's python3)."""

from __future__ import annotations

import errno
import json
import os
import random
import re
import sys

EVENT = "sched/sched_switch"  # fields: prev_comm prev_pid prev_prio prev_state next_comm next_pid next_prio
FIELDS = ["prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid",
          "next_prio", "common_pid", "common_cpu", "common_timestamp", "hitcount", "cpu",
          "comm", "nosuch", "stacktrace", "common_stacktrace", "$x", "$nosuch", "3", "0x10",
          ""]
MODS = ["", "", "", ".hex", ".sym", ".sym-offset", ".execname", ".syscall", ".log2",
        ".buckets=10", ".buckets=0", ".buckets", ".usecs", ".percent", ".graph",
        ".descending", ".ascending", ".junk", ".stacktrace"]
OPS = ["+", "-", "*", "/"]
ATTRS = ["pause", "cont", "clear", "nohitcount", "NOHC", "size=100", "size=5", "size=2048",
         "size=0x40000", "size=abc", "name=h33n", "clock=global", "clock=nosuch", "sort=",
         "junk", "x=", "onmax($x).save(prev_comm)", "onmax(prev_pid).save(prev_comm)",
         "onchange($x).snapshot()", "onmatch(sched.sched_waking).nosynth($x)",
         "onmatch(sched).nosynth($x)", "onmatch(sched.nosuch).x($x)", "onmax($x).junk(a)",
         "onmax($x).save()", "onmatch(sched.sched_waking).save(prev_pid)",
         "onmax($x.save(a)"]


GOOD = FIELDS[:10]


def one(rng) -> str:
    name = rng.choice(GOOD) if rng.random() < 0.85 else rng.choice(FIELDS)
    return name + (rng.choice(MODS) if rng.random() < 0.35 else "")


def field(rng) -> str:
    f = one(rng)
    if rng.random() < 0.15:
        f += rng.choice(OPS) + one(rng)
    if rng.random() < 0.05:
        f = "-(" + f + ")"
    return f


def command(rng) -> str:
    parts = ["hist"]
    keys = ",".join(field(rng) for _ in range(rng.choice([1, 1, 1, 2, 3, 4])))
    parts.append(rng.choice(["keys=", "key=", "keys=", "keys=", "kyes="]) + keys)
    if rng.random() < 0.6:
        parts.append("vals=" + ",".join(field(rng) for _ in range(rng.choice([1, 2, 3]))))
    if rng.random() < 0.3:
        parts.append("x=" + field(rng) + ("," + "y=" + field(rng) if rng.random() < 0.3 else ""))
    if rng.random() < 0.4:
        parts.append("sort=" + ",".join(field(rng) for _ in range(rng.choice([1, 2, 3]))))
    for _ in range(rng.choice([0, 0, 0, 1, 2])):
        parts.insert(rng.randrange(1, len(parts) + 1), rng.choice(ATTRS))
    text = ":".join(parts)
    if rng.random() < 0.15:
        text += rng.choice([" if prev_pid > 1", " if nosuch == 1", " if", " if prev_pid ==",
                            "if prev_pid > 1", " if comm == \"x\""])
    if rng.random() < 0.05:
        text = "!" + text
    return text


def errors(tracing: str) -> list:
    with open(os.path.join(tracing, "error_log")) as fp:
        text = fp.read()
    return [re.sub(r"^\[ *[0-9.]+\] ", "", e) for e in re.split(r"(?m)^(?=\[)", text) if e]


def main() -> None:
    tracing = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 33)
    inst = os.path.join(tracing, "instances", "h33f")
    os.mkdir(inst)
    trig = os.path.join(inst, "events", EVENT, "trigger")
    try:
        for _ in range(n):
            cmd = command(rng)
            with open(os.path.join(inst, "error_log"), "w"):
                pass
            try:
                fd = os.open(trig, os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, cmd.encode())
                    result = "OK"
                finally:
                    os.close(fd)
            except OSError as err:
                result = errno.errorcode.get(err.errno, str(err.errno))
            with open(trig) as fp:
                listed = fp.read()
            print(json.dumps({"cmd": cmd, "result": result, "trigger": listed,
                              "errors": errors(inst)}), flush=True)
            os.close(os.open(trig, os.O_WRONLY | os.O_TRUNC))  # every hist trigger goes
            for line in listed.splitlines():  # and what else the command left
                if not line.startswith("#"):
                    try:
                        with open(trig, "a") as fp:
                            fp.write("!" + line.rsplit(" [", 1)[0])
                    except OSError:
                        pass
    finally:
        os.rmdir(inst)


if __name__ == "__main__":
    main()
