"""``python -m bench.conformance``: fetch and build the suites, run them in
the oracle guest and under the fake, and write docs/conformance.md.

    python -m bench.conformance                      everything (hours: the guest is emulated)
    python -m bench.conformance --side debian-6.12   the fake's column again, the guest's kept
    python -m bench.conformance --suite ftracetest   one suite
    python -m bench.conformance --report-only        the document from the saved results
    python -m bench.conformance --reparse            read the kept logs again, run nothing
    python -m bench.conformance --suite ftracetest --only 'trigger/*'   some tests again

Where git.kernel.org cannot be reached, ``--git-from DIR`` clones
libtraceevent, libtracefs and trace-cmd from ``DIR/<name>`` instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fakedebugfs.oracle.__main__ import profile_dir

from . import BUILD, LIBTRACEEVENT, LIBTRACEFS, PROFILE, SIDES, SUITES
from . import report, runs, sources
from .sides import side as make_side, stamp


def _logs_of(side, suite: str) -> Path:
    if side.name == "guest":
        return side.guest.work / "conformance" / suite
    return BUILD / "logs" / side.name / suite


def _one(suite, side, git_from, reparse: bool, only: str | None) -> dict:
    if suite.kind == "ftracetest":
        ftrace = sources.ftracetest_dir(profile_dir(PROFILE))
        if reparse:
            return runs.parse_ftracetest(_logs_of(side, suite.name), ftrace / "test.d")
        return runs.run_ftracetest(side, ftrace, suite, only)
    binary = sources.utest(suite, git_from)
    if reparse:
        logs = _logs_of(side, suite.name)
        return runs.parse_cunit(logs / "stdout", runs._declared(binary)), {}
    return runs.run_cunit(side, binary, sources.library_path(), suite)


def _version(suite) -> str:
    if suite.git:
        deps = [g.tag for g in (LIBTRACEFS, LIBTRACEEVENT) if g != suite.git]
        return f"{suite.git.tag} ({suite.git.commit[:12]}), with {' and '.join(deps)}"
    source, version = sources.kernel_source_version(profile_dir(PROFILE))
    return f"Debian's {source} {version}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.conformance", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", action="append", choices=sorted(SUITES),
                    help="run only this suite (repeatable; default: all)")
    ap.add_argument("--side", action="append", choices=SIDES,
                    help="run only on this side (repeatable; default: all the suite has)")
    ap.add_argument("--report-only", action="store_true", help="only write the document")
    ap.add_argument("--reparse", action="store_true",
                    help="read the logs of the last runs again instead of running")
    ap.add_argument("--only", metavar="GLOB",
                    help="ftracetest: run only the tests whose path under test.d matches "
                         "(e.g. 'trigger/*'), the other rows kept")
    ap.add_argument("--git-from", type=Path, metavar="DIR",
                    help="clone the utests' repositories from DIR/<name> (default: git.kernel.org)")
    args = ap.parse_args(argv)
    failed = False
    if not args.report_only:
        opened = {}
        try:
            for suite in [SUITES[n] for n in (args.suite or SUITES)]:
                for name in [s for s in suite.sides if not args.side or s in args.side]:
                    side = opened.setdefault(name, make_side(name))
                    t0 = time.monotonic()
                    print(f"# {suite.name} on {name} ...", file=sys.stderr, flush=True)
                    try:
                        rows, requires = _one(suite, side, args.git_from, args.reparse,
                                              args.only)
                    except (sources.SourceError, OSError) as e:
                        print(f"# {suite.name} on {name}: {e}", file=sys.stderr)
                        failed = True
                        continue
                    old = report.load(suite.name, name) or {}
                    if args.only and old:  # the other rows stay as they were
                        rows = {**old["rows"], **rows}
                        requires = {**old.get("requires", {}), **requires}
                    when = old.get("date", stamp()) if args.reparse else stamp()
                    release = old.get("release") if args.reparse and old else side.release()
                    report.save(suite.name, name, release, when, rows, requires,
                                _version(suite))
                    print(f"# {suite.name} on {name}: {report._totals(rows)} "
                          f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
        finally:
            for side in opened.values():
                side.close()
    path = report.write("python -m bench.conformance",
                        versions={name: _version(suite) for name, suite in SUITES.items()})
    print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
