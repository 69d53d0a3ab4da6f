"""The client side of a replay (the CLI's ``fakedebugfs replay``, ``mount
--replay`` and :meth:`fakedebugfs.Fake.replay`): start it over the control
socket, then follow it, with a progress bar (tqdm) on a terminal.

*call* is a control call, ``call(cmd, io_timeout=None, **args) -> dict``
(``ControlClient.call`` or ``Fake.call``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, Optional

from fakedebugfs.errors import FakeError, ReplayError
from fakedebugfs.server.replays import RUNNING
from fakedebugfs.sources.replay.replay import ReplayOptions

POLL_S = 0.25  # seconds the server waits per replay_status while following


def start(call: Callable, path, options: ReplayOptions) -> dict:
    """Ask the server to replay *path*: its status once checked and installed
    (ReplayError with the server's one line if refused: nothing replayed).
    The file (or directory) is opened here and its descriptor sent with the
    request, so a FIFO, ``/dev/stdin`` or ``<(...)`` is replayed too."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise ReplayError(f"{path}: {err.strerror}") from None
    try:
        return call("replay", io_timeout=600, path=os.path.abspath(path), fd=True,
                    pass_fds=[fd], **options.wire())
    except FakeError as err:
        if type(err) is FakeError or getattr(err, "kind", None) == "replay":
            raise ReplayError(str(err)) from None
        raise
    finally:
        os.close(fd)


def follow(call: Callable, number: int, progress: bool = False,
           timeout: Optional[float] = None, label: str = "replay") -> dict:
    """Wait until replay *number* ends; its last status.  *progress*: a tqdm
    bar on stderr (only when stderr is a terminal).  ReplayError if it failed,
    TimeoutError after *timeout* seconds."""
    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=None, unit="ev", unit_scale=True, desc=label, file=sys.stderr,
                   dynamic_ncols=True, leave=True)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            st = call("replay_status", replay=number, wait=POLL_S, io_timeout=POLL_S + 30)
            if bar is not None:
                bar.total = st["total"]
                bar.n = st["done"]
                bar.set_postfix_str(st["state"], refresh=False)
                bar.refresh()
            if st["state"] not in RUNNING:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"replay {number} not done after {timeout:g} s "
                                   f"({st['done']} of {st['total']} events)")
    finally:
        if bar is not None:
            bar.close()
    if st["state"] == "failed":
        raise ReplayError(f"replay of {st['source']} failed after {st['done']} events: "
                          f"{st['error']}")
    return st


def summary(st: dict) -> str:
    """One line about a finished replay."""
    rate = st["done"] / st["seconds"] if st["seconds"] else 0
    lost = f", {st['lost_marks']} lost-event marks" if st["lost_marks"] else ""
    return (f"replayed {st['done']} events of {st['source']} ({st['kind']}, buffer "
            f"{st['buffer'] or '(top)'!r}): {st['committed']} recorded{lost}, "
            f"{st['seconds']:.2f} s, {rate:,.0f} events/s")
