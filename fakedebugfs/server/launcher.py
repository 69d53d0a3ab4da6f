"""Starting a mount's server: in this process (``--foreground``), forked
(``fakedebugfs mount``, ``fakedebugfs run``) or as a child process that dies
with its parent (the Python API)."""

from __future__ import annotations

import os
from typing import Callable, Optional

from fakedebugfs.errors import MountError


def serve(server, ready: Optional[Callable[[], None]] = None) -> None:
    """Run *server* until it is unmounted; *ready* is called once mounted.
    Raises MountError when it cannot mount."""
    import trio

    trio.run(server.run, ready)


def fork_server(server, log_path: str,
                prepare: Optional[Callable[[], None]] = None) -> tuple[int, str]:
    """Fork; the child runs *prepare* then *server* with stdio on *log_path*.

    Returns ``(pid, message)``: *message* is ``"ok"`` once the file system is
    mounted, otherwise why the server could not mount (it has exited)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            if prepare is not None:
                prepare()
            _redirect_stdio(log_path)
            serve(server, ready=lambda: os.write(w, b"ok\n"))
            code = 0
        except MountError as err:
            os.write(w, f"{err}\n".encode())
        except BaseException as err:  # report anything to the waiting parent
            os.write(w, f"server failed: {err!r} (see {log_path})\n".encode())
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fp:
        message = fp.readline().decode().strip()
    return pid, message or f"server exited before mounting (see {log_path})"


def _redirect_stdio(log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)
