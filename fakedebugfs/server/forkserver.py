"""A warm start: a process that has imported a server's modules once and
forks a new mount's server on request.

``fakedebugfs mount`` pays Python's start and its imports (trio, pyfuse3,
the engine, the trees: 0.2 s on a quiet machine, seconds on a busy one)
before it mounts anything.  A fork server pays them once; each mount is a
``fork()`` of it that runs the very command :func:`launcher.spawn_server
<fakedebugfs.server.launcher.spawn_server>` would have started (``python
-m fakedebugfs mount MOUNTPOINT --foreground --ready-fd N ARGV``), with the
modules already in memory.

Entry points::

    python -m fakedebugfs.server.forkserver SOCKET   # serve until SIGTERM
    pid = start(SOCKET)                              # the same, as a child; waits until it listens
    proc = spawn(SOCKET, MOUNTPOINT, ARGV, ready_fd, log_fd)  # one mount's server (a Forked)
    pid = spawn_module(SOCKET, MODULE, ARGV, [stdin, stdout, ...])  # a fake's keeper

``spawn_server`` uses the fork server named by ``FAKEDEBUGFS_FORKSERVER``
(its socket) when that is set and answers, and starts the command as
before otherwise.  A forked server dies with the client that asked for it
as ``--die-with-parent`` makes a spawned one die with its parent: the
client holds one end of a pipe (the *lifeline*), the server the other, and
the server stops (SIGTERM: it unmounts) when the client's end closes.  Only
clients of the fork server's own user are served (``SO_PEERCRED``), and
only when their ``FAKEDEBUGFS_*`` environment is the fork server's (those
variables are read once, at import).
"""

from __future__ import annotations

import array
import gc
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional, Sequence

from fakedebugfs.server import allocator

# modules whose ``main(argv)`` a request may run in a fork instead of a
# server (:func:`spawn_module`): a fake's keeper, which makes the namespace
# its commands join (fakedebugfs.sandbox.keeper), at its first command
MODULES = ("fakedebugfs.sandbox.keeper",)
# what `python -m fakedebugfs mount` imports before it mounts, and what a
# mount imports when first used (by name: the fork server runs that
# command, it does not call into the layers above it)
WARM = ("fakedebugfs.cli", "fakedebugfs.api.mount", "fakedebugfs.server.server",
        "fakedebugfs.server.mounthelper", "fakedebugfs.trees", "fakedebugfs.trees.tracing",
        "fakedebugfs.trees.ktrace", "fakedebugfs.trees.kmemtrace", "fakedebugfs.engine.kernel",
        "fakedebugfs.engine.ftrace.format_text", "fakedebugfs.engine.ftrace.define",
        "fakedebugfs.engine.ftrace.printfmt", "fakedebugfs.engine.ftrace.cexpr",
        "fakedebugfs.engine.ftrace.pointer_text", "fakedebugfs.engine.ftrace.kernel_enums",
        "fakedebugfs.sources.workloads", "pyfuse3", "trio", *MODULES)
ENV = "FAKEDEBUGFS_FORKSERVER"  # the socket spawn_server asks, when set
MAX_REQUEST = 1 << 16


def _own_env() -> dict:
    return {k: v for k, v in os.environ.items() if k.startswith("FAKEDEBUGFS_") and k != ENV}


# --- the fork server ------------------------------------------------------------------------

def serve(path: str, lifeline: Optional[int] = None, rmdir: bool = False) -> None:
    """Import :data:`WARM`, make what every mount of the default options
    makes (:func:`_warm`), listen on the Unix socket *path* and fork a
    server for each request, until SIGTERM/SIGINT or, with *lifeline* (an
    fd: the read end of a pipe its starter holds), until that pipe's other
    end closes (the socket is then removed, and its folder with *rmdir*
    when nothing else is left in it)."""
    _warm()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked servers are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(16)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    watched = [listener] + ([lifeline] if lifeline is not None else [])
    try:
        while not stop:
            try:
                ready, _, _ = select.select(watched, [], [], 0.5)
            except InterruptedError:
                continue
            if lifeline in ready and not os.read(lifeline, 64):
                break  # whoever started us is gone
            if listener in ready:
                conn, _ = listener.accept()
                with conn:
                    _answer(conn, listener, lifeline)
    finally:
        listener.close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        if rmdir:
            try:
                os.rmdir(os.path.dirname(os.path.abspath(path)))
            except OSError:
                pass


