"""Compiled fast paths of the engine, built with Cython.

Each ``*.pyx`` sits beside the pure-Python module whose inner loop it runs
(for example ``engine/core/rb_fast.pyx`` beside ``ringbuffer.py``) and is
imported as an option: without the compiled module the Python path runs,
with the same bytes (tests compare the two).  Everything else about the
package is in pyproject.toml.
"""

from glob import glob

from Cython.Build import cythonize
from setuptools import setup

SOURCES = sorted(glob("fakedebugfs/**/*.pyx", recursive=True))

setup(ext_modules=SOURCES and cythonize(
    SOURCES,
    build_dir="build/cython",  # the generated C stays out of the source tree
    compiler_directives={"language_level": 3, "boundscheck": False, "wraparound": False,
                         "cdivision": True, "initializedcheck": False},
    quiet=True))
