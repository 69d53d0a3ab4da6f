"""Reading ``hist`` files while the default workload runs (Debian 6.12
profile, issue 33): one process's back-to-back reads of a histogram shared
by name through two events' files show the same table, as they do on a
quiet kernel (ftracetest's trigger-multihist.tc ``diff``s them), while the
workload's forks and exits still reach it between reads."""

from __future__ import annotations

import re
import time

import pytest

from fakedebugfs import Fake


@pytest.fixture(scope="module")
def busy():
    with Fake(profile="debian-6.12", cpus=4, workload="default") as fake:
        yield fake


def append(path, text: str) -> None:
    with open(path, "a") as fp:  # O_TRUNC would remove the event's hist triggers
        fp.write(text)


def hits(text: str) -> int:
    return int(re.search(r"Hits: (\d+)", text).group(1))


def test_back_to_back_reads_of_a_named_histogram_agree(busy):
    ev = busy.tracing / "events/sched"
    fork, exit_ = ev / "sched_process_fork", ev / "sched_process_exit"
    append(fork / "trigger", "hist:name=h33:keys=common_pid")
    append(exit_ / "trigger", "hist:name=h33:keys=common_pid")
    try:
        first = hits((fork / "hist").read_text())
        deadline = time.monotonic() + 60
        while hits((exit_ / "hist").read_text()) < first + 5 and time.monotonic() < deadline:
            time.sleep(0.05)  # the workload's forks and exits come in meanwhile
        seen = []
        for _ in range(20):
            a = (exit_ / "hist").read_text()
            b = (fork / "hist").read_text()
            assert a == b, f"one process's two reads of a shared histogram differ:\n{a}\n{b}"
            seen.append(hits(a))
            time.sleep(0.06)  # past one read's instant: the next reads see more
        assert seen[0] >= first + 5, (first, seen)
        assert seen[-1] > seen[0], f"the workload's forks stopped reaching it: {seen}"
    finally:
        append(exit_ / "trigger", "!hist:name=h33:keys=common_pid")
        append(fork / "trigger", "!hist:name=h33:keys=common_pid")
