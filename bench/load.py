"""The 32-client read load and the control-op probe, shared by the benchmarks.

``ReadLoad(root, clients)`` starts *clients* reader processes against a
``tracing/`` directory *root* (a fake's or a real tracefs instance's): a
third ``cat trace_pipe``, a third ``cat per_cpu/cpuN/trace_pipe_raw``, a
third shell loops of ``cat trace``; all are killed when the ``with`` block
ends.  ``probe(path, seconds)`` times ``open + read + close`` of *path* (a
control file such as ``tracing_on``) every few milliseconds and returns the
samples in milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time


class ReadLoad:
    def __init__(self, root: str, clients: int = 32, cpus: int = 2):
        self.root = root
        self.clients = clients
        self.cpus = cpus
        self.procs: list[subprocess.Popen] = []

    def _commands(self) -> list[list[str]]:
        cmds = []
        for i in range(self.clients):
            kind = i % 3
            if kind == 0:
                cmds.append(["cat", os.path.join(self.root, "trace_pipe")])
            elif kind == 1:
                raw = os.path.join(self.root, "per_cpu", f"cpu{i % self.cpus}", "trace_pipe_raw")
                cmds.append(["cat", raw])
            else:
                cmds.append(["sh", "-c", f'while :; do cat "{self.root}/trace"; done'])
        return cmds

    def __enter__(self) -> "ReadLoad":
        for cmd in self._commands():
            self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL,
                                               start_new_session=True))
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass


def probe(path: str, seconds: float, pause: float = 0.005) -> list[float]:
    """Milliseconds of each ``open + read + close`` of *path* over *seconds*."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            os.read(fd, 64)
        finally:
            os.close(fd)
        samples.append((time.perf_counter() - t0) * 1e3)
        time.sleep(pause)
    return samples


def percentile(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]
