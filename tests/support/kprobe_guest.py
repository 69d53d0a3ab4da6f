"""The kprobe tests that play a script recorded in the Debian 6.12 guest
(``fixtures/kprobes/NAME.sh`` beside its ``NAME.debian-6.12.out``) on the
fake under that profile: where they are, the mark that skips them without
the profile's kallsyms, and the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fakedebugfs.engine.core.profile_files import has_profile_file

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "fakedebugfs" / "profiles" / "debian-6.12"
FIXTURES = ROOT / "fixtures" / "kprobes"
needs_kallsyms = pytest.mark.skipif(not has_profile_file(PROFILE, "kallsyms"),
                                    reason="the debian-6.12 profile has no kallsyms")


def run(script: str, profile=PROFILE, options: tuple = ()) -> str:
    """``fakedebugfs run --profile PROFILE OPTIONS --workload none -- bash
    -c SCRIPT``'s output (it must succeed)."""
    out = subprocess.run(
        [sys.executable, "-m", "fakedebugfs", "run", "--profile", str(profile), *options,
         "--workload", "none", "--", "bash", "-c", script],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


__all__ = ["FIXTURES", "PROFILE", "ROOT", "needs_kallsyms", "run"]
