"""An incomplete event filter answers as the profile's kernel version does
(fakedebugfs/engine/ftrace/kversion.py): ``common_pid == 1 &&`` and its
kin are EINVAL with a caret under their end on this host's 6.18, accepted
as written by Debian's 6.12.113, where ``a || b &&`` is EINVAL with
``Error: (0)``.  The fake under each profile is compared with that
profile's kernel live: this host's tracefs (a private mount namespace) for
linux-6.18, the oracle guest for debian-6.12.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from support import realtracefs

INPUTS = (b"common_pid == 1 &&", b"common_pid == 1 ||", b"!common_pid == 1 &&",
          b"common_pid == 1 && !", b"common_pid == 1 || common_pid == 2 &&",
          b"(common_pid == 1) &&", b"common_pid == 1 && (", b"common_pid == 1 && \t ",
          b"common_pid == 1 && common_pid == 2")


def filter_answers(tracing: str) -> list:
    """Each input written to sched_switch's filter in a scratch instance:
    [input, the write's count or -errno, the filter file read back]."""
    inst = os.path.join(tracing, "instances", f"fv{os.getpid()}")
    os.mkdir(inst)
    path = os.path.join(inst, "events/sched/sched_switch/filter")
    out = []
    try:
        for data in INPUTS:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
            try:
                res = os.write(fd, data)
            except OSError as err:
                res = -err.errno
            finally:
                os.close(fd)
            with open(path, "rb") as fp:
                out.append([data.decode(), res, fp.read().decode()])
            with open(path, "wb") as fp:
                fp.write(b"0")
    finally:
        os.rmdir(inst)
    return out


def _fake(fake, profile: str) -> list:
    return filter_answers(str(fake("--workload", "none", "--profile", profile) / "tracing"))


def test_the_profiles_differ_as_their_kernels(fake):
    """6.18 refuses what 6.12 accepts: the answer follows the version."""
    new, old = _fake(fake, "linux-6.18"), _fake(fake, "debian-6.12")
    assert new[0][1] == -22 and "Meaningless filter expression" in new[0][2]
    assert old[0][1] == len(INPUTS[0]) and old[0][2] == INPUTS[0].decode() + "\n"
    assert new[-1] == old[-1]  # a complete filter: the same everywhere


def test_linux_6_18_as_this_host(fake):
    if not realtracefs.available():
        pytest.skip("no real tracefs here (root and tracefs needed)")
    if not os.uname().release.startswith("6.18."):
        pytest.skip(f"this host runs {os.uname().release}, not the profile's 6.18")
    real = realtracefs.call(filter_answers)
    assert _fake(fake, "linux-6.18") == real


def test_debian_6_12_as_the_guest(fake, oracle):
    here = Path(__file__).resolve().parent
    out = oracle.work / f"filters-{os.getpid()}.json"
    script = (f"import json, sys; sys.path.insert(0, {str(here)!r}); "
              f"from test_filter_versions import filter_answers; "
              f"json.dump(filter_answers('/sys/kernel/tracing'), open({str(out)!r}, 'w'))")
    res = oracle.run(f"{sys.executable} -c \"{script}\"", timeout=300)
    try:
        real = json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    fake_answers = _fake(fake, "debian-6.12")
    # 6.12 answers 'a || b &&' at random (tracefs_fuzz.KNOWN: it reads
    # before its program): the guest's answer is one of its two, the fake's
    # the one it gives 9 times in 10; every other input the same
    random = INPUTS.index(b"common_pid == 1 || common_pid == 2 &&")
    text = INPUTS[random].decode()
    assert real[random] in ([text, len(text), text + "\n"], [text, -22, text + "\nError: (0)\n\n"])
    assert fake_answers[random] == [text, -22, text + "\nError: (0)\n\n"]
    del real[random], fake_answers[random]
    assert fake_answers == real
