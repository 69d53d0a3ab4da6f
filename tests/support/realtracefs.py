"""The real kernel's tracefs, for the tests that compare the fake with it,
without depending on, or touching, the host's mounts.

Every use mounts tracefs in a private mount namespace of its own
(``unshare -m --propagation private``, then ``mount -t tracefs nodev
/sys/kernel/tracing`` inside it): nothing is mounted on the host, the mount
goes when the namespace's last process ends (even a killed test leaves
nothing), and whatever another session, trace-cmd or perf mounted or
unmounted on the host at /sys/kernel/tracing does not matter.

The tracing state itself is the kernel's, shared with everyone who traces
the machine: a test records in a scratch instance of its own (named with
its pid) and removes it.  A test that writes the top level holds
:data:`LOCK` (``flock /tmp/real-tracefs.lock``, which ``lock=True`` takes)
and puts back what it changed; another tracing user of the host does not
take that lock, so what such a test reads back at the top level must not
depend on nobody else writing it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import pickle
import shutil
import subprocess
import time
import traceback
from pathlib import Path

LOCK = "/tmp/real-tracefs.lock"
POINT = "/sys/kernel/tracing"  # where tools look for it, inside the namespace
_CLONE_NEWNS = 0x00020000
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18


def available() -> bool:
    """Root, a kernel with tracefs, and unshare(1)."""
    try:
        with open("/proc/filesystems") as fp:
            has = any(line.split()[-1:] == ["tracefs"] for line in fp)
    except OSError:
        return False
    return os.geteuid() == 0 and has and shutil.which("unshare") is not None


LOCK_WAIT = 240  # seconds: a holder that long is stuck; the test says so, not hangs


@contextlib.contextmanager
def top_level_lock(wait: float = LOCK_WAIT, shared: bool = False):
    """Hold ``/tmp/real-tracefs.lock`` (what ``flock`` takes): no other test
    of ours changes the real top level meanwhile (*shared*: ``flock -s``,
    for reading it while no one changes it).  Fails after *wait* seconds,
    naming the holder."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{LOCK} held for over {wait} s by {_holder()}") from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


def _holder() -> str:
    """The pid and command holding :data:`LOCK` (/proc/locks)."""
    ino = os.stat(LOCK).st_ino
    with open("/proc/locks") as fp:
        for f in map(str.split, fp):
            if len(f) > 5 and f[5].endswith(f":{ino}"):
                with contextlib.suppress(OSError), open(f"/proc/{f[4]}/cmdline", "rb") as c:
                    cmd = c.read().replace(b"\0", b" ").decode(errors="replace").strip()
                    return f"pid {f[4]} ({cmd})"
                return f"pid {f[4]}"
    return "nobody now"


def argv(cmd: list[str], lock: bool = False) -> list[str]:
    """*cmd* run with the real tracefs at /sys/kernel/tracing, in a private
    mount namespace (and holding :data:`LOCK` with *lock*)."""
    script = (f'mount -t tracefs nodev {POINT} 2>/dev/null || '  # EBUSY: the host's is there
              f'[ "$(stat -f -c %T {POINT})" = tracefs ] && exec "$@"')
    out = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "realtracefs",
           *map(str, cmd)]
    return ["flock", "-w", str(LOCK_WAIT), LOCK, *out] if lock else out


def contained(cmd: list[str]) -> list[str]:
    """*cmd* run where a tool that mounts a tracefs for itself when it finds
    none (libtracefs, so ``trace-cmd convert``; perf) mounts nothing on the
    host: :func:`argv` as root, else *cmd* (a user cannot mount)."""
    return argv(cmd) if available() else list(map(str, cmd))


