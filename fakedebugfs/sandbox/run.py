"""``fakedebugfs run [mount options] -- COMMAND …``: run an unmodified tool
against a fake of its own.

trace-cmd and libtracefs find the tracing directory only through
``/proc/mounts`` (docs/tracefs.md#how-tools-find-the-tracing-directory), so the command runs in a private mount
namespace arranged like a real kernel's:

    /sys/kernel/tracing   a real tracefs mount (for its ``tracefs`` line in
                          /proc/mounts), with the fake's ``tracing/`` bound over it
    /sys/kernel/debug     a real debugfs mount (its ``debugfs`` line), the
                          fake's root bound over it
    /proc                 the proc of the command's own PID namespace
    /proc/kallsyms        the fake's symbol table, live (a replay's or an
                          ``insmod``'s symbols are seen at the next open)
    /proc/sys/kernel/...  writable copies of the sysctls tracing tools write
                          (:mod:`fakedebugfs.sandbox.confine`)

Every other tracefs or debugfs mount is removed from the namespace first,
so the first ``tracefs`` line is ours.  The real tracefs and debugfs are
never touched: the fake covers them before the command starts, and the run
refuses to start the command unless it checked that both paths are the fake.

Processes: ``run`` makes a PID namespace and forks its first process, the
namespace's init (the *keeper* of the fake's namespaces), which mounts its
/proc, forks the server (mounted at a private temporary directory, in its
own session, so a terminal's Ctrl-C goes to the command, not to the
server), arranges the mounts and then forks the command's own init into a
PID namespace under its own (:mod:`fakedebugfs.sandbox.cmdinit`), which
confines and seals itself and runs the command.  Inside, the command sees
only its own processes and that init: neither the keeper nor the server,
so no ``/proc/<pid>/root`` leads to the host's mounts, no ptrace or
``kill -9 -1`` reaches the fake.  When the command ends, its init exits,
and every process of its namespace with it (a daemon, a recorder in the
background); the keeper then stops the server and exits; if ``run``
itself is killed, the keeper dies with it (PR_SET_PDEATHSIG), and with it
every process of both namespaces: nothing outlives a run.  Pids in the
fake's events (the command's process events, ``trace_marker`` writers) are
those the command sees.  (``--mirror`` keeps the command in the keeper's
namespace: its server follows the command by the pids it sees.)

The command gets ``LD_PRELOAD`` with ``splice_preload.so`` appended, which
makes splice() from fake files work (docs/fuse.md#splice).  SIGINT, SIGTERM,
SIGHUP and SIGQUIT sent to ``run`` reach the command once, and ``run``
exits with the command's status (128 + N when signal N killed it): see
:func:`own_group`.

Sealed (the default): the command keeps root's capabilities (bpftrace
needs CAP_SYS_ADMIN for the kernel's BTF) but a seccomp filter
(:mod:`fakedebugfs.sandbox.seal`) refuses it the mount family, setns and
new namespaces, so it cannot mount the real tracefs or debugfs, unmount
the fake or enter another namespace; /proc/sys and /sys are read-only to
it but for private copies of the sysctls tracing tools write, and other
fakes' control sockets are out of its sight (:mod:`fakedebugfs.sandbox.confine`).
Other fakes' sockets refuse it even where their paths are in sight
(:mod:`fakedebugfs.server.peers`).  What the seal promises and cannot
promise (BPF): docs/cli.md#the-seal.
``--unsealed`` starts it without the filter, the read-only mounts and
the hiding.

Rootless: without root, ``run`` first enters a user namespace of its own
(:mod:`fakedebugfs.sandbox.userns`), where it is uid 0 over a new mount namespace.
There it cannot mount a real tracefs or debugfs: it covers every tracefs
and debugfs mount it inherited (and /sys/kernel/{tracing,debug}) with the
fake, and mounts over the ``/proc/mounts`` symlink a copy of the mount
table whose first lines are ``tracefs`` at /sys/kernel/tracing and
``debugfs`` at /sys/kernel/debug.  The command runs as uid 0 of that
namespace, which is the invoking user outside it.  ``run --attach`` works
the same way rootless: the fake mounted there is bound in that namespace.
"""

from __future__ import annotations

import errno
import json
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from fakedebugfs.native import libc
from fakedebugfs.control import runstate
from fakedebugfs.sandbox import cmdinit, confine, helper, procsys, seal, userns
from fakedebugfs.sandbox.cmdinit import RunError, bind_kallsyms, bind_proc_version, mount_proc

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8
SI_KERNEL = 0x80

