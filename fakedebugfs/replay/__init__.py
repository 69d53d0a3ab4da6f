"""The paths earlier READMEs gave users, kept as thin aliases:
``from fakedebugfs.replay import open_recording`` and
``python -m fakedebugfs.replay.tracedat FILE``.  The recordings readers live
in :mod:`fakedebugfs.sources.replay`."""

from fakedebugfs.sources.replay import *  # noqa: F401,F403
from fakedebugfs.sources.replay import __all__  # noqa: F401
