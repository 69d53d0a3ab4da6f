"""Where a suite runs: the oracle guest or a fake.

Both run a bash script as root and leave its files in a folder both the
host and the script can write: the guest's work folder (the same path on
both sides), or build/conformance/logs for the fake.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from fakedebugfs.oracle.__main__ import profile_dir
from fakedebugfs.oracle.guest import Guest

from . import BUILD, CPUS, GUEST_NAME, PROFILE

FAKEDEBUGFS = str(Path(sys.executable).parent / "fakedebugfs")


class Side:
    """A place to run a suite: :meth:`run` a bash script there."""
    name: str

    def logs(self, suite: str) -> Path:
        """An empty folder the script writes its logs to (readable on the host)."""
        raise NotImplementedError

    def run(self, script: str, timeout: float, options: tuple = ()) -> tuple[int, str]:
        """*options*: the suite's own options of ``fakedebugfs run`` (a fake's side)."""
        raise NotImplementedError

    def release(self) -> str:
        """The kernel release this side is (or pretends to be)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class GuestSide(Side):
    """The profile's Debian kernel under QEMU: a guest of its own (named
    ``conf``), booted if it is not running and stopped at the end if booted here."""

    def __init__(self, profile: str = PROFILE):
        self.name = "guest"
        self.guest = Guest(profile_dir(profile), cpus=CPUS, name=GUEST_NAME)
        self.booted = False

    def _up(self) -> Guest:
        if not self.guest.running():
            self.booted = True
        self.guest.start()
        return self.guest

    def logs(self, suite: str) -> Path:
        path = self.guest.work / "conformance" / suite
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def run(self, script: str, timeout: float, options: tuple = ()) -> tuple[int, str]:
        res = self._up().run(script, timeout=timeout)
        return res.returncode, (res.stdout + res.stderr).decode(errors="replace")

    def release(self) -> str:
        return self._up().run("uname -r", timeout=60).text.strip()

    def close(self) -> None:
        if self.booted:
            self.guest.stop()


class FakeSide(Side):
    """``fakedebugfs run --profile P --cpus 4 [OPTIONS] -- bash -c SCRIPT`` on this host.

    ftracetest writes /proc/sys/kernel/sched_rt_runtime_us (it sets -1 for
    its run and puts the value back); the fake's namespace does not cover
    /proc/sys, so this is the host's value: it is put back here too if a
    run is cut short."""

    def __init__(self, profile: str):
        self.name = profile
        self.profile = profile

    def logs(self, suite: str) -> Path:
        path = BUILD / "logs" / self.name / suite
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def run(self, script: str, timeout: float, options: tuple = ()) -> tuple[int, str]:
        rt = Path("/proc/sys/kernel/sched_rt_runtime_us")
        saved = rt.read_text() if rt.exists() else None
        argv = [FAKEDEBUGFS, "run", "--profile", self.profile, "--cpus", str(CPUS),
                *options, "--", "bash", "-c", script]
        try:
            r = subprocess.run(argv, capture_output=True, timeout=timeout)
            return r.returncode, (r.stdout + r.stderr).decode(errors="replace")
        except subprocess.TimeoutExpired as e:
            return 124, ((e.stdout or b"") + (e.stderr or b"")).decode(errors="replace")
        finally:
            if saved is not None and rt.read_text() != saved:
                rt.write_text(saved)

    def release(self) -> str:
        """The profile's ``uname`` (what the fake says it is)."""
        from fakedebugfs.oracle.__main__ import PROFILES
        path = PROFILES / self.profile / "uname"
        return path.read_text().split()[0] if path.is_file() else self.profile


def side(name: str) -> Side:
    return GuestSide() if name == "guest" else FakeSide(name)


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
