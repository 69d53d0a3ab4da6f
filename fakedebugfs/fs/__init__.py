"""The FUSE adapter: a tree of nodes with kernel-style file operations,
served by pyfuse3 (see :mod:`fakedebugfs.fs.operations`)."""

import pyfuse3

from fakedebugfs.errors import MountError
from fakedebugfs.version import PYFUSE3


class Pyfuse3Mismatch(MountError, ImportError):
    """The installed pyfuse3 is not the patched build fakedebugfs needs
    (its version, with fakedebugfs's local label, says so)."""


if getattr(pyfuse3, "__version__", None) != PYFUSE3:
    raise Pyfuse3Mismatch(
        f"pyfuse3 {getattr(pyfuse3, '__version__', '?')} is installed, fakedebugfs needs its "
        f"patched build {PYFUSE3}: `pip install --force-reinstall --no-deps "
        f"pyfuse3-{PYFUSE3}-*.whl` from fakedebugfs's dist/ (`make dist`), or `make install`")
