"""The hostile tester's probes, kept: a seeded fuzz of the control protocol
(random, malformed, oversized and nested requests) and of scenario, define
and insmod inputs, against one real fake.  After every request the server
still answers; every refused request left the fake as it was (its status,
faults, events and ktrace events before == after).

Bounded in count and time; the seed is printed with a failure, so a case
can be replayed (FUZZ_SEED=N).
"""

from __future__ import annotations

import json
import os
import random
import socket
import time

import pytest

from fakedebugfs import Fake
from fakedebugfs.api.scenario import ArgError, parse_scenario
from fakedebugfs.control import runstate
from fakedebugfs.errors import FakeError, ScenarioError

SEED = int(os.environ.get("FUZZ_SEED", "20261126"))
BUDGET_S = 60.0  # per test

EVENTS = ["kmem:kmalloc", "kmem:kfree", "sched:sched_switch", "ftrace:print",
          "raw_syscalls:sys_enter", "demo:tick", "nosuch:event", "", ":", "kmem:", 7, None]
COMMANDS = ["hello", "status", "emit", "define", "fault", "faults", "clear_faults", "scenario",
            "insmod", "rmmod", "kallsyms", "replay_status", "nosuch", "", 3, None]


@pytest.fixture(scope="module")
def fk():
    with Fake(clock="virtual", cpus=2) as fake:
        fake.define("demo", "tick", ["u64 seq", "char name[8]"])
        (fake.tracing / "events" / "enable").write_text("1")
        yield fake


def snapshot(fk: Fake) -> dict:
    """What a refused request must not change."""
    return {"status": fk.call("status"), "faults": fk.call("faults")["faults"],
            "events": (fk.tracing / "available_events").read_text(),
            "ktrace": sorted(os.listdir(fk.ktrace / "events")),
            "instances": sorted(os.listdir(fk.tracing / "instances"))}


class Conn:
    """One raw connection to the control socket (reopened when closed)."""

    def __init__(self, fk: Fake):
        self.path = runstate.read_state(str(fk.root))["sock"]
        self.sock = None
        self.buf = bytearray()

    def ask(self, line: bytes) -> dict:
        if self.sock is None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(30)
            self.sock.connect(self.path)
            self.buf = bytearray()
        try:
            self.sock.sendall(line)
        except (BrokenPipeError, ConnectionResetError):
            pass
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                self.close()
                raise AssertionError(f"connection closed without a reply to {line[:80]!r}")
            self.buf += chunk
        at = self.buf.index(b"\n")
        reply = json.loads(self.buf[:at])
        del self.buf[:at + 1]
        return reply

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


# --- random values ------------------------------------------------------------------

