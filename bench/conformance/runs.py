"""Running a suite on a side and reading its results into rows.

A row is one test: ftracetest's test file (relative to test.d, with
`` (instance)`` for its second run in an instance when its ``# flags:``
say so), or a CUnit test's name.  Its result is the suite's own word:
ftracetest's PASS, FAIL, UNRESOLVED, UNTESTED, UNSUPPORTED, XFAIL or
UNDEFINED, CUnit's PASS or FAIL; and TIMEOUT for a test still running at
its time limit, NOT RUN for one the suite never reached (a crash).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from pathlib import Path

from . import Suite
from .sides import Side

# one ftracetest invocation per test file, each within a time limit, so
# that one test that hangs costs its own rows only
FTRACETEST_LOOP = """\
cd {ftrace} || exit 2
n=0
for t in {tests}; do
  n=$((n+1)); d={logs}/$(printf %03d $n); mkdir -p $d; echo $t > $d/test
  timeout -k 10 {limit} ./ftracetest -k -l $d $t > $d/stdout 2>&1
  echo $? > $d/rc
done
"""

CUNIT = """\
cd {logs} || exit 2
LD_LIBRARY_PATH={libs} timeout -k 10 {limit} stdbuf -oL -eL {binary} > stdout 2>&1
echo $? > rc
"""


def run_ftracetest(side: Side, ftrace: Path, suite: Suite,
                   only: str | None = None) -> tuple[dict, dict]:
    """{row: result} and {row: the test's ``# requires:``} of ftracetest on
    *side*: every test file, or those whose path under test.d matches the
    glob *only* (their logs kept apart, in ``<suite>-only``)."""
    logs = side.logs(suite.name + ("-only" if only else ""))
    per_test = 900 if side.name == "guest" else 300
    tests = sorted(str(p.relative_to(ftrace)) for p in (ftrace / "test.d").rglob("*.tc")
                   if not only or fnmatch.fnmatch(str(p.relative_to(ftrace / "test.d")), only))
    script = FTRACETEST_LOOP.format(ftrace=shlex.quote(str(ftrace)), logs=shlex.quote(str(logs)),
                                    limit=per_test, tests=" ".join(map(shlex.quote, tests)))
    side.run(script, timeout=suite.guest_timeout if side.name == "guest" else suite.fake_timeout)
    return parse_ftracetest(logs, ftrace / "test.d")


_CASE = re.compile(r"^\[(\d+)\](.*)\t\[(\w+)\]\s*$", re.M)
_EXEC = re.compile(r"^execute( \(instance\) )?: (\S+)")


def parse_ftracetest(logs: Path, testd: Path) -> tuple[dict, dict]:
    """Rows from every ftracetest log folder under *logs* (``-k -l DIR``
    keeps one ``N-name-log.*`` per case, whose first line names the file)."""
    rows, requires = {}, {}
    for log in sorted(logs.rglob("ftracetest.log")):
        d = log.parent
        results = {int(n): res for n, _, res in _CASE.findall(log.read_text(errors="replace"))}
        seen = set()
        for case in d.glob("*-log.*"):
            first = case.read_text(errors="replace").partition("\n")[0]
            m = _EXEC.match(first)
            if not m or not case.name.split("-", 1)[0].isdigit():
                continue
            path = Path(m.group(2))
            row = _row(path, testd, bool(m.group(1)))
            seen.add(row)
            requires[row] = _requires(path)
            rows[row] = results.get(int(case.name.split("-", 1)[0]), _cut(d))
        # a file the loop started whose cases never printed (cut by the limit)
        test = d / "test"
        if test.is_file():
            path = (testd.parent / test.read_text().strip()).resolve()
            for row in _rows_of(path, testd):
                if row not in seen:
                    rows[row], requires[row] = _cut(d), _requires(path)
    return rows, requires


def _cut(d: Path) -> str:
    rc = (d / "rc").read_text().strip() if (d / "rc").is_file() else ""
    return "TIMEOUT" if rc in ("124", "137") else "NOT RUN"


def _row(path: Path, testd: Path, instance: bool) -> str:
    parts = path.parts
    # the part after test.d, wherever the suite was when it ran
    rel = "/".join(parts[len(parts) - parts[::-1].index("test.d"):]) if "test.d" in parts \
        else path.name
    return rel + (" (instance)" if instance else "")


def _rows_of(path: Path, testd: Path) -> list:
    rows = [_row(path, testd, False)]
    if re.search(r"^#[ \t]*flags:.*instance", _text(path), re.M):
        rows.append(_row(path, testd, True))
    return rows


def _requires(path: Path) -> str:
    m = re.search(r"^#[ \t]*requires:(.*)$", _text(path), re.M)
    return m.group(1).strip() if m else ""


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def run_cunit(side: Side, binary: Path, libs: str, suite: Suite) -> tuple[dict, dict]:
    """{row: result} of a CUnit ``trace-utest`` on *side* (run from its log
    folder: trace-cmd's utest writes its trace.dat files in the current one)."""
    logs = side.logs(suite.name)
    limit = suite.guest_timeout if side.name == "guest" else suite.fake_timeout
    script = CUNIT.format(logs=shlex.quote(str(logs)), libs=shlex.quote(libs),
                          binary=shlex.quote(str(binary)), limit=limit)
    side.run(script, timeout=limit + 60, options=suite.fake_options)
    return parse_cunit(logs / "stdout", _declared(binary)), {}


_START = re.compile(r"^\s*Test: (.*?) \.\.\.", re.M)
_VERDICT = re.compile(r"(passed|FAILED)$", re.M)


def parse_cunit(out: Path, declared: list) -> dict:
    """CUnit's verbose run: ``Test: NAME ...`` then, after whatever the test
    printed, ``passed`` or ``FAILED`` at the end of a line (the last such
    word before the next test is CUnit's)."""
    text = _text(out)
    rows = {name: "NOT RUN" for name in declared}
    starts = list(_START.finditer(text))
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        words = _VERDICT.findall(text, m.end(), end)
        rows[m.group(1)] = ("PASS" if words[-1] == "passed" else "FAIL") if words else "NOT RUN"
    return rows


def _declared(binary: Path) -> list:
    """The test names the suite registers (``CU_add_test(suite, "NAME", ...)``),
    so a test a crash kept from running is still a row."""
    names = []
    for src in sorted((binary.parent).glob("*-utest.c")):
        names += re.findall(r'CU_add_test\(\s*\w+,\s*"([^"]+)"', _text(src))
    return names