TRACEFS = "/sys/kernel/tracing"
DEBUGFS = "/sys/kernel/debug"
PROC = "/proc"
KALLSYMS = "/proc/kallsyms"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
WATCHED = frozenset(FORWARDED) | {signal.SIGCHLD}




mount = libc.mount


def umount(target, flags=MNT_DETACH | UMOUNT_NOFOLLOW) -> None:
    libc.umount2(target, flags)


mountinfo = confine.mount_points  # ``(mount point, fstype)`` of this namespace's mounts


def preload_path() -> str:
    from fakedebugfs.native import build

    try:
        return str(build("splice_preload"))
    except Exception as err:  # gcc missing or failing
        raise RunError(f"cannot build splice_preload.so ({err}); run `make install`") from None


# --- the namespaces ---------------------------------------------------------------

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


def terminal_foreground() -> bool:
    """Whether this process is in the foreground process group of a
    controlling terminal (an interactive shell's job in front)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:  # no controlling terminal (CI, setsid, a daemon)
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def own_group() -> bool:
    """Whether run's namespaces (its init, the command's init, the command)
    go into a process group of their own, out of run's.

    A signal sent to run's process group (``kill -INT -PGID``, a CI
    runner's or ``timeout``'s group kill) reaches every member; had the
    command stayed in run's group it would get it twice, directly and
    forwarded by run, and run cannot tell a group's signal from one sent
    to it alone (both are SI_USER from the same sender).  In a group of its
    own the command gets only what run forwards: exactly what run got.

    A terminal's foreground job keeps the command in run's group, as a
    shell's job: it must read the terminal (a pager, a prompt) and be
    stopped with the job (Ctrl-Z); the terminal's signals reach every
    member of the group from the kernel (SI_KERNEL), and run's inits
    forward none of those."""
    return not terminal_foreground()


def fork_init(body, admit: str | None = None, restore: bool = False,
              group: bool = False) -> tuple[int, int, int]:
    """unshare(CLONE_NEWPID) and fork the new PID namespace's first process,
    its init, which runs *body()* and exits with the status it returns.
    *admit*: the mount point of a fake whose control socket the new
    namespace may use (server/peers.py), told before *body* starts.

    Returns ``(pid, errors, alive)``: *errors* is the read end of a pipe on
    which init writes a RunError's arguments (JSON) before exiting; init
    dies with us (PR_SET_PDEATHSIG), *alive* being the pipe it checks to
    see whether we died before the prctl took hold (and, with *admit*,
    reads a byte from once the namespace is admitted).  *restore*: this
    process's later children are of its own PID namespace again (setns),
    not of the new one (an init that forks more: once the new one's init is
    gone, fork would fail there).  *group*: init leads a process group of
    its own, which its descendants inherit (:func:`own_group`)."""
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC) if restore else None
    try:
        libc.unshare(CLONE_NEWPID, "unshare(CLONE_NEWPID)")
    except OSError as err:
        raise RunError(f"cannot make the command's PID namespace: {err.strerror}") from None
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    live_r, live_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if group:  # (both sides, as shells do: whichever runs first)
        try:
            os.setpgid(pid, 0)
        except OSError:  # (the child ended already)
            pass
    if pid and own is not None:
        libc.check(libc.LIBC.setns(own, CLONE_NEWPID), "setns(CLONE_NEWPID)")
        os.close(own)
    if pid == 0:
        code = 1
        try:
            os.close(err_r)
            os.close(live_w)
            if own is not None:
                os.close(own)
            libc.set_pdeathsig(signal.SIGKILL)
            if admit is not None:
                if os.read(live_r, 1) != b"1":  # EOF: run is gone, or could not admit us
                    os._exit(1)
            elif select.select([live_r], [], [], 0)[0]:  # EOF: run is gone already
                os._exit(1)
            # init gets no signal it has no handler for, blocked or not
            # (SIGNAL_UNKILLABLE): give each a handler; they stay blocked and
            # are taken with sigtimedwait.
            for sig in WATCHED:
                signal.signal(sig, _never_called)
            code = body()
        except RunError as err:
            os.write(err_w, json.dumps([str(a) if i == 0 else a
                                        for i, a in enumerate(err.args)]).encode())
        except BaseException as err:  # report anything to run
            os.write(err_w, json.dumps([f"{type(err).__name__}: {err}"]).encode())
        finally:
            os._exit(code)
    os.close(err_w)
    os.close(live_r)
    if admit is not None:
        try:
            admit_namespace(admit, pid)
        except BaseException:
            os.close(live_w)  # init ends
            os.waitpid(pid, 0)
            os.close(err_r)
            raise
        os.write(live_w, b"1")
    return pid, err_r, live_w


def run_nested(argv: list[str], env: dict, mnt: str, work: str, rootless: bool,
               sealed: bool, watching: bool) -> int:
    """As run's init (the keeper of the fake's namespaces): COMMAND under an
    init of its own, in a PID namespace of its own
    (:mod:`fakedebugfs.sandbox.cmdinit`); its exit status."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def body() -> int:
        ours.close()
        cmdinit.enter(mnt, work, rootless, sealed, theirs if sealed else None)
        watch = (lambda pid: cmdinit.watch_command(pid, mnt)) if watching else None
        return start_command(argv, env, False, watch, None)

    try:
        started = fork_init(body, admit=mnt, restore=True)
    finally:
        theirs.close()
    threading.Thread(target=_supervise_mounts, args=(ours, mnt), daemon=True,
                     name="mount supervisor").start()
    return wait_init(*started)


