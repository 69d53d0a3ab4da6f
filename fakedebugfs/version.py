"""The version of fakedebugfs (one place; the package and the control protocol read it),
and the one pyfuse3 it runs on."""

__version__ = "0.2.0"

# pyfuse3 3.5.0 from PyPI's sdist with patches/*.patch, under a local version
# label of its own so that PyPI's pyfuse3 can never stand in for it: the
# Makefile builds it under this version (the startup patch writes it into
# pyfuse3.__version__), pyproject.toml requires exactly it, and
# fakedebugfs.fs refuses any other at import.
PYFUSE3 = "3.5.0+fakedebugfs.3"