# kernels of the default configuration, made before the fork: each forked
# server finds one (its copy-on-write copy) and takes it (prebuilt_kernel)
_KERNELS: dict = {}


def _warm() -> None:
    """What each mount would do first, done once here, before the forks:
    the imports; the command line's parser (``cli.parser`` keeps it); a
    kernel and its trees built and dropped (what a first build loads and
    keeps: the kernel profile's catalogue, ~75 ms); a kernel of the
    default configuration kept for the next mount (:func:`prebuilt_kernel`:
    the Python API's ``Fake()``, ``fakedebugfs mount`` without options),
    its caches filled (:meth:`Kernel.warm`).
    Then everything made so far goes to the collector's permanent
    generation (``gc.freeze``): a forked server's collections do not walk
    it, so its pages stay shared with the fork server."""
    for name in WARM:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    try:
        import tempfile

        tempfile.gettempdir()  # (its first call tries each candidate folder with a file)
        importlib.import_module("fakedebugfs.cli").parser("mount")
        from fakedebugfs.engine.kernel import Kernel
        from fakedebugfs.trees import build_root

        build_root(Kernel())
        kernel = Kernel().warm()
        _KERNELS[kernel.config] = kernel
    except Exception:  # a cold start is slower, not wrong
        pass
    gc.collect()
    gc.freeze()


def prebuilt_kernel(kwargs: dict):
    """The kernel the fork server made before forking this server, if
    it was made with the same configuration (``Kernel(**kwargs)``), else
    None; taken once (a second mount in this process makes its own).  A
    kernel nothing has used yet is the kernel ``Kernel(**kwargs)`` makes:
    its clock reads the time when asked, its random state starts from the
    seed."""
    if not _KERNELS:
        return None
    from fakedebugfs.engine.kernel import KernelConfig

    try:
        config = KernelConfig(**kwargs)
    except TypeError:
        return None
    return _KERNELS.pop(config, None)


def _same_pid_namespace(conn: socket.socket) -> bool:
    """The peer of *conn* is a process of our PID namespace (not one of
    a ``run``'s command, which may be root: server/peers.py)."""
    from fakedebugfs.server.peers import peer_of, pidns_of

    own = pidns_of("self")
    pid = peer_of(conn)[0]
    return own is None or (pid != 0 and pidns_of(pid) == own)


def _answer(conn: socket.socket, listener: socket.socket, lifeline: Optional[int]) -> None:
    """One request: ``{"argv": [...], "env": {...}}`` with three fds (the
    server's log, the ready pipe's write end, the lifeline's read end), or
    ``{"module": NAME, "argv": [...], "env": {...}}`` with the fds of its
    stdin, stdout and any more (:func:`spawn_module`); answered
    ``{"pid": N}`` or ``{"error": why}``."""
    fds: list[int] = []
    try:
        uid = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        peer_uid = int.from_bytes(uid[4:8], sys.byteorder)
        msg, fds = _recv_fds(conn)
        req = json.loads(msg)
        if peer_uid != os.getuid():
            raise PermissionError(f"uid {peer_uid} is not the fork server's")
        if not _same_pid_namespace(conn):  # a root command of a run: not ours to serve
            raise PermissionError("the fork server serves its own PID namespace only")
        if req.get("env") != _own_env():
            raise ValueError("FAKEDEBUGFS_* environment differs from the fork server's")
        module = req.get("module")
        if module is not None and module not in MODULES:
            raise ValueError(f"{module!r} is not a module the fork server runs")
        if module is not None and len(fds) < 2:
            raise ValueError("two fds at least expected (stdin, stdout)")
        if module is None and len(fds) != 3:
            raise ValueError("three fds expected (log, ready, lifeline)")
        sys.stdout.flush()  # (nothing of ours repeated by a child)
        pid = os.fork()
        if pid == 0:
            listener.close()
            conn.close()
            if lifeline is not None:
                os.close(lifeline)
            if module is not None:
                _module_child(module, req["argv"], fds)  # never returns
            _child(req["argv"], *fds)  # never returns
        conn.sendall(json.dumps({"pid": pid}).encode())
    except Exception as err:  # a bad request costs its client, never the fork server
        try:
            conn.sendall(json.dumps({"error": f"{type(err).__name__}: {err}"}).encode())
        except OSError:
            pass
    finally:
        for fd in fds:
            os.close(fd)