def value(rng: random.Random, depth: int = 0):
    """Any JSON value, sometimes deep, huge or odd."""
    kind = rng.randrange(12 if depth < 40 else 7)
    if kind == 0:
        return rng.choice([0, 1, -1, 2**31, 2**63, 2**64, -(2**64), 10**30])
    if kind == 1:
        return rng.choice([0.5, -0.0, 1e308, float("inf"), float("nan")])
    if kind == 2:
        return rng.choice(["", "x", "0x10", "a" * rng.randrange(300), "\u00a0", "\0", "é" * 9,
                           "%d", "../../etc", "enable", "filter", "a/b"])
    if kind == 3:
        return rng.choice([True, False, None])
    if kind in (4, 5, 6):
        return rng.randrange(-5, 70)
    if kind in (7, 8):
        return [value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind in (9, 10):
        return {rng.choice(["a", "event", "cpu", "fields", "ts", "0"]): value(rng, depth + 1)
                for _ in range(rng.randrange(4))}
    deep = rng.choice([20, 100, 990, 3000])
    return json.loads("[" * deep + "]" * deep) if deep < 900 else "[" * deep


def event(rng: random.Random) -> dict:
    ev = {"event": rng.choice(EVENTS)}
    for key in ("cpu", "pid", "comm", "ts", "fields"):
        if rng.random() < 0.5:
            ev[key] = value(rng) if key != "fields" else {
                rng.choice(["ptr", "bytes_req", "seq", "name", "buf", "nosuch", "call_site"]):
                    value(rng) for _ in range(rng.randrange(3))}
    return ev


def request(rng: random.Random) -> dict:
    cmd = rng.choice(COMMANDS)
    req = {"cmd": cmd}
    if rng.random() < 0.1:
        req["v"] = value(rng)
    if cmd == "emit":
        req["events"] = [event(rng) for _ in range(rng.randrange(4))] \
            if rng.random() < 0.9 else value(rng)
        if rng.random() < 0.3:
            req["repeat"] = rng.choice([0, -1, 1, 3, 2**33, "2", None, 1.5])
        if rng.random() < 0.3:
            req["strict"] = value(rng)
    elif cmd == "define":
        req.update(system=rng.choice(["demo", "enable", "header_page", "ftrace", "", "a b", 5]),
                   name=rng.choice(["tick", "t2", "enable", "filter", "", "x" * 70, None]),
                   fields=rng.choice([["u64 seq"], ["u32 seq"], ["char x[0]"], ["u64"], "u64 x",
                                      [value(rng)], ["__data_loc char[] m"], []]))
        if rng.random() < 0.3:
            req["print_fmt"] = rng.choice(['"%d", REC->seq', "%d", '"x"', value(rng)])
    elif cmd == "fault":
        req["spec"] = rng.choice([{"kind": "overrun", "cpu": rng.randrange(-1, 4),
                                   "events": value(rng)},
                                  {"kind": "errno", "path": value(rng), "op": "read",
                                   "errno": value(rng)},
                                  {"kind": value(rng)}, value(rng)])
    elif cmd == "clear_faults":
        req["id"] = value(rng)
    elif cmd == "scenario":
        req["steps"] = [step(rng) for _ in range(rng.randrange(4))] \
            if rng.random() < 0.9 else value(rng)
    elif cmd == "insmod":
        req.update(module=rng.choice(["m1", "m-2", "", "a/b", 3, "x" * 300]),
                   events=rng.choice([[[rng.choice(["ok", "a/b", "", "..", "é", "x y"]),
                                        rng.choice(["%d", "%s %lu", "", "%", value(rng)])]],
                                      value(rng), [[1, 2]], [["a"]]]))
    elif cmd == "rmmod":
        req["module"] = value(rng)
    elif cmd == "replay_status":
        req["replay"] = value(rng)
        req["wait"] = rng.choice([0, -1, 0.01, "x", None, float("nan")])
    else:
        for _ in range(rng.randrange(3)):
            req[rng.choice(["x", "events", "cmd2", "path"])] = value(rng)
    return req


def step(rng: random.Random) -> dict:
    op = rng.choice(["emit", "define", "fault", "sleep", "nosuch", None])
    out = {"op": op, "line": rng.choice([1, 2, 99, None, "x"])}
    if op == "emit":
        out["events"] = [event(rng) for _ in range(rng.randrange(3))]
    elif op == "define":
        out.update(system=rng.choice(["demo", "enable", "d2"]), name=rng.choice(["tick", "t3"]),
                   fields=rng.choice([["u64 seq"], ["u32 seq"], ["bad decl"]]))
    elif op == "sleep":
        out["seconds"] = rng.choice([0, 0.001, -1, "x", float("nan")])
    elif op == "fault":
        out["spec"] = {"kind": rng.choice(["overrun", "nosuch"]), "cpu": rng.randrange(-1, 3)}
    return out


def encoded(rng: random.Random) -> bytes:
    """One request line: mostly structured, sometimes bytes that are not one."""
    r = rng.random()
    if r < 0.08:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(200))).replace(b"\n", b"") \
            + b"\n"
    if r < 0.12:
        return rng.choice([b"[" * 5000, b"{" * 3000, b'{"cmd":', b"", b"\0" * 100,
                           json.dumps({"cmd": "emit", "events": [{"event": "kmem:kfree"}] * 3000,
                                       "x": "y" * 100000}).encode()]) + b"\n"
    return json.dumps(request(rng), allow_nan=True).encode() + b"\n"


# --- the fuzz -------------------------------------------------------------------------

def test_control_protocol_fuzz(fk):
    """Random requests on raw connections: every one gets a reply line;
    a refused one changes nothing; the server lives throughout."""
    rng = random.Random(SEED)
    conn = Conn(fk)
    before = snapshot(fk)
    deadline = time.monotonic() + BUDGET_S
    counts = {"ok": 0, "refused": 0}
    try:
        for i in range(600):
            if time.monotonic() > deadline:
                break
            line = encoded(rng)
            reply = conn.ask(line)
            assert isinstance(reply.get("ok"), bool) and reply.get("v") == 1, reply
            if reply["ok"]:
                counts["ok"] += 1
                before = snapshot(fk)
                continue
            counts["refused"] += 1
            assert reply["kind"] in ("request", "protocol", "event", "define", "fault",
                                     "scenario", "replay", "timeout"), reply
            assert "\n" not in reply["error"] and len(reply["error"]) <= 4096
            assert "internal error" not in reply["error"], (SEED, i, line[:300], reply)
            after = snapshot(fk)
            assert after == before, (f"seed {SEED} request {i} refused ({reply['error']}) but "
                                     f"changed the fake: {line[:300]!r}")
    finally:
        conn.close()
    assert counts["refused"] > 100 and counts["ok"] > 10, counts
    assert fk.call("hello")["pid"] == before["status"]["pid"]


SCENARIO_LINES = [
    "emit kmem:kfree ptr=0x10 --cpu 1",
    "emit kmem:kmalloc bytes_req=8 --repeat 3 --pid 7 --comm app",
    'define demo:tick "u64 seq" "char name[8]"',
    'define demo:other "u32 a"',
    "fault overrun cpu=1 events=3",
    "sleep 1ms",
    '{"emit": "demo:tick", "fields": {"seq": 1}}',
    '{"sleep": 0.001}',
    "emit ftrace:print buf=hello",
]


