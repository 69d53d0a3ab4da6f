"""``fakedebugfs doctor``: as root, and as uid 65534 with a usable FUSE
device, a 0600 one, none, and a fuse.conf with ``user_allow_other`` (each
in a private mount namespace: tests/support/nobody.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from support.nobody import NOBODY, nobody_user

from fakedebugfs.server.fusefix import in_container

nobody = pytest.fixture(scope="module")(nobody_user)
pytestmark = pytest.mark.timeout(300)

NAMES = ["FUSE device", "fusermount3", "fuse.conf", "pyfuse3", "user namespaces",
         "mount in a user namespace", "perf events", "trace-cmd"]


def lines_of(text: str) -> dict:
    """{check name: (status, detail)} of the report."""
    out = {}
    for line in text.splitlines()[1:-1]:
        if line.startswith("   "):  # a check's own lines below it (the FUSE device's fixes)
            continue
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
    status, detail = lines_of(p.stdout)["FUSE device"]
    assert status == "FAIL" and detail.startswith(
        f"/dev/fuse is mode 0600, not readable and writable by uid {NOBODY}: ")
    assert detail.endswith("; other fixes: `fakedebugfs doctor`), or run as root")
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


FIXES = ["container", "fuse group", "ACL", "udev rule", "chmod"]


def fixes_of(text: str) -> tuple[list[tuple[str, str, str, str]], str]:
    """The FUSE device's fixes in the report: (marker, name, commands and
    scope, why not here), and the "this machine" line."""
    rows = re.findall(r"^ +(->|  ) \d\. ([\w ]+): (.*?)(?: \[not here: (.*)\])?$", text, re.M)
    machine = re.search(r"^ +this machine: (.*)$", text, re.M)
    return rows, machine.group(1) if machine else ""


@pytest.mark.parametrize("fuse_group", [False, True])
def test_doctor_offers_the_least_invasive_fixes_in_order(nobody, fuse_group):
    """A 0600 /dev/fuse: five fixes, least invasive first, with their exact
    commands for this user; the one picked is the first this machine can
    take (a container's own /dev; else the distribution's fuse group when
    /etc/group has one and the device is its; ...; chmod 0666 last), and
    the FUSE device line names it."""
    setup = ""
    if fuse_group:  # the distribution's fuse group, the device already its (0600 still)
        group = nobody.base / "group"
        group.write_text(Path("/etc/group").read_text() + "fuse:x:4321:\n")
        group.chmod(0o644)
        setup = f"mount --bind {group} /etc/group && chgrp 4321 /dev/fuse"
    p = nobody.run(["fakedebugfs", "doctor"], fuse_mode=0o600, setup=setup)
    assert p.returncode == 1, p.stdout + p.stderr
    rows, machine = fixes_of(p.stdout)
    assert [name for _, name, _, _ in rows] == FIXES, p.stdout
    text = {name: what for _, name, what, _ in rows}
    assert text["ACL"].startswith("`sudo setfacl -m u:nobody:rw /dev/fuse`: this user only")
    assert "echo 'KERNEL==\"fuse\", GROUP=\"fuse\", MODE=\"0660\"' | sudo tee " \
           "/etc/udev/rules.d/60-fuse-group.rules && sudo udevadm trigger" in text["udev rule"]
    assert text["chmod"].startswith("`sudo chmod 0666 /dev/fuse`: every user of the machine")
    if fuse_group:
        assert text["fuse group"].startswith("`sudo usermod -aG fuse nobody`, then log in again")
    else:
        assert text["fuse group"].startswith("`sudo chgrp fuse /dev/fuse && sudo chmod 0660 "
                                             "/dev/fuse && sudo usermod -aG fuse nobody`")
    not_here = {name: why for _, name, _, why in rows}
    assert bool(not_here["fuse group"]) == (not fuse_group)
    assert not_here["container"] == ("" if in_container() else "not in a container")
    assert not_here["ACL"] == ("" if shutil.which("setfacl") else
                               "no setfacl (`sudo apt install acl` first)")
    assert not_here["chmod"] == ""
    picked = [name for mark, name, _, _ in rows if mark == "->"]
    first = next(name for name in FIXES if not not_here[name])
    assert picked == [first] and machine == f"{FIXES.index(first) + 1} ({first}); or run as root"
    line = lines_of(p.stdout)["FUSE device"][1]
    assert text[first].split("`")[1] in line, line
