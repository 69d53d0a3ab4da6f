"""Compiled parts of the package: the engine's Cython fast paths and the C
helpers of ``fakedebugfs/native``.

Each ``*.pyx`` sits beside the pure-Python module whose inner loop it runs
(for example ``engine/core/rb_fast.pyx`` beside ``ringbuffer.py``) and is
imported as an option: without the compiled module the Python path runs,
with the same bytes (tests compare the two).  The C helpers (the splice
preload library of ``fakedebugfs run``) are compiled into the package too,
so an installed fakedebugfs needs no gcc (``fakedebugfs.native.build``
finds them).  Everything else about the package is in pyproject.toml.

Nothing is written into the source tree but what an in-place (editable)
build puts beside its sources: the generated C goes to setuptools' build
directory, and that directory is a temporary one when the checkout is not
writable (a read-only copy, another user's clone).

The modules are compiled once: a wheel built after the editable install
(``make dist`` after ``make install``) takes each in-place module that is
newer than its sources (its ``.pyx``, the package's ``.pxd`` files and this
file), for this Python, and the in-place C helpers of the current source,
instead of running Cython and gcc again.  (Cython alone would regenerate
every module: each build gets a fresh Cython in its isolated environment,
whose own ``.pxd`` files are then newer than the generated C.)
"""

import atexit
import importlib.util
import os
import shutil
import tempfile
from glob import glob
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
SOURCES = sorted(glob("fakedebugfs/**/*.pyx", recursive=True))
DIRECTIVES = {"language_level": 3, "boundscheck": False, "wraparound": False,
              "cdivision": True, "initializedcheck": False}


def build_options() -> dict:
    """setuptools' ``build/`` and ``*.egg-info`` in the checkout, or in a
    temporary directory (removed at exit) when the checkout is read-only."""
    if os.access(HERE, os.W_OK):
        return {}
    base = tempfile.mkdtemp(prefix="fakedebugfs-build-")
    atexit.register(shutil.rmtree, base, ignore_errors=True)
    return {"build": {"build_base": os.path.join(base, "build")}, "egg_info": {"egg_base": base}}


def native_module():
    """``fakedebugfs/native/__init__.py`` loaded by its path (the package
    itself is not importable while it is being built)."""
    spec = importlib.util.spec_from_file_location(
        "_fakedebugfs_native", HERE / "fakedebugfs" / "native" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildExt(build_ext):
    """Cython output under ``build_temp`` (never the source tree); after
    the extensions, the C helpers into the built package (and beside their
    sources for an in-place build)."""

    def finalize_options(self):
        super().finalize_options()
        # the modules are independent: one process per core, to Cython and to gcc
        jobs = len(os.sched_getaffinity(0))
        self.parallel = self.parallel or jobs
        self.reused = {} if self.inplace else \
            {ext.name: path for ext in self.extensions if (path := self.built_in_place(ext))}
        todo = [ext for ext in self.extensions if ext.name not in self.reused]
        generated = cythonize(todo, quiet=True, compiler_directives=DIRECTIVES,
                              build_dir=os.path.join(self.build_temp, "cython"),
                              nthreads=jobs) if todo else []
        sources = {ext.name: ext.sources for ext in generated}
        for ext in todo:  # setuptools' own objects, with the C for the .pyx
            ext.sources = sources[ext.name]

    def built_in_place(self, ext):
        """The in-place build of *ext* for this Python, if it is newer than
        its ``.pyx``, every ``.pxd`` of the package and this file."""
        built = HERE / self.get_ext_filename(ext.name)
        sources = [HERE / ext.sources[0], Path(__file__).resolve(),
                   *HERE.glob("fakedebugfs/**/*.pxd")]
        try:
            newest = max(path.stat().st_mtime for path in sources)
            return built if built.stat().st_mtime > newest else None
        except OSError:  # not built in place (or a source gone)
            return None

    def build_extension(self, ext):
        """Compiled, or (building elsewhere than in place) copied from the
        in-place build when that is up to date (:meth:`built_in_place`)."""
        built = self.reused.get(ext.name)
        dest = Path(self.get_ext_fullpath(ext.name))
        if built is None or self.inplace or dest.resolve() == built:
            super().build_extension(ext)
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, dest)
        print(f"{ext.name}: the in-place build, up to date (not compiled again)")

    def run(self):
        super().run()
        native = native_module()
        dest = Path(self.build_lib) / "fakedebugfs" / "native"
        names = [native.prebuilt_name(name) for name in native.TARGETS]
        here = HERE / "fakedebugfs" / "native"
        if not self.inplace and all((here / name).exists() for name in names):
            dest.mkdir(parents=True, exist_ok=True)  # named by their source's key: current
            for name in names:
                shutil.copy2(here / name, dest / name)
        else:
            native.build_prebuilt(dest)
        if self.inplace:
            native.build_prebuilt(here)

    def get_outputs(self):
        native = native_module()
        return [*super().get_outputs(),
                *(os.path.join(self.build_lib, "fakedebugfs", "native", native.prebuilt_name(name))
                  for name in native.TARGETS)]


setup(ext_modules=[Extension(path[:-len(".pyx")].replace("/", "."), [path]) for path in SOURCES],
      cmdclass={"build_ext": BuildExt},
      options=build_options())
