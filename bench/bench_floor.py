"""What no FUSE server can take away: the system calls a ``trace-cmd stat``
or ``reset`` makes for each of 2,305 events, on the real tracefs, on the
fake, and on the least a FUSE server can be.

``floor_client.c`` makes exactly those calls (``stat`` of the event's
directory; open, read to end of file and close of ``filter`` and
``trigger``; for ``reset``, the ``filter`` written ``0`` with ``O_TRUNC``
and ``trigger`` read twice) over every event of the fake's profile that the
real kernel has too, one pass per trial.  It runs against four sides, their
trials taken in turn (a round is one pass on each), each side set up and
given one untimed pass first (so no pass meets a fresh mount: the lookups
are each name's first use only):

* the fake: inside one ``fakedebugfs run --workload none``;
* ``floor_server.c`` (``[C libfuse]``): a libfuse low-level server in C,
  one thread, every answer ready in a table, sleeping in ``read(2)`` on
  ``/dev/fuse`` between requests (libfuse's own loop);
* the same with ``--spin`` (``[C libfuse, spin]``): it polls ``/dev/fuse``
  without ever sleeping, so a request never waits for the server to be
  woken (stopped with SIGSTOP between its own passes, so that its spinning
  does not take a CPU from the other sides' passes);
* the real tracefs (``real``): a scratch instance's ``events/`` in a private
  mount namespace.

Rows (ms a pass; ``fake`` is the server named in brackets, the fake where
there is none; ``real`` is the kernel's passes of the same rounds; each
pair's ratio is in ``spread["ratio"]``):

* ``stat_pattern_ms``, ``stat_pattern_ms[C libfuse]``,
  ``stat_pattern_ms[C libfuse, spin]``: 2,305 x (OPEN, READ, READ,
  RELEASE) x 2, some 18,400 FUSE requests a pass;
* ``reset_pattern_ms``, ``reset_pattern_ms[C libfuse]``,
  ``reset_pattern_ms[C libfuse, spin]``: 2,305 x (OPEN, WRITE, RELEASE, 2 x
  (OPEN, READ, READ, RELEASE)) and the GETATTRs the kernel asks after a
  write, some 27,000 requests.
* ``walk_pattern_ms[...]``: a listing of ``events/``, of each system's
  directory and of each event's (OPENDIR, READDIRPLUS until empty,
  RELEASEDIR), as ``ls -R``, ``find`` and ``perf list`` walk it;
  ``[C libfuse, cache_dir]``: the C server opening its directories with
  FOPEN_CACHE_DIR, so the kernel lists them from its cache after the
  first pass; the fake does the same with no OPENDIR at all (fs/dircache.py),
  ``[fake, no dircache]`` is the fake asking for every listing, as it did
  before (``FAKEDEBUGFS_NO_DIRCACHE=1``).
* ``static_pattern_ms[...]``: OPEN, READ, READ, RELEASE of each event's
  ``format``, what ``trace-cmd stream`` and ``record`` read at start
  (twice each).

Every row carries ``"load"``, the 1-minute load average before and after
its trials.

The gap between a C server's row and the kernel's is what a request costs
through FUSE on this machine (the two wake-ups of a round trip, the
kernel's FUSE code), whatever the server; the gap between the fake's row
and the C servers' is the fake's own (docs/cost.md, "The floor").

    python -m bench floor                  # this table (a few minutes)
    python -m bench.bench_floor            # rows as JSON lines
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from . import FAKEDEBUGFS, print_rows
from .bench_control import TrialProcess, interleaved, namespace_trials, real_available, row

HERE = Path(__file__).resolve().parent
TRIALS = 5  # rounds of one pass on each side
PATTERNS = ("stat", "reset", "walk", "static")
# prints the event directories ("system/event") under the events/ directory $1
LIST_EVENTS = 'cd "$1" && for d in */*/; do [ -e "$d/filter" ] && echo "${d%/}"; done; true'
REAL_LOOP = r"""
set -u
dir=$(mktemp -d /tmp/floor-real-XXXXXX)
mount -t tracefs nodev "$dir" || exit 1
inst="$dir/instances/floor$$"
mkdir "$inst" || { umount "$dir"; exit 1; }
"$1" "$inst/events" "$2" "$3"
status=$?
for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$inst" 2>/dev/null && break; sleep 0.1; done
umount "$dir" && rmdir "$dir"
exit $status
"""


def _build(workdir: str) -> tuple[str, str]:
    """floor_client and floor_server compiled into *workdir*."""
    client, server = os.path.join(workdir, "floor_client"), os.path.join(workdir, "floor_server")
    subprocess.run(["gcc", "-O2", "-Wall", "-o", client, str(HERE / "floor_client.c")],
                   check=True, capture_output=True)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], check=True,
                           capture_output=True, text=True).stdout.split()
    subprocess.run(["gcc", "-O2", "-Wall", "-o", server, str(HERE / "floor_server.c"), *flags],
                   check=True, capture_output=True)
    return client, server


def _event_list(workdir: str) -> str:
    """A file of the fake's events ("system/event", a line each), less those
    the real kernel lacks when there is one to ask."""
    events = subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", "--", "sh", "-c",
                             LIST_EVENTS, "sh", "/sys/kernel/tracing/events"],
                            check=True, capture_output=True, text=True, timeout=120).stdout.split()
    if real_available():
        real = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               'd=$(mktemp -d) && mount -t tracefs nodev "$d" && '
                               f'sh -c \'{LIST_EVENTS}\' sh "$d/events"; umount "$d"; rmdir "$d"'],
                              capture_output=True, text=True, timeout=120)
        known = set(real.stdout.split())
        if real.returncode == 0 and known:
            events = [e for e in events if e in known]
    path = os.path.join(workdir, "events.txt")
    with open(path, "w") as fp:
        fp.write("".join(e + "\n" for e in events))
    return path


@contextlib.contextmanager
def fake_side(client: str, events: str, pattern: str, dircache: bool = True):
    """Passes inside one ``fakedebugfs run``; without *dircache*, its
    server asks for every listing (``FAKEDEBUGFS_NO_DIRCACHE=1``)."""
    env = [] if dircache else ["env", "FAKEDEBUGFS_NO_DIRCACHE=1"]
    with TrialProcess(env + [FAKEDEBUGFS, "run", "--workload", "none", "--", client,
                             "/sys/kernel/tracing/events", events, pattern]) as trial:
        yield trial


def real_side(client: str, events: str, pattern: str):
    """Passes on a scratch instance of the real tracefs (None without one)."""
    return namespace_trials(["sh", "-c", REAL_LOOP, "sh", client, events, pattern], pattern)


@contextlib.contextmanager
def c_side(server: str, client: str, events: str, pattern: str, workdir: str, mode: str = ""):
    """Passes against floor_server mounted in *workdir* (*mode*: ``--spin``,
    ``--cache-dir`` or nothing); a spinning one is stopped (SIGSTOP)
    between its passes."""
    spin = mode == "--spin"
    mnt = tempfile.mkdtemp(prefix="floor-", dir=workdir)
    proc = subprocess.Popen([server, mnt, events] + ([mode] if mode else []),
                            stdout=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "mounted":
            raise RuntimeError(f"floor_server did not mount ({proc.wait()})")
        with TrialProcess([client, mnt, events, pattern]) as passes:
            def trial() -> float:
                if spin:
                    os.kill(proc.pid, signal.SIGCONT)
                try:
                    return passes()
                finally:
                    if spin:
                        os.kill(proc.pid, signal.SIGSTOP)
            yield trial
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        os.rmdir(mnt)


def run(trials: int = TRIALS, patterns=PATTERNS) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as workdir:
        client, server = _build(workdir)
        events = _event_list(workdir)
        for pattern in patterns:
            before = os.getloadavg()[0]
            with contextlib.ExitStack() as stack:
                labels = ["", "[C libfuse]", "[C libfuse, spin]"]
                sides = [stack.enter_context(fake_side(client, events, pattern))]
                if pattern == "walk":
                    sides.append(stack.enter_context(fake_side(client, events, pattern, False)))
                    labels.insert(1, "[fake, no dircache]")
                for mode in ("", "--spin") + (("--cache-dir",) if pattern == "walk" else ()):
                    sides.append(stack.enter_context(c_side(server, client, events, pattern,
                                                            workdir, mode)))
                if pattern == "walk":
                    labels.append("[C libfuse, cache_dir]")
                real = stack.enter_context(real_side(client, events, pattern))
                interleaved(1, real, *sides)  # untimed: every name's lookup
                passes, r = interleaved(trials, real, *sides)
            name = f"{pattern}_pattern_ms"
            load = [round(before, 2), round(os.getloadavg()[0], 2)]
            for label, p in zip(labels, passes):
                rows.append(dict(row(f"{name}{label}", "ms", p, r, scale=1000, paired=True),
                                 load=load))
    return rows


if __name__ == "__main__":
    print_rows(run())