def _supervise_mounts(sock, mnt: str) -> None:
    """The command's mount(2) calls (:mod:`fakedebugfs.sandbox.mountview`),
    once its init sends the seal's listener (none: unsealed, or it failed)."""
    from fakedebugfs.sandbox import mountview

    try:
        with sock:
            _, fds, _, _ = socket.recv_fds(sock, 1, 1)
        if fds:
            mountview.supervise(fds[0], mnt)
    except OSError:
        pass


def admit_namespace(mnt: str, pid: int) -> None:
    """Let the PID namespace of *pid* use the control socket of the fake at
    *mnt* (server/peers.py: its commands are root, and no other run's
    may reach it)."""
    from fakedebugfs.control.client import ControlClient
    from fakedebugfs.errors import FakeError

    try:
        with ControlClient(mnt) as client:
            client.call("admit", pid=pid)
    except (FakeError, OSError) as err:
        raise RunError(f"{mnt}: cannot let the command's namespace reach the fake: {err}") \
            from None


def _never_called(signum, frame) -> None:
    pass


def wait_init(pid: int, errors: int, alive: int, forward_all: bool = False) -> int:
    """Wait for init (forwarding signals; a terminal's too with
    *forward_all*); its status, or the RunError it reported."""
    try:
        status = wait_command(pid, forward_all=forward_all)
    finally:
        os.close(alive)
    with os.fdopen(errors, "rb") as fp:
        report = fp.read()
    if report:
        raise RunError(*json.loads(report))
    return status


def end_namespace(keep=()) -> None:
    """As init: SIGKILL every other process of the PID namespace but *keep*
    and reap them (what the command left running must not outlive it)."""
    for _ in range(200):
        others = [int(d) for d in os.listdir(PROC) if d.isdigit()]
        others = [p for p in others if p != 1 and p not in keep]
        if not others:
            return
        for p in others:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap_orphans()
        time.sleep(0.005)


