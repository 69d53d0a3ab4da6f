"""The oracle's boot image: a Debian kernel package's ``vmlinuz`` and an
initramfs of busybox, the 9p modules and :file:`guest_init.sh`.

Which kernel a profile boots is data: the profile's ``oracle`` file names
its Debian package (``package linux-image-6.12.113+deb12-amd64-unsigned``).
The package is fetched with ``apt-get download`` into the cache folder
(``build/oracle/debs`` of the checkout, or ``$FAKEDEBUGFS_ORACLE_CACHE``)
and unpacked there once; the initramfs is ~2.5 MB and made again whenever
its inputs are newer than it.
"""

from __future__ import annotations

import glob
import lzma
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fakedebugfs.engine.ftrace.profile import ProfileError

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parents[1]
# the modules the guest's /init loads, in dependency order (fs/netfs, net/9p, fs/9p)
MODULES = ("netfs", "9pnet", "9pnet_virtio", "9p")
BUSYBOX = "/bin/busybox"


class OracleError(RuntimeError):
    """The oracle cannot be built or booted here; the message names the fix."""


def cache_dir() -> Path:
    env = os.environ.get("FAKEDEBUGFS_ORACLE_CACHE")
    return Path(env) if env else CHECKOUT / "build" / "oracle"


def oracle_spec(profile: Path) -> dict:
    """The profile's ``oracle`` file: ``key value`` lines (``package``,
    ``release``, ``cmdline``)."""
    path = Path(profile) / "oracle"
    if not path.is_file():
        raise ProfileError(f"{profile}: this profile names no kernel to boot (no 'oracle' file)")
    spec = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            spec[key] = value.strip()
    if "package" not in spec:
        raise ProfileError(f"{path}: no 'package' line")
    return spec


@dataclass
class Image:
    """What QEMU boots: the kernel, the initramfs and the kernel's release."""
    kernel: Path
    initrd: Path
    release: str
    cmdline: str


def _deb(package: str, debs: Path) -> Path:
    found = sorted(debs.glob(f"{package}_*.deb"))
    if found:
        return found[-1]
    debs.mkdir(parents=True, exist_ok=True)
    if shutil.which("apt-get") is None:
        raise OracleError(f"{package}: not in {debs} and no apt-get to fetch it "
                          f"(put the .deb there by hand)")
    cmd = ["apt-get", "download", package]
    r = subprocess.run(cmd, cwd=debs, capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
        r = subprocess.run(cmd, cwd=debs, capture_output=True, text=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise OracleError(f"apt-get download {package}: {last}")
    return found[-1]


def _unpack(deb: Path, into: Path) -> Path:
    """``dpkg-deb -x`` once; returns the folder."""
    done = into / ".unpacked"
    if not done.exists():
        shutil.rmtree(into, ignore_errors=True)
        into.mkdir(parents=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True)
        done.touch()
    return into


def build(profile: Path) -> Image:
    """The image of *profile*'s kernel, fetched and built as needed."""
    spec = oracle_spec(profile)
    package = spec["package"]
    root = cache_dir()
    tree = _unpack(_deb(package, root / "debs"), root / "kernels" / package)
    kernels = sorted(glob.glob(str(tree / "boot" / "vmlinuz-*")))
    if not kernels:
        raise OracleError(f"{package}: no /boot/vmlinuz-* in the package")
    kernel = Path(kernels[-1])
    release = kernel.name[len("vmlinuz-"):]
    initrd = root / "kernels" / f"{package}.initrd.gz"
    inputs = [HERE / "guest_init.sh", Path(BUSYBOX), tree / ".unpacked"]
    if not initrd.exists() or any(p.stat().st_mtime > initrd.stat().st_mtime for p in inputs):
        _initramfs(tree / "lib" / "modules" / release, release, initrd)
    cmdline = spec.get("cmdline", "console=ttyS0 nokaslr panic=-1 quiet")
    return Image(kernel, initrd, release, cmdline)


def _initramfs(moddir: Path, release: str, out: Path) -> None:
    if not Path(BUSYBOX).is_file():
        raise OracleError(f"{BUSYBOX}: missing (Debian package busybox-static)")
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "root"
        (stage / "bin").mkdir(parents=True)
        shutil.copy2(BUSYBOX, stage / "bin" / "busybox")
        shutil.copy2(HERE / "guest_init.sh", stage / "init")
        os.chmod(stage / "init", 0o755)
        mods = stage / "lib" / "modules" / release
        mods.mkdir(parents=True)
        for name in MODULES:
            found = list(moddir.rglob(f"{name}.ko*"))
            if not found:
                raise OracleError(f"{moddir}: no module {name}")
            src = found[0]
            data = lzma.decompress(src.read_bytes()) if src.suffix == ".xz" else src.read_bytes()
            (mods / f"{name}.ko").write_bytes(data)
        names = sorted(str(p.relative_to(stage)) for p in stage.rglob("*"))
        listing = "".join(n + "\n" for n in ["."] + names)
        tmp_out = out.with_suffix(".tmp")
        with open(tmp_out, "wb") as fp:
            cpio = subprocess.Popen([BUSYBOX, "cpio", "-o", "-H", "newc", "-R", "0:0"],
                                    cwd=stage, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            gz = subprocess.Popen(["gzip", "-1"], stdin=cpio.stdout, stdout=fp)
            cpio.stdout.close()
            cpio.communicate(listing.encode())
            if gz.wait() != 0 or cpio.returncode != 0:
                raise OracleError("building the initramfs failed (busybox cpio | gzip)")
        os.replace(tmp_out, out)


__all__ = ["Image", "OracleError", "build", "cache_dir", "oracle_spec", "MODULES"]
