"""Every control file answers as the 6.18 kernel: a differential fuzz of
over 10,000 writes (errno or count, and the file read back) between the
6.18 kernel and a fakedebugfs mount (tests/tracefs_fuzz.py).

The kernel's answers are recorded in fixtures/tracefs/semantics.json.gz
(``python tests/tracefs_fuzz.py record`` as root refreshes them).  The fake
is compared with all of them; on a machine with a real tracefs, a tenth of
them are also replayed on it (a scratch instance; top-level files put back)
to check the recording still describes this kernel, and with
FAKEDEBUGFS_FUZZ_LIVE=1 the fake is compared with all of them live.
"""

from __future__ import annotations

import collections
import os
import warnings

import pytest

import tracefs_fuzz as fuzz

LIVE = os.environ.get("FAKEDEBUGFS_FUZZ_LIVE") == "1"


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
    where = fuzz.real_tracefs()
    if where is None:
        pytest.skip("no real tracefs here (root and tracefs needed)")
    yield where
    fuzz.unmount(where)


def _known(bad: list[dict]) -> list[dict]:
    """Takes the mismatches of files with a known difference out of *bad*
    and prints them (as a warning: they are reported, not hidden)."""
    known = [case for case in bad if case["file"] in fuzz.KNOWN]
    for case in known:
        bad.remove(case)
    for rel, reason in fuzz.KNOWN.items():
        count = sum(case["file"] == rel for case in known)
        if count:
            warnings.warn(f"{rel}: {count} answers differ from the kernel's, a known "
                          f"difference: {reason}")
    return known


def test_fixture_covers_the_inputs():
    """The recorded answers are for this fuzzer's inputs (same seed and
    generator) over every writable file of a 6.18 instance but the function
    tracer's: over 10,000 of them."""
    fixture = fuzz.load_fixture()
    cases = fixture["cases"]
    writable = fixture["writable"]
    assert [(c["file"], bytes.fromhex(c["data"])) for c in cases] == \
        fuzz.make_inputs(writable, fixture["seed"])
    assert len(cases) >= 10_000
    assert {c["file"] for c in cases} == (set(writable) - set(fuzz.ABSENT)) | set(fuzz.TOP)
    assert len(writable) > 7000  # 2,305 events' enable, filter, trigger and the rest


def test_the_fake_has_every_writable_file(fake):
    """The fake's instance has the kernel's writable files, but those of the
    function tracer (listed, with the reason, in the warnings)."""
    writable = set(fuzz.load_fixture()["writable"])
    mnt = fake("--workload", "none")
    inst = mnt / "tracing" / "instances" / "w"
    inst.mkdir()
    try:
        ours = set(fuzz.writable_files(str(inst)))
    finally:
        inst.rmdir()
    assert ours - writable == set(), "writable in the fake only"
    assert writable - ours == set(fuzz.ABSENT), "writable in the kernel only"
    for rel, reason in fuzz.ABSENT.items():
        warnings.warn(f"{rel}: not in the fake's instances: {reason}")


def test_fixture_still_describes_this_kernel(real):
    fixture = fuzz.load_fixture()
    if fixture["kernel"].split("-")[0] != os.uname().release.split("-")[0]:
        pytest.skip(f"the fixture was recorded on {fixture['kernel']}")
    bad, ran = fuzz.compare(fixture, real, fixture["cases"][::20])
    assert ran >= 900
    assert not bad, _report(bad, "real kernel (the fixture is stale)")


def test_control_files_answer_as_the_kernel(fake):
    fixture = fuzz.load_fixture()
    source = "recorded 6.18 answers"
    if LIVE:
        where = fuzz.real_tracefs()
        assert where is not None, "FAKEDEBUGFS_FUZZ_LIVE=1 needs a real tracefs"
        try:
            fixture, source = fuzz.record(where), "live kernel"
        finally:
            fuzz.unmount(where)
    mnt = fake("--workload", "none")  # nothing fires: read-backs are the writes' own
    bad, ran = fuzz.compare(fixture, str(mnt / "tracing"))
    assert ran >= 10_000
    _known(bad)
    assert not bad, _report(bad, source)
