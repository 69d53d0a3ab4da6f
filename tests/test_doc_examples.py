"""Every code example of README.md and docs/*.md runs, as a reader would
run it (tests/support/docexamples.py finds them, with their markers):

* a ``python`` block with a ``def test_`` is a test file: pytest runs it
  with the plugin (``FAKEDEBUGFS_REQUIRE=1``: it must pass, not skip);
* another ``python`` block is a script, run by this venv's Python;
* a ``sh`` block runs (``set -e``) as root in a private mount namespace
  with a tmpfs over /mnt (its ``/mnt/fake`` is its own) and its own run
  state directory; every fake it mounted is unmounted when it ends.

Each runs in a folder of its own with this venv's commands first on PATH,
``CHECKOUT`` naming this checkout, and ``my-tool`` (the README's "tool under
test") played by a stand-in that counts the ``kmalloc`` lines of
``/sys/kernel/tracing/trace``.  A block marked ``<!-- example: skip (why)
-->`` is reported as skipped with its reason, and the skips are counted:
there may be no more than ``MAX_SKIPPED``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.docexamples import REPO, Example, MarkerError, _examples, examples, markdown_files

VENV_BIN = Path(sys.executable).parent
EXAMPLES = examples()
MAX_SKIPPED = 8

# the README's "tool under test": how many kmalloc events the trace holds
MY_TOOL = """#!/bin/sh
n=$(grep -c ' kmalloc: ' /sys/kernel/tracing/trace || true)
if [ "$n" = 1 ]; then echo "1 allocation"; else echo "$n allocations"; fi
"""


def _env(tmp_path: Path) -> dict:
    stand_ins = tmp_path / "stand-ins"
    stand_ins.mkdir()
    tool = stand_ins / "my-tool"
    tool.write_text(MY_TOOL)
    tool.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "FAKEDEBUGFS_REQUIRE")}
    env.update(PATH=f"{VENV_BIN}:{stand_ins}:{env.get('PATH', '/usr/bin:/bin')}",
               CHECKOUT=str(REPO), FAKEDEBUGFS_REQUIRE="1")
    return env


def _python(ex: Example, work: Path, env: dict) -> subprocess.CompletedProcess:
    if ex.after:
        subprocess.run(["sh", "-ec", ex.after], cwd=work, env=env, check=True, timeout=60)
    if "def test_" in ex.code:
        (work / "test_example.py").write_text(ex.code)
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "test_example.py"], cwd=work, env=env, capture_output=True,
                              text=True, timeout=240)
    (work / "example.py").write_text(ex.code)
    return subprocess.run([sys.executable, "example.py"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=240)


# the namespace's set-up: /mnt private, every fake mounted in it unmounted at
# the end (the block's status kept)
SH_PROLOGUE = """\
mount -t tmpfs -o mode=0755 fakedebugfs-example /mnt
unmount_fakes() {
    status=$?
    for m in $(awk '$1 == "fakedebugfs" {print $2}' /proc/self/mounts); do
        fakedebugfs umount "$m" >/dev/null 2>&1 || umount -l "$m"
    done
    exit $status
}
trap unmount_fakes EXIT
set -e
"""


def _sh(ex: Example, work: Path, env: dict) -> subprocess.CompletedProcess:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a shell example runs as root, in a private mount namespace (unshare)")
    env = dict(env, FAKEDEBUGFS_RUNDIR=str(work / ".run"))
    script = SH_PROLOGUE + (ex.after + "\n" if ex.after else "") + ex.code
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          cwd=work, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("ex", EXAMPLES, ids=[ex.id for ex in EXAMPLES])
def test_example_runs(ex: Example, tmp_path):
    if ex.skip:
        pytest.skip(f"marked in {ex.id}: {ex.skip}")
    work = tmp_path / "work"
    work.mkdir()
    env = _env(tmp_path)
    p = (_python if ex.lang == "python" else _sh)(ex, work, env)
    assert p.returncode == 0, f"{ex.id} failed:\n{ex.code}\n--- stdout\n{p.stdout[-4000:]}" \
                              f"\n--- stderr\n{p.stderr[-4000:]}"
    if "def test_" in ex.code:
        assert "passed" in p.stdout and "skipped" not in p.stdout, p.stdout


def test_skips_are_few_and_say_why():
    """Each skipped example says why; there are few, and most examples run."""
    skipped = [ex for ex in EXAMPLES if ex.skip]
    print(f"{len(EXAMPLES)} examples, {len(skipped)} marked skip:",
          *(f"  {ex.id}: {ex.skip}" for ex in skipped), sep="\n")
    assert all(len(ex.skip.strip()) >= 10 for ex in skipped)
    assert len(skipped) <= MAX_SKIPPED and len(EXAMPLES) - len(skipped) >= 2 * len(skipped)


def test_markers_are_checked():
    """The extractor: a marker applies to the next fence only, must be
    well formed and right before it; plain blocks are not examples."""
    text = textwrap.dedent("""\
        <!-- example: skip (needs Docker here) -->
        ```sh
        docker run x
        ```
        ```
        a diagram
        ```
        <!-- example: after: touch x -->
        ```python
        print(1)
        ```
        """)
    found = _examples("x.md", text)
    assert [(e.line, e.lang, e.skip, e.after) for e in found] == \
        [(2, "sh", "needs Docker here", ""), (9, "python", None, "touch x")]
    for bad in ("<!-- example: skp (x) -->\n```sh\nx\n```\n",
                "<!-- example: skip (x) -->\n\ntext\n```sh\nx\n```\n",
                "<!-- example: skip (x) -->\n```\nx\n```\n"):
        with pytest.raises(MarkerError):
            _examples("x.md", bad)


def test_an_example_that_emits_before_enabling_fails(tmp_path):
    """The README's pytest example with its marker's ``enable_all=True``
    taken out (the event is then emitted into a fake where it is not
    enabled): the example's own assertion fails."""
    readme = [ex for ex in EXAMPLES if ex.path == "README.md" and "def test_" in ex.code]
    assert readme and "enable_all=True" in readme[0].code
    ex = readme[0]
    broken = Example(ex.path, ex.line, ex.lang, ex.code.replace(", enable_all=True", ""))
    work = tmp_path / "work"
    work.mkdir()
    p = _python(broken, work, _env(tmp_path))
    assert p.returncode == 1 and "1 failed" in p.stdout, p.stdout + p.stderr
    assert "assert '1 allocation' in '0 allocations" in p.stdout, p.stdout


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings (lower case, spaces to
    hyphens, punctuation but ``-`` and ``_`` dropped)."""
    out = set()
    for line in path.read_text().splitlines():
        m = re.match(r"^#{1,6} +(.*?) *$", line)
        if m:
            title = re.sub(r"[`*]", "", m.group(1)).lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_links_between_the_docs_resolve():
    """Every relative link of README.md and docs/*.md names a file of the
    checkout and, with ``#anchor``, a heading of that file."""
    broken = []
    for md in markdown_files():
        text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            name, _, anchor = target.partition("#")
            dest = (md.parent / name).resolve() if name else md
            if not dest.exists():
                broken.append(f"{md.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{md.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []
