"""The server's control socket: requests from ``fakedebugfs`` commands, the
Python API and tests (:mod:`fakedebugfs.control.protocol`), a JSON line
each, answered in order on a Unix socket only its peers may use
(:mod:`fakedebugfs.server.peers`).  A client's bytes never stop the
server: whatever decoding or handling raises is a refused reply.  A mixin
of :class:`~fakedebugfs.server.server.Server` (which sets ``service``)."""

from __future__ import annotations

import gc
import logging
import os
import socket
from typing import Optional

import trio

from fakedebugfs.control.protocol import (MAX_FDS, MAX_LINE, BadRequest, LineReader, decode,
    decode_steps, encode, fds_of, refused, too_long)
from fakedebugfs.control.service import PEER_OWN
from fakedebugfs.fs.slices import slicer
from fakedebugfs.server.peers import Peers

log = logging.getLogger(__name__)

BIG_LINE = 1 << 16  # request lines longer than this are decoded in slicer turns


class ControlSocket:
    """Serves the control socket of a mount."""

    async def serve_control(self, sock_path: str, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The control socket (:mod:`fakedebugfs.control.protocol`)."""
        try:
            os.unlink(sock_path)
        except FileNotFoundError:
            pass
        self.peers = Peers()  # (in the PID namespace it serves from)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(sock_path)  # here: trio's bind goes through a worker thread (~3 ms)
        os.chmod(sock_path, 0o600)
        sock.listen(16)
        listener_sock = trio.socket.from_stdlib_socket(sock)
        listener = trio.SocketListener(listener_sock)
        task_status.started()
        await trio.serve_listeners(self._control_client, [listener])

    async def _control_client(self, stream) -> None:
        """One client: a request per line, a reply per line, in order
        (:mod:`fakedebugfs.control.protocol`).  Reading is linear in what
        arrives (:class:`LineReader`); a line past MAX_LINE is refused as
        soon as it passes it, with the limit named, and the connection
        closed.  File descriptors sent along (SCM_RIGHTS: a replay's
        recording) wait in ``fds`` for the request that takes them."""
        reader = LineReader(MAX_LINE)
        sock, fds = stream.socket, []
        async with stream:
            why, own = self.peers.refusal(sock)  # (server/peers.py)
            if why is not None:
                await _send(stream, refused("request", why))
                return
            PEER_OWN.set(own)
            try:
                while True:
                    try:
                        data, anc, _flags, _addr = await sock.recvmsg(
                            65536, socket.CMSG_SPACE(MAX_FDS * 4))
                    except OSError:
                        return
                    fds.extend(fds_of(anc))
                    while len(fds) > MAX_FDS:  # more than any request takes
                        os.close(fds.pop(0))
                    if not data:
                        return
                    for line in reader.feed(data):
                        reply = await self.handle_line(line, fds)
                        if not await _send(stream, reply):
                            return
                    if reader.overflow:
                        await _send(stream, refused("request", too_long(), limit=MAX_LINE))
                        return
            finally:
                for fd in fds:
                    os.close(fd)

    async def handle_line(self, line: bytes, fds: Optional[list] = None) -> dict:
        """The reply to one request line (never raises: whatever decoding or
        handling raises is a refused reply, and the server goes on).  A
        long line is decoded, checked and applied in slicer turns, with
        the collector off meanwhile (its hundreds of thousands of new
        objects would set off full collections of a second: they die by
        reference counting at the end)."""
        if len(line) <= BIG_LINE:
            return await self._handle(line, fds)
        collecting = gc.isenabled()
        gc.disable()
        try:
            return await self._handle(line, fds)
        finally:
            if collecting:
                gc.enable()

    async def _handle(self, line: bytes, fds: Optional[list]) -> dict:
        try:
            if len(line) > BIG_LINE:  # in turns: FUSE requests are answered meanwhile
                req = await _decode_in_turns(line)
            else:
                req = decode(line)
        except BadRequest as err:
            return refused("request", str(err))
        except Exception as err:  # noqa: BLE001 (MemoryError, ...)
            return refused("request", f"unreadable request: {type(err).__name__}")
        try:
            return await self.service.handle(req, fds)
        except Exception as err:  # noqa: BLE001: a client's bytes never stop the server
            log.error("control request %.200s failed: %s", req.get("cmd"), type(err).__name__)
            return refused("request", f"internal error: {type(err).__name__}")


async def _decode_in_turns(line: bytes) -> dict:
    """:func:`decode_steps` run in turns of the slicer."""
    steps = decode_steps(line)
    while True:
        async with slicer.turn(slicer.WRITER) as turn:
            try:
                while not turn.over():
                    next(steps)
            except StopIteration as done:
                return done.value


async def _send(stream, reply: dict) -> bool:
    """Send one reply; False if the client is gone."""
    try:
        data = encode(reply)
    except Exception as err:  # noqa: BLE001: a reply that is not JSON is our bug
        log.error("unencodable control reply: %s", type(err).__name__)
        data = encode(refused("error", f"internal error: unencodable reply ({type(err).__name__})"))
    try:
        await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return False
    return True


__all__ = ["ControlSocket", "BIG_LINE"]
