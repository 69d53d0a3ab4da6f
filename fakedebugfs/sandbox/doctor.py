"""``fakedebugfs doctor``: what on this machine lets a fake run, for this
user, and what does not, each with the fix.

The basics (a mount, the Python API, the pytest plugin) need the FUSE
device readable and writable, a setuid-root ``fusermount3`` when not
root, and fakedebugfs's patched pyfuse3 (:mod:`fakedebugfs.server.fusecheck`:
the same checks a mount makes); when one fails the command exits 1.  The
rest is reported for what needs it: ``run`` without root needs
unprivileged user namespaces in which mounts are allowed (the sysctls
``kernel.unprivileged_userns_clone``, ``user.max_user_namespaces`` and
AppArmor's ``kernel.apparmor_restrict_unprivileged_userns``, which lets a
process create the namespace but denies it mounts there); mirroring real
events needs ``perf_event_open`` on tracepoints (CAP_PERFMON or
``kernel.perf_event_paranoid`` <= -1); the tests of a tool use trace-cmd.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass

OK, FAIL, WARN, INFO = "ok", "FAIL", "warn", "info"
CAP_PERFMON = 38  # include/uapi/linux/capability.h


@dataclass
class Check:
    """One line of the report: *status* is OK, FAIL, WARN or INFO; a
    *basic* check failing makes the exit status 1."""

    name: str
    status: str
    detail: str
    basic: bool = False

    def line(self) -> str:
        return f"{self.status:<4}  {self.name}: {self.detail}"


def _sysctl(name: str):
    try:
        with open("/proc/sys/" + name.replace(".", "/")) as fp:
            return fp.read().strip()
    except OSError:
        return None


def fuse_device() -> Check:
    from fakedebugfs.server.fusecheck import FUSE_DEVICE, device_problem

    problem = device_problem()
    if problem:
        return Check("FUSE device", FAIL, problem, basic=True)
    mode = stat.S_IMODE(os.stat(FUSE_DEVICE).st_mode)
    return Check("FUSE device", OK, f"{FUSE_DEVICE} (mode {mode:04o}) readable and writable",
                 basic=True)


def fusermount() -> Check:
    from fakedebugfs.server.fusecheck import fusermount as where, fusermount_problem

    problem = fusermount_problem()
    if problem:
        return Check("fusermount3", FAIL, problem, basic=True)
    path = where()
    if os.geteuid() == 0:
        return Check("fusermount3", OK if path else INFO,
                     f"{path or 'not installed'} (root mounts without it)")
    return Check("fusermount3", OK, f"{path} is setuid root (mounts for users)", basic=True)


def fuse_conf() -> Check:
    from fakedebugfs.server.fusecheck import FUSE_CONF, user_allow_other

    if user_allow_other():
        return Check("fuse.conf", INFO, f"{FUSE_CONF} has user_allow_other (not needed)")
    return Check("fuse.conf", OK, f"no user_allow_other in {FUSE_CONF}: a user's fake is "
                                  "mounted without allow_other (only that user uses it)")


def pyfuse3() -> Check:
    from fakedebugfs.server.fusecheck import pyfuse3_problem

    problem = pyfuse3_problem()
    if problem:
        return Check("pyfuse3", FAIL, problem, basic=True)
    import pyfuse3 as mod

    version = getattr(mod, "__version__", "?")
    return Check("pyfuse3", OK, f"{version} with fakedebugfs's patch (ioctl handler)",
                 basic=True)


def user_namespaces() -> Check:
    """Unprivileged user namespaces, and mounts in them (rootless ``run``)."""
    from fakedebugfs.sandbox.userns import forbidding_setting

    setting = forbidding_setting()
    if setting:
        name, _, value = setting.partition(" = ")
        good = "1" if name == "kernel.unprivileged_userns_clone" else \
            "0" if name.startswith("kernel.apparmor") else "15000"
        fix = f"`sudo sysctl -w {name}={good}`"
        if name.startswith("kernel.apparmor"):
            fix += (" (or an AppArmor profile granting `userns,` to this Python, as "
                    "Ubuntu 24.04 ships for other programs in /etc/apparmor.d/)")
        status = INFO if os.geteuid() == 0 else WARN
        return Check("user namespaces", status, f"{setting} forbids them (rootless "
                     f"`fakedebugfs run` needs them): {fix}, or run as root")
    return Check("user namespaces", OK, "unprivileged user namespaces allowed (rootless "
                 "`fakedebugfs run`)" + ("" if os.geteuid() else "; as root, not needed"))


def userns_mount() -> Check:
    """Try it: a user namespace of our own and a tmpfs mounted in it (what
    AppArmor's restriction, a seccomp profile or a container may deny)."""
    if os.geteuid() == 0:
        return Check("mount in a user namespace", INFO, "not tried as root (not needed)")
    unshare = shutil.which("unshare")
    if unshare is None:
        return Check("mount in a user namespace", INFO, "unshare(1) not installed: not tried")
    with tempfile.TemporaryDirectory(prefix="fdfs-doctor-") as tmp:
        p = subprocess.run([unshare, "--user", "--map-root-user", "--mount", "mount", "-t",
                            "tmpfs", "none", tmp], capture_output=True, text=True, timeout=20)
    if p.returncode == 0:
        return Check("mount in a user namespace", OK, "a tmpfs mounted in a user namespace")
    why = (p.stderr.strip().splitlines() or ["failed"])[-1]
    hint = ""
    if _sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1":
        hint = (": AppArmor restricts unprivileged user namespaces: `sudo sysctl -w "
                "kernel.apparmor_restrict_unprivileged_userns=0`")
    return Check("mount in a user namespace", WARN,
                 f"{why}{hint} (rootless `fakedebugfs run` needs it; or run as root)")


def perf_events() -> Check:
    """For mirroring real events (perf_event_open on tracepoints)."""
    paranoid = _sysctl("kernel.perf_event_paranoid")
    cap = _has_capability(CAP_PERFMON)
    if cap or os.geteuid() == 0:
        return Check("perf events", OK, f"CAP_PERFMON held (perf_event_paranoid {paranoid})")
    if paranoid is not None and int(paranoid) <= -1:
        return Check("perf events", OK, f"kernel.perf_event_paranoid = {paranoid}")
    return Check("perf events", INFO,
                 f"kernel.perf_event_paranoid = {paranoid}, no CAP_PERFMON: mirroring real "
                 "tracepoints needs `sudo sysctl -w kernel.perf_event_paranoid=-1` or "
                 "CAP_PERFMON (`sudo setcap cap_perfmon+ep` on the interpreter), or root")


def _has_capability(cap: int) -> bool:
    try:
        with open("/proc/self/status") as fp:
            for line in fp:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> cap & 1)
    except OSError:
        pass
    return False


