"""trace-cmd's own unit test "Simple reset" (trace-cmd 3.2+ ``utest/``), its
uprobe steps replayed with Debian's trace-cmd under ``fakedebugfs run``.

The utest writes a probe with ``tracefs_instance_file_write`` (an O_TRUNC
open, as ``echo >`` here), looks for it in ``trace-cmd stat`` and removes
it with ``trace-cmd reset``.  It relies on these kernel behaviours
(``trace_uprobe.c``), each checked against this machine's 6.18 tracefs in
a private mount: a probe without a name is called ``p_<file>_0x<offset>``
whether it is an entry or a return probe; an O_TRUNC open of
``uprobe_events`` removes every probe first, so writing ``r`` replaces the
``p`` of the same name; appending a probe of the other type under an
existing name is EEXIST with "Probe type is different from existing
probe" in ``error_log``.  The same script on that real tracefs prints
the same lines but ``reset: 1``: this VM's kernel refuses opening
``set_ftrace_filter`` (EPERM), which the fake does not serve.  How the
whole utest compares, fake against the real kernel, is in docs/tracefs.md
("Checking against the real kernel").
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import FAKEDEBUGFS

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="fakedebugfs run needs root"),
    pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="trace-cmd is not installed"),
]

# the utest's own probe (test_trace_reset_uprobe / _uretprobe)
PROBE = "/bin/bash:0x4245c0"
LISTED = "uprobes/p_bash_0x4245c0 /bin/bash:0x00000000004245c0"

SCRIPT = f"""
T=/sys/kernel/tracing
echo 'p {PROBE}' > $T/uprobe_events; echo "write p: $?"
trace-cmd stat | grep -F 'p:{LISTED}' | sed 's/^ */stat: /'
echo 'r {PROBE}' > $T/uprobe_events; echo "write r: $?"
trace-cmd stat | grep -F 'r:{LISTED}' | sed 's/^ */stat: /'
echo 'p {PROBE}' >> $T/uprobe_events 2>/dev/null; echo "append p: $?"
sed -n 's/^\\[ *[0-9.]*\\] /log: /p' $T/error_log
trace-cmd reset >/dev/null 2>&1; echo "reset: $?"
echo "left: [$(cat $T/dynamic_events)]"
"""


def test_utest_uprobe_steps():
    proc = subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", "--", "sh", "-c", SCRIPT],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "write p: 0",
        f"stat: p:{LISTED}",
        "write r: 0",
        f"stat: r:{LISTED}",
        "append p: 1",
        "log: trace_uprobe: error: Probe type is different from existing probe",
        "reset: 0",
        "left: []",
    ], proc.stderr
