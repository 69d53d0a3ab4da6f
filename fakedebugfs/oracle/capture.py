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

from fakedebugfs.oracle.image import OracleError


def capture(guest, outdir: Path) -> int:
    """Capture the running *guest*'s tracefs into *outdir*; returns the
    number of formats."""
    tmp = guest.work / "capture"
    shutil.rmtree(tmp, ignore_errors=True)
    res = guest.run(f"{shlex.quote(sys.executable)} -m fakedebugfs capture-profile -q "
                    f"--tracefs /sys/kernel/tracing {shlex.quote(str(tmp))}", timeout=1800)
    if res.returncode != 0:
        raise OracleError(f"capture-profile in the guest failed: "
                          f"{res.stderr.decode(errors='replace').strip()[-400:]}")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for f in tmp.iterdir():
        shutil.copyfile(f, outdir / f.name)
    shutil.rmtree(tmp, ignore_errors=True)
    return (outdir / "formats").read_text().count("\n### ") + 1


__all__ = ["capture"]
