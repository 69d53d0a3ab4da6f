"""The ``fakedebugfs`` command: a thin layer over :mod:`fakedebugfs.api`.

    fakedebugfs mount MOUNTPOINT [options]     serve the trees (background unless --foreground)
    fakedebugfs umount MOUNTPOINT              stop the server and unmount (also a dead one's)
    fakedebugfs status MOUNTPOINT [--wait-done]
    fakedebugfs emit MOUNTPOINT SYSTEM:EVENT FIELD=VALUE ... | --file SCENARIO
    fakedebugfs define MOUNTPOINT SYSTEM:EVENT DECL ...
    fakedebugfs fault MOUNTPOINT KIND KEY=VALUE ... | --list | --clear [ID]
    fakedebugfs wait MOUNTPOINT idle|consumed|done
    fakedebugfs insmod MOUNTPOINT MODULE FILE  load ktrace events declared in FILE
    fakedebugfs rmmod MOUNTPOINT MODULE
    fakedebugfs ktrace-read MOUNTPOINT         the reference ktrace reader (poll + mmap + ioctl)
    fakedebugfs kmemtraced MOUNTPOINT [-o DIR] log kmemtrace/cpuN to DIR/cpuN.out until Ctrl-C
    fakedebugfs kmemtrace-report [DIR]         allocations, fragmentation, errors from cpuN.out
    fakedebugfs kmemtrace-check FILE...        is each cpuN.out well formed?
    fakedebugfs run [options] -- COMMAND ...   COMMAND sees a fake at /sys/kernel/{debug,tracing}
    fakedebugfs doctor                         what this machine allows this user, with fixes

Every error is one line on stderr: exit status 2 for what the user gave
(arguments, fields, scenario lines), 1 for what went wrong running it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import logging
import os
import sys

from fakedebugfs.control import runstate
from fakedebugfs.api.options import MountOptions
from fakedebugfs.api.scenario import (ArgError, add_define_arguments, add_emit_arguments,
    add_fault_arguments, define_step, emit_step, emit_timeout, fault_step, apply_scenario)
from fakedebugfs.errors import FakeError, RequestError
from fakedebugfs.version import __version__

USAGE_ERROR = 2
MAX_EVENTS_FILE = 1 << 20  # bytes of insmod's events file (a longer one is refused, not read)


class CliError(Exception):
    """A failure to report as one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


class Parser(argparse.ArgumentParser):
    """Argument errors as one line plus a hint, not the whole usage."""

    def error(self, message):
        self.exit(USAGE_ERROR, f"{self.prog}: {message}\n"
                               f"(see `{self.prog} --help`)\n")


# --- mount options: the table of api.options -----------------------------------

def add_mount_options(p: argparse.ArgumentParser) -> None:
    """The options every command that starts a fake takes, from
    :class:`~fakedebugfs.api.options.MountOptions`."""
    g = p.add_argument_group("simulated kernel")
    for f in dataclasses.fields(MountOptions):
        name = "--" + f.name.replace("_", "-")
        meta = f.metadata
        if f.type in (bool, "bool"):
            flags = ("-v", name) if f.name == "verbose" else (name,)
            g.add_argument(*flags, action="store_true", help=meta["help"])
            continue
        kwargs = {"default": f.default, "help": meta["help"], "type": _arg(meta["convert"])}
        if getattr(meta["convert"], "choices", None):
            kwargs["choices"] = meta["convert"].choices
            kwargs.pop("type")
        elif meta["metavar"]:
            kwargs["metavar"] = meta["metavar"]
        g.add_argument(name, **kwargs)