def run(cmd: list[str], lock: bool = False, **kw) -> subprocess.CompletedProcess:
    """``subprocess.run`` of :func:`argv`; output captured as text unless
    told otherwise."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run(argv(cmd, lock), **kw)


def shell(script: str, lock: bool = False, **kw) -> subprocess.CompletedProcess:
    """``sh -c SCRIPT`` under :func:`run`."""
    return run(["sh", "-c", script], lock, **kw)


def call(fn, *args, lock: bool = False):
    """``fn(POINT, *args)`` in a forked child that has a private mount
    namespace with the real tracefs at :data:`POINT`; its return value
    (pickled back) or its exception, raised here.  *lock*: holding
    :data:`LOCK` while it runs."""
    with top_level_lock() if lock else contextlib.nullcontext():
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            os.close(rfd)
            code = 0
            try:
                try:
                    _private_tracefs()
                    out = (True, fn(POINT, *args))
                except BaseException as exc:  # noqa: BLE001 (handed to the parent)
                    out = (False, exc, traceback.format_exc())
                try:
                    data = pickle.dumps(out)
                except Exception:  # an exception that does not pickle: its text
                    data = pickle.dumps((False, RuntimeError(out[-1]), out[-1]))
                with os.fdopen(wfd, "wb") as fp:
                    fp.write(data)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        os.close(wfd)
        with os.fdopen(rfd, "rb") as fp:
            data = fp.read()
        _, status = os.waitpid(pid, 0)
    if not data:
        raise RuntimeError(f"the real-tracefs child ended with status {status} and no answer")
    out = pickle.loads(data)
    if out[0]:
        return out[1]
    exc, text = out[1], out[2]
    if isinstance(exc, AssertionError) or type(exc).__module__.startswith("_pytest"):
        raise exc
    raise RuntimeError(f"in the real-tracefs child:\n{text}") from exc


def _private_tracefs() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "mount --make-rprivate /")
    if libc.mount(b"nodev", POINT.encode(), b"tracefs", 0, None) != 0:
        err = ctypes.get_errno()  # EBUSY: the host's mount is there, now a private copy
        if not _is_tracefs(POINT):
            raise OSError(err, f"mount -t tracefs nodev {POINT}")


def _is_tracefs(path: str) -> bool:
    with open("/proc/self/mounts") as fp:
        return any(f[1] == path and f[2] == "tracefs" for f in map(str.split, fp))


def record(dat, instance: str, *options: str, command=("sleep", "1"), timeout: float = 300,
           env=None, cwd=None):
    """``trace-cmd record --no-filter -B INSTANCE OPTIONS -o DAT COMMAND`` on
    the real kernel, in a private mount namespace whose
    /proc/sys/kernel/ftrace_enabled is a file of ours (trace-cmd writes it;
    a sandboxed /proc may refuse it); the scratch instance is removed if
    trace-cmd left it (``(CompletedProcess, whether it was left)``).
    *env*, *cwd*: trace-cmd's (and so COMMAND's).

    The top level is not touched, so the lock is not taken (what another
    user does there does not change the recording), unless OPTIONS have
    ``-F``: a task filter puts the top instance in trace-cmd's list as well
    (trace-record.c), so trace-cmd turns the top level's tracing off,
    resets its events and sets its ``set_event_pid``, and on this machine's
    kernel it dies at exit on ``set_ftrace_filter`` (EPERM) before it puts
    ``tracing_on`` back.  Then the run holds :data:`LOCK` and the top
    level's files are put back after it (:func:`top_level_kept`)."""
    dat = Path(dat)
    flag = dat.with_name(dat.name + ".ftrace_enabled")
    flag.write_text("1\n")
    top = "-F" in options

    def story(root):
        subprocess.run(["mount", "--bind", str(flag), "/proc/sys/kernel/ftrace_enabled"],
                       check=True, capture_output=True)
        with top_level_kept(root) if top else contextlib.nullcontext():
            proc = subprocess.run(["trace-cmd", "record", "--no-filter", "-B", instance, *options,
                                   "-o", str(dat), *command], capture_output=True, text=True,
                                  timeout=timeout, env=env, cwd=cwd)
            return proc, remove_instance(root, instance)

    try:
        return call(story, lock=top)
    finally:
        flag.unlink()


def remove_instance(root: str, name: str) -> bool:
    """rmdir of a scratch instance if it is there (True then), its events
    disabled first; rmdir answers EBUSY while a reader still holds one of
    its files."""
    inst = os.path.join(root, "instances", name)
    if not os.path.isdir(inst):
        return False
    with contextlib.suppress(OSError), open(os.path.join(inst, "events/enable"), "w") as fp:
        fp.write("0")
    for _ in range(50):
        try:
            os.rmdir(inst)
            return True
        except OSError:
            time.sleep(0.1)
    os.rmdir(inst)
    return True


