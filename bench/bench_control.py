"""The cost of one use: control-plane tools, a fake's start, one test.

Every row is measured on the fake and on the real tracefs in the same run
(except where the kernel has no counterpart), TRIALS times on each side;
``fake``/``real`` are the medians and ``spread`` gives min/median/max of
each side.  The rows of a tool (reset, stat, the formats, the recorder's
start, the realistic test, the ``set_event`` write) take their trials in
turn, fake, real, fake, ...: each side's process is set up first (the
fake's ``fakedebugfs run``, the real side's namespace child, both kept
between trials: a ``TrialProcess`` each, a trial per line asked), so a pair
is measured at one moment of this machine's drifting speed; ``spread``'s
``ratio`` is min/median/max of the pairs' fake/real.  The start rows
(mount, fixture) and ``cat trace`` run all of one side, then the other.  The real side runs in a private mount namespace (``unshare -m
--propagation private``, tracefs mounted at /sys/kernel/tracing there),
in a scratch instance where the command allows it; what must touch the top
level (``trace-cmd reset``, ``trace-cmd record``) runs under ``flock
/tmp/real-tracefs.lock`` with the top level's settings saved first and put
back after (``tracing_on``, ``current_tracer``, ``set_event``,
``buffer_size_kb``, ``trace_options``, ``tracing_cpumask``, ``set_event_pid``).

* ``tracecmd_reset_s``, ``tracecmd_stat_s``: the command run TRIALS times,
  timed by a Python process in the same namespace as the command (fake:
  inside one ``fakedebugfs run --workload none``, so its start is not
  counted; the first trial meets a fresh mount).
* ``format_read_all_s``: ``cat events/*/*/format`` (2,305 files), what
  ``trace-cmd stream`` and ``record`` read first; timed like the two rows
  above (the fake's first trial meets a fresh mount: every lookup, no
  event's format read yet).
* ``tracecmd_record_ready_s``: from starting ``trace-cmd record -e
  sched:sched_switch`` until every CPU's ``trace_pipe_raw`` is open in one
  of its processes (read from ``/proc/PID/fd``, the same way on both sides);
  the fake's recorder is started through the handle (``Fake.popen``), as a
  test does: a command after the fake's first, which joins the namespace
  the first one made.  ``[first command]``: the recorder is a fresh fake's
  first command (a new fake each trial, forked by a fork server as the
  plugin's fixture is, its start not timed): its keeper makes the namespace.
* ``mount_ready_ms``: ``Fake().start()`` until ``tracing/tracing_on`` is
  read, each server a new process (``FAKEDEBUGFS_FORKSERVER=0``); real:
  ``mount -t tracefs`` and the same read.  ``[forkserver]``: the servers
  forked by a fork server (fakedebugfs/server/forkserver.py), as the pytest
  plugin does.
* ``fake_cycle_ms[forkserver]``: ``Fake().start()``, one read, ``close()``
  in this process, forked; real: ``mount -t tracefs``, the read, ``umount``.
* ``fixture_per_test_ms``: what the pytest plugin's function-scoped
  ``fakedebugfs`` fixture costs a test, through a real ``pytest``
  subprocess: a file of 1 + FIXTURE_TESTS trivial tests (each reads
  ``tracing_on``) against one of 1, ``(T(1 + N) - T(1)) / N`` per trial
  (the session's first fake, which starts the fork server, is in both);
  real: the mount, read, umount cycle.  ``[no forkserver]``: with
  ``FAKEDEBUGFS_FORKSERVER=0`` (FIXTURE_TESTS_PLAIN tests).
  ``fixture_first_ms``: ``T(1)`` less a session of one test without the
  fixture: the session's first fake, its fork server's start included.
* ``realistic_test_s``: a test end to end: (fake: the fixture's start,
  its server forked by a fork server as the pytest plugin's are),
  ``trace-cmd record -e sched:sched_switch`` started, its readers waited
  for, a line written to ``trace_marker``, SIGINT, ``trace-cmd report``
  checked for the line, (the fixture's close).  ``[no forkserver]``: each
  fake's server a new process (``FAKEDEBUGFS_FORKSERVER=0``).
* ``set_event_write_ms``: one ``write(2)`` of one event name
  (``sched:sched_switch``, already on; WRITES per trial) to a scratch
  instance's ``set_event``.
* ``cat_trace_full_s``: ``cat trace`` of a full default buffer (1408 KiB per
  CPU of kmem events, tracing off): the fake's filled by the kmem workload,
  the kernel's scratch instance by ``find /usr`` with the kmem events on.

    python -m bench control               # this table alone (a few minutes)
    python -m bench.bench_control         # rows as JSON lines
    python -m bench.bench_control --rows mount_ready_ms,fixture   # rows whose name starts so
    BENCH_CONTROL_ROWS=mount_ready_ms,fixture python -m bench control   # the same, as a table
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from fakedebugfs.server.launcher import wait_exit

from . import FAKEDEBUGFS, ROOT, Mount, cli, pair_ratios, run_exact, spread, write_trunc
from .bench_dataplane import _compile_package

TRIALS = 5
FIXTURE_TESTS = 20  # fixture tests per session of the fixture_per_test_ms row
FIXTURE_TESTS_PLAIN = 5  # the same without the fork server (~1 s each)
ROWS_ENV = "BENCH_CONTROL_ROWS"  # comma-separated row name prefixes: only those rows run
WRITES = 200  # set_event writes per trial
FILL_EVENTS = 300_000  # kmem events for a full default buffer on 2 CPUs, with wrap
KMEM_EVENTS = ("kmalloc", "kfree", "kmem_cache_alloc", "kmem_cache_free")
TRACING = "/sys/kernel/tracing"  # where the real side mounts tracefs in its namespace
LOCK = "/tmp/real-tracefs.lock"
FUNCTION_FILES = ("set_ftrace_pid", "set_ftrace_notrace_pid", "set_ftrace_filter",
                  "set_ftrace_notrace", "set_graph_function", "set_graph_notrace")
# top-level files a real reset or record changes, put back afterwards
SAVED = ("tracing_on", "current_tracer", "buffer_size_kb", "trace_options", "tracing_cpumask",
         "set_event", "set_event_pid")


def row(name: str, unit: str, fake: list, real, scale: float = 1.0,
        paired: bool = False) -> dict:
    """A row from the trials of each side (seconds, shown times *scale*);
    *paired*: the two lists' trials were taken in turn (fake, real, fake,
    ...), so each pair's fake/real is a ratio of its own (``"ratio"`` in
    ``spread`` and ``detail``), free of the machine's drift between them."""
    fake = [t * scale for t in fake]
    real = [t * scale if t is not None else None for t in real] if real else None
    out = {"name": name, "fake": spread(fake)[1], "real": spread(real)[1] if real else None,
           "unit": unit, "spread": {"fake": spread(fake), "real": spread(real) if real else None},
           "detail": {"fake": [round(t, 6) for t in fake],
                      "real": [round(t, 6) if t is not None else None for t in real]
                      if real else None}}
    if paired and real:
        ratios = pair_ratios(fake, real)
        out["spread"]["ratio"] = spread(ratios)
        out["detail"]["ratio"] = [round(r, 4) for r in ratios]
        out["paired"] = True
    return out


