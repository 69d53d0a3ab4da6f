"""The way another project gets fakedebugfs (docs/ci.md): the steps of
docs/github-actions.yml run as written, against a project of the test's
own.  Its "fakedebugfs wheels" step (``make dist``) runs on a read-only
bind mount of this checkout, so nothing may be written into the source
tree; the "venv" and "tests" steps install the two wheels into a fresh
venv of Debian's python3 and run the project's tests with the plugin,
with no gcc on PATH and an empty build cache: the compiled fast paths and
the C helpers come from the wheel.  The patched pyfuse3 has a version of
its own, and a venv without it cannot install fakedebugfs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from support.plugin import USER_TEST

from fakedebugfs.version import PYFUSE3

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / "docs" / "github-actions.yml"
# what must not be on PATH where the wheels are installed and used
# building the wheel compiles every Cython module (minutes on two busy cores)
pytestmark = pytest.mark.timeout(1800)
COMPILERS = re.compile(r"^(gcc|cc|c89|c99|c\+\+|g\+\+|cpp|tcc|clang)(-[\d.]+)?$|-gcc(-[\d.]+)?$")

# the project's own tests: the plugin's fixture with trace-cmd through
# fk.run/popen (the splice preload library), a file read, and what came
# from the wheel
PROJECT_TEST = USER_TEST + '''

def test_read_a_file(fakedebugfs):
    assert (fakedebugfs.tracing / "tracing_on").read_text() == "1\\n"
    assert "kmalloc" in (fakedebugfs.tracing / "available_events").read_text()


def test_installed_parts():
    import pyfuse3

    from fakedebugfs import native, version
    from fakedebugfs.engine.core import rb_fast  # compiled, from the wheel

    assert pyfuse3.__version__ == version.PYFUSE3
    assert native.prebuilt("splice_preload") is not None
    assert native.build("splice_preload") == native.prebuilt("splice_preload")
    assert rb_fast.__file__.endswith(".so")
'''


def steps() -> dict[str, dict]:
    """The workflow's ``run`` steps by name."""
    doc = yaml.safe_load(WORKFLOW.read_text())
    [job] = doc["jobs"].values()
    return {step["name"]: step for step in job["steps"] if "run" in step}


