"""``python -m fakedebugfs.oracle``: boot, use and stop the oracle guest.

    start [--profile P]          boot the guest of profile P (default debian-6.12), detached
    --guest NAME                 a separate guest of the same profile (its own top level)
    run [--profile P] CMD        run a shell command as root in it (booting it first if needed)
    capture [--profile P] [DIR]  capture a freshly booted guest's tracefs into a profile folder
    image [--profile P]          fetch the kernel package and build the initramfs
    status / stop [--profile P]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fakedebugfs.engine.ftrace.profile import ProfileError
from fakedebugfs.oracle.capture import capture
from fakedebugfs.oracle.guest import Guest
from fakedebugfs.oracle.image import OracleError

PROFILES = Path(__file__).resolve().parents[1] / "profiles"
DEFAULT = "debian-6.12"


def profile_dir(name: str) -> Path:
    path = Path(name)
    if "/" not in name and (PROFILES / name).is_dir():
        path = PROFILES / name
    if not (path / "oracle").is_file():
        raise ProfileError(f"{name}: not a profile the oracle can boot (no 'oracle' file)")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fakedebugfs.oracle")
    ap.add_argument("--profile", default=DEFAULT, help="profile name or folder (default %(default)s)")
    ap.add_argument("--guest", default="", metavar="NAME",
                    help="a guest of its own for this profile (default: the shared one)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("image")
    sub.add_parser("start")
    sub.add_parser("stop")
    sub.add_parser("status")
    r = sub.add_parser("run")
    r.add_argument("--timeout", type=float, default=600)
    r.add_argument("command", nargs=argparse.REMAINDER)
    c = sub.add_parser("capture")
    c.add_argument("outdir", nargs="?")
    args = ap.parse_args(argv)
    try:
        guest = Guest(profile_dir(args.profile), name=args.guest)
        if args.cmd == "image":
            from fakedebugfs.oracle.image import build

            img = build(guest.profile)
            print(f"{guest.profile.name}: {img.kernel} and {img.initrd}")
        elif args.cmd == "stop":
            guest.stop()
        elif args.cmd == "status":
            print("running" if guest.running() else "stopped", guest.state)
            return 0 if guest.running() else 3
        elif args.cmd == "start":
            guest.start()
            print(f"guest of {guest.profile.name} running ({guest.state})")
        elif args.cmd == "run":
            guest.start()
            res = guest.run(" ".join(args.command), timeout=args.timeout)
            sys.stdout.buffer.write(res.stdout)
            sys.stderr.buffer.write(res.stderr)
            return res.returncode
        elif args.cmd == "capture":
            # a guest of its own, fresh: the shared one's state may have been
            # changed by its users (an option left set is a wrong default)
            own = Guest(guest.profile, name=args.guest or "capture")
            own.stop()
            own.start()
            try:
                n = capture(own, Path(args.outdir or guest.profile))
            finally:
                own.stop()
            print(f"{n} events captured into {args.outdir or guest.profile}")
    except (OracleError, ProfileError, TimeoutError) as e:
        print(f"fakedebugfs oracle: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
