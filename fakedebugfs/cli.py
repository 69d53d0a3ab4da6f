"""The ``fakedebugfs`` command.

    fakedebugfs mount MOUNTPOINT [options]     serve the trees (background unless --foreground)
    fakedebugfs umount MOUNTPOINT              stop the server and unmount (also a dead one's)
    fakedebugfs status MOUNTPOINT [--wait-done]
    fakedebugfs insmod MOUNTPOINT MODULE FILE  load ktrace events declared in FILE
    fakedebugfs rmmod MOUNTPOINT MODULE
    fakedebugfs ktrace-read MOUNTPOINT         the reference ktrace reader (poll + mmap + ioctl)
    fakedebugfs kmemtraced MOUNTPOINT [-o DIR] log kmemtrace/cpuN to DIR/cpuN.out until Ctrl-C
    fakedebugfs kmemtrace-report [DIR]         allocations, fragmentation, errors from cpuN.out
    fakedebugfs kmemtrace-check FILE...        is each cpuN.out well formed?
    fakedebugfs run [options] -- COMMAND ...   COMMAND sees a fake at /sys/kernel/{debug,tracing}

Every error is one line on stderr and a nonzero exit status.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

from . import runstate


class CliError(Exception):
    pass


def size_arg(text: str) -> int:
    """Bytes, with an optional K/M/G suffix (powers of 1024)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().rstrip("b")
    mult = units.get(t[-1:], 1)
    if mult != 1:
        t = t[:-1]
    try:
        value = int(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if value < 8192 or value % 4096:
        raise argparse.ArgumentTypeError(f"{text}: a multiple of 4096 bytes, at least 8192")
    return value


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def add_mount_options(p: argparse.ArgumentParser) -> None:
    """The options every command that starts a fake takes."""
    g = p.add_argument_group("simulated kernel")
    g.add_argument("--cpus", type=positive, default=2, help="number of CPUs (default 2)")
    g.add_argument("--buffer-size", type=size_arg, default=65536, metavar="BYTES",
                   help="ktrace per-CPU buffer size (default 65536, the RFC's)")
    g.add_argument("--workload", default="default", help="default, kmem, kmem-faults or none")
    g.add_argument("--rate", type=float, default=30000.0, metavar="EVENTS_PER_S",
                   help="workload pace; 0 means as fast as possible (default 30000)")
    g.add_argument("--count", type=positive, default=None, metavar="N",
                   help="emit exactly N events in total, then stop")
    g.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    g.add_argument("--clock", choices=("monotonic", "virtual"), default="monotonic",
                   help="trace clock; virtual is deterministic")
    g.add_argument("--enable-all", action="store_true",
                   help="start with tracing and every event enabled")
    g.add_argument("--events", metavar="FILE", help="extra ktrace events, one 'NAME FORMAT' a line")
    g.add_argument("--kmemtrace-abi", choices=("2008-08", "2008-07"), default="2008-08",
                   help="kmemtrace relay layout: seed 004 (default) or seed 003")
    g.add_argument("--kmemtrace-subbufs", type=positive, default=20, metavar="N",
                   help="relay sub-buffers per CPU (kmemtrace.subbufs, default 20)")
    g.add_argument("--kmemtrace-subbuf-events", type=positive, default=8192, metavar="N",
                   help="events per relay sub-buffer (default 8192)")
    g.add_argument("-v", "--verbose", action="store_true", help="log requests and errors")


def kernel_options(args) -> dict:
    return dict(cpus=args.cpus, buffer_size=args.buffer_size, clock=args.clock, seed=args.seed,
                enable_all=args.enable_all, events_file=args.events,
                kmemtrace_abi=args.kmemtrace_abi, kmemtrace_subbufs=args.kmemtrace_subbufs,
                kmemtrace_subbuf_events=args.kmemtrace_subbuf_events)


def build_server(args, mountpoint: str):
    from .kernel import Kernel
    from .server import Server
    from .workloads import make_workload

    if args.cpus < 1 or args.cpus > 256:
        raise CliError("--cpus must be between 1 and 256")
    if args.events and not os.path.isfile(args.events):
        raise CliError(f"--events {args.events}: no such file")
    try:
        kernel = Kernel(**kernel_options(args))
        workload = make_workload(args.workload, kernel, seed=args.seed, count=args.count)
    except (ValueError, OSError) as err:
        raise CliError(str(err)) from None
    return Server(kernel, mountpoint, workload, rate=args.rate)


# --- mount / umount -----------------------------------------------------------

def cmd_mount(args) -> int:
    from .server import MountError, check_can_mount

    try:
        check_can_mount(args.mountpoint)
    except MountError as err:
        raise CliError(str(err)) from None
    server = build_server(args, args.mountpoint)
    if args.foreground:
        return _serve(server, ready=lambda: print(f"mounted {server.mountpoint}", flush=True))
    return _daemonize(server, args.mountpoint)


def _serve(server, ready) -> int:
    import trio

    from .server import MountError

    try:
        trio.run(server.run, ready)
    except MountError as err:
        raise CliError(str(err)) from None
    return 0


def _daemonize(server, mountpoint: str) -> int:
    """Fork the server; return once it is mounted (or report why not)."""
    from .daemon import fork_server

    _, message = fork_server(server, str(runstate.paths(mountpoint)["log"]), prepare=os.setsid)
    if message != "ok":
        raise CliError(message)
    return 0


def cmd_umount(args) -> int:
    """Stop the server (SIGTERM) and make sure the mount is gone, even when
    the server was killed and left a dead mount behind."""
    mnt = args.mountpoint
    state = runstate.read_state(mnt)
    pid = state.get("pid") if state else None
    if pid and runstate.alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while runstate.alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    if runstate.is_mounted(mnt):
        for cmd in (["fusermount3", "-u", "-z", mnt], ["umount", "-l", mnt]):
            if subprocess.run(cmd, capture_output=True).returncode == 0:
                break
    runstate.clear_state(mnt, drop_log=True)
    if runstate.is_mounted(mnt):
        raise CliError(f"{mnt}: still mounted")
    return 0


# --- control socket ------------------------------------------------------------

def control(mountpoint: str, request: dict) -> dict:
    state = runstate.read_state(mountpoint)
    if not state:
        raise CliError(f"{mountpoint}: no fakedebugfs server is serving it")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(state["sock"])
        except OSError as err:
            raise CliError(f"{mountpoint}: server not answering ({err.strerror})") from None
        s.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    reply = json.loads(data or b"{}")
    if not reply.get("ok"):
        raise CliError(reply.get("error", "no answer"))
    return reply


def cmd_status(args) -> int:
    deadline = time.monotonic() + args.timeout
    reply = control(args.mountpoint, {"cmd": "status"})
    while args.wait_done and not reply["done"]:
        if time.monotonic() > deadline:
            raise CliError(f"workload not done after {args.timeout} s")
        time.sleep(0.05)
        reply = control(args.mountpoint, {"cmd": "status"})
    reply.pop("ok", None)
    print(json.dumps(reply, indent=2 if sys.stdout.isatty() else None))
    return 0


def cmd_insmod(args) -> int:
    from .engine.ktrace.sites import parse_event_file

    try:
        with open(args.file) as fp:
            events = parse_event_file(fp.read())
    except OSError as err:
        raise CliError(f"{args.file}: {err.strerror}") from None
    except ValueError as err:
        raise CliError(f"{args.file}: {err}") from None
    reply = control(args.mountpoint, {"cmd": "insmod", "module": args.module, "events": events})
    print(" ".join(reply["events"]))
    return 0


def cmd_rmmod(args) -> int:
    control(args.mountpoint, {"cmd": "rmmod", "module": args.module})
    return 0


def cmd_ktrace_read(args) -> int:
    from .clients.ktrace_reader import main as reader_main

    return reader_main(args)


def cmd_run(args) -> int:
    from .run import run

    return run(args)


def cmd_kmemtraced(args) -> int:
    from .clients.kmemtraced import main as kmemtraced_main

    return kmemtraced_main(args)


def cmd_kmemtrace_report(args) -> int:
    from .clients.kmemtrace_report import main as report_main

    return report_main(args)


def cmd_kmemtrace_check(args) -> int:
    from .clients.kmemtrace_check import main as check_main

    return check_main(args)


def cmd_build_native(args) -> int:
    from .native import build_all

    for path in build_all(quiet=args.quiet):
        if not args.quiet:
            print(path)
    return 0


# --- argument parsing ---------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fakedebugfs", description=(
        "A FUSE file system serving the kernel's debugfs tracing trees "
        "(ktrace/, tracing/, kmemtrace/) from an in-process tracer engine."))
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    m = sub.add_parser("mount", help="mount the trees at MOUNTPOINT",
                       description="Mount the trees; returns once the mount is ready.")
    m.add_argument("mountpoint")
    m.add_argument("--foreground", action="store_true", help="stay in front until unmounted")
    add_mount_options(m)
    m.set_defaults(func=cmd_mount)

    u = sub.add_parser("umount", help="unmount (also recovers a mount whose server died)")
    u.add_argument("mountpoint")
    u.set_defaults(func=cmd_umount)

    s = sub.add_parser("status", help="print the server's status as JSON")
    s.add_argument("mountpoint")
    s.add_argument("--wait-done", action="store_true", help="wait until the workload is done")
    s.add_argument("--timeout", type=float, default=300, help="seconds to wait (default 300)")
    s.set_defaults(func=cmd_status)

    i = sub.add_parser("insmod", help="load a module of ktrace events (files appear)")
    i.add_argument("mountpoint")
    i.add_argument("module")
    i.add_argument("file", help="one 'NAME FORMAT' a line")
    i.set_defaults(func=cmd_insmod)

    r = sub.add_parser("rmmod", help="unload a module (its event files go)")
    r.add_argument("mountpoint")
    r.add_argument("module")
    r.set_defaults(func=cmd_rmmod)

    k = sub.add_parser("ktrace-read", help="read ktrace buffers with poll + mmap + ioctl",
                       description="The reference ktrace reader: knows only the RFC's "
                                   "protocol and ktrace/info; prints events as text or JSON lines.")
    k.add_argument("mountpoint", help="where fakedebugfs (or debugfs) is mounted")
    k.add_argument("--json", action="store_true", help="one JSON object per event")
    k.add_argument("--follow", action="store_true",
                   help="keep reading until interrupted (default: drain and stop)")
    k.add_argument("--disable", action="store_true",
                   help="write 0 to ktrace/enabled first so every event can be drained")
    k.add_argument("--timeout", type=float, default=0.2,
                   help="without --follow: stop after this many idle seconds (default 0.2)")
    k.set_defaults(func=cmd_ktrace_read)

    rn = sub.add_parser("run", help="run COMMAND with a fake of its own at /sys/kernel/{debug,tracing}",
                        description="Start a fake (same options as mount) and run COMMAND in a "
                                    "private mount namespace where it is /sys/kernel/debug and "
                                    "/sys/kernel/tracing (listed as debugfs and tracefs), with "
                                    "splice() made to work; exits with COMMAND's status.")
    add_mount_options(rn)
    rn.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    rn.set_defaults(func=cmd_run)

    kd = sub.add_parser("kmemtraced", help="log kmemtrace's relay files to cpuN.out files",
                        description="One poll+read reader per CPU of MOUNTPOINT/kmemtrace/cpuN; "
                                    "stops on Ctrl-C/SIGTERM (or --duration), drains, then "
                                    "warns if total_overruns is nonzero.")
    kd.add_argument("mountpoint", help="where fakedebugfs (or debugfs) is mounted")
    kd.add_argument("-o", "--output", default=".", metavar="DIR",
                    help="directory for cpuN.out (default: current)")
    kd.add_argument("--duration", type=float, default=0, metavar="SECONDS",
                    help="stop by itself after this long (default: run until interrupted)")
    kd.set_defaults(func=cmd_kmemtraced)

    kr = sub.add_parser("kmemtrace-report", help="summarise kmemtraced's cpuN.out files",
                        description="Per call site and per size: allocations, bytes requested "
                                    "and allocated, fragmentation; totals; cross-CPU "
                                    "allocations and frees; inconsistent frees and sizes.")
    kr.add_argument("directory", nargs="?", default=".", help="where the cpuN.out files are")
    kr.add_argument("--abi", choices=("2008-08", "2008-07"), help="record layout (default: detect)")
    kr.add_argument("--top", type=positive, default=0, metavar="N", help="only the N largest call sites")
    kr.add_argument("--kallsyms", metavar="FILE", help="symbols in /proc/kallsyms format "
                                                       "(default: the simulated kernel's)")
    kr.add_argument("--raw", action="store_true", help="print call sites as addresses")
    kr.add_argument("--json", action="store_true", help="the figures as JSON")
    kr.add_argument("--chart", metavar="FILE", help="fragmentation per call site, .svg or .png")
    kr.set_defaults(func=cmd_kmemtrace_report)

    kc = sub.add_parser("kmemtrace-check", help="check cpuN.out files for malformed data",
                        description="Record sizes, ids, ordering (sequence numbers or "
                                    "timestamps) and stray padding; exit 1 on any error.")
    kc.add_argument("files", nargs="+", metavar="FILE")
    kc.add_argument("--abi", choices=("2008-08", "2008-07"), help="record layout (default: detect)")
    kc.set_defaults(func=cmd_kmemtrace_check)

    b = sub.add_parser("build-native", help="compile the C helpers (preload library, readers)")
    b.add_argument("--quiet", action="store_true")
    b.set_defaults(func=cmd_build_native)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return args.func(args)
    except CliError as err:
        print(f"fakedebugfs {args.command}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
