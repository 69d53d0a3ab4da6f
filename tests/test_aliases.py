"""Paths earlier READMEs gave users still work after the re-layout:
``from fakedebugfs.replay import open_recording`` and
``python -m fakedebugfs.replay.tracedat FILE``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "replay" / "default-v7-zstd.dat"


def test_open_recording_from_the_old_path():
    from fakedebugfs.replay import open_recording
    from fakedebugfs.sources.replay import open_recording as new

    assert open_recording is new
    rec = open_recording(FIXTURE)
    assert rec.kind == "trace.dat v7" and rec.cpus == 2


def test_the_tracedat_command_from_the_old_path():
    p = subprocess.run([sys.executable, "-m", "fakedebugfs.replay.tracedat", str(FIXTURE)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"{FIXTURE.name}: trace.dat v7, little endian")