# --- trials in turn: a process per side, a trial per line -----------------------------------

TRIAL_LOOP = """
import subprocess, sys, time, json
argv = json.loads(sys.argv[1])
print("ready", flush=True)
for _ in sys.stdin:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    print(time.perf_counter() - t0, flush=True)
"""


class TrialProcess:
    """A process that has done its side's setup (it prints ``ready``) and
    runs one trial each time it reads a line, answering the trial's seconds
    on a line: the two sides of a row kept alive together, so their trials
    can alternate (fake, real, fake, ...) while the machine's speed drifts."""

    def __init__(self, argv, cwd=None):
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        self._answer("ready")

    def _answer(self, expect=None) -> str:
        line = self.proc.stdout.readline()
        while line and expect and line.strip() != expect:  # a command's own chatter
            line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.log.seek(0)
            raise RuntimeError(f"{self.proc.args[:3]} ended ({self.proc.returncode}): "
                               f"{self.log.read()[-800:]}")
        return line

    def __call__(self) -> float:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return float(self._answer())

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@contextlib.contextmanager
def fake_command(argv):
    """Trials of *argv* inside one ``fakedebugfs run --workload none`` (its
    start not timed; the first trial meets a fresh mount), timed by a Python
    process in the same namespace as the command."""
    with TrialProcess([FAKEDEBUGFS, "run", "--workload", "none", "--", "python3", "-c",
                       TRIAL_LOOP, json.dumps(list(argv))]) as trial:
        yield trial


