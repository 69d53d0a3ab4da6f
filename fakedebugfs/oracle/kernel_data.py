"""``python -m fakedebugfs.oracle.kernel_data [--profile DIR] [--guest NAME]``:
record what a profile knows of its kernel's data, in its oracle guest:

* ``kernel_data``: the bytes of a few constant strings of the kernel's
  data (:data:`SYMBOLS`: the banners ``/proc/version`` is printed from),
  one ``SYMBOL HEX`` a line, up to and with the string's NUL.  The fake
  reads them at ``@SYM`` fetches of kernel probes
  (:mod:`fakedebugfs.engine.ftrace.kernel_data`); other data symbols are
  listed in ``kallsyms`` but their bytes are unknown.  The guest shows
  them with a kprobe on ``kernel_clone`` fetching ``@SYM+N:x8[64]`` in
  64-byte pieces, hit by a fork;
* ``proc_version``: the guest's ``/proc/version``, which ``fakedebugfs
  run`` shows its command for the profile (``linux_proc_banner`` printed
  with the kernel's ``utsname``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from fakedebugfs.engine.ftrace.profile import DEFAULT_PROFILE

NAME = "kernel_data"
SYMBOLS = ("linux_proc_banner", "linux_banner")
PIECES = 4  # 64 bytes each: the longest string read is 256 bytes
PROBE = "kernel_data_rec"
_ARGS = " ".join(f"{s}_{i}=@{s}+{64 * i}:x8[64]" for s in SYMBOLS for i in range(PIECES))
SCRIPT = f"""\
set -e
cd /sys/kernel/tracing
mkdir instances/{PROBE}
echo 'p:{PROBE} kernel_clone {_ARGS}' >> dynamic_events
echo 1 > instances/{PROBE}/events/kprobes/{PROBE}/enable
/bin/true
echo 0 > instances/{PROBE}/events/kprobes/{PROBE}/enable
grep -a -m1 ': {PROBE}: ' instances/{PROBE}/trace
rmdir instances/{PROBE}
echo '-:kprobes/{PROBE}' >> dynamic_events
cat /proc/version
"""
_ARG = re.compile(r" (\w+)_(\d+)=\{([0-9a-fx,]*)\}")


def parse(hit: str) -> dict[str, bytes]:
    """Each symbol's string (with its NUL) from the probe's hit line."""
    pieces: dict = {}
    for m in _ARG.finditer(hit):
        pieces.setdefault(m[1], {})[int(m[2])] = bytes(int(b, 16) for b in m[3].split(","))
    out = {}
    for sym in SYMBOLS:
        raw = b"".join(pieces[sym][i] for i in range(PIECES))
        end = raw.find(b"\0")
        if end < 0:
            raise ValueError(f"{sym}: no NUL in its first {len(raw)} bytes")
        out[sym] = raw[:end + 1]
    return out


def record(profile: Path, guest_name: str) -> tuple[dict, str]:
    from fakedebugfs.oracle.guest import Guest

    guest = Guest(profile, name=guest_name)
    guest.start()
    lines = guest.run(SCRIPT, timeout=600, check=True).text.splitlines(True)
    return parse(lines[0]), "".join(lines[1:])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fakedebugfs.oracle.kernel_data",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    p.add_argument("--guest", default=NAME, help="the guest's name (its own state)")
    args = p.parse_args(argv)
    data, version = record(args.profile, args.guest)
    (args.profile / NAME).write_text("".join(f"{s} {b.hex()}\n" for s, b in data.items()))
    (args.profile / "proc_version").write_text(version)
    print(f"{args.profile}: {', '.join(data)}; proc_version {version.strip()!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
