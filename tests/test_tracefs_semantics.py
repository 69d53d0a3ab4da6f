"""Every control file answers as the kernel of the profile: a differential
fuzz of some 17,000-19,000 writes over every writable file of an instance
(each event's enable, filter and trigger, each system's enable and filter,
every option, and the rest; errno or count, and the file read back)
between a kernel and a fakedebugfs mount of its profile
(tests/tracefs_fuzz.py), for both reference kernels:

* ``linux-6.18``: this host's 6.18, recorded in a private mount namespace
  (fixtures/tracefs/semantics.json.gz);
* ``debian-6.12``: Debian's 6.12 in the oracle guest (4 vCPUs), recorded
  there (fixtures/tracefs/semantics-debian-6.12.json.gz).

Each fixture holds the kernel's answers, its writable files and what the
inputs depend on in it (CPUs, a fresh instance's values, the deep events,
the options).  ``python tests/tracefs_fuzz.py record`` as root refreshes
the host's; ``python -m fakedebugfs.oracle run --timeout 5400 'cd
tests && python tracefs_fuzz.py --profile debian-6.12 record --tracing
/sys/kernel/tracing --out WORK/semantics-debian-6.12.json.gz'`` the
guest's (WORK: the guest's shared folder; about 9 minutes).  The fake is
compared with all of them; the differences it keeps for now
(``fuzz.KNOWN``, ``fuzz.ABSENT``) are printed as warnings with their reason
and issue.  Where the kernel is at hand (the host's tracefs, the oracle
guest), a twentieth of the inputs are replayed on it too, to check the
recording still describes it; with FAKEDEBUGFS_FUZZ_LIVE=1 the fake is
compared with a live recording of this host's kernel.
"""

from __future__ import annotations

import collections
import fnmatch
import json
import os
import sys
import warnings
from pathlib import Path

import pytest

import tracefs_fuzz as fuzz
from support import realtracefs

LIVE = os.environ.get("FAKEDEBUGFS_FUZZ_LIVE") == "1"
PROFILES = ("linux-6.18", "debian-6.12")


