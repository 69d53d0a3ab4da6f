"""Running things as a normal user (uid 65534) with Debian's /usr/bin/python3.

The user gets a virtual environment outside the repository whose
``sys.path`` is this test run's (a ``.pth`` adds its site-packages: the
installed fakedebugfs, the patched pyfuse3, trio ...), so nothing under
/root need be readable.  :func:`as_nobody` runs a command as that user in
a private mount namespace where /dev/fuse is a node of our own with the
given mode (0666: usable, 0600: as this machine's; None: the host's
device left alone; "missing": no device at all)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"


def usable() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (to become uid 65534 and make a /dev/fuse node)"
    for tool in ("unshare", "setpriv", "mknod"):
        if not shutil.which(tool):
            return f"needs {tool}(1)"
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"needs {SYSTEM_PYTHON}"
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
    if version != str(tuple(sys.version_info[:2])):
        return f"{SYSTEM_PYTHON} is {version}, the test run's Python {sys.version_info[:2]}"
    return None


class Nobody:
    """A world-readable work folder, with ``venv/`` and a writable ``home/``."""

    def __init__(self):
        self.base = Path(tempfile.mkdtemp(prefix="fdfs-nobody-", dir="/tmp"))
        self.base.chmod(0o755)
        self.venv = self.base / "venv"
        self.home = self.base / "home"
        subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(self.venv)],
                       check=True, timeout=120)
        purelib = Path(sysconfig.get_paths(vars={"base": str(self.venv),
                                                 "platbase": str(self.venv)})["purelib"])
        ours = sysconfig.get_paths()["purelib"]
        (purelib / "fakedebugfs_tests.pth").write_text(
            f"import site; site.addsitedir({ours!r})\n")
        script = self.venv / "bin" / "fakedebugfs"
        script.write_text(f"#!{self.venv}/bin/python\nimport sys\n"
                          "from fakedebugfs.cli import main\nsys.exit(main())\n")
        script.chmod(0o755)
        self.home.mkdir()
        (self.base / "dev").mkdir()
        os.chown(self.home, NOBODY, NOBODY)
        for path in (self.base, self.venv):
            subprocess.run(["chmod", "-R", "a+rX", str(path)], check=True)

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def run(self, argv, fuse_mode: int | str | None = 0o666, env: dict | None = None,
            cwd: str | None = None, timeout: float = 300, setup: str = "",
            ) -> subprocess.CompletedProcess:
        """*argv* as uid 65534 (see the module's docstring for *fuse_mode*);
        *setup*: shell commands run as root in the namespace first."""
        steps = []
        if fuse_mode == "missing":
            steps.append("mount -t tmpfs -o mode=755 none /dev && mknod -m 666 /dev/null c 1 3")
        elif fuse_mode is not None:
            d = self.base / "dev"  # a tmpfs of the namespace's own over it
            steps.append(f'mount -t tmpfs -o dev,mode=755 none {d} && '
                         f'mknod -m {fuse_mode:o} {d}/fuse c 10 229 && '
                         f'mount --bind {d}/fuse /dev/fuse')
        if setup:
            steps.append(setup)
        user_env = {"HOME": str(self.home), "PATH": f"{self.venv}/bin:/usr/bin:/bin",
                    "LANG": "C.UTF-8", **(env or {})}
        env_args = " ".join(shlex.quote(f"{k}={v}") for k, v in user_env.items())
        steps.append(f"cd {shlex.quote(cwd or str(self.home))} && exec setpriv --reuid "
                     f"{NOBODY} --regid {NOBODY} --clear-groups env -i {env_args} "
                     + " ".join(shlex.quote(str(a)) for a in argv))
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               " && ".join(steps)], capture_output=True, text=True,
                              timeout=timeout)

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


def nobody_user():
    """The generator of a test module's ``nobody`` fixture:
    ``nobody = pytest.fixture(scope="module")(nobody_user)``."""
    why = usable()
    if why:
        pytest.skip(f"as a normal user: {why}")
    user = Nobody()
    try:
        yield user
    finally:
        user.close()
