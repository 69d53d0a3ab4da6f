"""``saved_tgids`` and the ``record-tgid`` option (trace_sched_switch.c's
tgid map, trace_output.c's ``trace_print_context``): empty until the
option is set, then ``<pid> <tgid>`` of each task an entry was recorded
for, in pid order, kept when the option is cleared; ``trace`` shows a TGID
column and its header says so.  The header is compared with the Debian
6.12 guest's (an instance there)."""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import FAKEDEBUGFS

SCRIPT = r"""
cd /sys/kernel/tracing
before=$(cat saved_tgids | wc -l)
mkdir instances/tg
cd instances/tg
echo 1 > options/record-tgid
echo hello > trace_marker
echo 1 > events/sched/sched_switch/enable
sleep 0.3
echo 0 > events/sched/sched_switch/enable
echo "before=$before"
echo ---header
head -12 trace | tail -8
echo ---lines
grep -m3 -v '^#' trace
echo 0 > options/record-tgid
echo ---tgids
cat ../../saved_tgids
cd ../..; rmdir instances/tg
"""


def _fake(profile: str) -> str:
    res = subprocess.run([FAKEDEBUGFS, "run", "--profile", profile, "--", "sh", "-c", SCRIPT],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _parts(out: str) -> dict:
    parts = dict(re.findall(r"---(\w+)\n(.*?)(?=\n---|\Z)", out, re.S))
    parts["before"] = re.search(r"before=(\d+)", out)[1]
    return parts


@pytest.mark.parametrize("profile", ["linux-6.18", "debian-6.12"])
def test_saved_tgids_fill_while_record_tgid_is_set(profile):
    parts = _parts(_fake(profile))
    assert parts["before"] == "0"
    header = parts["header"].splitlines()
    assert header[-2] == "#           TASK-PID       TGID    CPU#  |||||  TIMESTAMP  FUNCTION"
    for line in parts["lines"].splitlines():  # comm-pid (tgid or dashes) [cpu]
        m = re.match(r"^ *(\S+)-(\d+) +\((-------|\s*\d+)\) \[\d{3}\] ", line)
        assert m, line
        pid, tgid = int(m[2]), m[3].strip()
        assert tgid == ("-------" if pid == 0 else str(pid))
    pairs = [tuple(map(int, line.split())) for line in parts["tgids"].splitlines()]
    assert pairs and pairs == sorted(pairs) and all(p == t for p, t in pairs)
    assert 0 not in dict(pairs)  # the idle task is never saved


def test_the_tgid_header_is_the_guests(oracle):
    res = oracle.run(SCRIPT, timeout=300)
    assert res.returncode == 0, res.stderr
    guest, fake = _parts(res.text), _parts(_fake("debian-6.12"))
    assert fake["header"] == guest["header"]
    assert guest["before"] == fake["before"] == "0"  # a fresh guest has saved none
