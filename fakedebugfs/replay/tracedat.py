"""``python -m fakedebugfs.replay.tracedat FILE``: the trace.dat reader's
command line, :mod:`fakedebugfs.sources.replay.tracedat`."""

import sys

from fakedebugfs.sources.replay.tracedat import *  # noqa: F401,F403
from fakedebugfs.sources.replay.tracedat import main

if __name__ == "__main__":
    sys.exit(main())