def trace_cmd() -> Check:
    path = shutil.which("trace-cmd")
    if path is None:
        return Check("trace-cmd", INFO, "not installed (`sudo apt install trace-cmd`): "
                                        "only needed by tests that run it")
    try:
        p = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        out = (p.stdout + p.stderr).strip().splitlines()
        version = next((line.strip() for line in out if "version" in line), "")
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    return Check("trace-cmd", OK, f"{path}" + (f" ({version})" if version else ""))


CHECKS = (fuse_device, fusermount, fuse_conf, pyfuse3, user_namespaces, userns_mount,
          perf_events, trace_cmd)


def run_checks() -> list[Check]:
    out = []
    for check in CHECKS:
        try:
            out.append(check())
        except Exception as err:  # noqa: BLE001 - one check's surprise is its line
            out.append(Check(check.__name__, WARN, f"could not check: {err}"))
    return out


def report(checks: list[Check]) -> tuple[str, int]:
    """The text to print and the exit status (1 when a basic check failed)."""
    who = f"uid {os.geteuid()}" + (" (root)" if os.geteuid() == 0 else "")
    lines = [f"fakedebugfs doctor, as {who}:"] + ["  " + c.line() for c in checks]
    failed = [c for c in checks if c.basic and c.status == FAIL]
    if failed:
        lines.append("the basics fail: no fake can be mounted by this user until "
                     + ", ".join(c.name for c in failed) + " is fixed")
    else:
        lines.append("the basics work: this user can mount a fake (mount, the Python API, "
                     "the pytest plugin)")
    return "\n".join(lines), 1 if failed else 0
