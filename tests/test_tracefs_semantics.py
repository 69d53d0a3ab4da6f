"""Every control file answers as the 6.18 kernel: a differential fuzz of
over 10,000 writes (errno or count, and the file read back) between this
machine's real tracefs and a fakedebugfs mount (tests/tracefs_fuzz.py).

With a real tracefs (root, tracefs in the kernel) the inputs run on both,
live; without one the fake is compared with the answers recorded from the
6.18 kernel in fixtures/tracefs/semantics.json.gz.
"""

from __future__ import annotations

import collections
import os

import pytest

import tracefs_fuzz as fuzz


def _report(bad: list[dict]) -> str:
    by_file = collections.Counter(case["file"] for case in bad)
    lines = [f"{len(bad)} mismatches: {dict(by_file)}"]
    for case in bad[:15]:
        lines.append(f"{case['file']} {bytes.fromhex(case['data'])[:60]!r}: kernel "
                     f"{case['res']} {case['back']!r:.120} fake {case['got']['res']} "
                     f"{case['got']['back']!r:.120}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def expected():
    """The kernel's answers: live from a real tracefs when there is one."""
    if os.environ.get("FAKEDEBUGFS_FUZZ_LIVE", "1") != "0":
        real = fuzz.real_tracefs()
        if real is not None:
            try:
                return fuzz.record(real), "live"
            finally:
                fuzz.unmount(real)
    return fuzz.load_fixture(), "fixture"


def test_fixture_covers_the_inputs():
    """The recorded answers are for this fuzzer's inputs (same seed and
    generator): over 10,000 of them, over every file fuzzed."""
    cases = fuzz.load_fixture()
    inputs = fuzz.make_inputs()
    assert [(c["file"], bytes.fromhex(c["data"])) for c in cases] == inputs
    assert len(cases) >= 10_000
    assert {c["file"] for c in cases} == set(fuzz.FILES)


def test_control_files_answer_as_the_kernel(fake, expected):
    cases, source = expected
    mnt = fake("--workload", "none")  # nothing fires: read-backs are the writes' own
    bad, ran = fuzz.compare(cases, str(mnt / "tracing"))
    assert ran >= 10_000
    assert not bad, f"against the {source} kernel answers: " + _report(bad)
