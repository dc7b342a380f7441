"""A client connection over a WebSocket (``websockets``): the ``FrameTransport`` the daemon's
own endpoint serves (bridge/server/endpoint.py).

What is specific to websockets lives here: the socket buffer's write limit, framing a burst of
frames into one socket write, and the largest message a client may send.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from bridge.server.transport import TransportClosed
from bridge.wire.protocol import SUBPROTOCOL_MSGPACK

#: Bytes a connection's socket buffer may hold before sending waits for the client.
WRITE_LIMIT = 256 * 1024
#: The longest a close waits for the client to take the close frame (after whatever was queued
#: before it) and answer it; then the TCP connection is dropped.
CLOSE_GRACE_S = 5.0


class WebSocketTransport:
    """One ``websockets`` server connection as a ``FrameTransport``."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.binary = ws.subprotocol == SUBPROTOCOL_MSGPACK
        self.peer = peer_of(ws)

    def buffered(self) -> int:
        transport = self.ws.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def writable(self) -> bool:
        transport = self.ws.transport
        return (
            self.ws.protocol.state is State.OPEN
            and not transport.is_closing()
            and transport.get_write_buffer_size() < WRITE_LIMIT
        )

    def write(self, frames: list[bytes]) -> None:
        """Frame encoded frames and write them to the socket at once.

        An awaited send() per frame, and then a write (a system call) per frame, were most of
        the sender's cost at full speed (docs/benchmarks.md).
        """
        protocol = self.ws.protocol
        transport = self.ws.transport
        if not protocol.extensions:
            # Nothing negotiated (no compression): a server frame is a header and the payload
            # (RFC 6455 section 5.2), which costs a third of going through the protocol object.
            opcode = 0x82 if self.binary else 0x81
            parts: list[bytes] = []
            for data in frames:
                parts.append(frame_header(opcode, len(data)))
                parts.append(data)
            transport.write(b"".join(parts))
            return
        # Compression negotiated: websockets frames and compresses.
        frame = protocol.send_binary if self.binary else protocol.send_text
        for data in frames:
            frame(data)
        chunks = protocol.data_to_send()
        if all(chunks):
            transport.write(b"".join(chunks))
            return
        # An empty chunk asks for end-of-stream; framing data never does, but the protocol
        # decides, so honour it the way websockets does.
        for chunk in chunks:
            if chunk:
                transport.write(chunk)
            elif transport.can_write_eof():
                transport.write_eof()
            else:
                transport.close()

    async def send(self, frame: bytes) -> None:
        """websockets writes the frame, then waits while the socket's buffer is over
        ``WRITE_LIMIT``."""
        try:
            await self.ws.send(frame, text=not self.binary)
        except ConnectionClosed as exc:
            raise TransportClosed(str(exc)) from None

    async def recv(self) -> bytes | str:
        try:
            return await self.ws.recv()
        except ConnectionClosed as exc:
            raise TransportClosed(str(exc)) from None

    async def close(self, code: int, reason: str) -> None:
        """The closing handshake, bounded: websockets bounds the wait for the client's answer,
        but not the wait for room to write the close frame, which never comes from a client
        that stopped reading (it and its buffers stayed, however long it was cut off for)."""
        try:
            async with asyncio.timeout(CLOSE_GRACE_S):
                await self.ws.close(code, reason)
        except TimeoutError:
            self.ws.transport.abort()

    def limit_frame_size(self, size: int) -> None:
        # websockets reads the limit when the next frame starts to arrive.
        protocol: Any = self.ws.protocol
        if hasattr(protocol, "max_message_size"):
            protocol.max_message_size = size
        else:  # websockets < 15
            protocol.max_size = size


def frame_header(opcode: int, length: int) -> bytes:
    """FIN, the opcode, and the payload length of an unmasked frame (RFC 6455 section 5.2)."""
    if length < 126:
        return bytes((opcode, length))
    if length < 65536:
        return struct.pack("!BBH", opcode, 126, length)
    return struct.pack("!BBQ", opcode, 127, length)


def peer_of(ws: ServerConnection) -> str:
    try:
        addr = ws.remote_address
    except Exception:
        return "?"
    if isinstance(addr, tuple) and addr:
        return str(addr[0])
    return "unix"