def run_step(name: str, env: dict, cwd: Path, wrap: list[str] = (), timeout: int = 600):
    """One step as GitHub runs it (``bash --noprofile --norc -eo pipefail``),
    with the workflow's env, then the step's, then *env*."""
    doc = yaml.safe_load(WORKFLOW.read_text())
    step = steps()[name]
    full = {**os.environ, **{k: str(v) for k, v in doc.get("env", {}).items()},
            **{k: str(v) for k, v in step.get("env", {}).items()}, **env}
    argv = [*wrap, "bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]]
    return subprocess.run(argv, env=full, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def debian_python() -> str:
    """Debian's /usr/bin/python3 when it is the Python the wheels are for
    (this suite's), else this suite's own interpreter."""
    here = sys.version_info[:2]
    try:
        out = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30).stdout.split()
        if tuple(map(int, out)) == here:
            return "/usr/bin/python3"
    except (OSError, ValueError):
        pass
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def path_without_gcc(tmp: Path) -> str:
    """A PATH with every command of /usr/bin but the C compilers, then
    /usr/sbin; ``python3`` is :func:`debian_python`."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for entry in os.scandir("/usr/bin"):
        if not COMPILERS.search(entry.name):
            (bin_dir / entry.name).symlink_to(entry.path)
    (bin_dir / "python3").unlink(missing_ok=True)
    (bin_dir / "python3").symlink_to(debian_python())
    path = f"{bin_dir}:/usr/sbin"
    assert shutil.which("gcc", path=path) is None and shutil.which("cc", path=path) is None
    assert shutil.which("trace-cmd", path=path)
    return path


@pytest.fixture(scope="session")
def dist(tmp_path_factory) -> Path:
    """The workflow's "fakedebugfs wheels" step (``make dist``) on a
    read-only bind mount of this checkout: both wheels, in a temporary DIST."""
    stale = subprocess.run(["make", "-C", str(REPO), "-q", "build/stamps/package"],
                           capture_output=True, text=True)
    assert stale.returncode == 0, "the patched pyfuse3 or the package is not built (the " \
                                  "read-only checkout cannot): run `make install`"
    tmp = tmp_path_factory.mktemp("dist")
    ro, out = tmp / "checkout", tmp / "dist"
    ro.mkdir()
    wrap = ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"',
            str(REPO), str(ro)]
    # CFLAGS=-O0 (it comes last on gcc's line): the flow is under test here,
    # not the code's speed, and unoptimised C compiles several times faster
    env = {"FAKEDEBUGFS": str(ro), "DIST": str(out), "CFLAGS": "-O0"}
    step = run_step("fakedebugfs wheels", env, tmp, wrap, timeout=1500)
    assert step.returncode == 0, step.stdout[-3000:] + step.stderr[-3000:]
    return out


def test_dist_holds_both_wheels_with_their_compiled_parts(dist):
    [pyfuse3_whl] = dist.glob(f"pyfuse3-{PYFUSE3}-*.whl")
    [fake_whl] = dist.glob("fakedebugfs-*.whl")
    names = zipfile.ZipFile(fake_whl).namelist()
    for pyx in REPO.glob("fakedebugfs/**/*.pyx"):
        module = pyx.relative_to(REPO).with_suffix("").as_posix()
        assert any(n.startswith(module + ".cpython-") and n.endswith(".so") for n in names), module
    assert [n for n in names if re.fullmatch(r"fakedebugfs/native/splice_preload-\w+\.so", n)]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    # what an installed package needs beside its modules: the oracle's init
    # and call-tree recorder, the shipped profiles
    for data in REPO.glob("fakedebugfs/oracle/*.[cs]*"):
        if data.suffix in (".c", ".sh"):
            assert data.relative_to(REPO).as_posix() in names, data
    assert "fakedebugfs/profiles/debian-6.12/available_tracers" in names
    meta = zipfile.ZipFile(fake_whl).read(next(n for n in names if n.endswith("/METADATA")))
    assert f"Requires-Dist: pyfuse3=={PYFUSE3}" in meta.decode()
    assert "Classifier: Framework :: Pytest" in meta.decode()
    assert not [n for n in names if "/tests/" in n or n.startswith("tests/")]


def test_workflow_installs_and_tests_a_project(dist, tmp_path):
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_tool.py").write_text(PROJECT_TEST)
    cache = tmp_path / "cache"
    env = {"DIST": str(dist), "PATH": path_without_gcc(tmp_path), "HOME": str(tmp_path),
           "FAKEDEBUGFS_BUILD": str(cache)}
    venv = run_step("venv", env, project)
    assert venv.returncode == 0, venv.stdout[-3000:] + venv.stderr[-3000:]
    assert venv.stdout.strip().splitlines()[-1] == f"fakedebugfs {version()}"
    tests = run_step("tests", env, project)
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert re.search(r"\b3 passed\b", tests.stdout) and "skipped" not in tests.stdout
    # nothing compiled on the spot: the preload library came from the wheel
    assert not list(cache.rglob("*.so"))


def test_pypi_pyfuse3_cannot_stand_in(dist, tmp_path):
    """Without the patched wheel pip refuses fakedebugfs (no pyfuse3 on an
    index carries the local label)."""
    venv = tmp_path / "venv"
    subprocess.run([debian_python(), "-m", "venv", str(venv)], check=True, timeout=120)
    [fake_whl] = dist.glob("fakedebugfs-*.whl")
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--dry-run", str(fake_whl)],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode != 0
    assert f"pyfuse3=={PYFUSE3}" in pip.stderr, pip.stderr[-2000:]


def version() -> str:
    from fakedebugfs.version import __version__

    return __version__


def test_one_pyfuse3_version_everywhere():
    """The Makefile builds, the startup patch writes in, pyproject requires,
    fakedebugfs checks and this suite's venv has the same version."""
    import pyfuse3
    from importlib.metadata import version as installed

    make = (REPO / "Makefile").read_text()
    base = re.search(r"^PYFUSE3_VER\s*:=\s*(\S+)$", make, re.M)[1]
    label = re.search(r"^PYFUSE3_PATCHED\s*:=\s*\$\(PYFUSE3_VER\)(\S+)$", make, re.M)[1]
    assert base + label == PYFUSE3
    startup = (REPO / "patches" / f"pyfuse3-{base}-startup.patch").read_text()
    assert f"+__version__ = '{PYFUSE3}'" in startup
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"pyfuse3=={PYFUSE3}" in deps
    assert pyfuse3.__version__ == installed("pyfuse3") == PYFUSE3
