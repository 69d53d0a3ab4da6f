"""A fake's keeper: the ``run --attach`` namespace of a fake, made once and
held, so that each command of ``Fake.popen`` joins it in a few
milliseconds (the launcher ``fakedebugfs/native/join.c``) instead of
making its own.

``python -m fakedebugfs.sandbox.keeper MNT [WORK [TELL_FD]]`` does what ``run --attach MNT``
does before its command starts (:func:`fakedebugfs.sandbox.run.run_attached`:
a mount namespace, rootless in a user namespace of its own, a PID namespace
and its init, the namespace's /proc, the fake at /sys/kernel/tracing and
/sys/kernel/debug, /proc/kallsyms, the mount helper); then init, the
*holder*, confines itself as a sealed command is confined
(:func:`fakedebugfs.sandbox.confine.confine`: /proc/sys and /sys
read-only, the sysctl copies, other fakes' sockets hidden), keeps no
descriptor but pipes, seals itself (:mod:`fakedebugfs.sandbox.seal`) and
waits, reaping what it adopts: the commands' PID 1 is then no way out of
their seal (:mod:`fakedebugfs.sandbox.cmdinit`), and the keeper and the
fake's server are outside their PID namespace.  A joined command enters the holder's namespaces:
it is a process of the same PID namespace (init reaps what it leaves),
with the same mounts.

Launchers started before the namespace is held (the fake's first
commands: they need not wait for a ``run --attach`` of their own) wait for
EOF on a pipe whose write end is TELL_FD; every launcher reads the
holder's pid, the seal and the environment from WORK/join-info
(:func:`tell_launchers`).

On its stdout the keeper writes one JSON line: ``{"holder": PID`` (the
holder's pid, as the fake sees it), ``"userns"`` (whether the command must
enter a user namespace too), ``"env"`` (what ``run`` adds to a command's
environment), ``"filter"`` (the seal, assembled, in hex)``}``, or
``{"error": "..."}`` and exits 1.  It then holds until its stdin closes
(the fake closes it when it closes, or dies) or SIGTERM, kills init, which
takes every process of the namespace with it (what commands left
running), removes its work folder (WORK, a new one when not given)
and exits.  If the keeper is killed outright, init dies with it
(PR_SET_PDEATHSIG), and so does the rest; WORK is then its starter's to
remove.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import sys
import tempfile

from fakedebugfs.control import runstate
from fakedebugfs.sandbox import cmdinit, run, seal
from fakedebugfs.sandbox.run import RunError
from fakedebugfs.server.launcher import wait_gone

HOLD_TIMEOUT = 60.0  # seconds the holder may take to confine itself
# the seal, assembled once at import (~1 ms): a fork server imports this
# module before it forks, and every keeper it forks has it
SEAL_HEX = seal.filter_bytes().hex()


def _hold_as_init(confine, ready: int) -> None:
    """As the namespace's init, once it is arranged: confine this process as
    a sealed command is confined (a mount namespace of its own), say so on
    *ready*, then reap what the joined commands leave (init adopts orphans)
    until the keeper kills it, and with it every process of the namespace.
    Init is the holder: commands join its namespaces (one fork fewer than a
    holder of its own: the forks' copy-on-write faults are most of a
    keeper's start)."""
    try:
        confine()
        # as the command's init of a run (sandbox/cmdinit.py): nothing of the
        # keeper's namespace through /proc/1/fd, and sealed, so that a
        # command that takes it over (ptrace) gets nothing it has not
        cmdinit.close_inherited()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):  # (the keeper's pipes to the fake: not the holder's to keep)
            os.dup2(null, fd)
        os.close(null)
        seal.install_filter()
        os.write(ready, b"ok")
    except BaseException as err:  # reported to the keeper, which says it on stdout
        os.write(ready, f"cannot confine the holder: {err}".encode())
        os._exit(1)
    os.close(ready)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            signal.sigtimedwait([signal.SIGCHLD], 3600)
        except InterruptedError:
            pass


