"""fakedebugfs: the kernel's debugfs tracing trees over FUSE.

Layout: :mod:`.engine` (sans-I/O tracer engine), :mod:`.workloads` (event
sources), :mod:`.trees` (one module per debugfs tree), :mod:`.fs` (the
pyfuse3 adapter), :mod:`.server` (the trio server), :mod:`.clients`
(readers and reports), :mod:`.cli`.
"""

__version__ = "0.1.0"
