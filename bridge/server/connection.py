"""One client connection: its outbox, its sender task, its authentication.

Each connection has one bounded outbox drained by one sender task, so every frame it gets
(answers, events, state) keeps its order, and a client that stops reading fills only its own
outbox and is cut off with 4408 without slowing the agent or anyone else. It works over any
``FrameTransport`` (bridge/server/transport.py): a WebSocket, or a virtual connection of the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from bridge.config import LimitsConfig
from bridge.logs import get_logger
from bridge.process import TaskOwner
from bridge.server.outbox import Outbox, Sized, measure, measure_run
from bridge.server.transport import FrameTransport, TransportClosed
from bridge.wire.protocol import (
    CLOSE_TOO_SLOW,
    CLOSE_UNAUTHORIZED,
    EncodedFrame,
    Err,
    Ok,
    Outgoing,
    RequestId,
    Result,
)

log = get_logger("bridge.server")

#: Frames a sender writes at once (one write) before it yields to the event loop.
SEND_BURST = 256
#: ... or bytes: a burst of large frames must not overshoot the transport's write limit far.
BURST_BYTES = 64 * 1024
#: A connection whose transport took nothing for this long while data waits has stopped
#: reading: turns no longer wait for it (Connection.stalled).
STALLED_S = 0.5
#: How often, at most, a sender looks at a transport that holds data the client has not taken
#: (``limits.write_stall_s`` is checked this often, whichever path queued the data).
STALL_TICK_S = 1.0


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

    def __init__(
        self,
        transport: FrameTransport,
        limits: LimitsConfig,
        *,
        trusted: bool,
        owner: TaskOwner | None = None,
    ) -> None:
        self.transport = transport
        #: who owns the closing handshake, which may outlive the connection (the server)
        self.owner = owner or TaskOwner("connection")
        self.limits = limits
        self.msgpack = transport.binary
        self.trusted = trusted
        self.authenticated = False
        self.token_used: str | None = None
        self.outbox = Outbox(
            limits.send_queue_frames,
            limits.send_queue_bytes,
            binary=transport.binary,
            now=time.monotonic(),
        )
        #: ``_progress_mark()`` after a ``catch_up`` that the client answered with nothing.
        self._unanswered: tuple[float, int] | None = None
        self._wake = asyncio.Event()
        #: the sender waits for frames with nothing queued and nothing in the transport
        self._parked = False
        self._space = asyncio.Event()
        self._space.set()
        self._closed = False
        self._closing: asyncio.Task[None] | None = None
        self.bucket = TokenBucket(limits.requests_per_second, limits.request_burst)
        self.peer = transport.peer
        self.said_hello = False
        self.opened_at = time.monotonic()

    def evict(self) -> None:
        """Give its unauthenticated slot to a newer handshake (bridge/server/admission.py)."""
        self.close(CLOSE_UNAUTHORIZED, "too many unauthenticated connections")

    @property
    def closed(self) -> bool:
        return self._closed

    def push(self, item: Outgoing) -> None:
        if self._closed:
            return
        items = [item]
        self._enqueue(items, measure(items, self.msgpack, self.outbox.bytes_cap))

    def push_many(self, items: list[Outgoing]) -> None:
        """``push`` a committed run of frames at once (bridge/hub/fanout.py): measured once
        for every connection, one ``extend``."""
        if self._closed:
            return
        self._enqueue(items, measure_run(items, self.msgpack, self.outbox.bytes_cap))

    def _enqueue(self, items: list[Outgoing], sized: Sized) -> None:
        """Queue frames, or cut off a reader that fell too far behind."""
        if (
            self._parked
            and not self.outbox
            and len(items) <= SEND_BURST
            and sized.total <= BURST_BYTES
            and self._write_now(items)
        ):
            return
        if not self.outbox.offer(items, sized, time.monotonic()):
            self.cut_off()
            return
        if self.outbox.behind:
            self._space.clear()
        self._parked = False  # woken: what comes next goes behind what is queued
        self._wake.set()

    def _write_now(self, items: list[Outgoing]) -> bool:
        """Frames for a connection whose sender waits with nothing queued nor unsent go to the
        transport at once (False: it has no room, they are queued): through the outbox, a
        frame at a time (an agent streaming at its own pace) cost two more passes of the
        event loop, waking the sender and letting it go back to waiting (docs/benchmarks.md,
        T12). Nothing waits to go before them, so their order holds; the sender wakes only to
        watch what the client has not taken."""
        transport = self.transport
        if not transport.writable():
            return False
        try:
            transport.write([item.encoded(self.msgpack) for item in items])
        except TransportClosed:
            self._parked = False
            self._wake.set()  # the sender finds it closed
            return True
        buffered = transport.buffered()
        self.outbox.wrote(time.monotonic(), buffered)
        if buffered:
            self._parked = False
            self._wake.set()
        return True

    @property
    def behind(self) -> bool:
        """More than half of the outbox is full, in frames or bytes (``put`` waits, turns
        slow down)."""
        return self.outbox.behind

    @property
    def stalled(self) -> bool:
        """Frames wait and the transport has taken nothing for ``STALLED_S``: the client has
        stopped reading, and is not waited for (it is cut off when its outbox is full)."""
        return bool(self.outbox) and self.outbox.stalled_for(time.monotonic()) > STALLED_S

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
        """Changes whenever the transport takes bytes: when the outbox saw progress, or the
        transport's buffer shrank while a blocked send waits for the client."""
        return self.outbox.since, self.transport.buffered()

    def cut_off(self) -> None:
        if not self._closed:
            log.warning("client_too_slow", peer=self.peer, queued=len(self.outbox))
            self.close(CLOSE_TOO_SLOW, "too far behind; reconnect and replay with after_seq")

    async def put(self, item: Outgoing) -> None:
        """``push``, after waiting while the outbox is half full (a replay: paced by the
        client, and ended by the sender's stall check if the client takes nothing)."""
        while not self._closed and self.outbox.behind:
            self._space.clear()
            await self._space.wait()
        self.push(item)

    def reply(self, request_id: RequestId, result: Result) -> None:
        self.push(EncodedFrame(Ok(id=request_id, result=result)))

    def error(
        self,
        request_id: RequestId,
        code: str,
        message: str,
        hint: str | None = None,
        output: str | None = None,
    ) -> None:
        err = Err(id=request_id, code=code, message=message)
        if hint is not None:
            err.hint = hint
        if output:
            err.output = output
        self.push(EncodedFrame(err))

    def close(self, code: int, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        self.outbox.clear()
        self._wake.set()
        self._space.set()
        self._closing = self.owner.spawn(self.transport.close(code, reason), name="close")

    async def wait_closed(self) -> None:
        """Wait for the close (its code sent, or the transport dropped)."""
        if self._closing is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._closing)

    async def drain_then_close(self, code: int, reason: str, timeout: float = 2.0) -> None:
        """Send what is queued (an error answer, say), then close."""
        deadline = time.monotonic() + timeout
        while self.outbox and not self._closed and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self.close(code, reason)

    async def sender(self) -> None:
        """Drain the outbox in bursts while the transport has room; when it has none, send
        one frame (which waits for room); and while any data waits, check that the client
        takes some within ``limits.write_stall_s``."""
        transport = self.transport
        outbox = self.outbox
        tick = max(0.05, min(STALL_TICK_S, self.limits.write_stall_s / 4))
        try:
            while not self._closed:
                if outbox and transport.writable():
                    transport.write(outbox.burst(SEND_BURST, BURST_BYTES))
                    outbox.wrote(time.monotonic(), transport.buffered())
                    self._relieve()
                    if outbox:
                        await asyncio.sleep(0)  # let other connections and the hub run
                elif outbox:
                    # The transport's buffer is full: send() waits for the client, and
                    # raises once the connection is lost.
                    data = outbox.pop().encoded(self.msgpack)
                    self._relieve()
                    if not await self._send_unless_stalled(data, tick):
                        return
                else:
                    self._wake.clear()
                    if not await self._idle(tick):
                        return
        except TransportClosed:
            pass
        finally:
            self._closed = True
            self._space.set()

    async def _idle(self, tick: float) -> bool:
        """Wait for frames to send; while the transport still holds some the client has not
        taken, look at it every ``tick``. False once that has stalled (the client is cut off)."""
        while True:
            buffered = self.transport.buffered()
            if not buffered:
                self.outbox.observe(time.monotonic(), 0)
                self._parked = True
                try:
                    await self._wake.wait()
                finally:
                    self._parked = False
                return True
            if self._stalled(buffered):
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), tick)
                return True

    async def _send_unless_stalled(self, data: bytes, tick: float) -> bool:
        """Send one frame (the transport waits while its buffer is full); False, and the
        connection closed with 4408, once the transport has taken no byte for
        ``limits.write_stall_s``."""
        send = asyncio.ensure_future(self.transport.send(data))
        try:
            while True:
                done, _ = await asyncio.wait({send}, timeout=tick)
                if done:
                    send.result()
                    self.outbox.wrote(time.monotonic(), self.transport.buffered())
                    return True
                if self._stalled(self.transport.buffered()):
                    return False
        finally:
            send.cancel()  # the send is the sender's: it never outlives it

    def _stalled(self, buffered: int) -> bool:
        """Tell the outbox what the transport holds; past ``write_stall_s`` without progress,
        cut the client off (True)."""
        now = time.monotonic()
        self.outbox.observe(now, buffered)
        stall_s = self.limits.write_stall_s
        if self.outbox.stalled_for(now) < stall_s:
            return False
        log.warning("client_stalled", peer=self.peer, stalled_s=stall_s)
        self.close(CLOSE_TOO_SLOW, "stopped reading; reconnect and replay with after_seq")
        return True

    def _relieve(self) -> None:
        if self.outbox.relieved:
            self._space.set()
