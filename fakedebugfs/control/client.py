"""A blocking client of a mount's control socket (:mod:`.protocol`)."""

from __future__ import annotations

import json
import socket
from typing import Optional

from fakedebugfs.control import runstate
from fakedebugfs.errors import ProtocolError, RequestError, ServerGone, from_reply
from fakedebugfs.control.protocol import (MAX_LINE, PROTOCOL_VERSION, encode, request,
    send_with_fds, too_long)


class ControlClient:
    """One connection to the server of *mountpoint*; reconnects when needed.

    :meth:`call` returns the reply's results or raises the typed error of a
    refused request (:mod:`.errors`)."""

    def __init__(self, mountpoint: str, timeout: Optional[float] = 60.0):
        self.mountpoint = str(mountpoint)
        self.timeout = timeout
        self._sock: Optional[socket.socket] = None
        self._buf = bytearray()

    def _connect(self) -> socket.socket:
        state = runstate.read_state(self.mountpoint)
        if not state:
            raise ServerGone(f"{self.mountpoint}: no fakedebugfs server is serving it")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(state["sock"])
        except OSError as err:
            sock.close()
            raise ServerGone(f"{self.mountpoint}: server not answering "
                             f"({err.strerror or err})") from None
        self._buf = bytearray()
        return sock

    def call(self, cmd: str, io_timeout: Optional[float] = None,
             pass_fds: Optional[list] = None, **args) -> dict:
        """Send one request; its results, or the typed error it got.
        *pass_fds*: file descriptors sent with it (SCM_RIGHTS: ``replay``'s
        ``fd``)."""
        data = encode(request(cmd, **args))
        if len(data) > MAX_LINE:
            raise RequestError(too_long())
        if self._sock is None:
            self._sock = self._connect()
        sock = self._sock
        sock.settimeout(self.timeout if io_timeout is None else io_timeout)
        try:
            send_with_fds(sock, data, pass_fds)
            line = self._readline(sock)
        except (OSError, ServerGone) as err:
            self.close()
            if isinstance(err, socket.timeout):
                raise ServerGone(f"{self.mountpoint}: no answer to {cmd!r} in time") from None
            raise ServerGone(f"{self.mountpoint}: server went away during {cmd!r}") from None
        try:
            reply = json.loads(line)
        except ValueError:
            raise ProtocolError(f"{self.mountpoint}: unreadable reply {line[:80]!r}") from None
        if reply.get("v", PROTOCOL_VERSION) != PROTOCOL_VERSION:
            raise ProtocolError(f"server speaks control protocol {reply.get('v')}, "
                                f"this client {PROTOCOL_VERSION}")
        if not reply.get("ok"):
            raise from_reply(reply)
        reply.pop("ok", None)
        reply.pop("v", None)
        return reply

    def _readline(self, sock: socket.socket) -> bytes:
        at = self._buf.find(b"\n")
        while at < 0:
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ServerGone(f"{self.mountpoint}: connection closed")
            start = len(self._buf)
            self._buf += chunk
            at = self._buf.find(b"\n", start)
        line = bytes(self._buf[:at])
        del self._buf[:at + 1]
        return line

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def __enter__(self) -> "ControlClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