@contextlib.contextmanager
def holder():
    """A process in a private mount namespace with the real tracefs mounted
    at /sys/kernel/tracing: yields its pid (``/proc/PID/root`` reaches that
    mount, as a host process's root would); ended afterwards."""
    proc = subprocess.Popen(argv(["sleep", "600"]), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        path = f"/proc/{proc.pid}/root{POINT}/tracing_on"
        for _ in range(500):  # until the mount is made
            if os.path.exists(path) or proc.poll() is not None:
                break
            time.sleep(0.01)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


# --- the top level's settings ---------------------------------------------------------

# what a test or a tool may leave changed at the top level (trace-cmd start
# and record -F, perf, bpftrace, libtracefs), each read whole; set_ftrace_*
# answer EPERM on this machine's kernel, kprobe_events is absent without kprobes
TOP_FILES = ("tracing_on", "current_tracer", "buffer_size_kb", "trace_clock", "trace_options",
             "set_event", "set_event_pid", "set_event_notrace_pid", "set_ftrace_pid",
             "set_ftrace_notrace_pid", "tracing_cpumask", "buffer_percent", "events/enable",
             "kprobe_events", "uprobe_events", "dynamic_events", "saved_cmdlines_size",
             "tracing_thresh")
# written back whole (set_event_pid's "": O_TRUNC, no pid)
_WRITE_BACK = ("current_tracer", "buffer_size_kb", "trace_clock", "tracing_cpumask",
               "buffer_percent", "saved_cmdlines_size", "tracing_thresh", "set_event_pid",
               "set_event_notrace_pid")


def read_or_errno(path: str) -> str:
    """The text of *path*, or ``!ENAME`` if it cannot be read."""
    try:
        with open(path) as fp:
            return fp.read()
    except OSError as err:
        return f"!{errno.errorcode.get(err.errno, err.errno)}"


def top_level(root: str) -> dict:
    """The top level's :data:`TOP_FILES` and its ``instances`` (reads only)."""
    out = {name: read_or_errno(os.path.join(root, name)) for name in TOP_FILES}
    try:
        out["instances"] = sorted(os.listdir(os.path.join(root, "instances")))
    except OSError as err:
        out["instances"] = f"!{errno.errorcode.get(err.errno, err.errno)}"
    return out


def _value(name: str, text: str) -> str:
    """What to write to *name* for it to read *text* again."""
    if name == "trace_clock":  # "[local] global ...": the one in brackets
        return next((w[1:-1] for w in text.split() if w.startswith("[")), "")
    if name == "buffer_size_kb" and "expanded: " in text:  # "7 (expanded: 1408)"
        return text.split("expanded: ")[1].split(")")[0]
    return " ".join(text.split())


def put_back(root: str, before: dict, after: dict, instances=()) -> list[str]:
    """The top level's files that differ between two :func:`top_level`
    reads written back as *before* had them (``tracing_on`` last), probes
    *before* lacked removed, and the scratch *instances* named; holding
    :data:`LOCK`.  ``["put back: WHAT, ..."]`` and a line per failure."""
    done, failed = [], []

    def attempt(what, data, name=None, mode="w"):
        try:
            with open(os.path.join(root, name or what), mode) as fp:
                fp.write(data)
            done.append(what)
        except OSError as err:
            failed.append(f"{what}: {err}")

    changed = [n for n in TOP_FILES if before.get(n) != after.get(n)
               and not str(before.get(n, "!")).startswith("!")]
    for name in changed:
        if name in _WRITE_BACK:
            attempt(name, _value(name, before[name]))
        elif name == "trace_options":
            for opt in set(before[name].split()) - set(after[name].split()):
                attempt(f"trace_options {opt}", opt, name)
    if "set_event" in changed:
        attempt("set_event", "")  # O_TRUNC: every event off, then before's on
        for event in before["set_event"].split():
            attempt(f"set_event {event}", event + "\n", "set_event", "a")
    for name in instances:
        try:
            remove_instance(root, name)
            done.append(f"instance {name}")
        except OSError as err:
            failed.append(f"instance {name}: {err}")
    for name in ("dynamic_events", "uprobe_events", "kprobe_events"):
        if name in changed and not before[name].strip():
            with contextlib.suppress(OSError), open(os.path.join(root, "events/enable"),
                                                    "w") as fp:
                fp.write("0")  # a probe's event must be off for it to go
            attempt(name, "")
    if "tracing_on" in changed:
        attempt("tracing_on", before["tracing_on"].strip())
    return [f"put back: {', '.join(done) or 'nothing'}"] + failed


@contextlib.contextmanager
def top_level_kept(root: str):
    """The top level read before the block and what changed put back after
    it (in a :func:`call` child holding :data:`LOCK`): for a real-kernel run
    that cannot help writing the top level."""
    before = top_level(root)
    try:
        yield before
    finally:
        put_back(root, before, top_level(root))


__all__ = ["LOCK", "POINT", "TOP_FILES", "available", "argv", "call", "contained", "holder", "put_back",
           "read_or_errno", "record", "remove_instance", "run", "shell", "top_level",
           "top_level_kept", "top_level_lock"]
