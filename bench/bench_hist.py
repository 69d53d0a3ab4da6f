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

from . import FAKEDEBUGFS, ROOT, guest_outputs, spread

TRIALS = 5
SECONDS = 4  # recording window on the fake
GUEST_BYTES = 10_000  # dd bs=1 count=... in the guest: 2 system calls a byte
TRIGGER = "hist:keys=id.syscall:vals=hitcount"
EVENT = "raw_syscalls/sys_enter"
PROFILE = ROOT / "fakedebugfs" / "profiles" / "debian-6.12"

FAKE_SCRIPT = f"""\
E=/sys/kernel/tracing/events/{EVENT}
echo '{TRIGGER}' > $E/trigger || exit 1
trace-cmd record -q -e raw_syscalls:sys_enter -o "$1" sleep "$2" > /dev/null || exit 1
sed -n 's/^ *Hits: //p' $E/hist
"""

GUEST_SCRIPT = f"""\
E=/sys/kernel/tracing/events/{EVENT}
echo '{TRIGGER}' > $E/trigger || exit 1
cd /tmp
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
    return {**measured(report, stats), "hist_hits": int(p.stdout.split()[-1])}


def guest_trials() -> list:
    """TRIALS recordings in the guest (empty when the oracle cannot run here)."""
    out = []
    for text in guest_outputs(PROFILE, GUEST_SCRIPT, TRIALS):
        report, _, stats = text.partition("### stat\n")
        hits = re.search(r"^Hits: (\d+)", report, re.M)
        out.append({**measured(report, stats), "hist_hits": int(hits[1]) if hits else None})
    return out


def run() -> list[dict]:
    workdir = tempfile.mkdtemp(prefix="bench-hist-")
    try:
        fake = [fake_trial(workdir) for _ in range(TRIALS)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    real = guest_trials()
    clean = lambda trials: [t["per_s"] for t in trials if not t["lost"] and t["events"]]  # noqa: E731
    f, r = clean(fake), clean(real)
    return [{"name": "trace-cmd record -e raw_syscalls:sys_enter, a hist trigger on it "
                     "(debian-6.12), without loss",
             "fake": round(spread(f)[1]) if f else 0, "real": round(spread(r)[1]) if r else None,
             "unit": "events/s", "spread": {"fake": spread(f) if f else None,
                                            "real": spread(r) if r else None},
             "detail": {"fake": fake, "real": real, "trigger": TRIGGER,
                        "kernel": os.uname().release}}]
