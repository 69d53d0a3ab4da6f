"""The ``ftrace:function`` entry as Debian 6.12 has it, against its guest:
``events/ftrace/function/format`` byte for byte, and ``trace``'s function
lines as the guest prints them, in an instance running ``function``.

6.12's entry is ``ip`` and ``parent_ip``; 6.18's adds ``unsigned long
args[]`` (the fake's own table, that of this machine's kernel).  The
entry's layout is the profile's captured format: under a profile of the
6.12 formats without the function tracer's files (a kernel whose function
tracer is off), the fake served 6.18's ``args[]`` line, as only the
function tracer's set-up put the profile's layout in.

Every line of the guest's names the caller (``<-parent``); the fake's
calls at a call tree's depth 0 have none (``parent_ip`` 0: the trees do not
record who called their first call), so the parent stays optional here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS

PROFILE = Path(__file__).resolve().parent.parent / "fakedebugfs" / "profiles" / "debian-6.12"

SCRIPT = r"""
cd /sys/kernel/tracing
cat events/ftrace/function/format
echo ====
i=instances/fdfs-fn-$$
mkdir $i
echo function > $i/current_tracer
sleep 0.5
echo 0 > $i/tracing_on
head -40 $i/trace
echo nop > $i/current_tracer
rmdir $i
"""
# the column header of the function tracer's trace (print_func_help_header_irq)
HEAD = re.compile(r"^# entries-in-buffer/entries-written: \d+/\d+   #P:\d+$")
# a function entry: TASK-PID [CPU] flags TIMESTAMP: func <-parent
LINE = re.compile(r"^ {0,16}\S.*-\d+ +\[\d{3}\] [.a-zA-Z0-9]{5} +\d+\.\d{6}: [\w.]+( <-[\w.]+)?$")


def fake_run(profile) -> str:
    res = subprocess.run([FAKEDEBUGFS, "run", "--profile", str(profile), "--workload", "none",
                          "--", "sh", "-c", SCRIPT], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


@pytest.fixture(scope="module")
def guest_out(oracle):
    res = oracle.run(SCRIPT, timeout=300)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    return res.text


STARTED = re.compile(r"^##### CPU \d+ buffer started ####$")

def shape(trace: str) -> tuple:
    """A trace's header with its counts masked, and its entry lines (a
    ``##### CPU N buffer started ####`` annotation, which says a CPU's
    buffer overran while the trace was read, is the run's, not the format's)."""
    lines = [ln for ln in trace.splitlines() if not STARTED.match(ln)]
    head = [HEAD.sub("# entries-in-buffer/entries-written: N/N   #P:N", ln) if HEAD.match(ln)
            else ln for ln in lines if ln.startswith("#")]
    return head, [ln for ln in lines if not ln.startswith("#")]


@pytest.mark.parametrize("tracer_files", [True, False], ids=["profile", "no-function-tracer"])
def test_function_entry_is_the_guests(guest_out, tmp_path, tracer_files):
    profile = PROFILE
    if not tracer_files:  # 6.12's formats, no function records: no function tracer
        profile = tmp_path / "debian-6.12-nofn"
        shutil.copytree(PROFILE, profile)
        for f in profile.glob("available_filter_functions*"):
            f.unlink()
    fake_format, fake_trace = fake_run(profile).split("====\n")
    guest_format, guest_trace = guest_out.split("====\n")
    assert "args" not in guest_format
    assert fake_format == guest_format
    if not tracer_files:
        return
    fake_head, fake_lines = shape(fake_trace)
    guest_head, guest_lines = shape(guest_trace)
    assert fake_head == guest_head
    assert guest_lines and not [ln for ln in guest_lines if not LINE.match(ln)]
    assert fake_lines and not [ln for ln in fake_lines if not LINE.match(ln)]
