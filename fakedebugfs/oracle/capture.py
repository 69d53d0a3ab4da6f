"""``capture-profile`` in the guest: the profile of the guest's kernel.

The host's own ``fakedebugfs capture-profile`` runs inside the guest (the
host's root is shared with it), reads the guest's tracefs and writes into
the shared work folder; the files are then copied into the profile folder,
whose ``oracle`` file (which kernel to boot) is kept.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

from fakedebugfs.engine.core.profile_files import SUFFIX, read_profile_file, write_profile_file
from fakedebugfs.oracle.image import MODULES, OracleError

# lists that name modules' symbols (``sym\t[module]``): the modules the
# oracle itself loads (9p, to share the host's files) are left out, so the
# profile is the kernel's own and the same at every capture (a module's
# addresses change from boot to boot)
# files of the guest's kernel outside tracefs that the profile keeps: the
# kprobe blacklist (debugfs; its addresses are fixed: the guest boots with
# nokaslr) and the kernel's BTF (for probes' BTF arguments); ``syscalls``
# (the names the kernel gives syscall numbers) is made by syscall_table.py,
# ``pci_devices`` (the machine's, as mmiotrace lists them) by pci_devices.py
GUEST_FILES = {"kprobes_blacklist": "/sys/kernel/debug/kprobes/blacklist",
               "btf": "/sys/kernel/btf/vmlinux"}
INSTANCE = "/sys/kernel/tracing/instances/fakedebugfs_capture"
# ``<mode> <d|f> <path>`` of an instance's files and options/, as ``modes``
_INSTANCE_MODES = """
import os, stat, sys
root = sys.argv[1]
for rel in ("", "options"):
    for name in sorted(os.listdir(os.path.join(root, rel))):
        child = f"{rel}/{name}" if rel else name
        st = os.lstat(os.path.join(root, child))
        kind = "d" if stat.S_ISDIR(st.st_mode) else "f"
        print(f"{stat.S_IMODE(st.st_mode):04o} {kind} {child}")
"""
SYMBOL_LISTS = ("kallsyms", "available_filter_functions", "available_filter_functions_addrs")
_OWN = tuple(f"[{m}]" for m in MODULES)


def _without_oracle_modules(lines):
    return [ln for ln in lines if not ln.rstrip().endswith(_OWN)]


def capture(guest, outdir: Path) -> int:
    """Capture the running *guest*'s tracefs into *outdir*; returns the
    number of formats."""
    tmp = guest.work / "capture"
    shutil.rmtree(tmp, ignore_errors=True)
    extra = "".join(f" && cp {src} {shlex.quote(str(tmp / name))}"
                    for name, src in GUEST_FILES.items())
    # an instance's files (the guest is the oracle's own: an instance may be
    # made there, which capture-profile never does on a user's machine),
    # then what its output shows after writes: the preemption model its
    # latency header names, a marker entry's ip
    learnt = "".join(f" && {shlex.quote(sys.executable)} -m fakedebugfs.oracle.{name} {INSTANCE} "
                     f"{shlex.quote(str(tmp / name))}" for name in ("preempt_model", "marker_ip"))
    extra += (f" && mkdir {INSTANCE} && {shlex.quote(sys.executable)} -c "
              f"{shlex.quote(_INSTANCE_MODES)} {INSTANCE} > {shlex.quote(str(tmp / 'instance_modes'))}"
              f"{learnt}; rc=$?; rmdir {INSTANCE}; [ $rc = 0 ]")
    extra += (f" && {shlex.quote(sys.executable)} -m fakedebugfs.oracle.syscall_table "
              f"/sys/kernel/tracing {shlex.quote(str(tmp / 'syscalls'))}")
    extra += (f" && {shlex.quote(sys.executable)} -m fakedebugfs.oracle.pci_devices "
              f"/sys/bus/pci/devices {shlex.quote(str(tmp / 'pci_devices'))}")
    res = guest.run(f"{shlex.quote(sys.executable)} -m fakedebugfs capture-profile -q "
                    f"--tracefs /sys/kernel/tracing {shlex.quote(str(tmp))}{extra}", timeout=1800)
    if res.returncode != 0:
        raise OracleError(f"capture-profile in the guest failed: "
                          f"{res.stderr.decode(errors='replace').strip()[-400:]}")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for f in tmp.iterdir():
        name = f.name.removesuffix(SUFFIX)  # capture-profile's NAME.xz
        data = read_profile_file(f)
        if name in SYMBOL_LISTS + ("kprobes_blacklist",):
            text = data.decode("utf-8", errors="surrogateescape")
            data = "".join(_without_oracle_modules(text.splitlines(True)))
        write_profile_file(outdir, name, data)
    shutil.rmtree(tmp, ignore_errors=True)
    return (outdir / "formats").read_text().count("\n### ") + 1


__all__ = ["capture"]
