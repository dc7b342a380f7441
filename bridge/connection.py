"""One client connection: its outbox, its sender task, its authentication.

Each connection has one bounded outbox drained by one sender task, so every frame it gets
(answers, events, state) keeps its order, and a client that stops reading fills only its own
outbox and is cut off with 4408 without slowing the agent or anyone else. It works over any
``FrameTransport`` (bridge/transport.py): a WebSocket, or a virtual connection of the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

from bridge.config import LimitsConfig
from bridge.logs import get_logger
from bridge.protocol import (
    CLOSE_TOO_SLOW,
    CLOSE_UNAUTHORIZED,
    EncodedEvent,
    EncodedFrame,
    Err,
    Ok,
    Outgoing,
    RequestId,
    Result,
)
from bridge.transport import FrameTransport, TransportClosed

log = get_logger("bridge.server")

#: Frames a sender writes at once (one write) before it yields to the event loop.
SEND_BURST = 256
#: ... or bytes: a burst of large frames must not overshoot the transport's write limit far.
BURST_BYTES = 64 * 1024
#: A connection whose transport took nothing for this long while data waits has stopped
#: reading: turns no longer wait for it (Connection.stalled).
STALLED_S = 0.5
#: Bytes an event frame adds around its block (session id, seq, time stamp).
EVENT_OVERHEAD = 96


class TokenBucket:
    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.capacity = float(burst)
        self.tokens = float(burst)
        self.stamp = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Connection:
    """One client: its outbox, its sender task, its authentication."""

    def __init__(self, transport: FrameTransport, limits: LimitsConfig, *, trusted: bool) -> None:
        self.transport = transport
        self.limits = limits
        self.msgpack = transport.binary
        self.trusted = trusted
        self.authenticated = False
        self.token_used: str | None = None
        self._outbox: deque[Outgoing] = deque()
        self._cap = limits.send_queue_frames
        self._byte_cap = limits.send_queue_bytes
        self._bytes = 0
        #: When the transport last took bytes (or the connection opened): see ``stalled``.
        self.progress_at = time.monotonic()
        #: ``_progress_mark()`` after a ``catch_up`` that the client answered with nothing.
        self._unanswered: tuple[float, int] | None = None
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._closed = False
        self.bucket = TokenBucket(limits.requests_per_second, limits.request_burst)
        self.peer = transport.peer
        self.said_hello = False
        self.opened_at = time.monotonic()

    def evict(self) -> None:
        """Give its unauthenticated slot to a newer handshake (bridge/admission.py)."""
        self.close(CLOSE_UNAUTHORIZED, "too many unauthenticated connections")

    @property
    def closed(self) -> bool:
        return self._closed

    def push(self, item: Outgoing) -> None:
        if self._closed:
            return
        self._enqueue([item], _size(item, self.msgpack, self._byte_cap))

    def push_many(self, items: list[Outgoing]) -> None:
        """``push`` a committed run of frames at once (bridge/hub/fanout.py): one size sum
        shared by every connection, one ``extend``."""
        if self._closed:
            return
        self._enqueue(items, _run_size(items, self.msgpack, self._byte_cap))

    def _enqueue(self, items: list[Outgoing], size: int) -> None:
        """Queue frames of ``size`` bytes in all, or cut off a reader that fell too far behind."""
        if len(self._outbox) + len(items) > self._cap or self._bytes + size > self._byte_cap:
            self.cut_off()
            return
        self._outbox.extend(items)
        self._bytes += size
        if self.behind:
            self._space.clear()
        self._wake.set()

    @property
    def behind(self) -> bool:
        """More than half of the outbox is full, in frames or bytes (``put`` waits, turns
        slow down)."""
        return len(self._outbox) >= self._cap // 2 or self._bytes >= self._byte_cap // 2

    @property
    def stalled(self) -> bool:
        """Data waits and the transport has taken none of it for ``STALLED_S``: the client has
        stopped reading, and is not waited for (it is cut off when its outbox is full)."""
        return bool(self._outbox) and time.monotonic() - self.progress_at > STALLED_S

    async def catch_up(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the outbox to drain; not at all for a client that has
        stopped reading, nor again for one whose transport took nothing the last time it was
        waited for (until it takes bytes again)."""
        if self.stalled or self._unanswered == self._progress_mark():
            return  # a client that is not reading never paces the turn
        before = self._progress_mark()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._space.wait(), timeout)
        after = self._progress_mark()
        if after == before and self.behind:
            self._unanswered = after

    def _progress_mark(self) -> tuple[float, int]:
        """Changes whenever the transport takes bytes: when progress_at moves, or its buffer
        shrinks while a blocked send waits for the client."""
        return self.progress_at, self.transport.buffered()

    def cut_off(self) -> None:
        if not self._closed:
            log.warning("client_too_slow", peer=self.peer, queued=len(self._outbox))
            self.close(CLOSE_TOO_SLOW, "too far behind; reconnect and replay with after_seq")

    async def put(self, item: Outgoing) -> None:
        while not self._closed and self.behind:
            self._space.clear()
            await self._space.wait()
        self.push(item)

    def reply(self, request_id: RequestId, result: Result) -> None:
        self.push(EncodedFrame(Ok(id=request_id, result=result)))

    def error(self, request_id: RequestId, code: str, message: str) -> None:
        self.push(EncodedFrame(Err(id=request_id, code=code, message=message)))

    def close(self, code: int, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        self._outbox.clear()
        self._wake.set()
        self._space.set()
        asyncio.get_running_loop().create_task(self.transport.close(code, reason))

    async def drain_then_close(self, code: int, reason: str, timeout: float = 2.0) -> None:
        """Send what is queued (an error answer, say), then close."""
        deadline = time.monotonic() + timeout
        while self._outbox and not self._closed and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self.close(code, reason)

    async def sender(self) -> None:
        transport = self.transport
        try:
            while not self._closed:
                await self._wake.wait()
                self._wake.clear()
                while self._outbox and not self._closed:
                    if transport.writable():
                        transport.write(self._burst())
                        self.progress_at = time.monotonic()
                        await asyncio.sleep(0)  # let other connections and the hub run
                    else:
                        # The transport's buffer is full: send() waits for the client, and
                        # raises once the connection is lost.
                        data = self._pop().encoded(self.msgpack)
                        if not await self._send_unless_stalled(data):
                            return
                        self.progress_at = time.monotonic()
        except TransportClosed:
            pass
        finally:
            self._closed = True
            self._space.set()

    async def _send_unless_stalled(self, data: bytes) -> bool:
        """Send one frame (the transport waits while its buffer is full); False, and the
        connection closed with 4408, once the transport has taken no byte for
        ``limits.write_stall_s``."""
        stall_s = self.limits.write_stall_s
        transport = self.transport
        send = asyncio.ensure_future(transport.send(data))
        waiting = transport.buffered()
        moved_at = time.monotonic()
        while True:
            done, _ = await asyncio.wait({send}, timeout=min(1.0, stall_s))
            if done:
                send.result()
                return True
            now = time.monotonic()
            left = transport.buffered()
            if left < waiting:
                moved_at = now
                self.progress_at = now
            waiting = left
            if now - moved_at >= stall_s:
                send.cancel()
                log.warning("client_stalled", peer=self.peer, stalled_s=stall_s)
                self.close(CLOSE_TOO_SLOW, "stopped reading; reconnect and replay with after_seq")
                return False

    def _pop(self) -> Outgoing:
        item = self._outbox.popleft()
        self._bytes -= _size(item, self.msgpack, self._byte_cap)
        if len(self._outbox) < self._cap // 4 and self._bytes < self._byte_cap // 4:
            self._space.set()
        return item

    def _burst(self) -> list[bytes]:
        """The encoded payloads of up to ``SEND_BURST`` queued frames, or ``BURST_BYTES``."""
        out: list[bytes] = []
        size = 0
        for _ in range(SEND_BURST):
            if not self._outbox or size >= BURST_BYTES:
                break
            data = self._pop().encoded(self.msgpack)
            size += len(data)
            out.append(data)
        return out


def _size(item: Outgoing, msgpack: bool, cap: int) -> int:
    """Bytes a queued frame holds: a stored event's block plus its frame, or the encoded frame
    (encoded once and shared by every connection); counted as at most a quarter of ``cap``, so
    one frame near ``max_frame_bytes`` (a large message) does not cut a reader off alone."""
    if isinstance(item, EncodedEvent) and not msgpack:
        size = len(item.block_json) + EVENT_OVERHEAD
    else:
        size = len(item.encoded(msgpack))
    return min(size, cap // 4)


#: The last run summed, per encoding: (run, cap, size). The run is held, so ``is`` is exact.
_RUN_SIZES: dict[bool, tuple[list[Outgoing], int, int]] = {}


def _run_size(items: list[Outgoing], msgpack: bool, cap: int) -> int:
    """``_size`` summed over a run; every subscriber of the run gets the same list, so the sum
    is computed once per encoding, not once per connection."""
    hit = _RUN_SIZES.get(msgpack)
    if hit is not None and hit[0] is items and hit[1] == cap:
        return hit[2]
    size = sum(_size(item, msgpack, cap) for item in items)
    _RUN_SIZES[msgpack] = (items, cap, size)
    return size
