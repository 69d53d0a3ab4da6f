"""``kmemtraced``: log kmemtrace's relay files to ``cpuN.out`` (kmemtrace-user).

One reader per CPU, bound to that CPU when the machine has it, as the
July 2008 kmemtrace RFC's usage guide asks: ``poll()`` before ``read()``, every ``read()`` until
it returns 0, bytes appended to ``OUTDIR/cpuN.out``.  Ctrl-C, SIGTERM or
``--duration`` stop the readers; each drains its buffer (relay reads never
block, and the sub-buffer being filled never makes poll readable), then
``kmemtrace/total_overruns`` is checked and a warning printed if anything
was lost.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time

READ_SIZE = 256 * 1024
POLL_MS = 200


class CpuLogger(threading.Thread):
    """Reads ``kmemtrace/cpuN`` into ``cpuN.out`` until told to stop."""

    def __init__(self, path: str, cpu: int, out_path: str, stop: threading.Event):
        super().__init__(name=f"kmemtraced-cpu{cpu}", daemon=True)
        self.cpu = cpu
        self.fd = os.open(path, os.O_RDONLY)
        self.out = open(out_path, "wb")
        self.stop = stop
        self.bytes = 0
        self.error: OSError | None = None

    def run(self) -> None:
        try:
            _bind_to(self.cpu)
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            while not self.stop.is_set():
                if poller.poll(POLL_MS):
                    self.drain()
            self.drain()
        except OSError as err:
            self.error = err
        finally:
            os.close(self.fd)
            self.out.close()

    def drain(self) -> None:
        """Read until the relay says there is nothing left (read returns 0)."""
        while True:
            data = os.read(self.fd, READ_SIZE)
            if not data:
                return
            self.out.write(data)
            self.bytes += len(data)


def _bind_to(cpu: int) -> None:
    """Run this reader on its CPU when the host has one of that number."""
    try:
        if cpu in os.sched_getaffinity(0):
            os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError):
        pass


def main(args) -> int:
    base = os.path.join(args.mountpoint, "kmemtrace")
    try:
        names = sorted((n for n in os.listdir(base) if n[:3] == "cpu" and n[3:].isdigit()),
                       key=lambda n: int(n[3:]))
    except OSError as err:
        print(f"kmemtraced: {base}: {err.strerror}", file=sys.stderr)
        return 1
    os.makedirs(args.output, exist_ok=True)
    stop = threading.Event()
    loggers = [CpuLogger(os.path.join(base, n), int(n[3:]),
                         os.path.join(args.output, f"{n}.out"), stop) for n in names]
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for logger in loggers:
            logger.start()
        deadline = time.monotonic() + args.duration if args.duration else None
        while not stop.is_set():
            stop.wait(0.1)
            if deadline is not None and time.monotonic() >= deadline:
                stop.set()
        for logger in loggers:
            logger.join()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return report(base, loggers)


def report(base: str, loggers) -> int:
    status = 0
    for logger in loggers:
        if logger.error is not None:
            print(f"kmemtraced: cpu{logger.cpu}: {logger.error.strerror}", file=sys.stderr)
            status = 1
    total = sum(logger.bytes for logger in loggers)
    print(f"kmemtraced: {total} bytes logged from {len(loggers)} CPUs", file=sys.stderr)
    with open(os.path.join(base, "total_overruns")) as fp:
        overruns = int(fp.read())
    if overruns:
        print(f"kmemtraced: warning: total_overruns is {overruns}: events were lost; "
              "boot with a larger kmemtrace.subbufs (--kmemtrace-subbufs)", file=sys.stderr)
    return status
