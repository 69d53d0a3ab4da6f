"""The oracle: a real distro kernel under QEMU, beside the fake.

A profile that names a Debian kernel package (its ``oracle`` file) can be
booted: :class:`~fakedebugfs.oracle.guest.Guest` runs that kernel under TCG
with the host's root shared read-only, so the host's own trace-cmd, bash
and python run against the guest's real tracefs.  The suite compares the
fake with it (``tests/oracle.py``'s fixture), ``capture-profile`` runs in
it, and ``python -m fakedebugfs.oracle`` gives a shell command line to it.
How it is built and why: docs/oracle.md.
"""

from fakedebugfs.oracle.guest import Guest, Result, why_not
from fakedebugfs.oracle.image import OracleError

__all__ = ["Guest", "Result", "OracleError", "why_not"]
