"""``tracing_on`` turned back on with the function tracer empties the
buffers (``function_trace_start`` -> ``tracing_reset_online_cpus``);
with another tracer (nop) what was recorded stays.  The same script on
the Debian 6.12 guest and under ``fakedebugfs run --profile debian-6.12``.
"""

from __future__ import annotations

import subprocess

from conftest import FAKEDEBUGFS

SCRIPT = ("cd /sys/kernel/tracing && for t in function nop; do "
          "echo $t > current_tracer && echo 1 > tracing_on && echo before-$t > trace_marker && "
          "echo 0 > tracing_on && a=$(grep -c before-$t trace); "
          "echo 1 > tracing_on && echo 0 > tracing_on && b=$(grep -c before-$t trace); "
          "echo \"$t $a $b\"; echo nop > current_tracer; echo 1 > tracing_on; done")


def test_tracing_on_resets_the_function_tracers_buffers(oracle):
    real = oracle.run(SCRIPT, timeout=300)
    assert real.returncode == 0, real.stderr.decode(errors="replace")[-2000:]
    fake = subprocess.run([FAKEDEBUGFS, "run", "--profile", "debian-6.12", "--", "sh", "-c",
                           SCRIPT], capture_output=True, text=True, timeout=300)
    assert fake.returncode == 0, fake.stderr[-2000:]
    assert real.text == "function 1 0\nnop 1 1\n"
    assert fake.stdout == real.text
