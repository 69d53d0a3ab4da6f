import sys

from fakedebugfs.cli import main

sys.exit(main())
