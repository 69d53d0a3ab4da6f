"""Ring-buffer memory on transparent huge pages (engine/core/hugepages.py):
the advice changes where the bytes live, never what they are."""

import re

from fakedebugfs.engine.core import hugepages


def _anon_huge_kb() -> int:
    with open("/proc/self/smaps_rollup") as fp:
        return int(re.search(r"AnonHugePages:\s+(\d+)", fp.read()).group(1))


def _thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as fp:
            return re.search(r"\[(\w+)\]", fp.read()).group(1)
    except OSError:
        return "never"


def test_advice_keeps_the_bytes_and_backs_them_with_huge_pages():
    mem = bytearray(range(256)) * (24 << 12)  # 24 MiB of a known pattern
    before = _anon_huge_kb()
    took = hugepages.advise(mem)
    assert mem == bytearray(range(256)) * (24 << 12)
    if _thp_mode() != "never" and took:
        # at least 10 of the 11-12 whole 2 MiB pages inside (collapse may skip
        # one the allocator shares)
        assert _anon_huge_kb() - before >= 10 * 2048


def test_a_buffer_smaller_than_a_huge_page_is_left_alone():
    mem = bytearray(b"\x5a" * (1 << 20))
    assert hugepages.advise(mem) is False
    assert mem == bytearray(b"\x5a" * (1 << 20))
