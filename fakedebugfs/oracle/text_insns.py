"""A profile's ``text_insns``: the instruction lengths of its kernel's text
(:mod:`fakedebugfs.engine.core.text_insns` reads them for kprobes'
instruction-boundary check), made from the kernel package the oracle
boots.

    python -m fakedebugfs.oracle.text_insns PROFILE_DIR

The package's ``vmlinuz`` holds the kernel image zstd-compressed (Debian
6.12); the image is an ELF without symbols, so the instructions come from
a linear decode of its ``.text`` (``objdump -d``, binutils; ``zstd``) and
the functions from the profile's ``kallsyms`` (captured in the guest,
booted with ``nokaslr``: its addresses are the image's).  The kernel's
``can_probe`` decodes linearly from a function's start too; a function
whose start the sweep does not land on gets no record (every offset of it
is taken).  Needs: ``zstd`` and ``objdump`` on the host.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fakedebugfs.engine.core.profile_files import read_profile_text, write_profile_file
from fakedebugfs.engine.core.text_insns import INT_INSN, NAME, UD_INSN, pack
from fakedebugfs.oracle.image import OracleError, build

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# is_exception_insn's opcodes, by objdump's mnemonic
FLAGS = {"int3": INT_INSN, "int": INT_INSN, "into": INT_INSN, "int1": INT_INSN,
         "icebp": INT_INSN, "ud0": UD_INSN, "ud1": UD_INSN, "ud2": UD_INSN}


def image_of(vmlinuz: Path, out: Path) -> Path:
    """The ELF image inside a bzImage *vmlinuz* (its zstd payload), written to *out*."""
    data = vmlinuz.read_bytes()
    at = data.find(ZSTD_MAGIC)
    if at < 0:
        raise OracleError(f"{vmlinuz}: no zstd payload")
    if shutil.which("zstd") is None:
        raise OracleError("zstd is needed to unpack the kernel image (Debian package zstd)")
    res = subprocess.run(["zstd", "-dcq"], input=data[at:], capture_output=True)
    if not res.stdout.startswith(b"\x7fELF"):  # (trailing bytes make zstd complain)
        raise OracleError(f"{vmlinuz}: its payload is no ELF image")
    out.write_bytes(res.stdout)
    return out


def decode(image: Path) -> dict:
    """``address -> (length, flag)`` of each instruction of ``.text``."""
    if shutil.which("objdump") is None:
        raise OracleError("objdump is needed to decode the kernel text (Debian package binutils)")
    proc = subprocess.Popen(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", str(image)],
                            stdout=subprocess.PIPE, text=True, errors="replace")
    addrs, names = [], []
    for line in proc.stdout:
        head, sep, rest = line.partition(":\t")
        if not sep or not head.strip().startswith("ffffffff"):
            continue
        addrs.append(int(head, 16))
        names.append(rest.split(None, 1)[0] if rest.strip() else "")
    if proc.wait() != 0:
        raise OracleError(f"objdump -d {image} failed")
    return {a: (b - a, FLAGS.get(n, 0)) for a, b, n in zip(addrs, addrs[1:], names)}


def table(insns: dict, kallsyms: str) -> bytes:
    """The ``text_insns`` file of *insns* over the text symbols of *kallsyms*."""
    starts = sorted({int(f[0], 16) for f in (ln.split() for ln in kallsyms.splitlines())
                     if len(f) == 3 and f[1] in "tT"})  # (a module's have 4 fields)
    records = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else start
        rec, addr = bytearray(), start
        while addr < end and addr in insns:
            length, flag = insns[addr]
            rec.append(length | flag)
            addr += length
        records.append(bytes(rec) if addr == end else b"")
    return pack(starts, records)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fakedebugfs.oracle.text_insns",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", type=Path, help="the profile folder (its oracle and kallsyms)")
    args = ap.parse_args(argv)
    kallsyms = read_profile_text(args.profile, "kallsyms")
    if kallsyms is None:
        print(f"{args.profile}: no kallsyms", file=sys.stderr)
        return 1
    try:
        with tempfile.TemporaryDirectory() as tmp:
            insns = decode(image_of(build(args.profile).kernel, Path(tmp) / "vmlinux"))
    except OracleError as err:
        print(f"text_insns: {err}", file=sys.stderr)
        return 1
    write_profile_file(args.profile, NAME, table(insns, kallsyms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
