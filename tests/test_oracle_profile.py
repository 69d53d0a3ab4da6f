"""The debian-6.12 profile against the kernel it was captured from, live:
the Debian 6.12 guest of the oracle (tests/support/oracle.py) and the fake
under ``--profile debian-6.12`` are read the same way (tests/support/
treedump.py: the host's python runs in the guest) and compared.

* every event's format, ``header_page`` and ``header_event``: byte for byte;
* the top level and an instance: the same names and modes, but what
  docs/profiles.md lists as not yet emulated (checked both ways: a listed
  file the fake serves fails too);
* ``options/`` (names, modes, values), ``trace_options``, ``trace_clock``,
  ``available_tracers`` (but the listed tracers, and the fake's own
  ``kmemtrace``) and the README (the kernel's, less the lines of what is
  not emulated).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS

PROFILE = "debian-6.12"
ROOT = Path(__file__).resolve().parents[1]
DUMP = Path(__file__).parent / "support" / "treedump.py"
DOC = ROOT / "docs" / "profiles.md"
TRACING = "/sys/kernel/tracing"
INSTANCE = "oracle_diff"
# the entries of the fake's own kmemtrace tracer (docs/kmemtrace.md), under
# every profile
FAKES_OWN = {"events/ftrace/kmem_alloc/format", "events/ftrace/kmem_free/format"}


def not_yet(kind: str) -> dict[str, str]:
    """docs/profiles.md's "Not yet emulated" rows of this profile and kind."""
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\|\s*(\S+)\s*\|\s*(\w+)\s*\|\s*`([^`]+)`\s*\|\s*(.+?)\s*\|$", line)
        if m and m[1] == PROFILE and m[2] == kind:
            rows[m[3]] = m[4]
    return rows


def _script(patterns, setup: str = "", teardown: str = "") -> str:
    quoted = " ".join(f"'{p}'" for p in patterns)
    return (f"{setup}\n{sys.executable} {DUMP} {TRACING} {quoted}; rc=$?\n{teardown}\n"
            f"exit $rc\n")


def guest_dump(oracle, patterns, **kw) -> str:
    res = oracle.run(_script(patterns, **kw), timeout=600)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    return res.text


def fake_dump(patterns, **kw) -> str:
    res = subprocess.run([FAKEDEBUGFS, "run", "--profile", PROFILE, "--cpus", "4",
                          "--workload", "none", "--", "bash", "-c", _script(patterns, **kw)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def sections(text: str) -> dict[str, str]:
    """``### path mode`` sections of a dump: path -> "mode\\ncontent"."""
    out = {}
    for part in text.split("### ")[1:]:
        head, _, body = part.partition("\n")
        path, mode = head.rsplit(" ", 1)
        out[path] = f"{mode}\n{body}"
    return out


@pytest.fixture(scope="module")
def top(oracle):
    pats = ["ls:.", "ls:options", "ls:events", "options/*", "trace_options", "trace_clock",
            "available_tracers", "README", "events/header_page", "events/header_event"]
    return guest_dump(oracle, pats), fake_dump(pats)


def test_the_guest_runs_the_profiles_kernel(oracle):
    res = oracle.run("uname -r", check=True)
    profile = (ROOT / "fakedebugfs" / "profiles" / PROFILE / "uname").read_text()
    assert res.text == profile


def test_every_format_is_the_guests(oracle):
    pats = ["events/*/*/format"]
    guest, fake = guest_dump(oracle, pats), fake_dump(pats)
    g, f = sections(guest), sections(fake)
    assert len(g) > 1500
    assert sorted(g) == sorted(set(f) - FAKES_OWN)
    differ = [p for p in g if g[p] != f[p]]
    assert not differ, f"{len(differ)} formats differ, first {differ[:5]}"


def _listing(dump: str) -> dict[str, str]:
    return {line.split(" ", 2)[2]: line.split(" ", 2)[0] + " " + line.split(" ", 2)[1]
            for line in dump.splitlines() if re.match(r"^0[0-7]{3} [df] ", line)}


def test_the_top_level_is_the_guests_but_what_the_docs_list(top):
    guest, fake = (_listing(d) for d in top)
    guest_top = {p: m for p, m in guest.items() if p.startswith("./")}
    fake_top = {p: m for p, m in fake.items() if p.startswith("./")}
    missing = {p[2:] for p in guest_top} - {p[2:] for p in fake_top}
    listed = set(not_yet("file"))
    assert missing == listed, (f"files of the guest the fake lacks and docs/profiles.md does "
                               f"not list: {sorted(missing - listed)}; listed but served: "
                               f"{sorted(listed - missing)}")
    extra = {p[2:] for p in fake_top} - {p[2:] for p in guest_top}
    assert not extra, f"files the fake has and the guest does not: {sorted(extra)}"
    modes = {p: (guest_top[p], fake_top[p]) for p in fake_top if guest_top[p] != fake_top[p]}
    assert not modes, f"modes differ (guest, fake): {modes}"


def test_options_and_their_values_are_the_guests(top):
    g, f = (sections(d) for d in top)
    opts = sorted(p for p in g if p.startswith("options/"))
    assert len(opts) > 40
    assert opts == sorted(p for p in f if p.startswith("options/"))
    assert {p: g[p] for p in opts} == {p: f[p] for p in opts}
    for name in ("trace_options", "trace_clock", "events/header_page", "events/header_event"):
        assert f[name] == g[name], name


def test_tracers_are_the_guests_but_what_the_docs_list(top):
    g, f = (sections(d) for d in top)
    guest = g["available_tracers"].split("\n", 1)[1].split()
    fake = f["available_tracers"].split("\n", 1)[1].split()
    assert [t for t in guest if t not in not_yet("tracer")] == fake


def test_the_readme_is_the_kernels_less_what_is_not_emulated(top):
    g, f = (sections(d) for d in top)
    guest = g["README"].split("\n", 1)[1].split("\n")
    fake = f["README"].split("\n", 1)[1].split("\n")
    # the fake's lines are the kernel's, in its order
    it = iter(guest)
    assert all(line in it for line in fake), "the fake's README is not the kernel's, thinned"
    dropped = [line for line in guest if line not in fake]
    names = set(not_yet("file")) | set(not_yet("tracer"))
    entry = re.compile(r"^  (\S+)")
    heads = [entry.match(line)[1].split("/")[0] for line in dropped if entry.match(line)]
    assert set(heads) <= names, f"README entries dropped for served files: {set(heads) - names}"


def test_an_instance_is_the_guests(oracle):
    setup = f"mkdir {TRACING}/instances/{INSTANCE}"
    teardown = f"rmdir {TRACING}/instances/{INSTANCE}"
    pats = [f"ls:instances/{INSTANCE}", f"ls:instances/{INSTANCE}/options",
            f"instances/{INSTANCE}/options/*", f"instances/{INSTANCE}/trace_options",
            f"instances/{INSTANCE}/current_tracer", f"instances/{INSTANCE}/tracing_cpumask"]
    guest = guest_dump(oracle, pats, setup=setup, teardown=teardown)
    fake = fake_dump(pats, setup=setup, teardown=teardown)
    g, f = _listing(guest), _listing(fake)
    missing = {p.rsplit("/", 1)[1] for p in set(g) - set(f)}
    assert missing <= set(not_yet("file")), f"instance files missing: {sorted(missing)}"
    assert not set(f) - set(g), f"instance files the guest lacks: {sorted(set(f) - set(g))}"
    assert {p: g[p] for p in f} == f
    gs, fs = sections(guest), sections(fake)
    assert {p: gs[p] for p in fs} == fs
