"""``fakedebugfs run [mount options] -- COMMAND …``: run an unmodified tool
against a fake of its own.

trace-cmd and libtracefs find the tracing directory only through
``/proc/mounts`` (docs/tracefs.md#how-tools-find-the-tracing-directory), so the command runs in a private mount
namespace arranged like a real kernel's:

    /sys/kernel/tracing   a real tracefs mount (for its ``tracefs`` line in
                          /proc/mounts), with the fake's ``tracing/`` bound over it
    /sys/kernel/debug     a real debugfs mount (its ``debugfs`` line), the
                          fake's root bound over it
    /proc/kallsyms        the engine's symbol table, so call sites resolve
    /proc/sys/kernel/ftrace_enabled   a writable regular file holding "1"
    /proc/sys/kernel/kptr_restrict    a writable copy of the real one

Every other tracefs or debugfs mount is removed from the namespace first,
so the first ``tracefs`` line is ours.  The real tracefs and debugfs are
never touched: the fake covers them before the command starts, and the run
refuses to start the command unless it checked that both paths are the fake.

The server runs in a child process in the same namespace, mounted at a
private temporary directory, in its own session (a terminal's Ctrl-C goes to
the command, not to the server) and dies with us (PR_SET_PDEATHSIG).  Nothing
of it is visible in the host's mounts, and when the last process of the
namespace exits the kernel drops every mount made in it, whatever happened.

The command gets ``LD_PRELOAD`` with ``splice_preload.so`` appended, which
makes splice() from fake files work (docs/fuse.md#splice).  SIGINT, SIGTERM,
SIGHUP and SIGQUIT sent to ``run`` are forwarded to the command (a
terminal's own signals reach it directly, being in our process group).  When
it ends, the bind mounts go, the server is stopped and unmounts, and ``run``
exits with the command's status (128 + N when signal N killed it).

Sealed (the default): the command is started without CAP_SYS_ADMIN and
CAP_SYS_PTRACE in its bounding and inheritable sets (:mod:`fakedebugfs.sandbox.seal`),
so it cannot mount the real tracefs or debugfs, unmount the fake, enter
another mount namespace or walk into one through ``/proc/<pid>/root``;
perf_event_open(2) and bpf(2) need CAP_PERFMON and CAP_BPF, which it keeps.
``--unsealed`` starts it with every capability ``run`` has.

Rootless: without root, ``run`` first enters a user namespace of its own
(:mod:`fakedebugfs.sandbox.userns`), where it is uid 0 over a new mount namespace.
There it cannot mount a real tracefs or debugfs: it covers every tracefs
and debugfs mount it inherited (and /sys/kernel/{tracing,debug}) with the
fake, and mounts over the ``/proc/mounts`` symlink a copy of the mount
table whose first lines are ``tracefs`` at /sys/kernel/tracing and
``debugfs`` at /sys/kernel/debug.  The command runs as uid 0 of that
namespace, which is the invoking user outside it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from fakedebugfs.native import libc
from fakedebugfs.sources import procevents
from fakedebugfs.control import runstate
from fakedebugfs.sandbox import seal, userns

log = logging.getLogger(__name__)

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8
SI_KERNEL = 0x80

TRACEFS = "/sys/kernel/tracing"
DEBUGFS = "/sys/kernel/debug"
KALLSYMS = "/proc/kallsyms"
FTRACE_ENABLED = "/proc/sys/kernel/ftrace_enabled"
KPTR_RESTRICT = "/proc/sys/kernel/kptr_restrict"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class RunError(Exception):
    pass


mount = libc.mount


def umount(target, flags=MNT_DETACH | UMOUNT_NOFOLLOW) -> None:
    libc.umount2(target, flags)


def mountinfo() -> list[tuple[str, str]]:
    """``(mount point, fstype)`` of every mount of this namespace, in order."""
    out = []
    with open("/proc/self/mountinfo") as fp:
        for line in fp:
            left, _, right = line.partition(" - ")
            point = left.split()[4].encode().decode("unicode_escape")
            out.append((point, right.split()[0]))
    return out


def preload_path() -> str:
    from fakedebugfs.native import build

    try:
        return str(build("splice_preload"))
    except Exception as err:  # gcc missing or failing
        raise RunError(f"cannot build splice_preload.so ({err}); run `make install`") from None


# --- the namespace ----------------------------------------------------------------

def enter_private_namespace(rootless: bool = False, keep: str | None = None) -> None:
    """unshare(CLONE_NEWNS) (with a user namespace of its own when
    *rootless*) and make every mount private: nothing done from now on
    propagates to the host."""
    try:
        if rootless:
            userns.enter()
        else:
            libc.unshare(CLONE_NEWNS, "unshare(CLONE_NEWNS)")
    except userns.UsernsError as err:
        raise RunError(str(err)) from None
    except OSError as err:
        raise RunError(f"{err.strerror} (fakedebugfs run needs root, or user namespaces)") from None
    try:
        mount(None, "/", None, MS_REC | MS_PRIVATE)
    except OSError as err:  # e.g. AppArmor lets unshare succeed without capabilities
        raise RunError(userns.explain(err.errno, "mount --make-rprivate /") if rootless
                       else err.strerror) from None
    # Copies of other fakes' mounts would keep their connections referenced
    # from here after their owners unmount them: drop them (a user
    # namespace cannot: its copies are locked, and go when the run ends).
    for point, fstype in reversed(mountinfo()):
        if fstype == "fuse.fakedebugfs" and point != keep:
            try:
                umount(point)
            except OSError:
                pass


def arrange_namespace(mnt: str, work: str, kallsyms_text: str,
                      rootless: bool = False) -> list[str]:
    """Put the fake where tools look for it; returns the mounts made
    (innermost last) so they can be undone."""
    if rootless:
        made = cover_namespace(mnt, work)
    else:
        made = replace_tracing_mounts(mnt, work)
    check_covered(mnt)
    made += bind_proc_files(work, kallsyms_text)
    if rootless:
        try:
            made.append(userns.publish_mounts(work))
        except OSError as err:
            raise RunError(f"cannot mount a mount table over /proc/mounts ({err.strerror}): "
                           f"trace-cmd would not find the fake") from None
    return made


def _tracing_source(mnt: str, work: str) -> str:
    """The fake's ``tracing/``, or an empty directory if it has none (never
    the real tracefs)."""
    tracing = os.path.join(mnt, "tracing")
    if os.path.isdir(tracing):
        return tracing
    empty = os.path.join(work, "empty")
    os.makedirs(empty, exist_ok=True)
    return empty


def check_covered(mnt: str) -> None:
    fake_dev = os.stat(mnt).st_dev
    if os.stat(DEBUGFS).st_dev != fake_dev or \
            (os.path.isdir(os.path.join(mnt, "tracing")) and os.stat(TRACEFS).st_dev != fake_dev):
        raise RunError("the fake does not cover /sys/kernel/debug and /sys/kernel/tracing")


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def cover_namespace(mnt: str, work: str) -> list[str]:
    """In a user namespace: the inherited tracefs and debugfs mounts are
    locked (mount_namespaces(7)) and cannot be unmounted, and no new one
    can be made; bind the fake over each of them, and over
    /sys/kernel/{tracing,debug}, outermost first."""
    tracing = _tracing_source(mnt, work)
    targets = {TRACEFS: tracing, DEBUGFS: mnt}
    for point, fstype in mountinfo():
        if fstype == "tracefs":
            targets.setdefault(point, tracing)
        elif fstype == "debugfs":
            targets.setdefault(point, mnt)
    made: list[str] = []
    for point in sorted(targets, key=lambda p: p.count("/")):
        if any(_under(point, top) for top in made) or not os.path.isdir(point):
            continue
        mount(targets[point], point, None, MS_BIND)
        made.append(point)
    return made


def replace_tracing_mounts(mnt: str, work: str) -> list[str]:
    """As root: a real debugfs and tracefs at their usual places (for their
    /proc/mounts lines), the fake bound over each."""
    made: list[str] = []
    # No other tracefs/debugfs line may come before ours: drop them all
    # (deepest first), in this namespace only.
    for point, fstype in reversed(mountinfo()):
        if fstype in ("tracefs", "debugfs"):
            try:
                umount(point)
            except OSError:
                pass
    has_tracing = os.path.isdir(os.path.join(mnt, "tracing"))

    for path in (DEBUGFS, TRACEFS):
        os.makedirs(path, exist_ok=True)
    mount("debugfs", DEBUGFS, "debugfs")
    made.append(DEBUGFS)
    mount(mnt, DEBUGFS, None, MS_BIND)
    made.append(DEBUGFS)
    if has_tracing:
        mount("tracefs", TRACEFS, "tracefs")
        made.append(TRACEFS)
    mount(_tracing_source(mnt, work), TRACEFS, None, MS_BIND)
    made.append(TRACEFS)
    return made


def bind_proc_files(work: str, kallsyms_text: str) -> list[str]:
    """Files of our own over /proc files tools read or write: the engine's
    /proc/kallsyms; /proc/sys/kernel/ftrace_enabled holding "1" (the real
    one refuses writes on this kernel); /proc/sys/kernel/kptr_restrict
    holding the real value, which trace-cmd sets to 0 while it reads
    kallsyms and back (a sysctl only CAP_SYS_ADMIN may write, and the
    host's own, which the command has no business changing)."""
    files = {KALLSYMS: kallsyms_text, FTRACE_ENABLED: "1\n"}
    try:
        with open(KPTR_RESTRICT) as fp:
            files[KPTR_RESTRICT] = fp.read()
    except OSError:
        pass
    made: list[str] = []
    for target, text in files.items():
        if not os.path.exists(target):
            continue
        path = os.path.join(work, os.path.basename(target))
        with open(path, "w") as fp:
            fp.write(text)
        mount(path, target, None, MS_BIND)
        made.append(target)
    return made


def undo_mounts(made: list[str]) -> None:
    for target in reversed(made):
        try:
            umount(target)
        except OSError:
            pass


# --- the server -------------------------------------------------------------------

def start_server(server, mnt: str, log_path: str) -> int:
    """Fork the server (in this namespace); return its pid once mounted."""
    from fakedebugfs.server.launcher import fork_server

    parent = os.getpid()

    def prepare():
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.setsid()
        libc.set_pdeathsig(signal.SIGTERM)
        if os.getppid() != parent:  # run died before the prctl took hold
            os._exit(1)

    pid, message = fork_server(server, log_path, prepare)
    if message != "ok":
        _reap(pid, 5)
        try:
            with open(log_path) as fp:
                tail = fp.read()[-2000:].strip()
        except OSError:
            tail = ""
        raise RunError(message + (f"\n{tail}" if tail else ""))
    return pid


def _reap(pid: int, timeout: float) -> bool:
    """Wait up to *timeout* s for child *pid*; True once it is gone."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True
        if done:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def stop_server(pid: int, mnt: str) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    if not _reap(pid, 10):
        os.kill(pid, signal.SIGKILL)
        _reap(pid, 5)
    if runstate.is_mounted(mnt):
        try:
            umount(mnt)
        except OSError:
            pass
    runstate.clear_state(mnt)


# --- the command ------------------------------------------------------------------

def spawn(argv: list[str], env: dict, sealed: bool = True, before_exec=None) -> int:
    """fork + exec with default signal handling, *sealed* (see
    :mod:`fakedebugfs.sandbox.seal`); errors are reported through a close-on-exec
    pipe (exit 127 / 126 like a shell).  The command never starts unsealed
    by accident: if the seal fails, it does not start.  *before_exec(pid)*
    runs here while the child waits to exec."""
    r, w = os.pipe2(os.O_CLOEXEC)
    go_r, go_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(go_w)
            os.read(go_r, 1)  # until the parent is ready (or gone)
            for sig in FORWARDED + (signal.SIGCHLD, signal.SIGPIPE):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            # if run is killed outright, COMMAND goes too (nothing left behind)
            libc.set_pdeathsig(signal.SIGKILL)
            try:
                if sealed:
                    seal.drop_capabilities()
            except OSError as err:
                os.write(w, f"seal {err.errno}".encode())
                os._exit(126)
            os.execvpe(argv[0], argv, env)
        except OSError as err:
            os.write(w, f"exec {err.errno}".encode())
        finally:
            os._exit(127)
    os.close(w)
    os.close(go_r)
    try:
        if before_exec is not None:
            before_exec(pid)
    finally:
        os.close(go_w)
    with os.fdopen(r, "rb") as fp:
        data = fp.read().decode()
    if data:
        os.waitpid(pid, 0)
        what, code = data.split()[0], int(data.split()[1])
        if what == "seal":
            raise RunError(f"cannot seal the command ({os.strerror(code)}); "
                           f"--unsealed runs it with every capability", 126)
        raise RunError(f"{argv[0]}: {os.strerror(code)}", 127 if code == errno.ENOENT else 126)
    return pid


def wait_command(pid: int) -> int:
    """Wait for the command, forwarding signals; its exit status."""
    watched = set(FORWARDED) | {signal.SIGCHLD}
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) \
                else 128 + os.WTERMSIG(status)
        info = signal.sigtimedwait(watched, 1.0)
        if info is None or info.si_signo == signal.SIGCHLD:
            continue
        if info.si_code == SI_KERNEL:
            continue  # from the terminal: the command, in our group, got it too
        try:
            os.kill(pid, info.si_signo)
        except ProcessLookupError:
            pass


def sweep_stale_workdirs(rundir) -> None:
    """Remove the work folders of runs that were killed outright (SIGKILL
    leaves no chance to clean up): their owner is gone, nothing is mounted."""
    for work in Path(rundir).glob("run-*"):
        try:
            pid = int((work / "pid").read_text())
        except (OSError, ValueError):
            continue
        if runstate.alive(pid) or os.path.ismount(work / "mnt"):
            continue
        shutil.rmtree(work, ignore_errors=True)
    for state in Path(rundir).glob("*.json"):  # their servers' state files, too
        try:
            mnt = Path(json.loads(state.read_text())["mountpoint"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if mnt.parent.parent == Path(rundir) and mnt.parent.name.startswith("run-") \
                and not mnt.parent.exists():
            state.unlink(missing_ok=True)
            state.with_suffix(".sock").unlink(missing_ok=True)


def command_env(preload: str, mnt: str) -> dict:
    """COMMAND's environment: the splice preload appended, the fake's mount point."""
    env = dict(os.environ)
    old = env.get("LD_PRELOAD", "").strip()
    env["LD_PRELOAD"] = f"{old}:{preload}" if old else preload
    env["FAKEDEBUGFS_MOUNT"] = mnt
    return env


def watch_command(pid: int, mnt: str) -> None:
    """Ask the server to watch command *pid* (forked, not yet exec'd): its
    fork/exec/exit and context switches become events
    (:mod:`fakedebugfs.server.watch`).  Where the kernel refuses
    (perf_event_paranoid 3, seccomp), the run goes on unwatched."""
    from fakedebugfs.control.client import ControlClient
    from fakedebugfs.errors import FakeError

    try:
        with ControlClient(mnt) as client:
            client.call("watch", pid=pid, parent=os.getpid(),
                        parent_comm=procevents.comm_of(os.getpid()))
    except (FakeError, OSError) as err:
        log.debug("the command's process events are not watched: %s", err)


def start_command(argv: list[str], env: dict, sealed: bool, before_exec=None) -> int:
    """Run COMMAND to its end; its exit status (127/126 when it cannot start)."""
    try:
        pid = spawn(argv, env, sealed=sealed, before_exec=before_exec)
    except RunError as err:
        print(f"fakedebugfs run: {err.args[0]}", file=sys.stderr)
        return err.args[1]
    return wait_command(pid)


def run(argv: list[str], options, attach: str | None = None, unsealed: bool = False) -> int:
    """``fakedebugfs run``: COMMAND (*argv*) against a fake of its own, made
    with *options* (:class:`~fakedebugfs.api.options.MountOptions`), or
    against the one mounted at *attach*.  Returns COMMAND's exit status;
    RunError (one line) when it cannot be arranged."""
    from fakedebugfs.api.options import build_server
    from fakedebugfs.errors import MountError
    from fakedebugfs.server.server import check_can_mount

    if not argv:
        raise RunError("no command given (fakedebugfs run [options] -- COMMAND ...)")
    if attach:
        return run_attached(argv, attach, unsealed)
    rootless = os.geteuid() != 0
    if rootless:
        try:
            userns.check_fuse()
        except userns.UsernsError as err:
            raise RunError(str(err)) from None
    preload = preload_path()

    if rootless:  # uid 0 in the user namespace: keep our own run directory
        os.environ[runstate.RUNDIR_ENV] = str(runstate.rundir())
    sweep_stale_workdirs(runstate.rundir())
    work = tempfile.mkdtemp(prefix="run-", dir=runstate.rundir())
    with open(os.path.join(work, "pid"), "w") as fp:
        fp.write(f"{os.getpid()}\n")
    mnt = os.path.join(work, "mnt")
    os.mkdir(mnt, 0o755)
    os.chmod(work, 0o755)
    server_pid = None
    made: list[str] = []
    # Signals are taken with sigtimedwait from here on; children unblock them.
    signal.pthread_sigmask(signal.SIG_BLOCK, set(FORWARDED) | {signal.SIGCHLD})
    try:
        check_can_mount(mnt)
        # unshare first: it refuses a process with threads, and building the
        # server may start some (numpy's BLAS pool)
        enter_private_namespace(rootless)
        server = build_server(options, mnt)
        kallsyms_text = server.kernel.engine.kallsyms.proc_kallsyms()
        server_pid = start_server(server, mnt, os.path.join(work, "server.log"))
        made = arrange_namespace(mnt, work, kallsyms_text, rootless)
        engine = server.kernel.engine

        def watch(pid):
            # real processes' events have real timing: not in a deterministic run
            if not getattr(engine.clock, "deterministic", False):
                watch_command(pid, mnt)

        return start_command(argv, command_env(preload, mnt), not unsealed, watch)
    except (MountError, OSError) as err:
        raise RunError(str(err)) from None
    finally:
        undo_mounts(made)
        if server_pid is not None:
            stop_server(server_pid, mnt)
        shutil.rmtree(work, ignore_errors=True)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(FORWARDED) | {signal.SIGCHLD})


# --- a command against a fake that is already mounted ------------------------------

def run_attached(argv: list[str], attach: str, unsealed: bool = False) -> int:
    """``run --attach MNT``: COMMAND sees the fake mounted at MNT (the Python
    API's ``Fake.run``) instead of one of its own; that fake stays mounted."""
    from fakedebugfs.control.client import ControlClient
    from fakedebugfs.errors import FakeError

    mnt = runstate.canonical(attach)
    if runstate.mounted_fstype(mnt) != runstate.FSTYPE:
        raise RunError(f"--attach {attach}: no fakedebugfs is mounted there")
    if os.geteuid() != 0:
        raise RunError("--attach needs root")
    try:
        with ControlClient(mnt) as client:
            kallsyms_text = client.call("kallsyms")["text"]
    except FakeError as err:
        raise RunError(f"--attach {attach}: {err}") from None
    preload = preload_path()
    work = tempfile.mkdtemp(prefix="attach-", dir=runstate.rundir())
    made: list[str] = []
    signal.pthread_sigmask(signal.SIG_BLOCK, set(FORWARDED) | {signal.SIGCHLD})
    try:
        enter_private_namespace(keep=mnt)
        made = arrange_namespace(mnt, work, kallsyms_text)
        return start_command(argv, command_env(preload, mnt), not unsealed)
    except OSError as err:
        raise RunError(str(err)) from None
    finally:
        undo_mounts(made)
        shutil.rmtree(work, ignore_errors=True)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(FORWARDED) | {signal.SIGCHLD})
