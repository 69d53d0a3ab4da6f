"""The ``emit``, ``define``, ``fault`` and ``sleep`` commands, as the CLI and
scenario files spell them, turned into control-protocol steps.

A scenario file has one step a line, either in the CLI's own words (without
the mount point) or as a JSON object; blank lines and ``#`` comments are
skipped::

    # the kernel shows three allocations, then loses 300 events on CPU 1
    define demo:tick "u64 seq" "char name[16]"
    emit kmem:kmalloc call_site=0x10 ptr=0x20 bytes_req=8 bytes_alloc=8 --cpu 1 --repeat 3
    emit demo:tick seq=1 name=first --pid 42 --comm app
    fault overrun cpu=1 events=300
    sleep 0.5
    fault errno path=tracing/per_cpu/cpu0/trace_pipe_raw op=read errno=EINTR count=1
    {"emit": "sched:sched_process_exit", "cpu": 0, "fields": {"comm": "app", "pid": 42}}
    {"sleep": 0.25}

JSON steps: ``{"emit": EVENT, "fields": {...}, "cpu", "pid", "comm", "ts", "repeat",
"strict"}``, ``{"define": "SYSTEM:EVENT", "fields": [DECL, ...], "print_fmt"}``,
``{"fault": {"kind": ..., ...}}``, ``{"sleep": SECONDS}``.  The whole file is
checked (here, then by the server) before any step is applied; a bad line is
a :class:`~fakedebugfs.errors.ScenarioError` naming it.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
from typing import Union

from fakedebugfs.api.inputs import InputError, read_text
from fakedebugfs.control.protocol import MAX_REPEAT, decode
from fakedebugfs.errors import ScenarioError


MAX_SCENARIO = 16 << 20  # bytes of a scenario file (a longer one is refused, not read)


class ArgError(ValueError):
    """A command's words are wrong (the message says which)."""


class Parser(argparse.ArgumentParser):
    """An argument parser that raises :class:`ArgError` instead of exiting."""

    def error(self, message):
        raise ArgError(message)


# --- the words of each command ------------------------------------------------------

def add_emit_arguments(p: argparse.ArgumentParser, optional: bool = False) -> None:
    p.add_argument("event", metavar="SYSTEM:EVENT", nargs="?" if optional else None,
                   help="e.g. kmem:kmalloc, ftrace:print")
    p.add_argument("fields", nargs="*", metavar="FIELD=VALUE",
                   help="field values (integers in any C base; strings as they are)")
    p.add_argument("--cpu", type=int, default=0, help="CPU it happens on (default 0)")
    p.add_argument("--pid", type=int, default=0, help="task pid (default 0, the idle task)")
    p.add_argument("--comm", help="task name, recorded in saved_cmdlines")
    p.add_argument("--ts", type=int, help="timestamp in ns (default: the trace clock)")
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="emit it N times")
    p.add_argument("--strict", action="store_true", help="every field must be given")


def add_define_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("event", metavar="SYSTEM:EVENT")
    p.add_argument("decls", nargs="+", metavar="DECL",
                   help="C declarations, e.g. 'unsigned long addr' 'char comm[16]' "
                        "'__data_loc char[] msg' (or several in one, split by ';')")
    p.add_argument("--print-fmt", metavar="FMT", help="the event's print fmt "
                   "(default: name=value for each field)")


def add_fault_arguments(p: argparse.ArgumentParser, optional: bool = False) -> None:
    p.add_argument("kind", choices=("overrun", "errno", "stall", "short_read", "poll_delay"),
                   nargs="?" if optional else None)
    p.add_argument("params", nargs="*", metavar="KEY=VALUE",
                   help="overrun: cpu= events=|pages= [tracer=]; errno: path= op= errno= "
                        "[count=]; stall: path= ms= [op=] [count=]; short_read: path= bytes= "
                        "[count=]; poll_delay: path= ms= [count=]")


# --- words -> protocol steps ------------------------------------------------------------

def pairs(words, what: str) -> dict:
    """``key=value`` words as a dict (values stay strings)."""
    out = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise ArgError(f"expected {what}=VALUE, got {word!r}")
        out[key] = value
    return out


def _typed(value: str):
    """A fault parameter: an integer if it reads as one, else the string."""
    try:
        return int(value, 0)
    except ValueError:
        return value


def _event_name(text: str) -> str:
    if ":" not in text:
        raise ArgError(f"{text!r}: name the event as SYSTEM:EVENT")
    return text


def emit_step(args) -> dict:
    if args.repeat < 1:
        raise ArgError(f"--repeat must be at least 1, got {args.repeat}")
    ev = {"event": _event_name(args.event), "cpu": args.cpu, "pid": args.pid,
          "fields": pairs(args.fields, "FIELD")}
    if args.comm is not None:
        ev["comm"] = args.comm
    if args.ts is not None:
        ev["ts"] = args.ts
    return _emit(ev, args.repeat, args.strict)


def _emit(ev: dict, repeat: int, strict: bool) -> dict:
    """An emit step: *ev* fired *repeat* times (the server repeats it, in
    turns: no list of *repeat* copies is built on either side)."""
    if repeat < 1:
        raise ArgError(f"--repeat must be at least 1, got {repeat}")
    if repeat > MAX_REPEAT:
        raise ArgError(f"--repeat must be at most {MAX_REPEAT}, got {repeat}")
    step = {"op": "emit", "events": [ev], "strict": bool(strict)}
    if repeat != 1:
        step["repeat"] = repeat
    return step


