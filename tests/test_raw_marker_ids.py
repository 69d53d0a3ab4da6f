"""Entries as the profile's kernel numbers and sizes them.

* Every event and entry of the fake has its own ``ID:`` under each profile:
  the fake's own kmemtrace entries (2.6.29's numbers, 17 and 18) take free
  numbers where the profile's kernel gives those to other entries (6.12's
  ``timerlat`` and ``raw_data``), so a trace-cmd recording or ``trace``
  never reads a ``trace_marker_raw`` entry as a kmemtrace one.
* ``trace_marker_raw`` entries under debian-6.12 are sized as the guest's
  6.12 sizes them (``sizeof(struct raw_data_entry) + cnt``, at least
  ``FAULT_SIZE_ID`` bytes of data), so ``trace`` prints the same ``buf``
  bytes: compared live with the oracle guest.
"""

from __future__ import annotations

import subprocess

import pytest

from conftest import FAKEDEBUGFS

IDS = "cd /sys/kernel/tracing && grep -h '^ID:' events/*/*/format | sort | uniq -d | head"
RAW = (r'cd /sys/kernel/tracing && echo > trace && '
       r'for d in "\xc9\x00\x00\x00xyz\x00" "\x01\x00\x00\x00" '
       r'"\x02\x00\x00\x00abcdefghijklmnop" "\x03\x00\x00\x00abcdefghi"; do '
       r'printf "$d" > trace_marker_raw; done; grep -o "# [0-9a-f]* buf:.*" trace')


def fake_sh(profile: str, script: str) -> str:
    res = subprocess.run([FAKEDEBUGFS, "run", "--profile", profile, "--workload", "none", "--",
                          "bash", "-c", script], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


@pytest.mark.parametrize("profile", ["linux-6.18", "debian-6.12"])
def test_every_entry_has_its_own_id(profile):
    assert fake_sh(profile, IDS) == ""
    own = ("cd /sys/kernel/tracing/events/ftrace && grep -h '^ID:' kmem_alloc/format "
           "kmem_free/format raw_data/format | sort -u | wc -l")
    assert fake_sh(profile, own) == "3\n"  # the fake's own two among them, apart


WRITTEN = (4, 0, 16, 9)  # the data bytes each write of RAW gives, after its id


def _entries(text: str) -> list:
    """Each ``# <id> buf: <bytes>`` line as (id, its bytes)."""
    out = []
    for line in text.splitlines():
        head, _, data = line.partition(" buf:")
        out.append((head, data.split()))
    return out


def test_raw_marker_entries_as_the_guest(oracle):
    """The same ids and the same number of bytes per entry (the size the
    kernel reserves), the written bytes equal.  The bytes past what was
    written are the ring buffer page's old contents on the kernel
    (``tracing_mark_raw_write`` copies only ``cnt`` bytes into a larger
    reservation; a marker written earlier in the guest shows through), and
    zeros on the fake."""
    res = oracle.run(RAW, timeout=300)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    real = _entries(res.text)
    fake = _entries(fake_sh("debian-6.12", RAW))
    assert len(real) == len(fake) == len(WRITTEN), (res.text, fake)
    for (rid, rbytes), (fid, fbytes), n in zip(real, fake, WRITTEN):
        assert fid == rid
        assert len(fbytes) == len(rbytes), (fbytes, rbytes)
        assert fbytes[:n] == rbytes[:n]
        assert set(fbytes[n:]) <= {"00"}
