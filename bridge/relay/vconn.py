"""A virtual connection: one client's protocol-v1 connection carried as sealed NATS messages
(docs/protocol.md, "Relay"). It is a FrameTransport (bridge/server/transport.py), so the server
serves it like a WebSocket connection.

``write`` seals at once and queues; one writer task publishes in order, so the counter order
on the wire is the sealing order. ``buffered`` counts what waits here and in nats-py's buffer.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from bridge.logs import get_logger
from bridge.process import TaskOwner
from bridge.relay import pieces, safejson, sealing
from bridge.relay.sealing import (
    CLIENT_TO_DAEMON,
    DAEMON_TO_CLIENT,
    Opener,
    Rejected,
    Sealer,
    Unauthenticated,
)
from bridge.server.transport import FrameTransport, TransportClosed
from bridge.util.logthrottle import Throttle

if TYPE_CHECKING:
    from bridge.relay.tunnel import Streams

log = get_logger("bridge.relay")
#: the lines a peer's frames cause, for all virtual connections: one a kind per 10 s
_THROTTLE = Throttle()

#: bytes queued before ``writable`` says no (the server then waits, like a WebSocket's)
WRITE_LIMIT = 1024 * 1024
KEEPALIVE_S = 20.0
IDLE_S = 60.0

CLOSE_REVOKED = 4401
CLOSE_IDLE = 4408
#: an authenticated message the protocol has no place for (an unknown kind)
CLOSE_REJECTED = 4400

#: publishes messages to one subject, in order
Publish = Callable[[str, list[bytes]], Awaitable[None]]
#: told of each message dropped as unauthenticated, with why ("forged", "replayed", "short")
Dropped = Callable[["VirtualConnection", str], None]


def _ignore(_vc: VirtualConnection, _why: str) -> None:
    pass


class VirtualConnection:
    binary = False

    def __init__(
        self,
        *,
        conn: str,
        client_id: str,
        key: bytes,
        down_subject: str,
        publish: Publish,
        pending: Callable[[], int],
        max_frame: int,
        owner: TaskOwner,
        on_dropped: Dropped = _ignore,
        batch: bool = False,
    ) -> None:
        self.conn = conn
        self.client_id = client_id
        self.peer = f"relay:{client_id}"
        self._down = down_subject
        self._publish = publish
        self._pending = pending
        self._sealer = Sealer(key, DAEMON_TO_CLIENT)
        self._opener = Opener(key, CLIENT_TO_DAEMON)
        self._joiner = pieces.Joiner(max_frame)
        #: the client takes BATCH messages (it said so when it opened the connection)
        self.batch = batch
        self._inbox: asyncio.Queue[str | None] = asyncio.Queue()
        self._out: collections.deque[bytes] = collections.deque()
        self._out_bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        self._wake = asyncio.Event()
        self.closed = False
        self.close_code: int | None = None
        self.last_recv = self.last_sent = time.monotonic()
        self.dropped_publishes = 0
        #: messages dropped as unauthenticated (anyone with the relay's client login can send
        #: them: they change nothing, not even the silence timer)
        self.dropped_unauthenticated = 0
        self._on_dropped = on_dropped
        #: starts the idle close, which tick (a plain call) cannot await: the relay link's
        self._owner = owner
        self._writer = asyncio.create_task(self._write_loop())
        #: a preview's byte streams on this connection (bridge/relay/tunnel.py); None: the
        #: daemon has no previews, and a STREAM message is refused as any unknown kind
        self.streams: Streams | None = None

    # ---- FrameTransport -----------------------------------------------------------------------

    def buffered(self) -> int:
        return self._out_bytes + self._pending()

    def writable(self) -> bool:
        return not self.closed and self.buffered() < WRITE_LIMIT

    def write(self, frames: list[bytes]) -> None:
        if self.closed:
            raise TransportClosed(self.peer)
        seal, out, size = self._sealer.seal, self._out, 0
        for kind, body in pieces.pack(frames, self.batch):
            payload = seal(kind, body)
            out.append(payload)
            size += len(payload)
        self._out_bytes += size
        self.last_sent = time.monotonic()
        self._wake.set()

    async def send(self, frame: bytes) -> None:
        await self.room()
        self.write([frame])

    async def room(self) -> None:
        """Wait until more may be written (TransportClosed once the connection is)."""
        while not self.writable():
            if self.closed:
                raise TransportClosed(self.peer)
            self._room.clear()
            await self._room.wait()

    def write_stream(self, body: bytes) -> None:
        """One STREAM message of a preview's stream, in order with the frames."""
        if self.closed:
            raise TransportClosed(self.peer)
        self._queue(self._sealer.seal(sealing.STREAM, body))

    async def recv(self) -> str:
        if self.closed and self._inbox.empty():
            raise TransportClosed(self.peer)
        item = await self._inbox.get()
        if item is None:
            self._inbox.put_nowait(None)  # later calls fail too
            raise TransportClosed(self.peer)
        return item

    async def close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        body = json.dumps({"code": code, "reason": reason[:120]}).encode()
        self._queue(self._sealer.seal(sealing.CLOSE, body))
        self._end(code)
        # the CLOSE goes out before the writer stops
        await asyncio.wait({self._writer}, timeout=2.0)

    def limit_frame_size(self, size: int) -> None:
        self._joiner.max_frame = size

    # ---- from the link ------------------------------------------------------------------------

    def deliver(self, payload: bytes) -> None:
        """A message from ``P.vc.<conn>.up``."""
        if self.closed:
            return
        try:
            opened = self._opener.open(payload)
        except Unauthenticated as exc:
            self.dropped_unauthenticated += 1
            self._on_dropped(self, str(exc))
            return
        except Rejected as exc:
            self._reject(exc)
            return
        self.last_recv = time.monotonic()
        if opened.kind == sealing.CLOSE:
            self._end(self._peer_code(opened.body))
        elif opened.kind == sealing.BATCH:
            try:
                frames = self._joiner.feed_batch(opened)
            except Rejected as exc:
                self._reject(exc)
                return
            for each in frames:
                self._take(each)
        elif opened.kind in (sealing.FRAME, sealing.MORE):
            whole = self._joiner.feed(opened)
            if whole is not None:
                self._take(whole)
        elif opened.kind == sealing.STREAM:
            if self.streams is None:
                self._reject(Rejected("no streams here"))
                return
            try:
                self.streams.feed(opened)
            except Rejected as exc:
                self._reject(exc)

    def _take(self, frame: bytes) -> None:
        try:
            self._inbox.put_nowait(frame.decode())
        except UnicodeDecodeError:
            _THROTTLE.log(log.info, "relay_frame_not_text", self.client_id, conn=self.conn)

    def _reject(self, exc: Rejected) -> None:
        # authentic (the client sealed it) yet not of the protocol: the client is broken
        _THROTTLE.log(
            log.warning,
            "relay_frame_rejected",
            (self.client_id, str(exc)),
            conn=self.conn,
            client=self.client_id,
            why=str(exc),
        )
        # the client hears it at once and reopens, rather than after 60 s of silence
        self._queue(self._sealer.seal(sealing.CLOSE, b'{"code":4400,"reason":"rejected frame"}'))
        self._end(CLOSE_REJECTED)

    def tick(self, now: float) -> None:
        """Keepalive after 20 s of sending nothing; closed after 60 s of hearing nothing."""
        if self.closed:
            return
        self._room.set()  # a send() waiting on nats-py's own buffer looks again
        if now - self.last_recv >= IDLE_S:
            self._owner.spawn(self.close(CLOSE_IDLE, "idle"), name=f"vc {self.conn}: idle")
        elif now - self.last_sent >= KEEPALIVE_S:
            self._queue(self._sealer.seal(sealing.KEEPALIVE))

    # ---- inside -------------------------------------------------------------------------------

    @staticmethod
    def _peer_code(body: bytes) -> int:
        try:
            code = safejson.read_object(body).get("code")
        except safejson.Unreadable:
            return 1000
        return code if isinstance(code, int) and not isinstance(code, bool) else 1000

    def _end(self, code: int) -> None:
        """Forget the connection: recv ends, writes fail; what is queued still goes out."""
        if self.closed:
            return
        self.closed = True
        self.close_code = code
        self._inbox.put_nowait(None)
        self._room.set()
        self._wake.set()

    def _queue(self, payload: bytes) -> None:
        self._out.append(payload)
        self._out_bytes += len(payload)
        self.last_sent = time.monotonic()
        self._wake.set()

    async def _write_loop(self) -> None:
        while True:
            while self._out:
                # what is queued goes out as one batch: one write to nats-py per burst
                batch = list(self._out)
                self._out.clear()
                size = sum(len(p) for p in batch)
                try:
                    await self._publish(self._down, batch)
                except Exception as exc:  # NATS core may drop; the protocol's seq replay covers it
                    self.dropped_publishes += len(batch)
                    if self.dropped_publishes == len(batch):
                        log.info("relay_publish_failed", conn=self.conn, error=repr(exc))
                finally:
                    self._out_bytes -= size
                if self.writable():
                    self._room.set()
            if self.closed:
                return
            self._wake.clear()
            await self._wake.wait()

    async def stopped(self) -> None:
        """Wait for the writer to finish (after close)."""
        await asyncio.wait({self._writer}, timeout=2.0)

    def abort(self) -> None:
        self._end(1001)
        self._writer.cancel()


def _is_a_transport(vc: VirtualConnection) -> FrameTransport:
    return vc  # mypy checks that a virtual connection is a FrameTransport
