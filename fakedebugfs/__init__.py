"""fakedebugfs: the kernel's debugfs tracing trees over FUSE, as a test instrument.

    from fakedebugfs import Fake
    with Fake(cpus=2) as fk:
        fk.emit("kmem:kmalloc", cpu=1, pid=42, comm="app", bytes_req=8)

Layout, from the bottom up (a module imports only from layers below its
own; ``tests/test_layering.py`` checks it): :mod:`.errors` and
:mod:`.native` (C helpers); :mod:`.engine` (the sans-I/O simulated kernel:
core/, one package per tracer, and :mod:`.engine.kernel`);
:mod:`.instrument` (scripted faults); :mod:`.sources` (what feeds the
engine: workloads, replay, injection, process events); :mod:`.fs` (the
pyfuse3 adapter); :mod:`.trees` (one module per debugfs tree);
:mod:`.control` (the control socket: protocol, service, client, and the
state files that say where each fake's socket is); :mod:`.server` (the
trio server and its lifecycle); :mod:`.api` (the Python API);
:mod:`.sandbox` (``run``, a layer over the API); then :mod:`.clients`,
:mod:`.cli` and :mod:`.pytest_plugin`.
"""

from fakedebugfs.version import __version__

_API = ("Fake", "Event", "MountOptions", "FakeError", "MountError", "ServerGone",
        "ProtocolError", "RequestError", "EventError", "DefineError", "FaultError",
        "ScenarioError", "ReplayError", "WaitTimeout")

__all__ = ["__version__", *_API]


def __getattr__(name):
    """The API, imported on first use (``import fakedebugfs`` stays cheap)."""
    if name in _API:
        from fakedebugfs import api

        return getattr(api, name)
    raise AttributeError(f"module 'fakedebugfs' has no attribute {name!r}")
