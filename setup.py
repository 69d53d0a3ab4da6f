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
        generated = cythonize(self.extensions, quiet=True, compiler_directives=DIRECTIVES,
                              build_dir=os.path.join(self.build_temp, "cython"), nthreads=jobs)
        sources = {ext.name: ext.sources for ext in generated}
        for ext in self.extensions:  # setuptools' own objects, with the C for the .pyx
            ext.sources = sources[ext.name]

    def run(self):
        super().run()
        native = native_module()
        native.build_prebuilt(Path(self.build_lib) / "fakedebugfs" / "native")
        if self.inplace:
            native.build_prebuilt(HERE / "fakedebugfs" / "native")

    def get_outputs(self):
        native = native_module()
        return [*super().get_outputs(),
                *(os.path.join(self.build_lib, "fakedebugfs", "native", native.prebuilt_name(name))
                  for name in native.TARGETS)]


setup(ext_modules=[Extension(path[:-len(".pyx")].replace("/", "."), [path]) for path in SOURCES],
      cmdclass={"build_ext": BuildExt},
      options=build_options())
