"""``python -m fakedebugfs run --attach MNT -- COMMAND`` (what ``Fake.run``
and ``Fake.popen`` start) takes a short way past the CLI's parser
(``fakedebugfs.sandbox.run.attach_main``): the same statuses, messages and
namespace as the CLI gives, without importing argparse and the mount
options; any other form of the line goes to the CLI as before."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fakedebugfs import Fake


@pytest.fixture(scope="module")
def fake():
    with Fake() as fk:
        yield fk


def module(*args, importtime=False, **kwargs) -> subprocess.CompletedProcess:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "fakedebugfs", *args],
                          capture_output=True, text=True, timeout=120, **kwargs)


def imported(stderr: str) -> set[str]:
    return {line.split("|")[-1].strip() for line in stderr.splitlines()
            if line.startswith("import time:")}


@pytest.mark.parametrize("form", ["--attach {}", "--attach={}", "--unsealed --attach {}",
                                  "--attach {} --unsealed"])
def test_short_way_status_namespace_and_no_parser(fake, form):
    args = ["run", *form.format(fake.root).split(), "--",
            "sh", "-c", "grep -c ' /sys/kernel/tracing tracefs ' /proc/mounts; "
                        "cat /sys/kernel/tracing/tracing_on; exit 7"]
    done = module(*args, importtime=True)
    assert done.returncode == 7, done.stderr[-2000:]
    assert done.stdout == "1\n1\n"
    mods = imported(done.stderr)
    assert "fakedebugfs.sandbox.run" in mods
    assert "argparse" not in mods and "fakedebugfs.cli" not in mods


def test_short_way_errors_are_the_clis(fake, tmp_path):
    for argv in (["run", "--attach", str(tmp_path), "--", "true"],
                 ["run", "--attach", str(fake.root), "--", "no-such-command-h4"]):
        short = module(*argv)
        through_cli = subprocess.run(
            [sys.executable, "-c", "import sys; from fakedebugfs.cli import main; "
                                   "sys.exit(main(sys.argv[1:]))", *argv],
            capture_output=True, text=True, timeout=120)
        assert (short.returncode, short.stderr) == (through_cli.returncode, through_cli.stderr)
        assert short.returncode != 0 and short.stderr.startswith("fakedebugfs run: ")


def test_other_forms_go_to_the_cli(fake):
    # no command: the CLI's usage error; an option the short way does not take: parsed
    done = module("run", "--attach", str(fake.root), "--", importtime=True)
    assert done.returncode == 2 and "no command given" in done.stderr
    assert "argparse" in imported(done.stderr)
    done = module("run", "--attach", str(fake.root), "--verbose", "--", "true",
                  importtime=True)
    assert "argparse" in imported(done.stderr)
    assert done.returncode in (0, 2)  # whatever the CLI makes of it
