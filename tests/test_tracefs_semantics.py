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


def test_fixture_covers_the_inputs():
    """The recorded answers are for this fuzzer's inputs (same seed and
    generator): over 10,000 of them, over every file fuzzed."""
    cases = fuzz.load_fixture()
    assert [(c["file"], bytes.fromhex(c["data"])) for c in cases] == fuzz.make_inputs()
    assert len(cases) >= 10_000
    assert {c["file"] for c in cases} == set(fuzz.FILES)


def test_fixture_still_describes_this_kernel(real):
    cases = fuzz.load_fixture()[::10]
    bad, ran = fuzz.compare(cases, real)
    assert ran >= 1000
    assert not bad, _report(bad, "real kernel (the fixture is stale)")


def test_control_files_answer_as_the_kernel(fake):
    cases = fuzz.load_fixture()
    source = "recorded 6.18 answers"
    if LIVE:
        where = fuzz.real_tracefs()
        assert where is not None, "FAKEDEBUGFS_FUZZ_LIVE=1 needs a real tracefs"
        try:
            cases, source = fuzz.record(where), "live kernel"
        finally:
            fuzz.unmount(where)
    mnt = fake("--workload", "none")  # nothing fires: read-backs are the writes' own
    bad, ran = fuzz.compare(cases, str(mnt / "tracing"))
    assert ran >= 10_000
    assert not bad, _report(bad, source)
