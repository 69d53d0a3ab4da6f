"""fakedebugfs: the kernel's debugfs tracing trees over FUSE, as a test instrument.

    from fakedebugfs import Fake
    with Fake(cpus=2) as fk:
        fk.emit("kmem:kmalloc", cpu=1, pid=42, comm="app", bytes_req=8)

Layout: :mod:`.engine` (sans-I/O tracer engine: core/ and one package per
tracer), :mod:`.instrument` (injection and faults), :mod:`.workloads` (event
sources), :mod:`.trees` (one module per debugfs tree), :mod:`.fs` (the
pyfuse3 adapter), :mod:`.server` (the trio server), :mod:`.control` (the
control socket), :mod:`.api` (the Python API), :mod:`.pytest_plugin`,
:mod:`.clients` (readers and reports), :mod:`.cli`.
"""

from .version import __version__

_API = ("Fake", "Event", "MountOptions", "FakeError", "MountError", "ServerGone",
        "ProtocolError", "RequestError", "EventError", "DefineError", "FaultError",
        "ScenarioError", "ReplayError", "WaitTimeout")

__all__ = ["__version__", *_API]


def __getattr__(name):
    """The API, imported on first use (``import fakedebugfs`` stays cheap)."""
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'fakedebugfs' has no attribute {name!r}")