def keep(attach: str, work: str | None = None, tell: int | None = None) -> int:
    """Hold the namespace of the fake at *attach* (see the module), in the
    work folder *work* (made here when None; removed at the end); *tell*:
    the write end of the pipe launchers started before the namespace was
    held wait on (:func:`tell_launchers`)."""
    mnt = runstate.canonical(attach)
    if runstate.mounted_fstype(mnt) != runstate.FSTYPE:
        raise RunError(f"--attach {attach}: no fakedebugfs is mounted there")
    rootless = os.geteuid() != 0
    preload = run.preload_path()
    env = {"LD_PRELOAD": preload, "FAKEDEBUGFS_MOUNT": mnt}
    if rootless:  # uid 0 in the user namespace: keep our own run directory
        os.environ[runstate.RUNDIR_ENV] = env[runstate.RUNDIR_ENV] = str(runstate.rundir())
    if work is None:
        work = tempfile.mkdtemp(prefix="keep-", dir=runstate.rundir())
    os.chmod(work, 0o755)
    signal.pthread_sigmask(signal.SIG_BLOCK, run.WATCHED)
    ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
    init_pid = None
    try:
        run.enter_private_namespace(rootless, keep=mnt)
        confine = run.command_namespace(work, mnt, True)

        def init() -> int:
            os.close(ready_r)
            if tell is not None:  # (its end must be ours only)
                os.close(tell)
            run.mount_proc()
            cmdinit.reserve_pids()  # (the commands' pids: never the workload's)
            run.arrange_namespace(mnt, work, rootless)
            _hold_as_init(confine, ready_w)  # never returns
            return 1

        init_pid, errors, alive = run.fork_init(init, admit=mnt)
        os.close(ready_w)
        init_fd = os.pidfd_open(init_pid)
        answer = b""
        while True:  # the holder's word, or init's end
            readable, _, _ = select.select([ready_r, init_fd], [], [], HOLD_TIMEOUT)
            if not readable:
                raise RunError("the namespace's holder did not start in time")
            if ready_r in readable:
                answer = os.read(ready_r, 4096)
                break
            raise RunError(_init_error(errors) or "the namespace's init ended")
        if answer != b"ok":
            raise RunError(answer.decode(errors="replace") or _init_error(errors)
                           or "the namespace's holder ended")
        info = {"holder": init_pid, "userns": rootless, "env": env, "filter": SEAL_HEX}
        tell_launchers(work, info, tell)
        tell = None
        print(json.dumps(info), flush=True)
        _hold(init_fd)
        return 0
    except OSError as err:
        raise RunError(str(err)) from None
    finally:
        if tell is not None:
            os.close(tell)  # (the waiting launchers go the slow way)
        if init_pid is not None:
            try:
                os.kill(init_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            wait_gone(init_pid, 5.0)
        shutil.rmtree(work, ignore_errors=True)


def tell_launchers(work: str, info: dict, tell: int | None) -> None:
    """Write what a launcher needs (``runstate.JOIN_INFO`` in *work*: ``PID USERNS
    FILTER`` on the first line, then ``NAME=VALUE`` of the environment's
    additions; fakedebugfs/native/join.c ``--info``) and close *tell*:
    every launcher waiting for EOF on the pipe's read end then reads the
    file (``--wait-fd``)."""
    lines = [f"{info['holder']} {int(info['userns'])} {info['filter']}",
             *(f"{name}={value}" for name, value in info["env"].items())]
    if not any("\n" in line for line in lines):  # (else no file: they go the slow way)
        path = os.path.join(work, runstate.JOIN_INFO)
        with open(path + ".tmp", "w") as fp:
            fp.write("\n".join(lines) + "\n")
        os.chmod(path + ".tmp", 0o644)
        os.rename(path + ".tmp", path)
    if tell is not None:
        os.close(tell)


def _init_error(errors: int) -> str:
    os.set_blocking(errors, False)
    try:
        report = os.read(errors, 65536)
    except OSError:
        return ""
    try:
        return str(json.loads(report)[0]) if report else ""
    except (ValueError, IndexError):
        return ""


def _hold(init_fd: int) -> None:
    """Until stdin closes, SIGTERM/SIGINT/SIGHUP come, or init ends."""
    sig_r, sig_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(sig_w)
    for sig in run.FORWARDED:
        signal.signal(sig, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, run.FORWARDED)
    while True:
        try:
            readable, _, _ = select.select([sys.stdin.fileno(), init_fd, sig_r], [], [])
        except InterruptedError:
            continue
        if init_fd in readable or sig_r in readable:
            return
        if not os.read(sys.stdin.fileno(), 4096):
            return


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2, 3):
        print("usage: python -m fakedebugfs.sandbox.keeper MNT [WORK [TELL_FD]]",
              file=sys.stderr)
        return 2
    try:
        code = keep(*argv[:2], int(argv[2]) if len(argv) == 3 else None)
    except RunError as err:
        print(json.dumps({"error": str(err.args[0])}), flush=True)
        return 1
    except Exception as err:  # said to the fake, which logs it (our stderr is not kept)
        print(json.dumps({"error": f"{type(err).__name__}: {err}"}), flush=True)
        return 1
    # done: the namespace's processes are gone and the work folder too; the
    # fake's end of stdout reads end of file now, before this process has
    # finished exiting (``Fake.close(wait=False)``)
    sys.stdout.flush()
    os.close(sys.stdout.fileno())
    return code


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
