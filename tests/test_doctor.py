"""``fakedebugfs doctor``: as root, and as uid 65534 with a usable FUSE
device, a 0600 one, none, and a fuse.conf with ``user_allow_other`` (each
in a private mount namespace: tests/support/nobody.py)."""

from __future__ import annotations

import pytest

from conftest import run_cli
from support.nobody import NOBODY, nobody_user

nobody = pytest.fixture(scope="module")(nobody_user)
pytestmark = pytest.mark.timeout(300)

NAMES = ["FUSE device", "fusermount3", "fuse.conf", "pyfuse3", "user namespaces",
         "mount in a user namespace", "perf events", "trace-cmd"]


def lines_of(text: str) -> dict:
    """{check name: (status, detail)} of the report."""
    out = {}
    for line in text.splitlines()[1:-1]:
        status, _, rest = line.strip().partition("  ")
        name, _, detail = rest.strip().partition(": ")
        out[name] = (status, detail)
    return out


def test_doctor_as_root():
    p = run_cli("doctor", check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("fakedebugfs doctor, as uid 0 (root):\n")
    checks = lines_of(p.stdout)
    assert list(checks) == NAMES
    assert checks["FUSE device"][0] == "ok" and checks["pyfuse3"][0] == "ok"
    assert checks["mount in a user namespace"] == ("info", "not tried as root (not needed)")
    assert p.stdout.rstrip().endswith("the basics work: this user can mount a fake (mount, "
                                      "the Python API, the pytest plugin)")


def test_doctor_as_a_user(nobody):
    p = nobody.run(["fakedebugfs", "doctor"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith(f"fakedebugfs doctor, as uid {NOBODY}:\n")
    checks = lines_of(p.stdout)
    assert checks["FUSE device"] == ("ok", "/dev/fuse (mode 0666) readable and writable")
    assert checks["fusermount3"] == ("ok", "/usr/bin/fusermount3 is setuid root (mounts for "
                                           "users)")
    assert checks["fuse.conf"][0] == "ok"
    assert checks["perf events"][0] in ("ok", "info")


def test_doctor_as_a_user_where_fuse_is_forbidden(nobody):
    """The basics fail: exit status 1, the cause and the fix."""
    p = nobody.run(["fakedebugfs", "doctor"], fuse_mode=0o600)
    assert p.returncode == 1, p.stdout + p.stderr
    assert lines_of(p.stdout)["FUSE device"] == (
        "FAIL", f"/dev/fuse is mode 0600, not readable and writable by uid {NOBODY}: "
                "`sudo chmod 0666 /dev/fuse` (the mode most distributions give it), or run "
                "as root")
    assert p.stdout.rstrip().endswith("until FUSE device is fixed")
    p = nobody.run(["fakedebugfs", "doctor"], fuse_mode="missing")
    assert p.returncode == 1
    assert lines_of(p.stdout)["FUSE device"][1].startswith("/dev/fuse is missing: load the "
                                                           "module (`sudo modprobe fuse`)")


def test_doctor_reads_fuse_conf(nobody):
    conf = nobody.base / "fuse.conf"
    conf.write_text("# mine\nuser_allow_other\n")
    conf.chmod(0o644)
    p = nobody.run(["fakedebugfs", "doctor"], setup=f"mount --bind {conf} /etc/fuse.conf")
    assert p.returncode == 0, p.stdout + p.stderr
    assert lines_of(p.stdout)["fuse.conf"] == ("info", "/etc/fuse.conf has user_allow_other "
                                                       "(not needed)")