def _reap_orphans() -> None:
    """Reap every child that ended (init adopts orphans)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def arrange_namespace(mnt: str, work: str, rootless: bool = False) -> None:
    """Put the fake where tools look for it (in init's mount namespace,
    after /proc is the namespace's own)."""
    if rootless:
        cover_namespace(mnt, work)
    else:
        replace_tracing_mounts(mnt, work)
    check_covered(mnt)
    bind_kallsyms(mnt, work)
    bind_proc_version(mnt)  # the profile's /proc/version, where it has one
    procsys.bind_stack_tracer(mnt)  # kernel.stack_tracer_enabled, where the fake has it
    helper.make_reachable(work, mount)  # mount -o remount,gid=N (fakedebugfs.sandbox.helper)
    if rootless:
        try:
            userns.publish_mounts(work)
        except OSError as err:
            raise RunError(f"cannot mount a mount table over /proc/mounts ({err.strerror}): "
                           f"trace-cmd would not find the fake") from None


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


# --- the server -------------------------------------------------------------------

def start_server(server, mnt: str, log_path: str, nested: bool = False) -> int:
    """Fork the server (in this namespace); return its pid once mounted.
    *nested*: the command runs in a PID namespace under this one, and the
    fake shows its tasks' pids as it sees them (fs/pidview.py)."""
    from fakedebugfs.server.launcher import fork_server, wait_gone

    parent = os.getpid()

    def prepare():
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.setsid()
        libc.set_pdeathsig(signal.SIGTERM)
        if os.getppid() != parent:  # init died before the prctl took hold
            os._exit(1)
        if nested:
            from fakedebugfs.fs import pidview

            pidview.INNERMOST = True

    pid, message = fork_server(server, log_path, prepare)
    if message != "ok":
        wait_gone(pid, 5)
        try:
            with open(log_path) as fp:
                tail = fp.read()[-2000:].strip()
        except OSError:
            tail = ""
        raise RunError(message + (f"\n{tail}" if tail else ""))
    return pid


def stop_server(pid: int, mnt: str) -> None:
    """Stop the fake's server and take its mount away: the one lifecycle
    the CLI and the API use (:mod:`fakedebugfs.server.launcher`)."""
    from fakedebugfs.server import launcher

    launcher.stop_server(pid)
    launcher.unmount(mnt)
    runstate.clear_state(mnt)


# --- the command ------------------------------------------------------------------

def spawn(argv: list[str], env: dict, sealed: bool = True, before_exec=None,
          arrange=None, supervise: str | None = None) -> int:
    """fork + exec with default signal handling, in a mount namespace of
    its own arranged by *arrange()* (:func:`fakedebugfs.sandbox.confine.confine`),
    *sealed* (:mod:`fakedebugfs.sandbox.seal`); errors are reported through a
    close-on-exec pipe (exit 127 / 126 like a shell).  The command never
    starts unsealed by accident: if the seal fails, it does not start.
    *before_exec(pid)* runs here while the child waits to exec.  *supervise*:
    the fake's mount point, whose views answer the sealed command's
    mount(2) and umount2(2) (a thread here: :func:`_supervise_mounts`)."""
    r, w = os.pipe2(os.O_CLOEXEC)
    go_r, go_w = os.pipe2(os.O_CLOEXEC)
    pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) if sealed and supervise \
        else None
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(go_w)
            os.read(go_r, 1)  # until the parent is ready (or gone)
            for sig in WATCHED | {signal.SIGPIPE}:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            # if init is killed outright, COMMAND goes too (nothing left behind)
            libc.set_pdeathsig(signal.SIGKILL)
            try:
                if arrange is not None:
                    arrange()
                if sealed:
                    listener = seal.install_filter(listener=pair is not None)
                    if listener is not None:
                        socket.send_fds(pair[1], [b"L"], [listener])
                        os.close(listener)
            except OSError as err:
                os.write(w, f"seal {err.errno} {err.strerror or err}".encode())
                os._exit(126)
            os.execvpe(argv[0], argv, env)
        except OSError as err:
            os.write(w, f"exec {err.errno}".encode())
        finally:
            os._exit(127)
    os.close(w)
    os.close(go_r)
    if pair is not None:
        pair[1].close()
        threading.Thread(target=_supervise_mounts, args=(pair[0], supervise), daemon=True,
                         name="mount supervisor").start()
    try:
        if before_exec is not None:
            before_exec(pid)
    finally:
        os.close(go_w)
    with os.fdopen(r, "rb") as fp:
        data = fp.read().decode()
    if data:
        os.waitpid(pid, 0)
        what, code, *why = data.split(" ", 2)
        code = int(code)
        if what == "seal":
            raise RunError(f"cannot seal the command ({why[0] if why else os.strerror(code)}); "
                           f"--unsealed runs it unsealed", 126)
        raise RunError(f"{argv[0]}: {os.strerror(code)}", 127 if code == errno.ENOENT else 126)
    return pid


def wait_command(pid: int, reap_orphans: bool = False, forward_all: bool = False) -> int:
    """Wait for child *pid*, forwarding signals to it; its exit status.
    With *reap_orphans* (init), every other child that ends is reaped too.
    A terminal's signal (SI_KERNEL) is not forwarded, the child being in
    the terminal's foreground group too, unless *forward_all* (it is in a
    group of its own: :func:`own_group`)."""
    while True:
        if reap_orphans:
            done, status = _wait_any(pid)
        else:
            done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) \
                else 128 + os.WTERMSIG(status)
        info = signal.sigtimedwait(WATCHED, 1.0)
        if info is None or info.si_signo == signal.SIGCHLD:
            continue
        if info.si_code == SI_KERNEL and not forward_all:
            continue  # from the terminal: the command, in our group, got it too
        try:
            os.kill(pid, info.si_signo)
        except ProcessLookupError:
            pass


