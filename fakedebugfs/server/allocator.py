"""Which allocator a server's Python runs with.

The kernel frees an instance's buffers at its ``rmdir``
(``instance_rmdir``); a server should give that memory back too.
Python's own small-object allocator returns an arena only once every
object in it is gone, so the dictionaries and strings of a thousand
instances, freed among long-lived objects, stay: 47 MB after 5 cycles of
1,000 ``mkdir`` and ``rmdir``, growing each cycle.  With the C library's
allocator the heap trim after removals (``malloc_trim``, server.py)
returns it: 5.6 MB after the first cycle and flat after; with Python's
free lists emptied first and the inode table shrunk back, about 1 MB
(``python -m bench instances``, docs/figures.md).

The allocator is chosen when an interpreter starts (``PYTHONMALLOC``), so
the processes that become servers start with it: the fork server and a
launched ``mount --foreground`` (:func:`server_env`), and ``run``, which
forks its server from itself, starts again with it (:func:`reexec_run`).
A caller's own ``PYTHONMALLOC`` is kept.  The variable is taken back out
of the environment at start (:func:`forget`), so the commands a server or
``run`` starts get the environment they were given.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

SET_HERE = "FAKEDEBUGFS_SET_PYTHONMALLOC"  # PYTHONMALLOC is ours, not the caller's


def server_env() -> dict:
    """This environment, with ``PYTHONMALLOC=malloc`` unless it has one."""
    env = dict(os.environ)
    if "PYTHONMALLOC" not in env:
        env["PYTHONMALLOC"] = "malloc"
        env[SET_HERE] = "1"
    return env


def forget() -> None:
    """Take back the ``PYTHONMALLOC`` :func:`server_env` added (this
    interpreter keeps its allocator; its children get the caller's
    environment)."""
    if os.environ.pop(SET_HERE, None):
        os.environ.pop("PYTHONMALLOC", None)


def reexec_run(argv: Sequence[str]) -> None:
    """``fakedebugfs run ...`` started without ``PYTHONMALLOC``: start again
    (the same pid) with :func:`server_env`, before anything else is done:
    the same program (the ``fakedebugfs`` script keeps its name: ``run``'s
    init in ``/proc/1/comm``), else ``python -m fakedebugfs``.  Where the
    interpreter cannot be started again (a user who may run the script but
    not search the folders its interpreter lives in), run goes on as it is."""
    if "PYTHONMALLOC" in os.environ or os.environ.get(SET_HERE):
        return
    script = sys.argv[0]
    if os.path.basename(script) != "__main__.py" and os.access(script, os.X_OK):
        program, args = script, [script, *argv]
    else:
        program, args = sys.executable, [sys.executable, "-m", "fakedebugfs", *argv]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(program, args, server_env())
    except OSError:
        pass
