"""A user's test file for the plugin tests (in-tree and from a fresh venv)."""

from __future__ import annotations


# A user's test: three kmallocs on CPU 1, recorded and reported by trace-cmd.
USER_TEST = '''
import re
import signal
import subprocess
import time

import pytest


@pytest.mark.fakedebugfs(cpus=2, clock="virtual")
def test_three_kmallocs(fakedebugfs, tmp_path):
    fk = fakedebugfs
    syms = fk.run(["grep", " getname_flags$", "/proc/kallsyms"], capture_output=True, text=True)
    base = int(syms.stdout.split()[0], 16)
    dat = tmp_path / "trace.dat"
    rec = fk.popen(["trace-cmd", "record", "-e", "kmem:kmalloc", "-o", str(dat)],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fk.wait_readers()  # trace-cmd reads every CPU's trace_pipe_raw
    deadline = time.monotonic() + 30
    while (fk.tracing / "tracing_on").read_text() != "1\\n":  # ... and has switched tracing on
        assert time.monotonic() < deadline and rec.poll() is None
        time.sleep(0.01)
    for i in range(3):
        fk.emit("kmem:kmalloc", cpu=1, pid=4242, comm="myapp", call_site=base + 4 * i,
                ptr=0xFFFF888100000000 + 64 * i, bytes_req=8 * (i + 1), bytes_alloc=16 * (i + 1),
                gfp_flags=0xCC0, node=-1)
    rec.send_signal(signal.SIGINT)
    rec.communicate(timeout=60)
    assert rec.returncode == 0
    report = fk.run(["trace-cmd", "report", "-i", str(dat)], capture_output=True, text=True)
    lines = [re.sub(r"\\s+", " ", l).strip() for l in report.stdout.splitlines() if "kmalloc:" in l]
    assert lines == [
        "myapp-4242 [001] 1.000000: kmalloc: (getname_flags+0x0) call_site=getname_flags+0x0 "
        "ptr=0xffff888100000000 bytes_req=8 bytes_alloc=16 gfp_flags=GFP_KERNEL node=-1 "
        "accounted=false",
        "myapp-4242 [001] 1.000001: kmalloc: (getname_flags+0x4) call_site=getname_flags+0x4 "
        "ptr=0xffff888100000040 bytes_req=16 bytes_alloc=32 gfp_flags=GFP_KERNEL node=-1 "
        "accounted=false",
        "myapp-4242 [001] 1.000002: kmalloc: (getname_flags+0x8) call_site=getname_flags+0x8 "
        "ptr=0xffff888100000080 bytes_req=24 bytes_alloc=48 gfp_flags=GFP_KERNEL node=-1 "
        "accounted=false",
    ]
'''