def _report(bad: list[dict], source: str) -> str:
    by_file = collections.Counter(case["file"] for case in bad)
    lines = [f"{len(bad)} mismatches with the {source}: {dict(by_file)}"]
    for case in bad[:15]:
        lines.append(f"{case['file']} {bytes.fromhex(case['data'])[:60]!r}: expected "
                     f"{case['res']} {case['back']!r:.120} got {case['got']['res']} "
                     f"{case['got']['back']!r:.120}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def real():
    """The real tracefs is there (it is mounted for each use, in a private
    mount namespace: ``fuzz.on_real_tracefs``)."""
    if not realtracefs.available():
        pytest.skip("no real tracefs here (root and tracefs needed)")


def _known(bad: list[dict], profile: str) -> list[dict]:
    """Takes the mismatches with a known difference out of *bad* and
    prints them (as a warning: they are reported, not hidden)."""
    known = collections.defaultdict(list)
    for case in list(bad):
        reason = fuzz.known_reason(case, profile)
        if reason:
            bad.remove(case)
            known[reason].append(case)
    for reason, cases in known.items():
        files = sorted({case["file"] for case in cases})
        warnings.warn(f"{profile}: {len(cases)} answers differ from the kernel's in "
                      f"{', '.join(files[:4])}{' ...' if len(files) > 4 else ''}, a known "
                      f"difference: {reason}")
    return [case for cases in known.values() for case in cases]


def _mount(fake, fixture: dict, profile: str):
    """The fake of *profile* with the recording kernel's CPUs, nothing
    firing (read-backs are the writes' own)."""
    return fake("--workload", "none", "--profile", profile,
                "--cpus", str(fixture["tree"]["cpus"]))


@pytest.mark.parametrize("profile", PROFILES)
def test_fixture_covers_the_inputs(profile):
    """The recorded answers are for this fuzzer's inputs (same seed,
    generator and kernel facts) over every writable file of an instance
    of the kernel but those ABSENT lists: over 10,000 of them."""
    fixture = fuzz.load_fixture(profile)
    cases = fixture["cases"]
    writable = fixture["writable"]
    assert [(c["file"], bytes.fromhex(c["data"])) for c in cases] == \
        fuzz.make_inputs(writable, fixture["tree"], fixture["seed"])
    assert len(cases) >= 10_000
    fuzzed = {rel for rel in writable if not fuzz.is_absent(rel)} | set(fuzz.TOP)
    assert {c["file"] for c in cases} == fuzzed
    assert len(writable) > 4000  # every event's enable, filter, trigger and the rest
    assert len(fixture["tree"]["deep"]) == 3


@pytest.mark.parametrize("profile", PROFILES)
def test_the_fake_has_every_writable_file(fake, profile):
    """The fake's instance has the kernel's writable files, but some of
    those ABSENT lists (printed, with the reason, in the warnings)."""
    fixture = fuzz.load_fixture(profile)
    writable = set(fixture["writable"])
    inst = _mount(fake, fixture, profile) / "tracing" / "instances" / "w"
    inst.mkdir()
    try:
        ours = set(fuzz.writable_files(str(inst)))
    finally:
        inst.rmdir()
    assert ours - writable == set(), "writable in the fake only"
    missing = writable - ours
    assert {rel for rel in missing if not fuzz.is_absent(rel)} == set(), \
        "writable in the kernel only, and not listed in fuzz.ABSENT"
    for pattern, reason in fuzz.ABSENT.items():
        lacking = sorted(rel for rel in missing if fnmatch.fnmatchcase(rel, pattern))
        if lacking:
            warnings.warn(f"{profile}: {', '.join(lacking[:3])}{' ...' if len(lacking) > 3 else ''}"
                          f" not in the fake's instances: {reason}")
        served = sorted(rel for rel in writable & ours if fnmatch.fnmatchcase(rel, pattern))
        if served:  # the issue brought them: the fuzz needs inputs of their kind
            warnings.warn(f"{profile}: {', '.join(served[:3])}{' ...' if len(served) > 3 else ''}"
                          f" served by the fake now but not fuzzed yet (fuzz.ABSENT: {reason})")


def test_fixture_still_describes_this_kernel(real):
    """A twentieth of the linux-6.18 inputs replayed on this host's kernel
    answer as recorded (when the host runs the build they were recorded on)."""
    fixture = fuzz.load_fixture()
    if fixture["kernel"] != os.uname().release:
        pytest.skip(f"the fixture was recorded on {fixture['kernel']}, "
                    f"this host runs {os.uname().release}")
    bad, ran = fuzz.on_real_tracefs(lambda root: fuzz.compare(fixture, root,
                                                              fixture["cases"][::20]), top=True)
    assert ran >= 800
    assert not bad, _report(bad, "real kernel (the fixture is stale)")


def test_fixture_still_describes_the_guest(oracle):
    """A twentieth of the debian-6.12 inputs replayed in the oracle guest
    (the session's: conftest's ``oracle``; its tracefs, a scratch instance,
    the top-level files put back) answer as recorded."""
    fixture = fuzz.load_fixture("debian-6.12")
    out = oracle.work / f"fuzz-check-{os.getpid()}.json"
    here = Path(__file__).resolve().parent
    res = oracle.run(f"cd {here} && {sys.executable} tracefs_fuzz.py --profile debian-6.12 "
                    f"check /sys/kernel/tracing --every 20 --out {out}", timeout=1200)
    try:
        seen = json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
    assert seen["kernel"] == fixture["kernel"], "the guest runs another kernel than recorded"
    assert seen["ran"] >= 800
    bad = seen["bad"]
    known = _known(bad, "debian-6.12")  # (6.12's random answers differ between two of its runs too)
    assert not bad, _report(bad, "guest's kernel (the fixture is stale)")
    # the check exits 1 for any input answered otherwise, a known one too
    assert res.returncode == (1 if known else 0), res.stderr.decode(errors="replace")


@pytest.mark.parametrize("profile", PROFILES)
def test_control_files_answer_as_the_kernel(fake, profile):
    fixture = fuzz.load_fixture(profile)
    source = f"recorded answers of {fixture['kernel']}"
    if LIVE and profile == fuzz.DEFAULT_PROFILE:
        fixture, source = fuzz.on_real_tracefs(fuzz.record, top=True), "live kernel"
        assert fixture is not None, "FAKEDEBUGFS_FUZZ_LIVE=1 needs a real tracefs"
    bad, ran = fuzz.compare(fixture, str(_mount(fake, fixture, profile) / "tracing"))
    assert ran >= 10_000
    _known(bad, profile)
    assert not bad, _report(bad, source)


def _marker_trigger_and_free(tracing: str) -> dict:
    """What a user sees: a ``traceoff if buf ~ ...`` trigger on
    ``ftrace/print`` stops tracing at the marker that matches (which is
    still recorded), and ``free_buffer`` with ``disable_on_free`` shrinks
    the buffer to two pages and turns tracing off."""
    inst = os.path.join(tracing, "instances", f"mt{os.getpid()}")
    os.mkdir(inst)
    seen = {}
    try:
        trig = os.path.join(inst, "events/ftrace/print/trigger")
        fuzz._write(trig, b'traceoff if buf ~ "*stop*"')
        seen["trigger"] = fuzz._read(trig)
        for text in (b"hello", b"please stop", b"after"):
            seen[text] = (fuzz._write(os.path.join(inst, "trace_marker"), text),
                          fuzz._read(os.path.join(inst, "tracing_on")))
        seen["trace"] = fuzz.trace_entries(fuzz._read(os.path.join(inst, "trace")))
        fuzz._write(trig, b"!traceoff")
        fuzz._write(os.path.join(inst, "tracing_on"), b"1")
        fuzz._write(os.path.join(inst, "options/disable_on_free"), b"1")
        fuzz._write(os.path.join(inst, "free_buffer"), b"x")
        seen["freed"] = (fuzz._read(os.path.join(inst, "buffer_size_kb")),
                         fuzz._read(os.path.join(inst, "tracing_on")))
    finally:
        os.rmdir(inst)
    return seen


def test_marker_triggers_and_free_buffer(fake):
    seen = _marker_trigger_and_free(str(fake("--workload", "none") / "tracing"))
    assert seen["trigger"] == b'traceoff:unlimited if buf ~ "*stop*"\n'
    assert seen[b"hello"] == (5, b"1\n")
    assert seen[b"please stop"] == (11, b"0\n")
    assert seen[b"after"] == (-9, b"0\n")  # EBADF: tracing is off
    assert seen["trace"] == b"tracing_mark_write: hello\ntracing_mark_write: please stop"
    assert seen["freed"] == (b"7\n", b"0\n")
    real = fuzz.on_real_tracefs(_marker_trigger_and_free)
    if real is not None:  # the kernel, where there is one, answers the same
        assert real == seen