def _wait_any(pid: int) -> tuple[int, int]:
    """Reap ended children; ``(pid, status)`` once *pid* is among them."""
    while True:
        try:
            done, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return pid, 0
        if done == 0:
            return 0, 0
        if done == pid:
            return done, status


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
    from fakedebugfs.sources import procevents  # (construct: not for run --attach)

    try:
        with ControlClient(mnt) as client:
            client.call("watch", pid=pid, parent=os.getpid(),
                        parent_comm=procevents.comm_of(os.getpid()))
    except (FakeError, OSError) as err:
        import logging  # (not imported by run --attach: ~4% of its start)

        logging.getLogger(__name__).debug("the command's process events are not watched: %s",
                                          err)


def start_command(argv: list[str], env: dict, sealed: bool, before_exec=None,
                  arrange=None, supervise: str | None = None) -> int:
    """As init: run COMMAND to its end; its exit status (127/126 when it
    cannot start)."""
    try:
        pid = spawn(argv, env, sealed=sealed, before_exec=before_exec, arrange=arrange,
                    supervise=supervise)
    except RunError as err:
        print(f"fakedebugfs run: {err.args[0]}", file=sys.stderr)
        return err.args[1]
    return wait_command(pid, reap_orphans=True)


def command_namespace(work: str, mnt: str, sealed: bool):
    """What the command's child does before exec: its mount namespace
    (:func:`fakedebugfs.sandbox.confine.confine`), keeping this fake's
    state file and socket in sight."""
    paths = runstate.paths(mnt)
    keep = [str(paths["state"]), str(paths["sock"])]
    return lambda: confine.confine(work, mnt, keep, sealed)


def mirror_default(options):
    """``run``'s mirror: *options* as the server takes them, whether the
    mirror is run's default rather than asked for, and the notice to
    print once the run starts (or None).  No ``--mirror``: the command's
    tree (``tree``) where perf_event_open allows it (root, or
    ``kernel.perf_event_paranoid`` -1), else one line saying why and
    how, and no mirror; not with ``--clock virtual`` (a deterministic
    run).  ``--mirror none``: no mirror, no line.  (Asked here, before a
    rootless run enters its user namespace, where perf asks again.)"""
    import dataclasses

    mode = getattr(options, "mirror", None)
    if mode == "none":
        return dataclasses.replace(options, mirror=None), False, None
    if mode is not None or options.clock == "virtual":
        return options, False, None
    from fakedebugfs.sources.mirror import privilege_problem

    if privilege_problem():
        try:
            with open("/proc/sys/kernel/perf_event_paranoid") as fp:
                now = f" (it is {int(fp.read())})"
        except (OSError, ValueError):
            now = ""
        return options, False, (
            "fakedebugfs run: the command's real events are not mirrored: perf_event_open "
            "of kernel tracepoints needs root (CAP_PERFMON) or `sysctl "
            f"kernel.perf_event_paranoid=-1`{now}; --mirror none turns this off")
    return dataclasses.replace(options, mirror="tree"), True, None


def run(argv: list[str], options, attach: str | None = None, unsealed: bool = False) -> int:
    """``fakedebugfs run``: COMMAND (*argv*) against a fake of its own, made
    with *options* (:class:`~fakedebugfs.api.options.MountOptions`), or
    against the one mounted at *attach*.  Returns COMMAND's exit status;
    RunError (one line) when it cannot be arranged."""
    if not argv:
        raise RunError("no command given (fakedebugfs run [options] -- COMMAND ...)")
    if attach:  # (before the server's imports: trio, pyfuse3, the engine: ~0.5 s)
        return run_attached(argv, attach, unsealed)
    from fakedebugfs.api.options import build_server
    from fakedebugfs.errors import MountError
    from fakedebugfs.server.server import check_can_mount

    options, implicit, notice = mirror_default(options)
    if options.mirror and not implicit:  # --mirror's privilege first: one line
        from fakedebugfs.sources.mirror import privilege_problem

        problem = privilege_problem()
        if problem:
            raise RunError(problem)
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
    # Signals are taken with sigtimedwait from here on; children unblock them.
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    try:
        check_can_mount(mnt)
        # unshare first: it refuses a process with threads, and building the
        # server may start some (numpy's BLAS pool)
        enter_private_namespace(rootless)
        server = build_server(options, mnt, implicit)
        env = command_env(preload, mnt)
        if notice:  # (once the run can start: not before another failure's line)
            print(notice, file=sys.stderr, flush=True)

        # --mirror system's server reads every task by the pids of its own
        # namespace: the command stays in it (docs/cli.md#the-seal); tree's
        # events are opened by the command's init, in the command's
        nested = options.mirror != "system"

        def init() -> int:
            mount_proc()
            server_pid = start_server(server, mnt, os.path.join(work, "server.log"), nested)
            try:
                arrange_namespace(mnt, work, rootless)
                # real processes' events have real timing: not in a deterministic run
                watching = not getattr(server.kernel.engine.clock, "deterministic", False)
                if nested:
                    return run_nested(argv, env, mnt, work, rootless, not unsealed, watching)

                def watch(pid):
                    if watching:
                        watch_command(pid, mnt)

                return start_command(argv, env, not unsealed, watch,
                                     command_namespace(work, mnt, not unsealed), mnt)
            finally:
                end_namespace(keep={server_pid})
                stop_server(server_pid, mnt)

        group = own_group()
        return wait_init(*fork_init(init, group=group), forward_all=group)
    except (MountError, OSError) as err:
        raise RunError(str(err)) from None
    finally:
        runstate.clear_state(mnt)  # init killed outright leaves it
        shutil.rmtree(work, ignore_errors=True)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WATCHED)