def _arg(convert):
    def parse(text: str):
        try:
            return convert(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    parse.__name__ = convert.__name__
    return parse


def mount_options(args) -> MountOptions:
    """The MountOptions of parsed arguments, checked."""
    values = {name: getattr(args, name) for name in MountOptions.names()}
    try:
        return MountOptions.make(**values)
    except ValueError as err:
        raise CliError(str(err), USAGE_ERROR) from None


# --- mount / umount -----------------------------------------------------------

def cmd_mount(args) -> int:
    """:mod:`fakedebugfs.api.mount`; an error before mounting reaches the
    API's ``--ready-fd`` too.  ``--rmdir`` (the Python API's own temporary
    mount point): the server removes it on its way out, also when its
    owner was killed and no ``close()`` runs."""
    from fakedebugfs.api import mount

    ready = mount.ReadyReporter(runstate.canonical(args.mountpoint), args.ready_fd)
    try:
        opts = mount_options(args)
        server = mount.prepare(opts, args.mountpoint, args.die_with_parent)
        if args.foreground:
            try:
                mount.mount_foreground(server, opts, ready)
            finally:
                if args.rmdir:
                    mount.remove_mountpoint(server.mountpoint)
                ready.ended()
            return 0
        mount.mount_background(server, opts)
    except (CliError, FakeError) as err:
        if args.ready_fd is not None:
            ready(str(err))
        raise
    _exit_now(0)


def _exit_now(code: int) -> None:
    """The server is forked and this process has nothing left to clean up:
    exit without tearing down its copy of the kernel (~80 ms of freeing
    that ``fakedebugfs mount`` would otherwise spend before returning)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cmd_umount(args) -> int:
    """Stop the server and make sure the mount is gone, even when the server
    was killed and left a dead mount behind; an error where nothing of ours
    is mounted, or something else is."""
    from fakedebugfs.api.mount import umount

    umount(args.mountpoint)
    return 0


# --- the control socket ------------------------------------------------------------

def control(mountpoint: str, cmd: str, **args) -> dict:
    """One control request; a refusal becomes a CliError (exit 2 for bad input)."""
    from fakedebugfs.control.client import ControlClient

    with ControlClient(mountpoint) as client:
        return client.call(cmd, **args)


def cmd_status(args) -> int:
    reply = control(args.mountpoint, "status")
    if args.wait_done and not reply["done"]:
        control(args.mountpoint, "wait", io_timeout=args.timeout + 10, until="done",
                timeout=args.timeout)
        reply = control(args.mountpoint, "status")
    if not args.verbose:  # every enabled event's name: ~60 KB with --enable-all
        enabled = reply.get("ftrace", {}).pop("enabled", None)
        if enabled is not None:
            reply["ftrace"]["enabled_events"] = len(enabled)
    print(json.dumps(reply, indent=2 if sys.stdout.isatty() else None))
    return 0


def cmd_emit(args) -> int:
    if args.file:
        if args.event or args.fields:
            raise CliError("give either SYSTEM:EVENT FIELD=VALUE ... or --file, not both",
                           USAGE_ERROR)
        from fakedebugfs.control.client import ControlClient

        with ControlClient(args.mountpoint) as client:
            applied = apply_scenario(client.call, args.file)
        print(f"{applied} steps applied")
        return 0
    if not args.event:
        raise CliError("name an event (SYSTEM:EVENT) or give --file SCENARIO", USAGE_ERROR)
    step = emit_step(args)
    step.pop("op")
    reply = control(args.mountpoint, "emit", io_timeout=emit_timeout(step), **step)
    if args.verbose:
        print(f"{reply['emitted']} emitted")
    return 0


def cmd_calls(args) -> int:
    """Function calls from a file of ``depth start duration function`` lines
    (docs/function-tracing.md), injected as one tree."""
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file).read()
    except OSError as err:
        raise CliError(f"{args.file}: {err.strerror}", USAGE_ERROR) from None
    tree = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        try:
            tree.append([int(parts[0]), int(parts[1]), int(parts[2]), parts[3]])
        except (ValueError, IndexError):
            raise CliError(f"{args.file}:{n}: not 'depth start duration function'",
                           USAGE_ERROR) from None
    reply = control(args.mountpoint, "calls", tree=tree, cpu=args.cpu, pid=args.pid,
                    comm=args.comm, ts=args.ts)
    if args.verbose:
        print(f"{reply['calls']} calls")
    return 0


def cmd_define(args) -> int:
    step = define_step(args)
    step.pop("op")
    reply = control(args.mountpoint, "define", **step)
    print(f"{reply['event']} id {reply['id']}")
    return 0


def cmd_fault(args) -> int:
    if args.list:
        for fault in control(args.mountpoint, "faults")["faults"]:
            print(json.dumps(fault))
        return 0
    if args.clear is not None:
        control(args.mountpoint, "clear_faults", **({} if args.clear == "all"
                                                     else {"id": _int(args.clear)}))
        return 0
    if not args.kind:
        raise CliError("name a fault kind (overrun, errno, stall, short_read, poll_delay), "
                       "or --list / --clear", USAGE_ERROR)
    reply = control(args.mountpoint, "fault", spec=fault_step(args)["spec"])
    print(json.dumps(reply["fault"]))
    return 0


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CliError(f"--clear takes a fault id or 'all', got {text!r}", USAGE_ERROR) from None


def cmd_wait(args) -> int:
    extra = {"tracers": args.tracer} if args.tracer else {}
    if args.until == "readers":
        extra["path"] = args.path
    reply = control(args.mountpoint, "wait", io_timeout=args.timeout + 10, until=args.until,
                    timeout=args.timeout, complete_pages=args.complete_pages, **extra)
    if args.verbose:
        print(f"waited {reply['waited']} s")
    return 0


def cmd_insmod(args) -> int:
    from fakedebugfs.api.inputs import InputError, read_text
    from fakedebugfs.engine.ktrace.sites import parse_event_file

    try:  # (bounded: /dev/zero or an endless pipe is refused at the limit)
        events = parse_event_file(read_text(args.file, MAX_EVENTS_FILE, "an events file"))
    except InputError as err:
        raise CliError(str(err), 1 if err.unreadable else USAGE_ERROR) from None
    except ValueError as err:
        raise CliError(f"{args.file}: {err}", USAGE_ERROR) from None
    reply = control(args.mountpoint, "insmod", module=args.module, events=events)
    print(" ".join(reply["events"]))
    return 0


def cmd_rmmod(args) -> int:
    control(args.mountpoint, "rmmod", module=args.module)
    return 0


def cmd_replay(args) -> int:
    """``fakedebugfs replay MNT FILE|DIR``: see :mod:`fakedebugfs.sources.replay.replay`."""
    from fakedebugfs.control.client import ControlClient
    from fakedebugfs.api.replay import follow, start, summary
    from fakedebugfs.sources.replay.replay import ReplayOptions

    try:
        options = ReplayOptions.make(
            speed=args.speed, realtime=args.realtime,
            as_fast_as_possible=args.as_fast_as_possible, loop=args.loop,
            events=args.events or (), cpu_map=",".join(args.cpu_map or ()),
            keep_timestamps=args.keep_timestamps, buffer=args.buffer,
            wait_enabled=args.wait_enabled, into=args.into)
    except ValueError as err:
        raise CliError(str(err), USAGE_ERROR) from None
    with ControlClient(args.mountpoint, timeout=None) as client:
        st = start(client.call, args.recording, options)
        for note in st["notes"]:
            print(f"fakedebugfs replay: {note}", file=sys.stderr)
        if args.no_wait:
            return 0
        st = follow(client.call, st["replay"], progress=not args.quiet,
                    label=os.path.basename(os.path.normpath(args.recording)))
    if not args.quiet:
        print(summary(st), file=sys.stderr)
    return 0


def cmd_ktrace_read(args) -> int:
    from fakedebugfs.clients.ktrace_reader import main as reader_main

    return reader_main(args)


def cmd_run(args) -> int:
    if getattr(args, "replay", None):
        raise CliError("run --replay is not supported: `fakedebugfs mount MNT --replay FILE`, "
                       "then `fakedebugfs run --attach MNT -- COMMAND`", USAGE_ERROR)
    return _cmd_run(args)


def _cmd_run(args) -> int:
    from fakedebugfs.sandbox.run import RunError, run

    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise CliError("no command given (fakedebugfs run [options] -- COMMAND ...)",
                       USAGE_ERROR)
    try:
        return run(argv, mount_options(args), attach=args.attach, unsealed=args.unsealed)
    except RunError as err:
        raise CliError(str(err.args[0])) from None


def cmd_kmemtraced(args) -> int:
    from fakedebugfs.clients.kmemtraced import main as kmemtraced_main

    return kmemtraced_main(args)


def cmd_kmemtrace_report(args) -> int:
    from fakedebugfs.clients.kmemtrace_report import main as report_main

    return report_main(args)


def cmd_kmemtrace_check(args) -> int:
    from fakedebugfs.clients.kmemtrace_check import main as check_main

    return check_main(args)


def cmd_build_native(args) -> int:
    from fakedebugfs.native import build_all

    for path in build_all(quiet=args.quiet):
        if not args.quiet:
            print(path)
    return 0


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0: {text}")
    return value


# --- argument parsing ---------------------------------------------------------

def _sub(sub, name: str, func, **kwargs) -> argparse.ArgumentParser:
    p = sub.add_parser(name, **kwargs)
    p.set_defaults(func=func, subcommand=name)
    return p


def _instrument_commands(sub) -> None:
    e = _sub(sub, "emit", cmd_emit, help="inject events (or apply a scenario file)",
             description="Inject an event into every tracer that has it enabled, on the "
                         "given CPU and task; or apply a scenario file (emit, define, fault, "
                         "sleep steps, checked whole before any is applied).")
    e.add_argument("mountpoint")
    add_emit_arguments(e, optional=True)
    e.add_argument("--file", metavar="SCENARIO", help="apply the steps of SCENARIO")
    e.add_argument("-v", "--verbose", action="store_true", help="print how many were emitted")

    c = _sub(sub, "calls", cmd_calls, help="inject function calls (a profile with function "
             "tracing)", description="Run a tree of function calls (FILE: 'depth start-ns "
             "duration-ns function' lines, - for stdin) through the function tracers, "
             "filters and probes, on the given CPU and task.")
    c.add_argument("mountpoint")
    c.add_argument("file", metavar="FILE")
    c.add_argument("--cpu", type=int, default=0, help="CPU the calls run on (default 0)")
    c.add_argument("--pid", type=int, default=0, help="task pid (default 0)")
    c.add_argument("--comm", help="task name, recorded in saved_cmdlines")
    c.add_argument("--ts", type=int, help="time of the tree's start in ns (default: now)")
    c.add_argument("-v", "--verbose", action="store_true", help="print how many calls ran")

    d = _sub(sub, "define", cmd_define, help="define a new tracefs event",
             description="Create events/SYSTEM/EVENT/ with a format computed from C "
                         "declarations, as the kernel lays out a TRACE_EVENT.")
    d.add_argument("mountpoint")
    add_define_arguments(d)

    f = _sub(sub, "fault", cmd_fault, help="script a fault: lost events, errors, stalls",
             description="Lose events as overruns, make operations on a path fail, stall, "
                         "read short, or delay poll wake-ups.")
    f.add_argument("mountpoint")
    add_fault_arguments(f, optional=True)
    f.add_argument("--list", action="store_true", help="print the active faults")
    f.add_argument("--clear", nargs="?", const="all", metavar="ID", help="remove one or all")

    w = _sub(sub, "wait", cmd_wait, help="wait until idle, consumed or done",
             description="idle: the workload is done and every event is visible; consumed: "
                         "readers took every event; done: the workload reached --count; "
                         "readers: every file matching --path is open (a recorder started).")
    w.add_argument("mountpoint")
    w.add_argument("until", choices=("idle", "consumed", "done", "readers"))
    w.add_argument("--timeout", type=seconds, default=30.0, help="seconds (default 30)")
    w.add_argument("--tracer", action="append", choices=("ftrace", "ktrace", "kmemtrace"),
                   help="consumed: only these tracers' buffers (repeatable)")
    w.add_argument("--complete-pages", action="store_true",
                   help="consumed: only whole pages must have been read")
    w.add_argument("--path", default="tracing/per_cpu/cpu*/trace_pipe_raw", metavar="GLOB",
                   help="readers: files that must all be open (default: every trace_pipe_raw)")
    w.add_argument("-v", "--verbose", action="store_true")


def _replay_commands(sub) -> None:
    rp = _sub(sub, "replay", cmd_replay, help="replay a trace.dat or raw capture into a mount",
              description="Replay a trace-cmd trace.dat (v6/v7) or a raw capture directory "
                          "(cpuN files of trace_pipe_raw pages, events/ format files) into "
                          "the fake mounted at MOUNTPOINT: events the fake lacks are defined "
                          "from the recording's formats, then each event is committed with "
                          "its CPU, pid and payload bytes, the recording's lost events "
                          "lost again. Only enabled events are recorded, as by the kernel. "
                          "A broken recording is refused (one line, exit 1) before any "
                          "event is replayed.")
    rp.add_argument("mountpoint")
    rp.add_argument("recording", metavar="FILE|DIR")
    pace = rp.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, metavar="X",
                      help="X times the recorded pace (1: real time)")
    pace.add_argument("--realtime", action="store_true", help="the recorded pace (--speed 1)")
    pace.add_argument("--as-fast-as-possible", action="store_true",
                      help="no pacing, only waiting for readers when a buffer is full "
                           "(the default)")
    rp.add_argument("--loop", type=positive, default=1, metavar="N",
                    help="replay N times, each after the last (default 1)")
    rp.add_argument("--events", metavar="SYSTEM:EVENT,...",
                    help="only these events (SYSTEM, SYSTEM:EVENT, SYSTEM:*)")
    rp.add_argument("--cpu-map", action="append", metavar="FROM:TO",
                    help="put recorded CPU FROM's events on CPU TO (repeatable, or a,b lists)")
    rp.add_argument("--keep-timestamps", action="store_true",
                    help="each event at the time trace-cmd report shows for it in the "
                         "recording (default: the first event at the fake's clock now)")
    rp.add_argument("--buffer", metavar="NAME",
                    help="the recording's buffer (instance) to replay (default: the top "
                         "one, else the one with data)")
    rp.add_argument("--into", metavar="INSTANCE",
                    help="replay into the fake's tracing/instances/INSTANCE (made before; "
                         "default: the top level)")
    rp.add_argument("--wait-enabled", action="store_true",
                    help="start once tracing is on with one of the recording's events "
                         "enabled (start a recorder after this command)")
    rp.add_argument("--no-wait", action="store_true",
                    help="return once the replay has started")
    rp.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")


def _mount_commands(sub) -> None:
    m = _sub(sub, "mount", cmd_mount, help="mount the trees at MOUNTPOINT",
             description="Mount the trees; returns once the mount is ready.")
    m.add_argument("mountpoint")
    m.add_argument("--foreground", action="store_true", help="stay in front until unmounted")
    m.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    m.add_argument("--die-with-parent", action="store_true", help=argparse.SUPPRESS)
    m.add_argument("--rmdir", action="store_true", help=argparse.SUPPRESS)
    add_mount_options(m)

    u = _sub(sub, "umount", cmd_umount, help="unmount (also recovers a mount whose server died)")
    u.add_argument("mountpoint")

    s = _sub(sub, "status", cmd_status, help="print the server's status as JSON")
    s.add_argument("mountpoint")
    s.add_argument("--wait-done", action="store_true", help="wait until the workload is done")
    s.add_argument("--timeout", type=seconds, default=300, help="seconds to wait (default 300)")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="list every enabled ftrace event (default: ftrace.enabled_events "
                        "counts them)")

    i = _sub(sub, "insmod", cmd_insmod, help="load a module of ktrace events (files appear)")
    i.add_argument("mountpoint")
    i.add_argument("module")
    i.add_argument("file", help="one 'NAME FORMAT' a line")

    r = _sub(sub, "rmmod", cmd_rmmod, help="unload a module (its event files go)")
    r.add_argument("mountpoint")
    r.add_argument("module")

    rn = _sub(sub, "run", cmd_run,
              help="run COMMAND with a fake of its own at /sys/kernel/{debug,tracing}",
              description="Start a fake (same options as mount), or use the one mounted at "
                          "--attach, and run COMMAND in a private mount namespace where it is "
                          "/sys/kernel/debug and /sys/kernel/tracing (listed as debugfs and "
                          "tracefs), with splice() made to work; exits with COMMAND's status.")
    add_mount_options(rn)
    rn.add_argument("--attach", metavar="MOUNTPOINT",
                    help="use the fake already mounted there instead of starting one")
    rn.add_argument("--unsealed", action="store_true",
                    help="let COMMAND keep CAP_SYS_ADMIN, so it can mount the real tracefs "
                         "or debugfs and reach the real kernel's tracing (default: sealed)")
    rn.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")


def _client_commands(sub) -> None:
    k = _sub(sub, "ktrace-read", cmd_ktrace_read,
             help="read ktrace buffers with poll + mmap + ioctl",
             description="The reference ktrace reader: knows only the RFC's "
                         "protocol and ktrace/info; prints events as text or JSON lines.")
    k.add_argument("mountpoint", help="where fakedebugfs (or debugfs) is mounted")
    k.add_argument("--json", action="store_true", help="one JSON object per event")
    k.add_argument("--follow", action="store_true",
                   help="keep reading until interrupted (default: drain and stop)")
    k.add_argument("--disable", action="store_true",
                   help="write 0 to ktrace/enabled first so every event can be drained")
    k.add_argument("--timeout", type=seconds, default=0.2,
                   help="without --follow: stop after this many idle seconds (default 0.2)")

    kd = _sub(sub, "kmemtraced", cmd_kmemtraced, help="log kmemtrace's relay files to cpuN.out",
              description="One poll+read reader per CPU of MOUNTPOINT/kmemtrace/cpuN; "
                          "stops on Ctrl-C/SIGTERM (or --duration), drains, then "
                          "warns if total_overruns is nonzero.")
    kd.add_argument("mountpoint", help="where fakedebugfs (or debugfs) is mounted")
    kd.add_argument("-o", "--output", default=".", metavar="DIR",
                    help="directory for cpuN.out (default: current)")
    kd.add_argument("--duration", type=seconds, default=0, metavar="SECONDS",
                    help="stop by itself after this long (default: run until interrupted)")

    kr = _sub(sub, "kmemtrace-report", cmd_kmemtrace_report,
              help="summarise kmemtraced's cpuN.out files",
              description="Per call site and per size: allocations, bytes requested "
                          "and allocated, fragmentation; totals; cross-CPU "
                          "allocations and frees; inconsistent frees and sizes.")
    kr.add_argument("directory", nargs="?", default=".", help="where the cpuN.out files are")
    kr.add_argument("--abi", choices=("2008-08", "2008-07"), help="record layout (default: detect)")
    kr.add_argument("--top", type=positive, default=0, metavar="N",
                    help="only the N largest call sites")
    kr.add_argument("--kallsyms", metavar="FILE", help="symbols in /proc/kallsyms format "
                                                       "(default: the simulated kernel's)")
    kr.add_argument("--raw", action="store_true", help="print call sites as addresses")
    kr.add_argument("--json", action="store_true", help="the figures as JSON")
    kr.add_argument("--chart", metavar="FILE", help="fragmentation per call site, .svg or .png")

    kc = _sub(sub, "kmemtrace-check", cmd_kmemtrace_check,
              help="check cpuN.out files for malformed data",
              description="Record sizes, ids, ordering (sequence numbers or "
                          "timestamps) and stray padding; exit 1 on any error.")
    kc.add_argument("files", nargs="+", metavar="FILE")
    kc.add_argument("--abi", choices=("2008-08", "2008-07"), help="record layout (default: detect)")

    b = _sub(sub, "build-native", cmd_build_native,
             help="compile the C helpers (preload library, readers)")
    b.add_argument("--quiet", action="store_true")


def cmd_capture_profile(args) -> int:
    """``fakedebugfs capture-profile OUTDIR``: this machine's tracefs, read
    only, saved as a kernel profile (:mod:`fakedebugfs.engine.ftrace.profile`)."""
    from fakedebugfs.sources.hostprofile import ProfileError, capture_here

    try:
        n, where = capture_here(args.outdir, args.tracefs)
    except (ProfileError, OSError) as err:
        raise CliError(str(err)) from None
    if not args.quiet:
        # n counts every format, the ftrace/ system's entries (function,
        # print, ...) too; available_events, what a tracer can enable, does not
        try:
            with open(os.path.join(args.outdir, "available_events")) as fp:
                events = sum(1 for line in fp if line.strip())
        except OSError:
            events = n
        entries = f" (and {n - events} ftrace entries)" if n > events else ""
        print(f"{events} events{entries} of {os.uname().release} from {where} "
              f"saved in {args.outdir}")
    return 0


def cmd_doctor(args) -> int:
    """``fakedebugfs doctor``: :mod:`fakedebugfs.sandbox.doctor`."""
    from fakedebugfs.sandbox.doctor import report, run_checks
    from fakedebugfs.server.fusecheck import FUSE_DEVICE
    from fakedebugfs.server.fusefix import device_fix_lines

    checks = run_checks()
    text, code = report(checks)
    lines = text.split("\n")
    device = next((i for i, c in enumerate(checks) if c.name == "FUSE device"), None)
    if device is not None and checks[device].status == "FAIL" \
            and " is mode " in checks[device].detail:  # the fixes, below its line
        lines[device + 2:device + 2] = ["        " + line for line in device_fix_lines(FUSE_DEVICE)]
    print("\n".join(lines))
    return code


def _profile_commands(sub) -> None:
    _sub(sub, "doctor", cmd_doctor, help="check what this machine allows this user",
         description="Check the FUSE device and its mode, fusermount3, fuse.conf, the "
                     "patched pyfuse3, user namespaces (sysctls, AppArmor), perf events and "
                     "trace-cmd; print what works and what does not, with the fix. Exit "
                     "status 1 when the basics (mounting a fake) fail.")

    cp = _sub(sub, "capture-profile", cmd_capture_profile,
              help="save this machine's tracefs as a kernel profile (--profile DIR)",
              description="Read the real tracefs (never writing to it) and save what the "
                          "fake needs to look like this kernel: every event's format and "
                          "id, available_events, tracers, options, clocks, README, header "
                          "files and the modes of the top level, as plain files to commit "
                          "next to a tool's tests; serve it with --profile OUTDIR.")
    cp.add_argument("outdir")
    cp.add_argument("--tracefs", metavar="DIR",
                    help="the tracefs to read (default: the one mounted, else one mounted "
                         "for the capture)")
    cp.add_argument("-q", "--quiet", action="store_true")


@functools.lru_cache(maxsize=8)
def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser.  With *command* (the first argument), the
    groups of commands are added until one holds it: ``mount`` needs only
    the first (the others took ~10 ms of a mount's start).  Help, an
    unknown command or none: all of them.  Made once per *command* (a fork
    server makes the mount's before it forks: server/forkserver.py)."""
    p = Parser(prog="fakedebugfs", description=(
        "A FUSE file system serving the kernel's debugfs tracing trees "
        "(ktrace/, tracing/, kmemtrace/) from an in-process tracer engine, "
        "with events, faults and scenarios injected on demand."))
    p.add_argument("--version", action="version", version=f"fakedebugfs {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           parser_class=Parser)
    for group in (_mount_commands, _instrument_commands, _replay_commands, _client_commands,
                  _profile_commands):
        group(sub)
        if command is not None and command in sub.choices:
            break
    return p


def commands(p: argparse.ArgumentParser) -> set[str]:
    """The names of *p*'s subcommands."""
    return {name for action in p._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices}


def main(argv=None) -> int:
    from fakedebugfs.server import allocator, mounthelper

    if argv is None and sys.argv[1:2] == ["run"]:
        allocator.reexec_run(sys.argv[1:])  # run's server is forked from here
    allocator.forget()
    argv = sys.argv[1:] if argv is None else list(argv)

    if mounthelper.is_helper_call(argv) and argv[0] not in commands(parser(argv[0])):
        return mounthelper.main(argv)  # mount(8) -> mount.fuse3 -> us
    if argv[:1] == ["mount"]:
        # no collections while the server's objects are made (~15 ms of a
        # start): the server freezes them and turns the collector back on
        # (Server.run)
        gc.disable()
    args = parser(argv[0] if argv else None).parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        code = args.func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _pipe_closed()
    except CliError as err:
        return _fail(args, str(err), err.code)
    except (ArgError, RequestError) as err:
        return _fail(args, str(err), USAGE_ERROR)
    except FakeError as err:
        return _fail(args, str(err), 1)
    except KeyboardInterrupt:
        return 130


def _pipe_closed() -> int:
    """The reader of our output went (``... | head``): end quietly, with the
    status of a tool killed by SIGPIPE, as cat or grep end there."""
    import signal

    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())  # what is still buffered goes nowhere
    os.close(null)
    return 128 + signal.SIGPIPE


def _fail(args, message: str, code: int) -> int:
    print(f"fakedebugfs {getattr(args, 'subcommand', '')}: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
