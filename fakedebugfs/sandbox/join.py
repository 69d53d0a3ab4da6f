"""The lean way into a fake's ``run`` namespace: what ``Fake.popen`` starts
once the fake's keeper (:mod:`fakedebugfs.sandbox.keeper`) holds that
namespace.

``python -S -I join.py --pidfd N [--userns] [--filter HEX | --unsealed]
[--status FD] [--env NAME=VALUE ...] --fallback ARGV... -- COMMAND ...``

A stdlib-only script (Python's start is most of its cost: no package, no
construct, no ``signal``/``enum``): it remembers its working directory,
enters the namespaces of the holder whose pidfd it is given with one
setns(2) (``CLONE_NEWUSER`` rootless, ``CLONE_NEWNS``, ``CLONE_NEWPID``:
the kernel enters the user namespace first), goes back to its working
directory by name (setns of a mount namespace resets the root and the
working directory, setns(2)), and forks COMMAND, the first process of its
PID namespace's that it makes, which

* dies with this launcher (PR_SET_PDEATHSIG, as ``run``'s command dies
  with ``run``);
* is sealed with the filter :mod:`fakedebugfs.sandbox.seal` assembled
  (PR_SET_NO_NEW_PRIVS, then seccomp(SECCOMP_SET_MODE_FILTER)), unless
  ``--unsealed``; it never starts unsealed by accident: if the seal
  fails, it does not start;
* gets ``run``'s environment additions (``LD_PRELOAD`` appended, the
  fake's mount point, ``--env``).

The launcher forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to COMMAND
(not those a terminal sent to the whole group, which COMMAND got too) and
exits with its status (128 + N when signal N killed it), as ``run`` does;
``fakedebugfs run: ...`` and 127/126 (like a shell) when COMMAND cannot
start.  When the namespace cannot be entered (setns refused by a
container, the holder gone, the working directory not reachable there),
the launcher writes why on the ``--status`` fd and execs ``--fallback``
(``fakedebugfs run --attach MNT -- COMMAND``): the command still runs,
the slow way, and the fake logs why.

Importable too: :func:`install_filter` (and the layout of ``struct
sock_fprog``) is the one the package's seal uses.
"""

import ctypes
import os

import _signal

CLONE_NEWNS = 0x00020000  # include/uapi/linux/sched.h
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1  # include/uapi/linux/seccomp.h
SYS_seccomp = 317  # x86_64 (arch/x86/entry/syscalls/syscall_64.tbl)
SOCK_FILTER_SIZE = 8  # sizeof(struct sock_filter)
SI_KERNEL = 0x80
FORWARDED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT)
WATCHED = set(FORWARDED) | {_signal.SIGCHLD}


class sock_fprog(ctypes.Structure):
    """struct sock_fprog { unsigned short len; struct sock_filter *filter; }
    (include/uapi/linux/filter.h): *len* instructions at *filter*."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_LIBC = None


def libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def install_filter(filt: bytes) -> None:
    """Seal this process and everything it will run with the classic BPF
    program *filt* (an array of struct sock_filter): PR_SET_NO_NEW_PRIVS,
    then seccomp(SECCOMP_SET_MODE_FILTER)."""
    lib = libc()
    buf = ctypes.create_string_buffer(filt, len(filt))
    prog = sock_fprog(len(filt) // SOCK_FILTER_SIZE, ctypes.addressof(buf))
    _check(lib.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(lib.syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, ctypes.byref(prog)),
           "seccomp(SECCOMP_SET_MODE_FILTER)")


def parse(args: list) -> dict:
    """The launcher's arguments (see the module); ValueError when malformed."""
    opts = {"pidfd": None, "userns": False, "filter": None, "unsealed": False, "status": None,
            "env": {}, "fallback": None, "argv": None}
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            opts["argv"] = args[i + 1:]
            break
        if word in ("--userns", "--unsealed"):
            opts[word[2:]] = True
            i += 1
            continue
        if word == "--fallback":  # up to its own "--": the fallback's whole command line
            end = args.index("--end-fallback", i)
            opts["fallback"] = args[i + 1:end]
            i = end + 1
            continue
        value = args[i + 1]
        if word == "--pidfd":
            opts["pidfd"] = int(value)
        elif word == "--status":
            opts["status"] = int(value)
        elif word == "--filter":
            opts["filter"] = bytes.fromhex(value)
        elif word == "--env":
            name, _, val = value.partition("=")
            opts["env"][name] = val
        else:
            raise ValueError(word)
        i += 2
    if opts["pidfd"] is None or not opts["argv"] or not opts["fallback"] \
            or (opts["filter"] is None and not opts["unsealed"]):
        raise ValueError("incomplete")
    return opts


