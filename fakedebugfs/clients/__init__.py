"""Userspace clients of the emulated interfaces: they use only what a
program on a real kernel could (files, poll, mmap, ioctl) plus the shared
binary layouts of :mod:`fakedebugfs.engine.core.layouts`."""
