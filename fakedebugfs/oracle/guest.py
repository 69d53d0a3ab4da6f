"""A booted oracle guest: QEMU (TCG, one thread) running a profile's
Debian kernel, and the agent that runs shell commands in it.

One guest per profile at a time, found by its state folder
(``build/oracle/run/<profile>``): ``qemu.pid``, the console log and the
work folder shared with the guest, where requests go in and answers come
out (guest_init.sh).  Whoever finds it running uses it (the suite, a
developer's shell, several callers at once: requests run side by side).  :meth:`Guest.start` boots it detached, so it outlives the command
that booted it until :meth:`Guest.stop`; the pytest fixture stops only a
guest it booted itself.

Why TCG with one thread: /dev/kvm exists on the machines this was built
on but guests die on it, and multi-threaded TCG once oopsed in a long run
(an ``int3`` while the kernel patched its own text).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from fakedebugfs.oracle.image import CHECKOUT, Image, OracleError, build, cache_dir

QEMU = "qemu-system-x86_64"
MEMORY_MB = 2048
CPUS = 4
BOOT_TIMEOUT = 300.0
_ids = itertools.count()


@dataclass
class Result:
    """A command's end in the guest, as :class:`subprocess.CompletedProcess` has it."""
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")


def why_not() -> Optional[str]:
    """Why no oracle can boot here (None: it can), with the fix."""
    if shutil.which(QEMU) is None:
        return f"{QEMU} is not installed (apt-get install --no-install-recommends qemu-system-x86)"
    if not Path("/bin/busybox").is_file():
        return "/bin/busybox is missing (apt-get install busybox-static)"
    if shutil.which("dpkg-deb") is None:
        return "dpkg-deb is missing (the oracle unpacks Debian's kernel package)"
    return None


