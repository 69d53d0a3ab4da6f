"""``python -m bench [--json] [--list] [NAME ...]``: run benchmark modules
and print their rows as a table (see bench/__init__.py)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback

from . import PREFIX, available

COLUMNS = ("benchmark", "fake", "real", "fake/real", "unit", "fake min/med/max",
           "real min/med/max", "pair ratio min/med/max", "load")


def fmt(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def run_module(name: str) -> tuple[list[dict], bool]:
    """The module's rows, or one error row; and whether it succeeded."""
    try:
        module = importlib.import_module(f"{__package__}.{PREFIX}{name}")
        rows = list(module.run())
        for row in rows:
            missing = {"name", "fake", "real", "unit"} - set(row)
            if missing:
                raise ValueError(f"row {row.get('name')!r} lacks {sorted(missing)}")
        return rows, True
    except Exception as err:  # report, go on with the others
        traceback.print_exc(file=sys.stderr)
        return [{"name": f"{name}: error", "fake": None, "real": None, "unit": "",
                 "detail": f"{type(err).__name__}: {err}"}], False


def ratio(row: dict) -> str:
    """fake / real, when the real kernel has the figure."""
    fake, real = row.get("fake"), row.get("real")
    if not isinstance(fake, (int, float)) or not isinstance(real, (int, float)) or not real:
        return "n/a"
    return f"{fake / real:.3g}"


def spread(row: dict, side: str) -> str:
    """``min/median/max`` of one side's trials, where the row gives them
    (``"spread": {"fake": [min, median, max], "real": [...]}``), or of the
    ratios of trials taken in turn (``"ratio"``); a row without them (one
    measurement, a best rung, sides measured apart) shows ``-``."""
    three = (row.get("spread") or {}).get(side)
    return "/".join(fmt(v) for v in three) if three else "-"


def load(row: dict) -> str:
    """The 1-minute load average before/after the row's trials, where the
    row says (``"load": [before, after]``)."""
    return "/".join(fmt(v) for v in row.get("load") or ()) or "-"


def table(rows: list[dict]) -> str:
    cells = [COLUMNS] + [(r["name"], fmt(r["fake"]), fmt(r["real"]), ratio(r), r["unit"],
                          spread(r, "fake"), spread(r, "real"), spread(r, "ratio"), load(r))
                         for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = []
    for n, c in enumerate(cells):
        lines.append("  ".join(c[i].ljust(widths[i]) if i in (0, 4) else c[i].rjust(widths[i])
                               for i in range(len(COLUMNS))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv=None) -> int:
    names = available()
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"benchmark modules to run (default: all of {', '.join(names)})")
    p.add_argument("--json", action="store_true", help="print rows (with detail) as JSON lines")
    p.add_argument("--list", action="store_true", help="list the benchmark modules")
    args = p.parse_args(argv)
    if args.list:
        print("\n".join(names))
        return 0
    unknown = [n for n in args.names if n.removeprefix(PREFIX) not in names]
    if unknown:
        p.error(f"unknown benchmark {', '.join(unknown)} (choose from {', '.join(names)})")
    rows, ok = [], True
    for name in [n.removeprefix(PREFIX) for n in args.names] or names:
        t0 = time.monotonic()
        print(f"# {name} ...", file=sys.stderr, flush=True)
        got, good = run_module(name)
        print(f"# {name}: {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        rows += got
        ok &= good
        if args.json:
            for row in got:
                print(json.dumps(row), flush=True)
    if not args.json:
        print(f"# {os.uname().release}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} "
              f"at the end")
        print(table(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
