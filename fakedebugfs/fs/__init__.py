"""The FUSE adapter: a tree of nodes with kernel-style file operations,
served by pyfuse3 (see :mod:`fakedebugfs.fs.operations`)."""