def real_available() -> bool:
    """Whether the real tracefs can be reached: root, and ``unshare`` for
    the private mount namespace it is mounted in."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None


@contextlib.contextmanager
def namespace_trials(argv, label: str, cwd=None):
    """A TrialProcess of *argv* run in a private mount namespace (``unshare
    -m --propagation private``), where it mounts the real tracefs; None when
    there is none (not root, no unshare, a failed setup, said on stderr)."""
    if not real_available():
        yield None
        return
    try:
        proc = TrialProcess(["unshare", "-m", "--propagation", "private", *argv], cwd=cwd)
    except RuntimeError as err:
        print(f"real {label}: {err}", file=sys.stderr)
        yield None
        return
    with proc:
        yield proc


def real_process(what: str):
    """Trials of *what* (a ``REAL_TRIAL`` entry) on the real tracefs, run by
    a child of this module in a private mount namespace (``--real-loop``)."""
    return namespace_trials([sys.executable, "-m", "bench.bench_control", "--real-loop", what],
                            what, cwd=ROOT)


def interleaved(trials: int, real, *fakes) -> tuple[list, list[float] | None]:
    """Trials of each fake side then of the real side, in turn, *trials*
    rounds (each side's setup done before the first round): the fakes'
    lists and the real side's (None without one).  A real trial that fails
    ends the real side (the rest of its trials are None)."""
    fake_out = [[] for _ in fakes]
    real_out = [] if real is not None else None
    for _ in range(trials):
        for out, fake in zip(fake_out, fakes):
            out.append(fake())
        if real is not None and (not real_out or real_out[-1] is not None):
            try:
                real_out.append(real())
            except (RuntimeError, ValueError) as err:
                print(f"real side: {err}", file=sys.stderr)
                real_out.append(None)
    if real_out is not None and all(t is None for t in real_out):
        real_out = None
    return fake_out, real_out


# --- the real side: a child in a private mount namespace -------------------------------------

def real_side(what: str, trials: int = TRIALS):
    """The trials of *what* (a ``real_*`` function here) on the real tracefs,
    run by a child of this module in a private mount namespace; None when
    there is none (not root, no tracefs)."""
    if not real_available():
        return None
    p = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-m",
                        "bench.bench_control", "--real", what, str(trials)], cwd=ROOT,
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        print(f"real {what}: {p.stderr[-800:]}", file=sys.stderr)
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def _in_namespace_mount() -> None:
    """(In the child's private namespace) tracefs at /sys/kernel/tracing,
    where trace-cmd looks for it, unless the namespace copied one there (the
    copies of other tracefs mounts are taken away: trace-cmd uses the first
    one listed); and
    a writable ``/proc/sys/kernel/ftrace_enabled`` saying 1 (``trace-cmd
    record`` writes 1 there, which this machine's container refuses with
    EPERM though the value is 1 already), and empty files in place of the
    function tracer's files it refuses to open (``set_ftrace_pid``...:
    trace-cmd record crashes on that EPERM); none is what is timed."""
    sysctl = "/proc/sys/kernel/ftrace_enabled"
    if os.path.exists(sysctl):
        _bind_stand_in(sysctl, _read(sysctl))
    with open("/proc/self/mounts") as fp:
        tracefs = [f[1] for f in (ln.split() for ln in fp) if f[2] == "tracefs"]
    for other in tracefs:  # copies of other users' mounts: trace-cmd takes the first listed
        if other != TRACING:
            subprocess.run(["umount", "-l", other], capture_output=True)
    if TRACING not in tracefs:
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACING], check=True,
                       capture_output=True)
    for name in FUNCTION_FILES:  # refused here: empty files in their place
        path = os.path.join(TRACING, name)
        try:
            with open(path):
                pass
        except PermissionError:
            _bind_stand_in(path, "")
        except OSError:
            pass


def _bind_stand_in(path: str, text: str) -> None:
    """A writable regular file holding *text* bind-mounted over *path* (in
    this private namespace only)."""
    with tempfile.NamedTemporaryFile("w", prefix="stand-in-", delete=False) as fp:
        fp.write(text)
    subprocess.run(["mount", "--bind", fp.name, path], capture_output=True, check=True)
    os.unlink(fp.name)  # the bind mount keeps it


def _read(path: str) -> str:
    with open(path) as fp:
        return fp.read()


@contextlib.contextmanager
def top_level_saved():
    """The real top level held (``flock``) and its settings put back after."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = {}
        for name in SAVED:
            text = _read(os.path.join(TRACING, name))
            if name == "buffer_size_kb" and "expanded" in text:
                text = text.split("expanded: ")[1].split(")")[0]
            saved[name] = text
        try:
            yield
        finally:
            _restore(saved)


def _restore(saved: dict) -> None:
    t = TRACING
    write_trunc(os.path.join(t, "tracing_on"), "0")
    write_trunc(os.path.join(t, "current_tracer"), saved["current_tracer"].strip())
    write_trunc(os.path.join(t, "set_event"), "")  # O_TRUNC: every event off
    for line in saved["set_event"].split():
        with open(os.path.join(t, "set_event"), "a") as fp:
            fp.write(line)
    with open(os.path.join(t, "set_event_pid"), "w") as fp:
        fp.write(" ".join(saved["set_event_pid"].split()))
    for opt in saved["trace_options"].split():
        try:
            write_trunc(os.path.join(t, "trace_options"), opt)
        except OSError:
            pass  # an option of another tracer
    write_trunc(os.path.join(t, "tracing_cpumask"), saved["tracing_cpumask"].strip())
    write_trunc(os.path.join(t, "buffer_size_kb"), saved["buffer_size_kb"].split()[0])
    write_trunc(os.path.join(t, "tracing_on"), saved["tracing_on"].strip())


@contextlib.contextmanager
def scratch_instance(root: str = TRACING):
    path = os.path.join(root, "instances", f"bench{os.getpid()}")
    os.mkdir(path)
    try:
        yield path
    finally:
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)


