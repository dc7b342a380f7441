"""A connection whose sender waits with nothing to send writes frames at once; frames keep
their order whichever way they go (at once, or queued for the sender)."""

from __future__ import annotations

import asyncio

from bridge.config import LimitsConfig
from bridge.server.connection import Connection
from bridge.wire.protocol import EncodedEvent


class Transport:
    """A ``FrameTransport`` that records what it is given and takes it all at once."""

    peer = "test"
    binary = False

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.room = True

    def buffered(self) -> int:
        return 0

    def writable(self) -> bool:
        return self.room

    def write(self, frames: list[bytes]) -> None:
        self.written += frames

    async def send(self, frame: bytes) -> None:
        self.written.append(frame)

    async def recv(self) -> bytes | str:
        await asyncio.Event().wait()
        return b""

    async def close(self, code: int, reason: str) -> None:
        self.room = False

    def limit_frame_size(self, size: int) -> None:
        pass


def _event(seq: int) -> EncodedEvent:
    return EncodedEvent("s", seq, "t", b'{"type":"text","text":"x"}')


def _seqs(transport: Transport) -> list[int]:
    return [int(frame.split(b'"seq":')[1].split(b",")[0]) for frame in transport.written]


async def test_frames_keep_their_order_whichever_way_they_go() -> None:
    transport = Transport()
    conn = Connection(transport, LimitsConfig(), trusted=True)
    sender = asyncio.create_task(conn.sender())
    try:
        for _ in range(3):
            await asyncio.sleep(0)  # the sender waits for frames
        conn.push(_event(1))
        assert _seqs(transport) == [1], "an idle connection writes at once"
        # A run longer than a burst is queued for the sender, which is woken; what comes
        # before the sender runs must not pass it.
        conn.push_many([_event(seq) for seq in range(2, 302)])
        conn.push(_event(302))
        # The transport has no room: 303 is queued; 304 comes when it has room again.
        transport.room = False
        conn.push(_event(303))
        transport.room = True
        conn.push_many([_event(304), _event(305)])
        for _ in range(10):
            await asyncio.sleep(0)
        assert _seqs(transport) == list(range(1, 306))
        for _ in range(3):
            await asyncio.sleep(0)  # waiting again: written at once again
        conn.push(_event(306))
        assert _seqs(transport) == list(range(1, 307))
    finally:
        conn.close(1000, "done")
        sender.cancel()