def mutate(rng: random.Random, line: str) -> str:
    """A scenario line with one of the hostile tester's changes."""
    how = rng.randrange(11)
    if how == 0:
        return line.replace("u64", rng.choice(["u32", "u65", "char", ""]))
    if how == 1:
        return line + " --ts " + rng.choice(["18446744073709551616", "-1", "5", "x", "0"])
    if how == 2:
        return line.replace("demo", rng.choice(["enable", "header_page", "ftrace", "a/b", ""]))
    if how == 3:
        return line.replace("tick", rng.choice(["enable", "filter", "x" * 80]))
    if how == 4:
        return line + " --repeat " + rng.choice(["0", "-3", "1000000000000", "2"])
    if how == 5:
        cut = rng.randrange(len(line) + 1)
        return line[:cut]
    if how == 6:
        return line.replace("=", rng.choice(["==", "= ", ""]))
    if how == 7:
        return '{"emit": "kmem:kfree", "fields": ' + "[" * rng.choice([10, 5000]) + "}"
    if how == 8:
        return line + "\u00a0" + rng.choice(["", "x", "'"])
    if how == 9:
        return line.replace("--cpu 1", "--cpu " + rng.choice(["9", "-1", "1e3"]))
    return line


def test_scenario_define_and_insmod_fuzz(fk, tmp_path):
    """Scenario texts (mutated good lines), definitions and ktrace modules:
    each is applied whole or refused whole with one line (FILE:LINE for a
    scenario), and a refused one changes nothing."""
    rng = random.Random(SEED + 1)
    deadline = time.monotonic() + BUDGET_S
    before = snapshot(fk)
    refused = applied = 0
    for i in range(250):
        if time.monotonic() > deadline:
            break
        kind = rng.randrange(4)
        try:
            if kind == 0:
                lines = [rng.choice(SCENARIO_LINES) for _ in range(rng.randrange(1, 5))]
                lines[rng.randrange(len(lines))] = mutate(rng, rng.choice(lines))
                path = tmp_path / f"s{i}.txt"
                path.write_text("\n".join(lines) + "\n")
                try:
                    fk.scenario(path)
                except ScenarioError as err:
                    text = str(err)
                    assert "\n" not in text and "internal error" not in text, text
                    if err.line is not None:
                        assert text.startswith(f"{path}:{err.line}: "), text
                    raise
            elif kind == 1:
                fields = rng.sample(["u64 seq", "u32 seq", "char name[8]", "int x[2]", "u64",
                                     "__data_loc char[] msg", "bool b", "x y z", "u8 a[0]"],
                                    rng.randrange(0, 3))
                fk.define(rng.choice(["demo", "fz", "enable", "header_event", "ftrace"]),
                          rng.choice(["tick", "one", "enable", "filter", "9x"]), fields,
                          rng.choice([None, '"%d", REC->seq', "%s", '"x"']))
            elif kind == 2:
                name = rng.choice(["ok1", "ok2", "a/b", "", "x y", "é", "."])
                fmt = rng.choice(["%d", "%lu %s", "%", "", "no args"])
                fk.call("insmod", module=rng.choice(["fz", "fz2", "bad/mod"]), events=[[name, fmt]])
            else:
                fk.call("rmmod", module=rng.choice(["fz", "fz2", "nosuch"]))
        except FakeError as err:
            refused += 1
            assert "internal error" not in str(err), (SEED, i, str(err))
            after = snapshot(fk)
            assert after == before, f"seed {SEED + 1} case {i} refused ({err}) but changed the fake"
            continue
        applied += 1
        before = snapshot(fk)
    assert refused > 30 and applied > 5, (refused, applied)


def test_scenario_parser_fuzz():
    """parse_scenario on mutated and random text: steps, or one ScenarioError
    naming the line; never another exception."""
    rng = random.Random(SEED + 2)
    for _ in range(2000):
        lines = [mutate(rng, rng.choice(SCENARIO_LINES)) for _ in range(rng.randrange(1, 4))]
        if rng.random() < 0.2:
            lines.append("".join(chr(rng.randrange(1, 0x300)) for _ in range(rng.randrange(40))))
        text = "\n".join(lines)
        try:
            steps = parse_scenario(text, "fz")
        except ScenarioError as err:
            assert str(err).startswith("fz:") and "\n" not in str(err)
            continue
        except ArgError as err:  # pragma: no cover: parse_scenario wraps them
            pytest.fail(f"ArgError escaped: {err}")
        for s in steps:
            assert s["op"] in ("emit", "define", "fault", "sleep") and isinstance(s["line"], int)
            if s["op"] == "emit":
                assert len(s["events"]) == 1 and s.get("repeat", 1) <= 1 << 32
