"""Every control file answers as the 6.18 kernel: a differential fuzz of
19,254 writes over every writable file of an instance (7,171 files: each
event's enable, filter and trigger, each system's enable and filter, every
option, and the rest; errno or count, and the file read back) between the
6.18 kernel and a fakedebugfs mount (tests/tracefs_fuzz.py).

The kernel's answers and its list of writable files are recorded in
fixtures/tracefs/semantics.json.gz (``python tests/tracefs_fuzz.py record``
as root refreshes them).  The fake is compared with all of them; the
differences the fake keeps on purpose (``fuzz.KNOWN``, ``fuzz.ABSENT``) are
printed as warnings with their reason.  On a machine with a real tracefs,
a twentieth of the inputs are also replayed on it (a scratch instance;
top-level files put back) to check the recording still describes this
kernel, and with FAKEDEBUGFS_FUZZ_LIVE=1 the fake is compared with all of
them live.
"""

from __future__ import annotations

import collections
import os
import warnings

import pytest

import tracefs_fuzz as fuzz
from support import realtracefs

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
    """The real tracefs is there (it is mounted for each use, in a private
    mount namespace: ``fuzz.on_real_tracefs``)."""
    if not realtracefs.available():
        pytest.skip("no real tracefs here (root and tracefs needed)")


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
    bad, ran = fuzz.on_real_tracefs(lambda root: fuzz.compare(fixture, root,
                                                              fixture["cases"][::20]), top=True)
    assert ran >= 900
    assert not bad, _report(bad, "real kernel (the fixture is stale)")


def test_control_files_answer_as_the_kernel(fake):
    fixture = fuzz.load_fixture()
    source = "recorded 6.18 answers"
    if LIVE:
        fixture, source = fuzz.on_real_tracefs(fuzz.record, top=True), "live kernel"
        assert fixture is not None, "FAKEDEBUGFS_FUZZ_LIVE=1 needs a real tracefs"
    mnt = fake("--workload", "none")  # nothing fires: read-backs are the writes' own
    bad, ran = fuzz.compare(fixture, str(mnt / "tracing"))
    assert ran >= 10_000
    _known(bad)
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