# --- a command against a fake that is already mounted ------------------------------

def run_attached(argv: list[str], attach: str, unsealed: bool = False) -> int:
    """``run --attach MNT``: COMMAND sees the fake mounted at MNT (the Python
    API's ``Fake.run``) instead of one of its own; that fake stays mounted.
    Rootless, in a user namespace of its own where that mount is bound.
    The namespace's init arranges it, then confines and seals itself as
    the command's init of a run does (:mod:`fakedebugfs.sandbox.cmdinit`)
    and runs the command; this process answers their mount(2) calls."""
    mnt = runstate.canonical(attach)
    if runstate.mounted_fstype(mnt) != runstate.FSTYPE:
        raise RunError(f"--attach {attach}: no fakedebugfs is mounted there")
    rootless = os.geteuid() != 0
    preload = preload_path()
    if rootless:  # uid 0 in the user namespace: keep our own run directory
        os.environ[runstate.RUNDIR_ENV] = str(runstate.rundir())
    work = tempfile.mkdtemp(prefix="attach-", dir=runstate.rundir())
    os.chmod(work, 0o755)
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    try:
        enter_private_namespace(rootless, keep=mnt)
        env = command_env(preload, mnt)

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

        def init() -> int:
            # the command's own init, confined and sealed as it is
            # (sandbox/cmdinit.py): no way out through /proc/1
            ours.close()
            mount_proc()
            cmdinit.reserve_pids()
            arrange_namespace(mnt, work, rootless)
            cmdinit.seal_in(mnt, work, not unsealed, theirs if not unsealed else None)
            try:
                return start_command(argv, env, False, None, None)
            finally:
                end_namespace()

        # (started first: once this process made the PID namespace, the
        # kernel lets it start no thread)
        threading.Thread(target=_supervise_mounts, args=(ours, mnt), daemon=True,
                         name="mount supervisor").start()
        group = own_group()
        try:
            started = fork_init(init, admit=mnt, group=group)
        finally:
            theirs.close()
        return wait_init(*started, forward_all=group)
    except OSError as err:
        raise RunError(str(err)) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WATCHED)


def attach_main(args: list[str]):
    """``fakedebugfs run --attach MNT [--unsealed] -- COMMAND ...`` (what
    ``Fake.run``/``Fake.popen`` start, from ``python -m fakedebugfs``)
    without the CLI's parser and its imports (argparse, the mount options,
    the scenario steps: about a third of the start's instructions): its
    exit status, or None when *args* (after ``run``) are not of that
    form exactly, for the CLI to parse.  Errors are the CLI's one line."""
    try:
        cut = args.index("--")
    except ValueError:
        return None
    head, argv = args[:cut], args[cut + 1:]
    attach, unsealed = None, False
    while head:
        word = head.pop(0)
        if word == "--unsealed" and not unsealed:
            unsealed = True
        elif word == "--attach" and attach is None and head and not head[0].startswith("-"):
            attach = head.pop(0)
        elif word.startswith("--attach=") and attach is None and len(word) > 9:
            attach = word[9:]
        else:
            return None
    if not attach or not argv:
        return None
    try:
        return run_attached(argv, attach, unsealed)
    except RunError as err:
        print(f"fakedebugfs run: {err.args[0]}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
