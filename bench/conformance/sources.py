"""Fetching and building the suites under build/conformance.

- ftracetest: only tools/testing/selftests/ftrace is taken out of Debian's
  ``linux-source-X.Y`` package, at the version of the linux-image package
  the oracle boots (its ``.deb`` in the oracle's cache names it), so the
  tests are those of the kernel they run against.
- the utests: ``git clone`` (upstream, or ``DIR/<name>`` with
  ``--git-from DIR``), a work tree per pinned commit, ``make`` with the
  libraries installed under ``build/conformance/prefix``.  Their Makefiles'
  ``install`` would add a file to /etc/ld.so.conf.d, run ldconfig and put
  the .pc files into the system's pkg-config folder: those are pointed
  into the prefix, and the programs run with LD_LIBRARY_PATH instead.

Whatever is already there is reused: a second run builds nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from fakedebugfs.oracle.image import _deb, cache_dir, oracle_spec

from . import BUILD, GIT_UPSTREAM, LIBTRACEEVENT, LIBTRACEFS, Git, Suite

PREFIX = BUILD / "prefix"
SRC = BUILD / "src"
FTRACE_SUBDIR = "tools/testing/selftests/ftrace"


class SourceError(RuntimeError):
    """A suite cannot be fetched or built here; the message says why."""


def _run(argv, cwd=None, env=None, log: Path | None = None) -> None:
    out = open(log, "ab") if log else subprocess.DEVNULL
    try:
        r = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, stdout=out,
                           stderr=subprocess.STDOUT if log else subprocess.PIPE)
    finally:
        if log:
            out.close()
    if r.returncode != 0:
        tail = log.read_text(errors="replace")[-600:] if log else r.stderr.decode()[-600:]
        raise SourceError(f"{' '.join(map(str, argv))} (in {cwd}) exited {r.returncode}: {tail}")


# --- ftracetest, from the kernel's Debian source package -------------------

def kernel_source_version(profile: Path) -> tuple[str, str]:
    """(``linux-source-X.Y``, its Debian version) matching the oracle's kernel package."""
    package = oracle_spec(profile)["package"]
    deb = _deb(package, cache_dir() / "debs")
    fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], capture_output=True,
                            text=True, check=True).stdout.strip()
    release = package.removeprefix("linux-image-")
    series = ".".join(release.split(".")[:2])
    return f"linux-source-{series}", fields


def ftracetest_dir(profile: Path) -> Path:
    """tools/testing/selftests/ftrace of the profile kernel's source, fetched once."""
    source, version = kernel_source_version(profile)
    top = BUILD / f"{source}_{version}"
    ftrace = top / FTRACE_SUBDIR
    if (ftrace / "ftracetest").is_file():
        return ftrace
    debs = BUILD / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{source}_{version.replace(':', '%3a')}_*.deb"))
    if not found:
        _run(["apt-get", "download", f"{source}={version}"], cwd=debs)
        found = sorted(debs.glob(f"{source}_*.deb"))
    if not found:
        raise SourceError(f"apt-get download {source}={version} left no .deb in {debs}")
    top.mkdir(parents=True, exist_ok=True)
    # the package holds /usr/src/linux-source-X.Y.tar.xz; only the selftests come out of it
    tarball = f"./usr/src/{source}.tar.xz"
    script = (f"dpkg-deb --fsys-tarfile '{found[-1]}' | tar -xO '{tarball}' | xz -dc "
              f"| tar -x -C '{top}' --strip-components=1 --wildcards '{source}/{FTRACE_SUBDIR}/*'")
    _run(["sh", "-c", script])
    if not (ftrace / "ftracetest").is_file():
        raise SourceError(f"{found[-1]} holds no {FTRACE_SUBDIR}/ftracetest")
    return ftrace


# --- the utests, from git --------------------------------------------------

def _clone(git: Git, git_from: Path | None) -> Path:
    """A work tree of *git* at its commit: ``src/<name>-<tag>``."""
    tree = SRC / f"{git.name}-{git.tag.rsplit('-', 1)[-1]}"
    if (tree / ".git").exists():
        head = subprocess.run(["git", "-C", tree, "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        if head == git.commit:
            return tree
        shutil.rmtree(tree)
    origin = _origin(git.name, git_from)
    SRC.mkdir(parents=True, exist_ok=True)
    _run(["git", "clone", "-q", "--no-checkout", origin, tree])
    _run(["git", "-c", "advice.detachedHead=false", "checkout", "-q", git.commit], cwd=tree)
    # the parsers flex and bison made are committed; a checkout may leave
    # them older than their sources, and make would then want flex and bison
    made = subprocess.run(["git", "ls-files", "*-lex.c", "*.tab.c", "*.tab.h"], cwd=tree,
                          capture_output=True, text=True).stdout.split()
    for name in made:
        os.utime(tree / name)
    return tree


def _origin(name: str, git_from: Path | None) -> str:
    if git_from is None:
        return GIT_UPSTREAM.format(name=name)
    for cand in (git_from / name, git_from / f"{name}.git", *git_from.glob(f"*+{name}/repo")):
        if cand.exists():
            return str(cand)
    raise SourceError(f"no clone of {name} in {git_from} (expected {git_from / name})")


def _make_env() -> dict:
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = str(PREFIX / "lib" / "pkgconfig")
    return env


def _install_args() -> list:
    """Install into the prefix only (no ld.so.conf.d file, no ldconfig, no system .pc)."""
    return [f"prefix={PREFIX}", "libdir_relative=lib", f"pkgconfig_dir={PREFIX}/lib/pkgconfig",
            f"LD_SO_CONF_PATH={PREFIX}/etc/", "LDCONFIG=true"]


def _library(git: Git, git_from: Path | None, target: str, log: Path) -> Path:
    tree = _clone(git, git_from)
    stamp = PREFIX / f".{git.name}-{git.commit[:12]}"
    if not stamp.exists():
        (PREFIX / "etc").mkdir(parents=True, exist_ok=True)
        _run(["make", *_install_args(), target], cwd=tree, env=_make_env(), log=log)
        stamp.touch()
    return tree


def libraries(git_from: Path | None) -> None:
    """libtraceevent and libtracefs in the prefix (libtracefs 1.8.1 needs libtraceevent >= 1.8)."""
    log = BUILD / "build.log"
    BUILD.mkdir(parents=True, exist_ok=True)
    _library(LIBTRACEEVENT, git_from, "install_libs", log)
    _library(LIBTRACEFS, git_from, "install_libs", log)


def utest(suite: Suite, git_from: Path | None) -> Path:
    """The suite's built ``utest/trace-utest``."""
    if not _cunit():
        raise SourceError("CUnit is missing (apt-get install libcunit1-dev pkg-config)")
    libraries(git_from)
    tree = _clone(suite.git, git_from)
    binary = tree / "utest" / "trace-utest"
    if not binary.is_file():
        extra = ["NO_PYTHON=1"] if suite.git.name == "trace-cmd" else []
        _run(["make", f"prefix={PREFIX}", *extra, "test"], cwd=tree, env=_make_env(),
             log=BUILD / "build.log")
    if not binary.is_file():
        raise SourceError(f"make test in {tree} built no utest/trace-utest")
    return binary


def _cunit() -> bool:
    return Path("/usr/include/CUnit/Basic.h").is_file()


def library_path() -> str:
    """LD_LIBRARY_PATH for the utests and the trace-cmd they run."""
    return str(PREFIX / "lib")
