"""``buffer_percent`` and a waiter on ``trace_pipe_raw``, as libtracefs
waits (``tracefs_cpu_read_buf``: select(), then one read of a page; its
utest "trace cpu read_buf_percent").  The kernel's poll says readable once
the CPU's buffer is ``buffer_percent`` full (``rb_watermark_hit``: with 0,
any entry), not when a first page is complete.

Each row is run by a C program (tests/c/percent_waiter.c) in a scratch
instance of a fakedebugfs mount, and of the real tracefs when there is one.
Its trace_marker entries ("hello") take 28 bytes: 145 to a 4 KiB page; an
instance's buffer has 354 pages (buffer_size_kb 1410), so 1% is hit with
three pages complete and one being written.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from support import realtracefs

# (buffer_percent, markers written, woken by them)
ROWS = [
    (0, 1, True),  # any entry wakes it
    (1, 300, False),  # two pages complete: under 1%
    (1, 2000, True),  # thirteen
    (50, 2000, False),  # thirteen pages of 354
]


def _run(prog, tracing, percent: int, markers: int) -> str:
    out = subprocess.run([str(prog), str(tracing), str(percent), str(markers)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _expected(woken: bool) -> str:
    return f"before=0 after={int(woken)} read={4096 if woken else -1}"


@pytest.mark.parametrize("percent,markers,woken", ROWS)
def test_trace_pipe_raw_waiter_wakes_at_buffer_percent(fake, cc, percent, markers, woken):
    prog = cc("percent_waiter.c", flags=("-pthread",))
    tracing = fake("--workload", "none") / "tracing"
    inst = tracing / "instances" / "percent"
    os.mkdir(inst)
    assert _run(prog, inst, percent, markers) == _expected(woken)


@pytest.mark.skipif(not realtracefs.available(), reason="needs root and a kernel with tracefs")
def test_the_kernel_wakes_the_same_waiters(cc):
    """The rows above, on the real tracefs (a scratch instance)."""
    prog = cc("percent_waiter.c", flags=("-pthread",))
    name = f"fakedebugfs-percent-{os.getpid()}"
    script = (f'd={realtracefs.POINT}/instances/{name}; mkdir $d || exit 3; '
              + "; ".join(f"{prog} $d {p} {m}" for p, m, _ in ROWS)
              + "; rmdir $d")
    out = realtracefs.shell(script, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:len(ROWS)] == [_expected(w) for _, _, w in ROWS]