def _leave_fork_server(stdin: int, stdout: int, stderr: int) -> None:
    """What a fork does first: the fork server's signal handling undone, a
    session of its own, its stdio on the three fds."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    os.setsid()
    for target, fd in enumerate((stdin, stdout, stderr)):
        os.dup2(fd, target)


def _child(argv: list[str], log: int, ready: int, lifeline: int) -> None:
    """The forked server: stdio on *log*, a session of its own, stopped when
    the lifeline closes; then ``fakedebugfs ARGV`` (``mount ... --ready-fd``)."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        _leave_fork_server(null, log, log)
        os.close(null)
        os.set_inheritable(ready, True)
        threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True).start()
        argv = [a if a != "{ready}" else str(ready) for a in argv]
        sys.argv = ["fakedebugfs", *argv]
        main = importlib.import_module("fakedebugfs.cli").main
        code = main(argv) or 0
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else 1
    except BaseException:  # shown in the server's log
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _module_child(module: str, argv: list[str], fds: list[int]) -> None:
    """A fork running ``MODULE.main(ARGV)`` as ``python -m MODULE ARGV``
    would, in a session of its own: stdin and stdout the first two *fds*,
    stderr /dev/null, ``{fdN}`` in *argv* the number of the N-th fd (kept
    open across exec).  No thread is started: the module may unshare."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        _leave_fork_server(fds[0], fds[1], null)
        os.close(null)
        for i, fd in enumerate(fds):
            os.set_inheritable(fd, True)
            argv = [str(fd) if a == f"{{fd{i}}}" else a for a in argv]
        sys.argv = [module, *argv]
        code = importlib.import_module(module).main(argv) or 0
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else 1
    except BaseException:  # pragma: no cover - nowhere to say it but the exit status
        code = 1
    finally:
        try:
            sys.stdout.flush()
        except BaseException:  # noqa: BLE001 - a closed pipe: its reader is gone
            pass
        os._exit(code)


def _watch_lifeline(fd: int) -> None:
    """SIGTERM this server (it unmounts) once the client's end is closed."""
    while True:
        try:
            if not os.read(fd, 64):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os.kill(os.getpid(), signal.SIGTERM)


