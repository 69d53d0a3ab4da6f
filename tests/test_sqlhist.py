"""libtracefs's SQL to a synthetic event and its hist triggers
(``tracefs_sql``, what ``sqlhist -e`` and ``trace-cmd sqlhist`` call),
by a C program built here against the system's libtracefs, run in the
Debian 6.12 guest and under ``fakedebugfs run --profile debian-6.12``:
the same ``dynamic_events``, trigger lists and format, and the synthetic
event fires on both.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS, build_c, libtracefs_flags

HEADER = Path("/usr/include/tracefs/tracefs.h")
SQL_C = r"""
#include <stdio.h>
#include <tracefs.h>

/* argv[1]: the synthetic event's name, argv[2]: the SQL (as sqlhist -e) */
int main(int argc, char **argv)
{
	struct tep_handle *tep;
	struct tracefs_synth *synth;
	char *err = NULL;

	if (argc != 3)
		return 2;
	tep = tracefs_local_events(NULL);
	if (!tep) {
		perror("tracefs_local_events");
		return 1;
	}
	synth = tracefs_sql(tep, argv[1], argv[2], &err);
	if (!synth) {
		fprintf(stderr, "tracefs_sql: %s\n", err ? err : "failed");
		return 1;
	}
	if (tracefs_synth_create(synth)) {
		perror("tracefs_synth_create");
		return 1;
	}
	tracefs_synth_free(synth);
	return 0;
}
"""
SQL = ("SELECT end.next_pid AS pid, (end.TIMESTAMP_USECS - start.TIMESTAMP_USECS) AS delta "
       "FROM sched_waking AS start JOIN sched_switch AS end ON start.pid = end.next_pid")
SHOW = ("cd /sys/kernel/tracing && {sql} wakeup_lat '{query}' && "
        "echo '== dynamic_events' && cat dynamic_events && "
        "echo '== waking' && cat events/sched/sched_waking/trigger && "
        "echo '== switch' && cat events/sched/sched_switch/trigger && "
        "echo '== format' && grep -v '^ID:' events/synthetic/wakeup_lat/format && "
        "echo 1 > events/synthetic/wakeup_lat/enable && "
        "for i in 1 2 3 4 5; do sleep 0.05; done && "
        "echo 0 > events/synthetic/wakeup_lat/enable && "
        "echo \"== fired $(grep -c ' wakeup_lat: pid=[0-9]* delta=[0-9]*' trace)\"; "
        # (an O_TRUNC open of a trigger file removes its triggers: unreg_all)
        ": > events/sched/sched_switch/trigger; : > events/sched/sched_waking/trigger; "
        "echo '!wakeup_lat' >> synthetic_events; echo '== left' && cat dynamic_events && "
        "(grep -h '^hist' events/sched/sched_switch/trigger events/sched/sched_waking/trigger || true)")

pytestmark = pytest.mark.skipif(not HEADER.is_file() or not shutil.which("gcc"),
                                reason="needs gcc and libtracefs-dev (make debs installs them)")


def build(into: Path) -> Path:
    (into / "sql.c").write_text(SQL_C)
    return build_c(into / "sql.c", into, flags=libtracefs_flags())


def parts(text: str) -> dict:
    """The script's output by section, libtracefs's numbered variable
    names (``__arg_<n>_<m>``: a counter of the process) made alike."""
    out, name = {}, None
    for line in text.splitlines():
        if line.startswith("== fired"):
            out["fired"] = int(line.split()[2])
        elif line.startswith("== "):
            name = line[3:]
            out[name] = []
        elif name:
            out[name].append(re.sub(r"_[0-9]+_", "_N_", line))
    return out


def test_sql_makes_the_guests_synthetic_event_and_triggers(oracle, tmp_path):
    guest_dir = oracle.work / f"sqlhist-{tmp_path.name}"
    guest_dir.mkdir(exist_ok=True)
    try:
        sql = build(guest_dir)
        real = oracle.run(SHOW.format(sql=sql, query=SQL), timeout=300)
        assert real.returncode == 0, real.stderr.decode(errors="replace")[-2000:]
    finally:
        shutil.rmtree(guest_dir, ignore_errors=True)
    sql = build(tmp_path)
    fake = subprocess.run([FAKEDEBUGFS, "run", "--profile", "debian-6.12", "--", "sh", "-c",
                           SHOW.format(sql=sql, query=SQL)],
                          capture_output=True, text=True, timeout=300)
    assert fake.returncode == 0, fake.stderr[-2000:]
    want, got = parts(real.text), parts(fake.stdout)
    assert want["dynamic_events"] == ["s:synthetic/wakeup_lat\tpid_t pid; u64 delta"]
    for name in ("dynamic_events", "waking", "switch", "format"):
        assert got[name] == want[name], name
    assert want["fired"] > 0 and got["fired"] > 0, (want["fired"], got["fired"])
    assert want["left"] == got["left"] == []  # (the guest is the session's: left clean)