def command_env(additions: dict) -> dict:
    """``run``'s command environment: ours, ``LD_PRELOAD`` appended to, the rest set."""
    env = dict(os.environ)
    for name, value in additions.items():
        if name == "LD_PRELOAD":
            old = env.get("LD_PRELOAD", "").strip()
            value = f"{old}:{value}" if old else value
        env[name] = value
    return env


def enter(opts: dict) -> None:
    """setns(2) into the holder's namespaces, back to our working directory."""
    cwd = os.getcwd()
    flags = CLONE_NEWNS | CLONE_NEWPID | (CLONE_NEWUSER if opts["userns"] else 0)
    _check(libc().setns(opts["pidfd"], flags), "setns")
    os.chdir(cwd)


def fail_over(opts: dict, why: str) -> None:
    """Tell the fake why (the --status fd) and exec the fallback command line."""
    if opts["status"] is not None:
        try:
            os.write(opts["status"], why.encode(errors="replace"))
        except OSError:
            pass
    for fd in (opts["status"], opts["pidfd"]):
        if fd is not None:
            os.close(fd)
    os.execv(opts["fallback"][0], opts["fallback"])


def start(opts: dict) -> int:
    """Fork COMMAND (see the module); its pid once it exec'd.  OSError
    (with the exit status in ``.status``) when it cannot start."""
    argv = opts["argv"]
    env = command_env(opts["env"])
    r, w = os.pipe2(os.O_CLOEXEC)
    live_r, live_w = os.pipe2(os.O_CLOEXEC)  # held by us: the child sees whether we live
    pid = os.fork()
    if pid == 0:
        code = 127
        try:
            os.close(r)
            os.close(live_w)
            for sig in WATCHED | {_signal.SIGPIPE}:
                _signal.signal(sig, _signal.SIG_DFL)
            _signal.pthread_sigmask(_signal.SIG_SETMASK, [])
            lib = libc()
            _check(lib.prctl(PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0),
                   "prctl(PR_SET_PDEATHSIG)")
            os.set_blocking(live_r, False)
            try:
                if not os.read(live_r, 1):  # EOF: the launcher died before the prctl
                    os._exit(1)
            except BlockingIOError:
                pass
            os.close(live_r)
            if not opts["unsealed"]:
                try:
                    install_filter(opts["filter"])
                except OSError as err:
                    os.write(w, f"seal {err.errno} {err.strerror or err}".encode())
                    code = 126
                    os._exit(code)
            os.execvpe(argv[0], argv, env)
        except OSError as err:
            os.write(w, f"exec {err.errno}".encode())
        finally:
            os._exit(code)
    os.close(w)
    os.close(live_r)
    data = b""
    while True:
        chunk = os.read(r, 512)
        if not chunk:
            break
        data += chunk
    os.close(r)
    if data:
        os.waitpid(pid, 0)
        what, code, *why = data.decode().split(" ", 2)
        code = int(code)
        if what == "seal":
            err = OSError(code, f"cannot seal the command ({why[0] if why else os.strerror(code)}); "
                                f"--unsealed runs it unsealed")
            err.status = 126
        else:
            err = OSError(code, f"{argv[0]}: {os.strerror(code)}")
            err.status = 127 if code == 2 else 126  # ENOENT: not found
        raise err
    return pid


def wait_command(pid: int) -> int:
    """Wait for *pid*, forwarding signals to it (as ``run`` does); its exit status."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) \
                else 128 + os.WTERMSIG(status)
        info = _signal.sigtimedwait(WATCHED, 1.0)
        if info is None or info.si_signo == _signal.SIGCHLD or info.si_code == SI_KERNEL:
            continue  # a terminal's signals reached COMMAND too: it is in our group
        try:
            os.kill(pid, info.si_signo)
        except ProcessLookupError:
            pass


def main(args: list) -> int:
    try:
        opts = parse(args)
    except (ValueError, IndexError):
        os.write(2, b"fakedebugfs run: join: bad arguments\n")
        return 2
    _signal.pthread_sigmask(_signal.SIG_BLOCK, WATCHED)
    try:
        enter(opts)
    except OSError as err:
        fail_over(opts, f"cannot join the fake's namespace ({err.strerror or err})")
    for fd in (opts["status"], opts["pidfd"]):
        if fd is not None:
            os.close(fd)
    try:
        pid = start(opts)
    except OSError as err:
        os.write(2, f"fakedebugfs run: {err.strerror}\n".encode())
        return err.status
    return wait_command(pid)


if __name__ == "__main__":
    import sys

    os._exit(main(sys.argv[1:]))