class Guest:
    """The guest of one profile (a profile folder with an ``oracle`` file)."""

    def __init__(self, profile, cpus: int = CPUS, memory_mb: int = MEMORY_MB,
                 name: str = ""):
        self.profile = Path(profile).resolve()
        # a second guest of the same profile (a suite that changes the top
        # level, run beside others' use of the shared one) has a name
        self.state = cache_dir() / "run" / (self.profile.name + (f"-{name}" if name else ""))
        self.work = self.state / "work"
        self.console = self.state / "console.log"
        self.pidfile = self.state / "qemu.pid"
        self.ready = self.state / "ready"  # made once the agent answered
        self.cpus, self.memory_mb = cpus, memory_mb
        self.boot_seconds: Optional[float] = None

    # --- life ------------------------------------------------------------

    def pid(self) -> Optional[int]:
        try:
            pid = int(self.pidfile.read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        try:  # a recycled pid is not ours
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return pid if QEMU.encode() in cmd and str(self.work).encode() in cmd else None

    def running(self) -> bool:
        return self.pid() is not None

    def start(self, timeout: float = BOOT_TIMEOUT) -> "Guest":
        """Boot the guest (if it is not running) and wait for its agent;
        callers racing to boot it wait for the first one's boot."""
        if self.running() and self.ready.exists():
            return self
        self.state.mkdir(parents=True, exist_ok=True)
        with open(self.state / "start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self.running():
                self._boot(timeout)
        return self

    def _boot(self, timeout: float) -> None:
        cause = why_not()
        if cause:
            raise OracleError(cause)
        image = build(self.profile)
        (self.work / "req").mkdir(parents=True, exist_ok=True)
        for stale in (self.pidfile, self.ready, self.console):
            stale.unlink(missing_ok=True)
        began = time.monotonic()
        with open(self.state / "qemu.log", "wb") as log:
            proc = subprocess.Popen(self._argv(image), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.pidfile.write_text(f"{proc.pid}\n")
        try:
            self._wait_ready(proc, began + timeout)
        except BaseException:
            self.stop()
            raise
        self.boot_seconds = time.monotonic() - began
        (self.state / "boot_seconds").write_text(f"{self.boot_seconds:.1f}\n")
        self.ready.touch()

    def _argv(self, image: Image) -> list:
        return [QEMU, "-accel", "tcg,thread=single", "-cpu", "max",
                "-m", str(self.memory_mb), "-smp", str(self.cpus),
                "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
                "-kernel", str(image.kernel), "-initrd", str(image.initrd),
                "-append", f"{image.cmdline} oracle.work={self.work}{self._shown()}",
                "-serial", f"file:{self.console}",
                "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,"
                           "readonly=on,multidevs=remap",
                "-virtfs", f"local,path={self.work},mount_tag=work,security_model=none"]

    @staticmethod
    def _shown() -> str:
        """``oracle.show=``: the folders the guest must see from the host
        under /tmp and /run, where it lays its own tmpfs: this checkout
        (its tests and helpers run from it) and the Python running it."""
        wanted = {CHECKOUT, Path(sys.prefix).resolve(), Path(sys.executable).resolve().parent}
        dirs = sorted(str(p) for p in wanted
                      if p.parts[:2] in (("/", "tmp"), ("/", "run")) and len(p.parts) > 2)
        return f" oracle.show={','.join(dirs)}" if dirs else ""

    def _wait_ready(self, proc, deadline: float) -> None:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise OracleError(f"the guest's QEMU ended ({proc.returncode}): "
                                  f"{self._tail(self.state / 'qemu.log') or self._tail(self.console)}")
            if b"oracle: ready" in self._read(self.console):
                r = self.run("true", timeout=max(5.0, deadline - time.monotonic()))
                if r.returncode == 0:
                    return
            bad = self._read(self.console)
            for marker in (b"oracle: cannot", b"Kernel panic"):
                if marker in bad:
                    raise OracleError(f"the guest did not start: {self._tail(self.console)}")
            time.sleep(0.5)
        raise OracleError(f"the guest did not answer within {deadline:.0f} s of boot: "
                          f"{self._tail(self.console)}")

    def stop(self) -> None:
        """Power the guest off (SIGTERM to QEMU, then SIGKILL)."""
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            for _ in range(50):
                try:
                    os.kill(pid, 0)
                except OSError:
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)
        for stale in (self.pidfile, self.ready):
            stale.unlink(missing_ok=True)

    # --- the agent --------------------------------------------------------

    def run(self, script: str, timeout: float = 600.0, check: bool = False) -> Result:
        """Run *script* with bash as root in the guest (cwd /tmp, the host's
        programs), within *timeout* seconds (the guest ends it then)."""
        if not self.running():
            raise OracleError(f"no guest running for {self.profile.name} "
                              f"(python -m fakedebugfs.oracle start {self.profile.name})")
        rid = f"r{os.getpid()}_{next(_ids)}_{time.monotonic_ns() % 10**9}"
        req = self.work / "req"
        (req / f"{rid}.cmd").write_text(script)
        (req / f"{rid}.tmp").write_text(
            f"exec timeout -k 5 {int(timeout)} /bin/bash {req}/{rid}.cmd\n")
        os.rename(req / f"{rid}.tmp", req / f"{rid}.sh")  # the guest takes it whole
        try:
            status = self._wait_rc(req / f"{rid}.rc", timeout + 30)
            out = (req / f"{rid}.out").read_bytes()
            err = (req / f"{rid}.err").read_bytes()
        finally:
            for ext in ("cmd", "sh", "run", "out", "err", "rc"):
                (req / f"{rid}.{ext}").unlink(missing_ok=True)
        result = Result(status, out, err)
        if check and status != 0:
            raise OracleError(f"guest: {script.strip()[:80]!r} exited {status}: "
                              f"{err.decode(errors='replace').strip()[-300:]}")
        return result

    def _wait_rc(self, rc: Path, timeout: float) -> int:
        """The request's exit status, once the guest wrote it (polled: the
        work folder is the guest's 9p share)."""
        deadline = time.monotonic() + timeout
        pause = 0.005
        while True:
            try:
                return int(rc.read_text())
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the guest did not end {rc.stem} in {timeout:.0f} s")
            if not self.running():
                raise OracleError(f"the guest died: {self._tail(self.console)}")
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    @staticmethod
    def _read(path: Path) -> bytes:
        try:
            return path.read_bytes()
        except OSError:
            return b""

    def _tail(self, path: Path) -> str:
        lines = self._read(path).decode(errors="replace").strip().splitlines()
        return " | ".join(lines[-6:])


__all__ = ["Guest", "Result", "why_not", "QEMU"]