def emit_timeout(step: dict) -> float:
    """Seconds a client waits for an emit step's reply (a long repeat takes
    a while: 50,000 events a second assumed at worst)."""
    return 60.0 + step.get("repeat", 1) * len(step["events"]) / 50_000


def define_step(args) -> dict:
    system, _, name = _event_name(args.event).partition(":")
    decls = [d.strip() for decl in args.decls for d in decl.split(";") if d.strip()]
    step = {"op": "define", "system": system, "name": name, "fields": decls}
    if args.print_fmt is not None:
        step["print_fmt"] = args.print_fmt
    return step


def fault_step(args) -> dict:
    spec = {key: _typed(value) for key, value in pairs(args.params, "KEY").items()}
    return {"op": "fault", "spec": {"kind": args.kind, **spec}}


def sleep_step(word: str) -> dict:
    """``sleep 0.5``, ``sleep 500ms``, ``sleep 2s``."""
    text = word.strip().lower()
    scale = 1.0
    if text.endswith("ms"):
        text, scale = text[:-2], 0.001
    elif text.endswith("s"):
        text = text[:-1]
    try:
        seconds = float(text) * scale
    except ValueError:
        raise ArgError(f"sleep takes seconds (0.5, 500ms, 2s), got {word!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ArgError(f"sleep takes seconds >= 0, got {word!r}")
    return {"op": "sleep", "seconds": seconds}


def _parsers() -> dict:
    out = {}
    for name, add in (("emit", add_emit_arguments), ("define", add_define_arguments),
                      ("fault", add_fault_arguments)):
        p = Parser(prog=name, add_help=False)
        add(p)
        out[name] = p
    return out


_PARSERS = None
_BUILD = {"emit": emit_step, "define": define_step, "fault": fault_step}


def word_step(words: list[str]) -> dict:
    """One step from a line in the CLI's words."""
    global _PARSERS
    if not words:
        raise ArgError("empty step")
    command, rest = words[0], words[1:]
    if command == "sleep":
        if len(rest) != 1:
            raise ArgError("sleep takes one argument: seconds")
        return sleep_step(rest[0])
    if command not in _BUILD:
        raise ArgError(f"unknown step {command!r} (emit, define, fault, sleep)")
    _PARSERS = _PARSERS or _parsers()
    return _BUILD[command](_PARSERS[command].parse_args(rest))


def json_step(obj) -> dict:
    """One step from a JSON line."""
    if not isinstance(obj, dict):
        raise ArgError("a JSON step is an object")
    if "emit" in obj:
        ev = {"event": obj["emit"], "cpu": obj.get("cpu", 0), "pid": obj.get("pid", 0),
              "fields": obj.get("fields") or {}}
        for key in ("comm", "ts"):
            if key in obj:
                ev[key] = obj[key]
        repeat = obj.get("repeat", 1)
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ArgError(f"repeat must be a whole number >= 1, got {repeat!r}")
        return _emit(ev, repeat, bool(obj.get("strict")))
    if "define" in obj:
        system, _, name = _event_name(str(obj["define"])).partition(":")
        step = {"op": "define", "system": system, "name": name, "fields": obj.get("fields") or []}
        if "print_fmt" in obj:
            step["print_fmt"] = obj["print_fmt"]
        return step
    if "fault" in obj:
        return {"op": "fault", "spec": obj["fault"]}
    if "sleep" in obj:
        return sleep_step(str(obj["sleep"]))
    raise ArgError("a JSON step has one of: emit, define, fault, sleep")


def parse_scenario(text: str, name: str = "scenario") -> list[dict]:
    """Every step of a scenario, each with its ``line``; ScenarioError at the
    first bad line (nothing is applied)."""
    steps = []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            if stripped.startswith("{"):
                step = json_step(decode(stripped.encode(), "JSON step"))
            else:
                step = word_step(shlex.split(stripped, comments=True))
        except (ArgError, ValueError, KeyError) as err:
            text = f"missing {err.args[0]!r}" if isinstance(err, KeyError) else str(err)
            raise ScenarioError(f"{name}:{lineno}: {text}", lineno) from None
        step["line"] = lineno
        steps.append(step)
    return steps


def scenario_name(source: Union[str, os.PathLike]) -> str:
    return "scenario" if isinstance(source, str) and "\n" in source else os.fspath(source)


def load_scenario(source: Union[str, os.PathLike]) -> list[dict]:
    """The steps of a scenario file (or of the text itself, if it has a newline)."""
    if isinstance(source, str) and "\n" in source:
        return parse_scenario(source)
    name = os.fspath(source)
    try:  # (bounded: /dev/zero or an endless pipe is refused at the limit)
        text = read_text(source, MAX_SCENARIO, "a scenario file")
    except InputError as err:
        raise ScenarioError(str(err), err.line) from None
    return parse_scenario(text, name)


def apply_scenario(call, source: Union[str, os.PathLike]) -> int:
    """Check and apply a scenario with *call* (a control request function);
    the number of steps.  Errors read ``NAME:LINE: message`` from either side."""
    steps = load_scenario(source)
    try:
        return call("scenario", io_timeout=3600, steps=steps)["applied"]
    except ScenarioError as err:
        if err.line is None:
            raise
        text = str(err).split(": ", 1)[1] if str(err).startswith("line ") else str(err)
        raise ScenarioError(f"{scenario_name(source)}:{err.line}: {text}", err.line) from None
