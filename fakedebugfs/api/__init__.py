"""The Python API: the one way into a fake (the CLI, ``run`` and the pytest
plugin are layers over it).

:class:`Fake` mounts a fake and drives it; :class:`MountOptions` is the table
of its options; the errors are those of :mod:`fakedebugfs.errors`.
Names are imported on first use, so ``fakedebugfs mount`` (which needs only
the options) does not load the client side.
"""

from importlib import import_module

_WHERE = {"Fake": ".fake", "Event": ".fake", "MountOptions": ".options"}
_ERRORS = ("FakeError", "MountError", "ServerGone", "ProtocolError", "RequestError",
           "EventError", "DefineError", "FaultError", "ScenarioError", "ReplayError",
           "WaitTimeout")

__all__ = ["Fake", "Event", "MountOptions", *_ERRORS]


def __getattr__(name):
    if name in _WHERE:
        return getattr(import_module(_WHERE[name], __name__), name)
    if name in _ERRORS:
        return getattr(import_module("fakedebugfs.errors"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
