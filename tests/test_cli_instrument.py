"""``fakedebugfs emit / define / fault / wait`` and the CLI's answers to bad
input, run as a shell user would, against real mounts."""

from __future__ import annotations

import json
import re

import pytest

from conftest import is_mounted, run_cli

KMALLOC_ARGS = ("call_site=0x10", "ptr=0x20", "bytes_req=8", "bytes_alloc=8",
                "gfp_flags=0xcc0", "node=-1")
# include/trace/events/kmem.h: "call_site=%pS ptr=%p bytes_req=%zu bytes_alloc=%zu
# gfp_flags=%s node=%d accounted=%s"; an address outside every symbol prints as 0x...
KMALLOC_LINE = re.compile(
    r"^\s+(?P<comm>\S+)-(?P<pid>\d+)\s+\[(?P<cpu>\d{3})\] \.{5}\s+\d+\.\d{6}: kmalloc: "
    r"call_site=0x10 ptr=[0-9a-f]{16} bytes_req=8 bytes_alloc=8 gfp_flags=GFP_KERNEL "
    r"node=-1 accounted=false$")


def events(mnt) -> list[str]:
    return [line for line in (mnt / "tracing" / "trace").read_text().splitlines()
            if not line.startswith("#")]


def test_emit_shows_in_trace_as_the_kernel_formats_kmalloc(fake):
    mnt = fake("--workload", "none", "--enable-all")
    run_cli("emit", mnt, "kmem:kmalloc", *KMALLOC_ARGS)
    run_cli("emit", mnt, "kmem:kmalloc", *KMALLOC_ARGS, "--cpu", "1", "--pid", "42",
            "--comm", "myprog", "--repeat", "2")
    lines = events(mnt)
    assert len(lines) == 3
    first, *mine = [KMALLOC_LINE.match(line) for line in lines]
    assert first and (first["comm"], first["pid"], first["cpu"]) == ("<idle>", "0", "000")
    assert all(m and (m["comm"], m["pid"], m["cpu"]) == ("myprog", "42", "001") for m in mine)


@pytest.mark.parametrize("args, message", [
    (("kmem:kmalloc", "bogus=1"), "kmem:kmalloc has no field 'bogus'"),
    (("kmem:kmalloc", "node=0x80000000"), "field node (int) must be in"),
    (("kmem:kmalloc", "bytes_req=eight"), "field bytes_req (size_t) takes an integer"),
    (("kmem:kmalloc", "node"), "expected FIELD=VALUE"),
    (("kmem:nope",), "unknown event 'kmem:nope'"),
    (("kmalloc",), "name the event as SYSTEM:EVENT"),
    (("kmem:kmalloc", "--cpu", "7"), "cpu 7 does not exist"),
    (("kmem:kmalloc", "--repeat", "0"), "--repeat must be at least 1"),
])
def test_bad_emit_is_one_line_exit_2_and_emits_nothing(fake, args, message):
    mnt = fake("--workload", "none", "--enable-all")
    p = run_cli("emit", mnt, *args, check=False)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and message in p.stderr, p.stderr
    assert p.stderr.startswith("fakedebugfs emit: ")
    assert events(mnt) == []


SCENARIO = """\
# three allocations on CPU 1, a pause, then the marker
emit kmem:kmalloc call_site=0x10 ptr=0x20 bytes_req=8 bytes_alloc=8 gfp_flags=0xcc0 node=-1 --cpu 1 --repeat 3
sleep 10ms
{"emit": "ftrace:print", "pid": 7, "comm": "echo", "fields": {"buf": "done"}}
"""


def test_emit_file_applies_a_scenario(fake, tmp_path):
    mnt = fake("--workload", "none", "--enable-all", "--clock", "virtual")
    scenario = tmp_path / "scenario.txt"
    scenario.write_text(SCENARIO)
    p = run_cli("emit", mnt, "--file", scenario)
    assert p.stdout == "3 steps applied\n"
    lines = events(mnt)
    assert len(lines) == 4 and all(KMALLOC_LINE.match(line) for line in lines[:3])
    assert lines[3].endswith("tracing_mark_write: done")


@pytest.mark.parametrize("bad_line, lineno, message", [
    ("emit kmem:kmalloc ptr=zz", 3, "field ptr (const void *) takes an integer"),
    ("sleep forever", 3, "sleep takes seconds"),
    ('{"emit": "kmem:kfree", "repeat": 0}', 3, "repeat must be"),
    ("jump 3", 3, "unknown step 'jump'"),
    ("fault overrun cpu=9 events=3", 3, "cpu"),
])
def test_bad_scenario_line_is_named_and_nothing_applied(fake, tmp_path, bad_line, lineno, message):
    mnt = fake("--workload", "none", "--enable-all")
    scenario = tmp_path / "bad.txt"
    scenario.write_text(SCENARIO.splitlines()[0] + "\n" + SCENARIO.splitlines()[1] + "\n"
                        + bad_line + "\n")
    p = run_cli("emit", mnt, "--file", scenario, check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert f"bad.txt:{lineno}: " in p.stderr and message in p.stderr, p.stderr
    assert events(mnt) == []
    assert json.loads(run_cli("status", mnt).stdout)["injected"] == 0


def test_wait_cli(fake):
    mnt = fake("--workload", "kmem", "--count", "2000", "--rate", "0")
    run_cli("wait", mnt, "done", "--timeout", "60")
    run_cli("wait", mnt, "idle")
    p = run_cli("wait", mnt, "readers", "--timeout", "0.1", check=False)
    assert p.returncode == 1 and "not readers after 0.1 s" in p.stderr
    assert "tracing/per_cpu/cpu0/trace_pipe_raw" in p.stderr


# --- hygiene -------------------------------------------------------------------------

@pytest.mark.parametrize("rate", ["inf", "nan", "-1", "1e400", "fast"])
def test_bad_rate_is_refused_before_mounting(tmp_path, rate):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = run_cli("mount", mnt, "--rate", rate, check=False)
    assert p.returncode == 2
    assert p.stderr.splitlines()[0].startswith("fakedebugfs mount: argument --rate: ")
    assert p.stderr.splitlines()[1] == "(see `fakedebugfs mount --help`)"
    assert "usage:" not in p.stderr and not is_mounted(mnt)


def test_argument_errors_are_one_line_and_a_hint():
    p = run_cli("mount", check=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 2, p.stderr
    assert "usage:" not in p.stderr
    p = run_cli("frobnicate", check=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 2, p.stderr


def test_umount_refuses_what_is_not_a_fakedebugfs_mount(tmp_path):
    import subprocess

    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "none", str(mnt)], check=True)
    try:
        p = run_cli("umount", mnt, check=False)
        assert p.returncode == 1 and "not a fakedebugfs mount (it is tmpfs)" in p.stderr
        assert is_mounted(mnt)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_commands_against_nothing_mounted(tmp_path):
    p = run_cli("emit", tmp_path, "kmem:kfree", check=False)
    assert p.returncode == 1 and "no fakedebugfs server is serving it" in p.stderr
