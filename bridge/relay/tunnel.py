"""A preview's byte streams on a virtual connection (docs/protocol.md, "Preview through the
relay"): the client opens a stream to an open preview, and its bytes (an HTTP/1.1 request, a
WebSocket after an upgrade) reach that preview's proxy (bridge/server/httpproxy.py) exactly as
a browser's connection to the preview's listener would, with the same rules: the preview's
secret first, Host and Origin rewritten, only ``localhost:PORT``, bounded. Every byte travels
sealed like the protocol's frames, as STREAM messages: ``stream`` (4 bytes, big-endian, not 0)
``op`` (1 byte) then the op's data.

- OPEN (1): data = JSON ``{"preview": ID}``, client to daemon.
- DATA (2): data = bytes of the stream, either way.
- END (3): data = empty, or JSON ``{"error": CODE}``; the stream is over both ways.

A stream needs every byte in order: a gap in the connection's counters (NATS core may drop a
message) ends every open stream with ``{"error":"gap"}``; the client asks again.
``encode``/``decode`` are sans-I/O.
"""

from __future__ import annotations

import asyncio
import collections
import json
from typing import TYPE_CHECKING, Protocol

from bridge.logs import get_logger
from bridge.process import TaskOwner
from bridge.relay import safejson
from bridge.relay.sealing import MAX_PLAINTEXT, Opened, Rejected
from bridge.server.httpproxy import ProxyConnection

if TYPE_CHECKING:
    from bridge.server.preview import Previews

log = get_logger("bridge.relay")

OPEN = 1
DATA = 2
END = 3
HEAD = 5
#: the most data one STREAM message carries (kind byte and head aside)
MAX_DATA = MAX_PLAINTEXT - 1 - HEAD
#: streams one virtual connection may have open at once
MAX_STREAMS = 64
#: bytes a stream may hold that its proxy has not read yet (more ends it: the client does not
#: wait for the daemon, nothing else bounds it)
MAX_UNREAD = 4 * 1024 * 1024


def encode(stream: int, op: int, data: bytes = b"") -> bytes:
    return stream.to_bytes(4, "big") + bytes([op]) + data


def decode(body: bytes) -> tuple[int, int, bytes]:
    """``(stream, op, data)``; Rejected when it is not a STREAM body."""
    if len(body) < HEAD:
        raise Rejected("short stream message")
    stream, op = int.from_bytes(body[:4], "big"), body[4]
    if stream == 0 or op not in (OPEN, DATA, END):
        raise Rejected("bad stream message")
    return stream, op, body[HEAD:]


class Carrier(Protocol):
    """What the streams need of their virtual connection."""

    conn: str
    closed: bool

    def write_stream(self, body: bytes) -> None: ...

    async def room(self) -> None: ...


class StreamReader:
    """What a preview's proxy reads from: the client's DATA, in order, then the end."""

    def __init__(self) -> None:
        self.chunks: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.eof = False
        self._more = asyncio.Event()

    def feed_data(self, data: bytes) -> None:
        if data and not self.eof:
            self.chunks.append(data)
            self.size += len(data)
            self._more.set()

    def feed_eof(self) -> None:
        self.eof = True
        self._more.set()

    async def read(self, n: int) -> bytes:
        while not self.chunks:
            if self.eof:
                return b""
            self._more.clear()
            await self._more.wait()
        first = self.chunks.popleft()
        if len(first) > n:
            self.chunks.appendleft(first[n:])
            first = first[:n]
        self.size -= len(first)
        return first


class StreamWriter:
    """What a preview's proxy writes to: STREAM DATA messages, then END."""

    def __init__(self, streams: Streams, stream: int) -> None:
        self.streams = streams
        self.stream = stream
        self.ended = False

    def write(self, data: bytes) -> None:
        if self.ended or self.streams.vc.closed:
            raise ConnectionError("stream ended")
        view = memoryview(data)
        for at in range(0, len(view), MAX_DATA):
            self.streams.vc.write_stream(encode(self.stream, DATA, bytes(view[at : at + MAX_DATA])))

    async def drain(self) -> None:
        await self.streams.vc.room()

    def close(self) -> None:
        self.streams.end(self.stream)

    async def wait_closed(self) -> None:
        return None


class Streams:
    """The open streams of one virtual connection."""

    def __init__(self, vc: Carrier, previews: Previews) -> None:
        self.vc = vc
        self.previews = previews
        self.readers: dict[int, StreamReader] = {}
        self.writers: dict[int, StreamWriter] = {}
        self.tasks = TaskOwner(f"streams {vc.conn}")

    def feed(self, opened: Opened) -> None:
        """A STREAM message (Rejected when its body is not one: the connection is closed)."""
        if opened.gap:  # bytes were lost: no stream can go on
            for stream in list(self.readers):
                self.end(stream, "gap")
        stream, op, data = decode(opened.body)
        if op == OPEN:
            self._open(stream, data)
        elif op == DATA:
            reader = self.readers.get(stream)
            if reader is None:
                return  # ended here already: what was in flight is dropped
            if reader.size + len(data) > MAX_UNREAD:
                self.end(stream, "too_much")
                return
            reader.feed_data(data)
        else:
            reader = self.readers.get(stream)
            if reader is not None:
                reader.feed_eof()

    def _open(self, stream: int, data: bytes) -> None:
        if stream in self.readers:
            raise Rejected("stream in use")
        try:
            wanted = safejson.read_object(data).get("preview")
        except safejson.Unreadable:
            wanted = None
        preview = self.previews.open_previews.get(wanted) if isinstance(wanted, str) else None
        if preview is None or len(self.readers) >= MAX_STREAMS:
            why = "not_found" if preview is None else "too_many"
            self.vc.write_stream(encode(stream, END, json.dumps({"error": why}).encode()))
            return
        reader = StreamReader()
        writer = StreamWriter(self, stream)
        self.readers[stream] = reader
        self.writers[stream] = writer
        proxy = ProxyConnection(preview, reader, writer)
        self.tasks.spawn(proxy.run(), name=f"stream {stream}")

    def end(self, stream: int, error: str | None = None) -> None:
        """The stream is over: END to the client (once), nothing more from it."""
        reader = self.readers.pop(stream, None)
        writer = self.writers.pop(stream, None)
        if reader is not None:
            reader.feed_eof()
        if writer is None or writer.ended:
            return
        writer.ended = True
        if not self.vc.closed:
            body = json.dumps({"error": error}).encode() if error else b""
            self.vc.write_stream(encode(stream, END, body))

    async def close(self) -> None:
        for stream in list(self.readers):
            reader = self.readers.pop(stream)
            reader.feed_eof()
        await self.tasks.close()
