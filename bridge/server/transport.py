"""The seam between a client connection and what carries its frames.

A ``Connection`` (bridge/server/connection.py) and ``BridgeServer.serve`` speak to a client through
a ``FrameTransport`` only, so the same code serves a WebSocket (bridge/server/wstransport.py) and a
virtual connection the relay carries: one client's frames, in order, with a way to tell how
much the peer has not taken yet (what the outbox's pacing and stall timer read).
"""

from __future__ import annotations

from typing import Protocol


class TransportClosed(Exception):
    """The peer is gone (recv/send on a closed transport)."""


class FrameTransport(Protocol):
    #: For logs: an address, "unix", or "relay:<client_id>".
    peer: str
    #: True: MessagePack frames (binary); False: JSON text frames.
    binary: bool

    def buffered(self) -> int:
        """Bytes accepted by ``write``/``send`` that the peer has not taken yet."""
        ...

    def writable(self) -> bool:
        """Open, and ``buffered()`` below the write limit."""
        ...

    def write(self, frames: list[bytes]) -> None:
        """Queue encoded frames now, without waiting."""
        ...

    async def send(self, frame: bytes) -> None:
        """Wait for room, then queue one frame; raises ``TransportClosed``."""
        ...

    async def recv(self) -> bytes | str:
        """The client's next frame; raises ``TransportClosed``."""
        ...

    async def close(self, code: int, reason: str) -> None: ...

    def limit_frame_size(self, size: int) -> None:
        """The largest frame the client may send from now on."""
        ...
