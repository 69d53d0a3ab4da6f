"""Typed errors of a fake, raised by the Python API with the server's message.

Every error a request can get carries a *kind* on the wire (see
:mod:`.protocol`); the client raises the class of that kind.
"""

from __future__ import annotations


class FakeError(Exception):
    """Base of every error fakedebugfs raises to its users."""

    kind = "error"

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.kind


class MountError(FakeError):
    """The file system cannot be mounted; the message says why and what to do."""

    kind = "mount"


class ServerGone(FakeError):
    """No server answers for that mount point (not mounted, or it died)."""

    kind = "gone"


class ProtocolError(FakeError):
    """The two sides do not speak the same control protocol."""

    kind = "protocol"


class RequestError(FakeError, ValueError):
    """The server refused a request: unknown command, bad arguments."""

    kind = "request"


class EventError(RequestError):
    """An injection the server refused: unknown event, bad field, bad ts."""

    kind = "event"


class DefineError(RequestError):
    """A ``define`` the server refused: bad declaration, name taken."""

    kind = "define"


class FaultError(RequestError):
    """A fault specification the server refused."""

    kind = "fault"


class ScenarioError(RequestError):
    """A scenario with a bad step; ``line`` is its line (1-based), if known.
    Nothing of the scenario was applied."""

    kind = "scenario"

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line


class ReplayError(FakeError):
    """A replay refused (a broken recording, bad options) or failed."""

    kind = "replay"


class WaitTimeout(FakeError, TimeoutError):
    """A wait (idle, consumed, workload done) did not end in time."""

    kind = "timeout"


KINDS: dict[str, type[FakeError]] = {
    cls.kind: cls for cls in (FakeError, MountError, ServerGone, ProtocolError, RequestError,
                              EventError, DefineError, FaultError, ScenarioError, ReplayError,
                              WaitTimeout)
}


def from_reply(reply: dict) -> FakeError:
    """The exception a refused reply stands for."""
    cls = KINDS.get(reply.get("kind", "error"), FakeError)
    message = reply.get("error", "the server refused the request")
    if cls is ScenarioError:
        return ScenarioError(message, reply.get("line"))
    return cls(message)
