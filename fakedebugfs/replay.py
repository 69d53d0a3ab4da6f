"""``from fakedebugfs.replay import open_recording``, as the README has it:
the recordings reader lives in :mod:`fakedebugfs.sources.replay`."""

from fakedebugfs.sources.replay import *  # noqa: F401,F403
from fakedebugfs.sources.replay import __all__  # noqa: F401
