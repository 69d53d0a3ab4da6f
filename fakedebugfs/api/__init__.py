"""The Python API: the one way into a fake (the CLI, ``run`` and the pytest
plugin are layers over it).

:class:`Fake` mounts a fake and drives it; :class:`MountOptions` is the table
of its options; the errors are those of :mod:`fakedebugfs.control.errors`.
"""

from ..control.errors import (DefineError, EventError, FakeError, FaultError, MountError,
                              ProtocolError, ReplayError, RequestError, ScenarioError, ServerGone,
                              WaitTimeout)
from .fake import Event, Fake
from .options import MountOptions

__all__ = ["Fake", "Event", "MountOptions", "FakeError", "MountError", "ServerGone",
           "ProtocolError", "RequestError", "EventError", "DefineError", "FaultError",
           "ScenarioError", "ReplayError", "WaitTimeout"]
