"""A user's project: a fresh virtual environment outside this repository,
fakedebugfs installed into it from the checkout (with the patched pyfuse3
wheel ``make install`` keeps in build/wheels), and the user's own test file
using the plugin's fixture, run with ``pytest -p no:cacheprovider``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.plugin import USER_TEST

from fakedebugfs.version import PYFUSE3

REPO = Path(__file__).resolve().parent.parent
WHEELS = REPO / "build" / "wheels"


def test_user_project_in_a_fresh_venv(tmp_path):
    assert list(WHEELS.glob(f"pyfuse3-{PYFUSE3}-*.whl")), \
        f"no pyfuse3 {PYFUSE3} wheel in build/wheels: run make install"
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--find-links", str(WHEELS),
                          "pytest", str(REPO)], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_allocations.py").write_text(USER_TEST)
    run = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider",
                          "-q", "test_allocations.py"], cwd=project, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout
    assert not (project / ".pytest_cache").exists()
