"""The conformance table: the tracing suites users run against a kernel,
run in the oracle guest (the real column) and under the fake (its column),
written to docs/conformance.md by ``python -m bench.conformance``.

The suites are not the project's code: they are fetched and built under
``build/conformance`` (git-ignored) and never committed.

- ftracetest, the kernel's tools/testing/selftests/ftrace, from the Debian
  source package of the profile's kernel (``linux-source-6.12`` at the
  version of the oracle's ``linux-image`` package), with ``apt-get download``;
- libtracefs's ``utest`` and trace-cmd's ``utest``, cloned with git at the
  pinned commits below (the upstream is git.kernel.org; ``--git-from DIR``
  clones from local mirrors instead), built against a libtraceevent and a
  libtracefs installed under ``build/conformance/prefix`` (Debian 12 has
  libtraceevent 1.7, libtracefs 1.8.1 needs 1.8).

A *side* is where a suite runs: ``guest`` (the profile's Debian kernel
under QEMU, a guest of its own so the suites may change its top level),
or a fake profile (``debian-6.12``, ``linux-6.18``: ``fakedebugfs run
--profile P --cpus 4``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD = ROOT / "build" / "conformance"
DOC = ROOT / "docs" / "conformance.md"

# the profile the oracle boots, and the guest of its own the suites use
PROFILE = "debian-6.12"
GUEST_NAME = "conf"
CPUS = 4  # the guest's vCPUs; the fake is given as many (tracing_cpumask checks need 4)

GIT_UPSTREAM = "https://git.kernel.org/pub/scm/libs/libtrace/{name}.git"


@dataclass(frozen=True)
class Git:
    """A library or tool built from a git commit (the tag named for reading)."""
    name: str      # the upstream repository's name
    tag: str
    commit: str


LIBTRACEEVENT = Git("libtraceevent", "libtraceevent-1.8.4", "bd47bd544c9ebc9f44bd88c2b2f2049230741058")
LIBTRACEFS = Git("libtracefs", "libtracefs-1.8.1", "417c2e3aa21af670cc5c13db633dd35292f2d0fa")


@dataclass(frozen=True)
class Suite:
    """One suite: how it is fetched (``git`` or the kernel source) and run
    (``kind``: ``ftracetest`` or ``cunit``, a CUnit ``trace-utest``)."""
    name: str
    kind: str
    title: str
    git: Git | None = None
    sides: tuple = ("guest", "debian-6.12")
    # seconds one run may take in the guest (emulated, ~20x slower) and on the fake
    guest_timeout: int = 3600
    fake_timeout: int = 900
    notes: tuple = field(default=())
    # options of ``fakedebugfs run`` on the fake's sides: the libtracefs utest
    # counts the events of its own system calls (getppid() loops), which a
    # fake sees only by mirroring them from the running kernel (docs/mirroring.md)
    fake_options: tuple = ()


SUITES = {
    s.name: s for s in (
        Suite("ftracetest", "ftracetest",
              "ftracetest (tools/testing/selftests/ftrace of the Debian kernel source)",
              sides=("guest", "debian-6.12", "linux-6.18"), guest_timeout=7200),
        Suite("libtracefs-utest", "cunit", "libtracefs 1.8.1 utest", git=LIBTRACEFS,
              fake_options=("--mirror=tree",)),
        Suite("trace-cmd-3.1.6-utest", "cunit", "trace-cmd 3.1.6 utest (Debian 12's trace-cmd)",
              git=Git("trace-cmd", "trace-cmd-v3.1.6", "0a68daed9f58e4429c0f1e7818f7cc0634873112")),
        Suite("trace-cmd-3.3.3-utest", "cunit", "trace-cmd 3.3.3 utest (histogram, reset, readers)",
              git=Git("trace-cmd", "trace-cmd-v3.3.3", "9da7e594cc9a33694b4e8aae9da9898241d399d8")),
    )
}

SIDES = ("guest", "debian-6.12", "linux-6.18")
