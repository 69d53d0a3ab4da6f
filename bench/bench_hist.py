"""A hist trigger under load: ``trace-cmd record`` of the event a hist
trigger aggregates, without loss (issue 33's "hist under load").

The same recipe on both sides: ``hist:keys=id.syscall:vals=hitcount`` on
``raw_syscalls/sys_enter``, then ``trace-cmd record -e
raw_syscalls:sys_enter`` while system calls are made; the figure is the
``sys_enter`` events trace-cmd recorded per second of their timestamps'
span, and a trial counts only without a loss (``trace-cmd report --stat``'s
overruns and drops, and no ``LOST EVENTS`` / ``EVENTS DROPPED`` mark).

* The fake: ``fakedebugfs run --profile debian-6.12 --rate 0`` (the default
  workload flat out: every tracepoint it fires, ``sys_enter`` about a tenth
  of them; the trigger puts ``sys_enter`` on the per-event path), SECONDS
  of recording; the hist's ``Hits`` at the end (every ``sys_enter`` since
  the trigger was set, before and after the recording too) are kept in the
  detail beside the recorded count.
* The real kernel: the Debian 6.12 guest (``python -m fakedebugfs.oracle``,
  TCG: an emulated machine, about 20 times slower than this hardware) while
  ``dd bs=1`` makes GUEST_BYTES reads and writes, with 8 MiB per-CPU
  buffers (``-b 8192``: the guest's trace-cmd lost events with the default
  size).  Its figure is the rate the load makes there, recorded whole, not
  a limit of the kernel's hist path.

Two more rows, from the same trials: the events that went through the
hist trigger a second of wall time while nothing recorded (the hist's
``Hits`` read before and after SECONDS of the fake's workload, and before
and after the guest's ``dd``: there, the rate the emulated machine's load
makes), and the hist path alone in process (``engine.emit`` of ``sys_enter``
into a debian-6.12 kernel whose only probe on it is the trigger, thread CPU
time): what the issue's 1 M events/s would ask of it.

TRIALS trials each side; the row gives the medians, their spread and the
load average of each trial.

    python -m bench hist
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time

from . import FAKEDEBUGFS, ROOT, guest_outputs, spread

TRIALS = 5
SECONDS = 4  # recording window on the fake (and the window before it, unrecorded)
ENGINE_EVENTS = 100_000  # events of an in-process trial
GUEST_BYTES = 10_000  # dd bs=1 count=... in the guest: 2 system calls a byte
TRIGGER = "hist:keys=id.syscall:vals=hitcount"
EVENT = "raw_syscalls/sys_enter"
PROFILE = ROOT / "fakedebugfs" / "profiles" / "debian-6.12"
GUEST = os.environ.get("FAKEDEBUGFS_BENCH_GUEST", "bench")  # the oracle guest's name

FAKE_SCRIPT = f"""\
E=/sys/kernel/tracing/events/{EVENT}
echo '{TRIGGER}' > $E/trigger || exit 1
echo "t0: $(date +%s.%N) $(sed -n 's/^ *Hits: //p' $E/hist)"
sleep "$2"
echo "t1: $(date +%s.%N) $(sed -n 's/^ *Hits: //p' $E/hist)"
trace-cmd record -q -e raw_syscalls:sys_enter -o "$1" sleep "$2" > /dev/null || exit 1
sed -n 's/^ *Hits: //p' $E/hist
"""

GUEST_SCRIPT = f"""\
E=/sys/kernel/tracing/events/{EVENT}
echo '{TRIGGER}' > $E/trigger || exit 1
cd /tmp
echo "t0: $(date +%s.%N) $(sed -n 's/^ *Hits: //p' $E/hist)"
dd if=/dev/zero of=/dev/null bs=1 count={GUEST_BYTES} > /dev/null 2>&1
echo "t1: $(date +%s.%N) $(sed -n 's/^ *Hits: //p' $E/hist)"
trace-cmd record -q -b 8192 -e raw_syscalls:sys_enter -o /tmp/bench_hist.dat \\
    dd if=/dev/zero of=/dev/null bs=1 count={GUEST_BYTES} > /dev/null 2>&1
rc=$?
echo 'Hits:' $(sed -n 's/^ *Hits: //p' $E/hist)
echo '!{TRIGGER}' >> $E/trigger
[ $rc = 0 ] || exit $rc
trace-cmd report -t -i /tmp/bench_hist.dat 2>/dev/null
echo '### stat'
trace-cmd report --stat -i /tmp/bench_hist.dat 2>/dev/null
rm -f /tmp/bench_hist.dat
"""

_STAMP = re.compile(r"\]\s+(\d+\.\d+): sys_enter:")
_MARK = re.compile(r"^t([01]): (\d+\.\d+) (\d+)$", re.M)


def through_hist(text: str) -> dict:
    """The hist's ``Hits`` gained per second of wall time between its
    reads t0 and t1, with nothing recording (the fake: SECONDS of the
    workload; the guest: ``dd bs=1`` of GUEST_BYTES): the events that went
    through the hist trigger."""
    marks = {m[1]: (float(m[2]), int(m[3])) for m in _MARK.finditer(text)}
    if set(marks) != {"0", "1"} or marks["1"][0] <= marks["0"][0]:
        return {"hist_per_s": 0.0}
    (t0, h0), (t1, h1) = marks["0"], marks["1"]
    return {"hist_per_s": (h1 - h0) / (t1 - t0), "hist_s": round(t1 - t0, 2)}


def measured(report: str, stats: str) -> dict:
    """Events, span, rate and losses of one recording's ``trace-cmd
    report -t`` and ``report --stat`` texts."""
    stamps = [float(s) for s in _STAMP.findall(report)]
    lost = sum(int(n) for n in re.findall(r"^(?:overrun|dropped events|commit overrun): (\d+)",
                                          stats, re.M))
    lost += report.count("LOST EVENTS") + report.count("EVENTS DROPPED")
    span = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
    return {"events": len(stamps), "span": span, "lost": lost,
            "per_s": len(stamps) / span if span else 0.0,
            "load": round(os.getloadavg()[0], 2)}


def fake_trial(workdir: str) -> dict:
    dat = os.path.join(workdir, "hist.dat")
    script = os.path.join(workdir, "rec.sh")
    with open(script, "w") as fp:
        fp.write(FAKE_SCRIPT)
    cmd = [FAKEDEBUGFS, "run", "--profile", "debian-6.12", "--cpus", "2", "--rate", "0",
           "--seed", "1", "--", "sh", script, dat, str(SECONDS)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-500:]}")
    report = subprocess.run(["trace-cmd", "report", "-t", "-i", dat], capture_output=True,
                            text=True, timeout=300).stdout
    stats = subprocess.run(["trace-cmd", "report", "--stat", "-i", dat], capture_output=True,
                           text=True, timeout=60).stdout
    return {**measured(report, stats), **through_hist(p.stdout),
            "hist_hits": int(p.stdout.split()[-1])}


def guest_trials() -> list:
    """TRIALS recordings in the guest (empty when the oracle cannot run here)."""
    out = []
    for text in guest_outputs(PROFILE, GUEST_SCRIPT, TRIALS, name=GUEST):
        report, _, stats = text.partition("### stat\n")
        hits = re.search(r"^Hits: (\d+)", report, re.M)
        out.append({**measured(report, stats), **through_hist(report),
                    "hist_hits": int(hits[1]) if hits else None})
    return out


def engine_trial(events: int = ENGINE_EVENTS) -> float:
    """``raw_syscalls:sys_enter`` fired *events* times in process (one by
    one, as the engine fires an event with a trigger) into a debian-6.12
    kernel whose only probe on it is the hist trigger: events a second of
    the thread's CPU time (the machine is shared: wall time counts other
    processes' turns), the events' values made before the clock starts."""
    import random

    from fakedebugfs.engine.ftrace import trigger_cmds
    from fakedebugfs.engine.kernel import Kernel

    k = Kernel(cpus=2, buffer_size=1 << 20, profile=PROFILE)
    key = EVENT.replace("/", ":")
    trigger_cmds.write(k.ftrace, key, TRIGGER.encode())
    tp, emit = k.engine.tracepoints[key], k.engine.emit
    rng = random.Random(1)
    values = [(nr, (1, 2, 3, 4, 5, 6)) for nr in rng.choices((0, 1, 3, 9, 12, 202, 228, 257),
                                                             k=1000)]
    start = time.thread_time()
    for i in range(events):
        emit(tp, i & 1, 1000 + (i & 7), values[i % 1000])
    return events / (time.thread_time() - start)


def run() -> list[dict]:
    workdir = tempfile.mkdtemp(prefix="bench-hist-")
    try:
        fake = [fake_trial(workdir) for _ in range(TRIALS)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    engine = [engine_trial() for _ in range(TRIALS)]
    real = guest_trials()
    clean = lambda trials: [t["per_s"] for t in trials if not t["lost"] and t["events"]]  # noqa: E731
    hist = lambda trials: [t["hist_per_s"] for t in trials if t["hist_per_s"]]  # noqa: E731
    f, r = clean(fake), clean(real)
    hf, hr = hist(fake), hist(real)
    detail = {"fake": fake, "real": real, "trigger": TRIGGER, "kernel": os.uname().release}
    return [{"name": "trace-cmd record -e raw_syscalls:sys_enter, a hist trigger on it "
                     "(debian-6.12), without loss",
             "fake": round(spread(f)[1]) if f else 0, "real": round(spread(r)[1]) if r else None,
             "unit": "events/s", "spread": {"fake": spread(f) if f else None,
                                            "real": spread(r) if r else None},
             "detail": detail},
            {"name": "events through the hist trigger, nothing recording (its Hits a second "
                     "of wall time; the fake: run --rate 0; the guest: dd bs=1)",
             "fake": round(spread(hf)[1]) if hf else 0,
             "real": round(spread(hr)[1]) if hr else None,
             "unit": "events/s", "spread": {"fake": spread(hf) if hf else None,
                                            "real": spread(hr) if hr else None},
             "detail": {"trials": TRIALS, "see": "the row above's detail (hist_per_s)"}},
            {"name": "the hist trigger's path in process (engine.emit of sys_enter one by "
                     "one, the trigger its only probe), thread CPU time",
             "fake": round(spread(engine)[1]), "real": None, "unit": "events/s",
             "spread": {"fake": spread(engine), "real": None},
             "detail": {"trials": [round(e) for e in engine], "events": ENGINE_EVENTS}}]