def _recv_fds(conn: socket.socket) -> tuple[bytes, list[int]]:
    fds = array.array("i")
    msg, ancdata, _, _ = conn.recvmsg(MAX_REQUEST, socket.CMSG_SPACE(8 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
    return msg, list(fds)


# --- the client side ------------------------------------------------------------------------

class Forked:
    """A server forked by the fork server, as ``spawn_server``'s caller uses
    a ``subprocess.Popen``: ``pid``, ``poll()``, ``wait()`` (its exit status
    is the fork server's to collect: 0 once gone).  Holds the lifeline (if
    any: a module's fork has its stdin instead): the server stops when this
    object (or this process) goes."""

    def __init__(self, pid: int, lifeline: Optional[int]):
        self.pid = pid
        self.returncode: Optional[int] = None
        self._lifeline = lifeline
        try:
            self._pidfd: Optional[int] = os.pidfd_open(pid)
        except OSError:  # gone already
            self._pidfd = None
            self.returncode = 0

    def poll(self) -> Optional[int]:
        if self.returncode is None and self._pidfd is not None \
                and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = 0
        if self.returncode is not None:
            self._close()
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        """Until it is gone (``subprocess.TimeoutExpired`` after *timeout* s)."""
        if self.returncode is None and self._pidfd is not None \
                and not select.select([self._pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
        self.returncode = 0
        self._close()
        return self.returncode

    def _close(self) -> None:
        for name in ("_pidfd", "_lifeline"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)

    def __del__(self):
        self._close()


def spawn(path: str, argv: Sequence[str], log: int, ready: int,
          timeout: float = 5.0) -> Forked:
    """Ask the fork server at *path* for a server running ``fakedebugfs
    ARGV`` (``"{ready}"`` in *argv* becomes its number of the fd *ready*),
    stdio on *log*.  OSError when there is no fork server there or it
    refuses (the caller then starts the command itself)."""
    r, w = os.pipe()  # the lifeline: w stays here, non-inheritable
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(path)
            msg = json.dumps({"argv": list(argv), "env": _own_env()}).encode()
            conn.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                  array.array("i", [log, ready, r]))])
            reply = json.loads(conn.recv(MAX_REQUEST) or b"{}")
    except BaseException:
        os.close(w)
        raise
    finally:
        os.close(r)
    if "pid" not in reply:
        os.close(w)
        raise OSError(f"fork server {path}: {reply.get('error', 'no answer')}")
    return Forked(reply["pid"], w)


def spawn_module(path: str, module: str, argv: Sequence[str], fds: Sequence[int],
                 timeout: float = 5.0) -> int:
    """Ask the fork server at *path* to run ``MODULE.main(ARGV)`` (one of
    :data:`MODULES`) in a fork of its own, its stdin and stdout ``fds[0]``
    and ``fds[1]`` (``{fdN}`` in *argv*: its number for ``fds[N]``); its
    pid (not a child of ours: wait for it with a pidfd).  OSError when there
    is no fork server there or it refuses (the caller then starts it itself)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(path)
        msg = json.dumps({"module": module, "argv": list(argv), "env": _own_env()}).encode()
        conn.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        reply = json.loads(conn.recv(MAX_REQUEST) or b"{}")
    if "pid" not in reply:
        raise OSError(f"fork server {path}: {reply.get('error', 'no answer')}")
    return int(reply["pid"])


class ForkServer:
    """A fork server started by this process (:func:`start`) and tied to
    it: the fork server holds the read end of a pipe whose write end only
    this object holds, and exits when that end closes, so it goes with
    this process however that ends (an exception, SIGKILL).  :meth:`stop`
    ends it at once.  Servers it forked live on until their own clients
    go.  *log*: the fork server's output (why it failed); *rmdir*: its
    socket's folder is removed with the socket, once empty.  Returns once
    it listens, or with *wait* false at once (then :meth:`wait` before
    asking it: the caller does something else while it warms up)."""

    def __init__(self, path: str, timeout: float = 60.0, python: Optional[str] = None,
                 log: Optional[str] = None, rmdir: bool = False, wait: bool = True):
        self.path = path
        self.timeout = timeout
        self._listening = False
        r, self._lifeline = os.pipe()  # the write end stays here, non-inheritable
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                [python or sys.executable, "-m", __name__, path, "--lifeline", str(r),
                 *(["--rmdir"] if rmdir else [])],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT if log else out,
                pass_fds=(r,), start_new_session=True, env=allocator.server_env())
        except BaseException:
            os.close(self._lifeline)
            raise
        finally:
            os.close(r)
            if log:
                out.close()
        if wait:
            self.wait()

    def wait(self) -> None:
        """Return once it listens (RuntimeError, and it is stopped, if it
        exited or did not listen within the timeout)."""
        if self._listening:
            return
        try:
            _until_listening(self.proc, self.path, self.timeout)
        except BaseException:
            self.stop()
            raise
        self._listening = True

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 10.0) -> None:
        """End the fork server (its socket removed); idempotent."""
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "ForkServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _until_listening(proc: subprocess.Popen, path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"fork server exited with status {proc.returncode}")
        if os.path.exists(path):
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                    probe.connect(path)
                return
            except OSError:
                pass
        time.sleep(0.01)
    raise RuntimeError(f"fork server not listening at {path} after {timeout:g} s")


def start(path: str, timeout: float = 60.0, python: Optional[str] = None) -> int:
    """A fork server listening at *path*, as a child of this process in a
    session of its own, that lives until SIGTERM (:class:`ForkServer` for
    one that goes with this process); returns its pid once it answers.
    RuntimeError if it did not start."""
    proc = subprocess.Popen([python or sys.executable, "-m", __name__, path],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, env=allocator.server_env())
    try:
        _until_listening(proc, path, timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc.pid


def _main(argv: list[str]) -> None:
    import argparse

    allocator.forget()  # (its servers' commands get the caller's environment)

    p = argparse.ArgumentParser(prog=f"python -m {__name__}",
                                description="Fork fakedebugfs mount servers on request.")
    p.add_argument("socket")
    p.add_argument("--lifeline", type=int, metavar="FD",
                   help="exit when this fd (a pipe's read end) reads end of file")
    p.add_argument("--rmdir", action="store_true",
                   help="remove the socket's folder (once empty) on the way out")
    args = p.parse_args(argv)
    serve(args.socket, args.lifeline, args.rmdir)


if __name__ == "__main__":
    # run as the package's module, not as __main__: the forked servers
    # find the prebuilt kernels in fakedebugfs.server.forkserver
    importlib.import_module("fakedebugfs.server.forkserver")._main(sys.argv[1:])