def command_trial(argv):
    """One run of *argv*, timed here (the caller is in the command's namespace)."""
    def trial() -> float:
        t0 = time.perf_counter()
        run_exact(argv, 1800, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - t0
    return trial


@contextlib.contextmanager
def real_reset():
    with top_level_saved():
        yield command_trial(["trace-cmd", "reset"])


@contextlib.contextmanager
def real_stat():
    yield command_trial(["trace-cmd", "stat"])


# every event's format, as trace-cmd stream and record read them before tracing
READ_FORMATS = ["sh", "-c", f"cat {TRACING}/events/*/*/format"]


@contextlib.contextmanager
def real_formats():
    yield command_trial(READ_FORMATS)


@contextlib.contextmanager
def real_record_ready():
    def trial() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.Popen(["trace-cmd", "record", "-e", "sched:sched_switch",
                                     "-o", os.path.join(tmp, "t.dat")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            t0 = time.perf_counter()
            try:
                return _until_readers(proc.pid, _ncpus(TRACING), t0)
            finally:
                _stop(proc)
    with top_level_saved():
        yield trial


REAL_ATTEMPTS = 3  # a real realistic trial whose report lacks the mark is run again


@contextlib.contextmanager
def real_realistic():
    """The realistic test on the kernel.  There, a mark written as soon as
    trace-cmd's readers are open is now and then not recorded (its readers
    open before it turns tracing on, a window the kernel's speed leaves
    open; seen in 2 of 15 trials): such an attempt is not timed, and the
    trial is run again, up to REAL_ATTEMPTS times (the count of retried
    attempts goes to stderr)."""
    count = iter(range(1 << 30))

    def trial() -> float:
        for attempt in range(REAL_ATTEMPTS):
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                try:
                    _realistic_steps(TRACING, ["trace-cmd", "record"], tmp, next(count), t0)
                except RuntimeError as err:
                    if attempt == REAL_ATTEMPTS - 1:
                        raise
                    print(f"real realistic: attempt {attempt + 1}: {err}; again",
                          file=sys.stderr)
                    continue
                return time.perf_counter() - t0
        raise AssertionError("unreachable")
    with top_level_saved():
        yield trial


@contextlib.contextmanager
def real_set_event():
    with scratch_instance() as inst, set_event_trial(inst) as trial:
        yield trial


def real_mount_ready(trials: int) -> list[float]:
    """``mount -t tracefs`` and a read of ``tracing_on`` (the umount after,
    not timed)."""
    return _real_mount_trials(trials, timed_umount=False)


def real_mount_cycle(trials: int) -> list[float]:
    """``mount -t tracefs``, a read of ``tracing_on``, ``umount``: what a
    test that mounted its own tracefs would pay (the fixture rows' figure)."""
    return _real_mount_trials(trials, timed_umount=True)


def _real_mount_trials(trials: int, timed_umount: bool) -> list[float]:
    out = []
    for _ in range(trials):
        mnt = tempfile.mkdtemp(prefix="mount-real-")
        try:
            t0 = time.perf_counter()
            subprocess.run(["mount", "-t", "tracefs", "nodev", mnt], check=True)
            _read(os.path.join(mnt, "tracing_on"))
            if timed_umount:
                subprocess.run(["umount", mnt], check=True)
            out.append(time.perf_counter() - t0)
        finally:
            subprocess.run(["umount", mnt], capture_output=True)
            os.rmdir(mnt)
    return out


def real_cat_trace(trials: int) -> list[float]:
    with scratch_instance() as inst:
        for e in KMEM_EVENTS:
            write_trunc(os.path.join(inst, "events", "kmem", e, "enable"), "1")
        for _ in range(8):  # until every CPU's buffer has wrapped
            subprocess.run(["find", "/usr"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=300)
            stats = [_read(f) for f in glob.glob(os.path.join(inst, "per_cpu/cpu*/stats"))]
            if all("overrun: 0\n" not in s for s in stats):
                break
        write_trunc(os.path.join(inst, "tracing_on"), "0")
        trials_out = cat_trials(os.path.join(inst, "trace"), trials)
        for e in KMEM_EVENTS:
            write_trunc(os.path.join(inst, "events", "kmem", e, "enable"), "0")
        return trials_out


# the real side's trials: one call each, after the setup (a context manager yielding the
# trial function), interleaved with the fake's through a TrialProcess (``--real-loop``)
REAL_TRIAL = {"reset": real_reset, "stat": real_stat, "formats": real_formats,
              "record_ready": real_record_ready, "realistic": real_realistic,
              "set_event": real_set_event}
# the rows whose two sides run apart (all trials of one, then of the other)
REAL = {"mount_ready": real_mount_ready, "mount_cycle": real_mount_cycle,
        "cat_trace": real_cat_trace}


# --- shared steps ----------------------------------------------------------------------------

def _ncpus(tracing: str) -> int:
    return len(glob.glob(os.path.join(tracing, "per_cpu", "cpu*")))


def _descendants(pid: int) -> list[int]:
    """*pid* and every process below it (/proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{p}/task/{task}/children", "rb") as fp:
                    todo += [int(c) for c in fp.read().split()]
            except OSError:
                pass
    return out


def _readers_open(pid: int) -> int:
    """How many distinct ``trace_pipe_raw`` files the process tree holds
    open.  (Called every millisecond while a row waits, on two CPUs shared
    with what it times: listdir and readlink, not glob, which cost the
    waiting side three times the CPU.)"""
    seen = set()
    for p in _descendants(pid):
        folder = f"/proc/{p}/fd/"
        try:
            fds = os.listdir(folder)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(folder + fd)
            except OSError:
                continue
            if target.endswith("/trace_pipe_raw"):
                seen.add(target)
    return len(seen)


def _until_readers(pid: int, ncpus: int, t0: float, timeout: float = 60.0) -> float:
    while _readers_open(pid) < ncpus:
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("trace-cmd record's readers did not all start")
        time.sleep(0.001)
    return time.perf_counter() - t0


def _stop(proc: subprocess.Popen, group: bool = True) -> None:
    """SIGINT to the recorder's group, as a user's ^C (or, for a command run
    through the fake's handle, to ``fakedebugfs run``, which forwards it, as
    a test does); wait for it."""
    try:
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
    except ProcessLookupError:
        pass
    try:
        wait_exit(proc, 60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _realistic_steps(tracing: str, record, tmp: str, i: int, t0: float, popen=None) -> None:
    """record, wait for the readers, mark, ^C, report and check."""
    dat = os.path.join(tmp, f"t{i}.dat")
    argv = [*record, "-e", "sched:sched_switch", "-o", dat]
    proc = (popen or (lambda a: subprocess.Popen(a, start_new_session=True,
                                                 stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL)))(argv)
    line = f"bench-mark-{os.getpid()}-{i}"
    try:
        _until_readers(proc.pid, _ncpus(tracing), t0)
        with open(os.path.join(tracing, "trace_marker"), "w") as fp:
            fp.write(line)
    finally:
        _stop(proc, popen is None)
    report = run_exact(["trace-cmd", "report", "-i", dat], 120, check=False,
                       capture=True).stdout
    if line not in report:
        raise RuntimeError(f"{line} not in the report of {dat}")


@contextlib.contextmanager
def set_event_trial(inst: str):
    """Trials of seconds per write of one name, each WRITES writes.  The
    event is enabled by an untimed first write: the timed ones find it on
    (on the kernel, a write that registers or unregisters a tracepoint waits
    for an RCU grace period, some 14 ms here, which would hide the write's
    own cost); it is turned off again at the end."""
    fd = os.open(os.path.join(inst, "set_event"), os.O_WRONLY | os.O_APPEND)

    def trial() -> float:
        t0 = time.perf_counter()
        for _ in range(WRITES):
            os.write(fd, b"sched:sched_switch")
        return (time.perf_counter() - t0) / WRITES
    try:
        os.write(fd, b"sched:sched_switch")
        yield trial
        os.write(fd, b"!sched:sched_switch")
    finally:
        os.close(fd)


def cat_trials(path: str, trials: int) -> list[float]:
    out = []
    for _ in range(trials):
        t0 = time.perf_counter()
        run_exact(["cat", path], 600, stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


# --- the fake side -----------------------------------------------------------------------------

def fake_api():
    sys.path.insert(0, str(ROOT))
    from fakedebugfs.api import Fake

    return Fake


@contextlib.contextmanager
def servers(fork: bool):
    """While it lasts, ``Fake().start()`` here gets its server from a fork
    server (server/forkserver.py, as the pytest plugin's fixtures do) when
    *fork*, else starts a new process."""
    with server_choice(fork) as value, _environ(value):
        yield


@contextlib.contextmanager
def server_choice(fork: bool):
    """The value of ``FAKEDEBUGFS_FORKSERVER`` that makes ``Fake().start()``
    fork its server from a fork server kept while this lasts (*fork*), or
    start a new process."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if fork:
            from fakedebugfs.server import forkserver

            sock = os.path.join(tmp, "fork.sock")
            stack.enter_context(forkserver.ForkServer(sock))
            yield sock
        else:
            yield "0"


@contextlib.contextmanager
def _environ(value: str):
    from fakedebugfs.server import forkserver

    saved = os.environ.get(forkserver.ENV)
    os.environ[forkserver.ENV] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ[forkserver.ENV]
        else:
            os.environ[forkserver.ENV] = saved


def fake_mount_ready(trials: int, fork: bool = False) -> tuple[list[float], list[float]]:
    """(mount-ready, whole fixture cycle) trials, after one untimed start;
    *fork*: the servers forked by a fork server (server/forkserver.py),
    else each a new process."""
    Fake = fake_api()
    with servers(fork):
        Fake().start().close()
        ready, cycle = [], []
        for _ in range(trials):
            t0 = time.perf_counter()
            fake = Fake().start()
            _read(str(fake.tracing / "tracing_on"))
            ready.append(time.perf_counter() - t0)
            fake.close()
            cycle.append(time.perf_counter() - t0)
    return ready, cycle


FIXTURE_FILE = """
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_reads(fakedebugfs, i):
    assert (fakedebugfs.tracing / "tracing_on").read_text() == "1\\n"
"""


def _pytest_seconds(path: str, env: dict) -> float:
    t0 = time.perf_counter()
    run_exact([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path], 1800,
              cwd=os.path.dirname(path), env=env, capture=True)
    return time.perf_counter() - t0


def fake_fixture(trials: int, fork: bool = True) -> tuple[list[float], list[float]]:
    """(per test, the session's first fake) of the plugin's function
    fixture, through ``pytest`` subprocesses: sessions of 1 + N fixture
    tests, of 1, and of one plain test, each trial."""
    env = dict(os.environ)
    env.pop("FAKEDEBUGFS_FORKSERVER", None)
    if not fork:
        env["FAKEDEBUGFS_FORKSERVER"] = "0"
    n = FIXTURE_TESTS if fork else FIXTURE_TESTS_PLAIN
    per_test, first = [], []
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for name, text in (("none", "def test_plain():\n    pass\n"),
                           ("one", FIXTURE_FILE.format(n=1)),
                           ("many", FIXTURE_FILE.format(n=1 + n))):
            files[name] = os.path.join(tmp, f"test_{name}.py")
            with open(files[name], "w") as fp:
                fp.write(text)
        _pytest_seconds(files["one"], env)  # untimed: caches, bytecode
        for _ in range(trials):
            t0 = _pytest_seconds(files["none"], env)
            t1 = _pytest_seconds(files["one"], env)
            tn = _pytest_seconds(files["many"], env)
            per_test.append((tn - t1) / n)
            first.append(t1 - t0)
    return per_test, first


def _record_ready(fake, dat: str) -> float:
    """Seconds from ``fake.popen`` of ``trace-cmd record`` to its reading
    every ``trace_pipe_raw``; the recorder stopped after."""
    t0 = time.perf_counter()
    proc = fake.popen(["trace-cmd", "record", "-e", "sched:sched_switch", "-o", dat],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return _until_readers(proc.pid, _ncpus(str(fake.tracing)), t0)
    finally:
        _stop(proc, group=False)


@contextlib.contextmanager
def fake_record_ready():
    """A fake's later commands: one fake, a recorder each trial (its first
    command, which makes the namespace the others join, untimed)."""
    Fake = fake_api()
    count = iter(range(1 << 30))
    with Fake() as fake, tempfile.TemporaryDirectory() as tmp:
        fake.run(["true"])
        yield lambda: _record_ready(fake, os.path.join(tmp, f"r{next(count)}.dat"))


@contextlib.contextmanager
def fake_record_ready_first():
    """A fake's first command, as a test's recorder is with the plugin's
    fixture: each trial a new fake forked by a fork server (its start not
    timed, its close after the trial), the recorder its first command."""
    Fake = fake_api()
    count = iter(range(1 << 30))

    def trial() -> float:
        with _environ(choice):
            fake = Fake().start()
        try:
            return _record_ready(fake, os.path.join(tmp, f"f{next(count)}.dat"))
        finally:
            fake.close()
    with tempfile.TemporaryDirectory() as tmp, server_choice(True) as choice:
        with _environ(choice):
            Fake().start().close()
        yield trial


@contextlib.contextmanager
def fake_realistic(fork: bool = True):
    """The realistic test's trials, each fake started as the plugin's
    fixture starts it: from a fork server (*fork*), after one untimed
    start; else each server a new process."""
    Fake = fake_api()
    count = iter(range(1 << 30))

    def trial() -> float:
        with _environ(choice):
            t0 = time.perf_counter()
            with Fake() as fake:
                popen = lambda argv: fake.popen(argv, stdout=subprocess.DEVNULL,  # noqa: E731
                                                stderr=subprocess.DEVNULL)
                _realistic_steps(str(fake.tracing), ["trace-cmd", "record"], tmp,
                                 next(count), t0, popen)
            return time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp, server_choice(fork) as choice:
        with _environ(choice):
            Fake().start().close()
        yield trial


@contextlib.contextmanager
def fake_set_event():
    Fake = fake_api()
    with Fake() as fake, scratch_instance(str(fake.tracing)) as inst, \
            set_event_trial(inst) as trial:
        yield trial


def fake_cat_trace(trials: int, workdir: str) -> list[float]:
    with Mount(workdir, "--cpus", "2", "--workload", "kmem", "--rate", "0", "--count",
               str(FILL_EVENTS), "--enable", "tracing") as mnt:
        cli("status", mnt, "--wait-done", "--timeout", "600", timeout=700)
        write_trunc(os.path.join(mnt, "tracing", "tracing_on"), "0")
        return cat_trials(os.path.join(mnt, "tracing", "trace"), trials)


# --- rows ----------------------------------------------------------------------------------------

def run(trials: int = TRIALS) -> list[dict]:
    """Every row; a row that fails is an ``error`` row (the others still run)."""
    if shutil.which("trace-cmd") is None:
        return []
    _compile_package()  # as installed: no module compiled again at each start
    rows: list[dict] = []

    def add(name: str, make, also: str = "") -> None:
        if not (_wanted(name) or (also and _wanted(also))):
            return
        try:
            rows.extend(make())
        except Exception as err:  # report, go on with the next row
            rows.append({"name": f"{name}: error", "fake": None, "real": None, "unit": "",
                         "detail": f"{type(err).__name__}: {err}"})

    def paired(name: str, unit: str, fake_side, real_what: str, scale: float = 1.0):
        with fake_side as fake, real_process(real_what) as real:
            (fake_trials,), real_trials = interleaved(trials, real, fake)
        return [row(name, unit, fake_trials, real_trials, scale, paired=True)]

    add("tracecmd_reset_s", lambda: paired(
        "tracecmd_reset_s", "s", fake_command(["trace-cmd", "reset"]), "reset"))
    add("tracecmd_stat_s", lambda: paired(
        "tracecmd_stat_s", "s", fake_command(["trace-cmd", "stat"]), "stat"))
    add("format_read_all_s", lambda: paired(
        "format_read_all_s", "s", fake_command(READ_FORMATS), "formats"))
    add("tracecmd_record_ready_s", lambda: paired(
        "tracecmd_record_ready_s", "s", fake_record_ready(), "record_ready"))
    add("tracecmd_record_ready_s[first command]", lambda: paired(
        "tracecmd_record_ready_s[first command]", "s", fake_record_ready_first(),
        "record_ready"))
    real: dict = {}  # the real kernel's mount figures, measured once, when a row wants them

    def real_of(what: str):
        if what not in real:
            real[what] = real_side(what, trials)
        return real[what]
    for fork in (False, True):
        label = "[forkserver]" if fork else ""

        def ready_rows(fork=fork, label=label):
            ready, cycle = fake_mount_ready(trials, fork=fork)
            return [row(f"mount_ready_ms{label}", "ms", ready, real_of("mount_ready"), 1e3)] + (
                [row(f"fake_cycle_ms{label}", "ms", cycle, real_of("mount_cycle"), 1e3)]
                if fork else [])
        add(f"mount_ready_ms{label}", ready_rows, also=f"fake_cycle_ms{label}")

    def fixture_rows():
        per_test, first = fake_fixture(trials)
        plain, _ = fake_fixture(trials, fork=False)
        return [row("fixture_per_test_ms", "ms", per_test, real_of("mount_cycle"), 1e3),
                row("fixture_per_test_ms[no forkserver]", "ms", plain, real_of("mount_cycle"),
                    1e3),
                row("fixture_first_ms", "ms", first, None, 1e3)]
    add("fixture_per_test_ms", fixture_rows, also="fixture")

    def realistic_rows():
        with fake_realistic() as forked, fake_realistic(fork=False) as plain, \
                real_process("realistic") as real:
            (forked_trials, plain_trials), real_trials = interleaved(trials, real, forked, plain)
        return [row("realistic_test_s", "s", forked_trials, real_trials, paired=True),
                row("realistic_test_s[no forkserver]", "s", plain_trials, real_trials,
                    paired=True)]
    add("realistic_test_s", realistic_rows)
    add("set_event_write_ms", lambda: paired(
        "set_event_write_ms", "ms", fake_set_event(), "set_event", 1e3))
    workdir = tempfile.mkdtemp(prefix="bench-control-")
    try:
        add("cat_trace_full_s", lambda: [row(
            "cat_trace_full_s", "s", fake_cat_trace(3, workdir), real_side("cat_trace", 3))])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def _wanted(name: str) -> bool:
    """Whether row *name* runs: every row, or those whose name starts with
    one of ``BENCH_CONTROL_ROWS``'s comma-separated prefixes (``--rows``)."""
    prefixes = [p.strip() for p in os.environ.get(ROWS_ENV, "").split(",") if p.strip()]
    return not prefixes or any(name.startswith(p) for p in prefixes)


def _main(argv: list[str]) -> None:
    if argv[:1] == ["--real"]:  # the child in its private namespace: N trials
        _in_namespace_mount()
        if argv[1] in REAL_TRIAL:
            with REAL_TRIAL[argv[1]]() as trial:
                print(json.dumps([trial() for _ in range(int(argv[2]))]))
        else:
            print(json.dumps(REAL[argv[1]](int(argv[2]))))
        return
    if argv[:1] == ["--real-loop"]:  # the same, a trial per line read (TrialProcess)
        _in_namespace_mount()
        with REAL_TRIAL[argv[1]]() as trial:
            print("ready", flush=True)
            for _ in sys.stdin:
                print(trial(), flush=True)
        return
    if argv[:1] == ["--rows"]:
        os.environ[ROWS_ENV] = argv[1]
    for r in run():
        print(json.dumps(r))


if __name__ == "__main__":
    _main(sys.argv[1:])
