"""A fork of ``fakedebugfs run``'s command brings the kmallocs its parent
makes in copy_process() (sources/forkallocs.py), as a fork of bash shows
them in the Debian 6.12 guest: the LSM cred and task blobs, and the larger
fd table bash's fd 255 needs, before ``sched_process_fork``; so
ftracetest's trigger-hist.tc finds a kmalloc call site in the hist after
its ten forks whatever the workload did meanwhile."""

from __future__ import annotations

import os
import re
import subprocess
import textwrap

import pytest

from conftest import FAKEDEBUGFS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the runs start as root")

SCRIPT = textwrap.dedent(r"""
    cd /sys/kernel/tracing
    echo 'hist:keys=call_site.sym,common_pid:vals=bytes_req' > events/kmem/kmalloc/trigger
    for i in 1 2 3 4 5 6 7 8 9 10; do ( echo forked > /dev/null ); done
    echo "shell $$"
    cat events/kmem/kmalloc/hist
    echo '!hist:keys=call_site.sym,common_pid:vals=bytes_req' > events/kmem/kmalloc/trigger
    echo 1 > events/kmem/kmalloc/enable
    echo 1 > events/sched/sched_process_fork/enable
    ( : )
    echo 0 > events/kmem/kmalloc/enable
    echo 0 > events/sched/sched_process_fork/enable
    grep -E "bash-$$ .*(lsm_blob_alloc|alloc_fdtable|sched_process_fork)" trace
""")


def test_the_commands_forks_bring_their_kmallocs(tmp_path):
    script = tmp_path / "forks.sh"  # bash reading a file keeps it open as fd 255
    script.write_text(SCRIPT)
    p = subprocess.run([FAKEDEBUGFS, "run", "--profile", "debian-6.12", "--", "bash", str(script)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    shell = re.search(r"^shell (\d+)$", p.stdout, re.M).group(1)
    mine = {}  # the shell's kmallocs by function (a key per call site)
    for m in re.finditer(r"call_site: \[[0-9a-f]+\] (\w+) +, common_pid: +" + shell
                         + r" \} hitcount: +(\d+)", p.stdout):
        mine[m.group(1)] = mine.get(m.group(1), 0) + int(m.group(2))
    # ten forks (and those of the command substitutions, if any): two blobs
    # each, and three parts of a 256-slot fd table
    assert mine.get("lsm_blob_alloc", 0) >= 20, p.stdout
    assert mine.get("alloc_fdtable", 0) >= 30, p.stdout
    # one fork traced: the parent's kmallocs as the guest printed them, then the fork
    lines = [re.sub(r"^.*?: (kmalloc|sched_process_fork): ", r"\1: ", line)
             for line in p.stdout.splitlines() if line.lstrip().startswith(f"bash-{shell} ")]
    lines = [re.sub(r"ptr=[0-9a-f]+", "ptr=P", line) for line in lines]
    child = re.search(r"child_pid=(\d+)", lines[-1]).group(1)
    assert lines == [
        "kmalloc: call_site=lsm_blob_alloc+0x2d/0x50 ptr=P bytes_req=16 bytes_alloc=16 "
        "gfp_flags=GFP_KERNEL_ACCOUNT|__GFP_ZERO node=-1 accounted=true",
        "kmalloc: call_site=lsm_blob_alloc+0x2d/0x50 ptr=P bytes_req=72 bytes_alloc=96 "
        "gfp_flags=GFP_KERNEL|__GFP_ZERO node=-1 accounted=false",
        "kmalloc: call_site=alloc_fdtable+0x55/0x130 ptr=P bytes_req=56 bytes_alloc=64 "
        "gfp_flags=GFP_KERNEL_ACCOUNT node=-1 accounted=true",
        "kmalloc: call_site=alloc_fdtable+0x7e/0x130 ptr=P bytes_req=2048 bytes_alloc=2048 "
        "gfp_flags=GFP_KERNEL_ACCOUNT node=-1 accounted=true",
        "kmalloc: call_site=alloc_fdtable+0xc3/0x130 ptr=P bytes_req=72 bytes_alloc=96 "
        "gfp_flags=GFP_KERNEL_ACCOUNT node=-1 accounted=true",
        f"sched_process_fork: comm=bash pid={shell} child_comm=bash child_pid={child}",
    ], p.stdout
