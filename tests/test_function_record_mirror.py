"""``trace-cmd record -p function ls`` under ``fakedebugfs run --mirror tree
--profile debian-6.12``, as a user types it: the report has the function
entries of ``ls``'s own task (its real system calls, mirrored and expanded
through the profile's call trees).

It recorded nothing in most runs (docs/function-tracing.md#trace-cmd-record-
with-a-short-command): trace-cmd's recorders, forked before the command,
open ``trace_pipe_raw`` and read ``events/header_page`` before they start
reading, and a recorder the parent's SIGUSR1 reaches before that exits
without reading.  The ``tracing_on`` 0 that ends the recording drained the
mirror's backlog of ``ls``'s system calls, expanded into call trees, at
once, and the recorders' requests waited behind it until the signal came.
The command is ``ls -l /proc/self``: its output names its pid.

That write now waits for the backlog in slicer turns, other requests
answered between them, as on the kernel a tool's other tasks go on while
the traced command's tracepoints write (``Server.drain_before_write``):
``test_other_requests_go_on_while_a_write_waits`` checks it with a reader
that reads ``events/header_page`` while ``tracing_on`` 0 waits for the
call trees of 5,000 mirrored read(2) calls.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS
from fakedebugfs.engine.core.profile_files import read_profile_text

PROFILE = Path(__file__).resolve().parent.parent / "fakedebugfs" / "profiles" / "debian-6.12"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="--mirror needs root (CAP_PERFMON)"),
    pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="needs trace-cmd"),
]

SCRIPT = """
cd "$1" || exit 1
trace-cmd record -q -p function ls -l /proc/self > ls.txt || exit 1
trace-cmd report > report.txt
"""
# trace-cmd report's line of a function entry
ENTRY = re.compile(r"^ *(?P<comm>.+)-(?P<pid>\d+) +\[\d{3}\] +\d+\.\d{6}: +function: +(?P<func>\S+)")


def test_record_p_function_ls_has_ls_functions(tmp_path):
    os.chmod(tmp_path, 0o755)
    res = subprocess.run([FAKEDEBUGFS, "run", "--mirror", "tree", "--profile", "debian-6.12",
                          "--", "sh", "-c", SCRIPT, "sh", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    listing = (tmp_path / "ls.txt").read_text()
    pid = re.search(r"/proc/self -> (\d+)$", listing, re.M)
    assert pid, listing
    report = (tmp_path / "report.txt").read_text()
    mine = [m["func"] for m in map(ENTRY.match, report.splitlines())
            if m and m["pid"] == pid[1] and m["comm"] == "ls"]
    assert mine, f"no function entry of ls-{pid[1]}:\n{report[:3000]}"
    # its system calls' call trees: the openat(2) of its libraries, its exit
    assert "do_sys_openat2" in mine and "do_group_exit" in mine, sorted(set(mine))[:200]
    traceable = set(read_profile_text(PROFILE, "available_filter_functions").split())
    assert set(mine) <= traceable, sorted(set(mine) - traceable)


# a backlog of 5,000 read(2) calls (57 calls each in the profile's tree),
# then tracing_on 0 while another thread reads events/header_page
DURING_PY = r"""
import os, threading, time
T = "/sys/kernel/tracing/"
def put(name, text):
    fd = os.open(T + name, os.O_WRONLY | os.O_TRUNC)
    os.write(fd, text.encode())
    os.close(fd)
put("current_tracer", "function")
on = os.open(T + "tracing_on", os.O_WRONLY)
os.write(on, b"1")
zero = os.open("/dev/zero", os.O_RDONLY)
for _ in range(5000):
    os.read(zero, 1)
done, stop, started = [0], threading.Event(), threading.Event()
def reader():
    fd = os.open(T + "events/header_page", os.O_RDONLY)
    while not stop.is_set():
        os.pread(fd, 4096, 0)
        done[0] += 1
        started.set()
        time.sleep(0.001)
th = threading.Thread(target=reader)
th.start()
started.wait()
before = done[0]
os.write(on, b"0")
print(done[0] - before)
stop.set()
th.join()
put("current_tracer", "nop")
"""


def test_other_requests_go_on_while_a_write_waits(tmp_path):
    """Reads of another thread are answered while ``tracing_on`` 0 waits
    for the mirror's backlog; before, the write's drain held the server
    and at most the two reads already under way got through."""
    script = tmp_path / "during.py"
    script.write_text(DURING_PY)
    os.chmod(tmp_path, 0o755)
    res = subprocess.run([FAKEDEBUGFS, "run", "--mirror", "tree", "--profile", "debian-6.12",
                          "--", "python3", str(script)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert int(res.stdout.split()[0]) >= 10, res.stdout
