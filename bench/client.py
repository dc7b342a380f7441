"""A lean WebSocket client for load generation, used against the daemon and the baseline alike.

It speaks RFC 6455 itself on an asyncio stream (handshake, masked client frames, pong), and
parses server frames in bulk, so one process can play a hundred subscribers without the
client becoming the bottleneck. Each text frame is handed to ``on_frame`` as raw bytes; the
scenario decides how much of it to parse.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import struct
import time
from collections.abc import Callable
from typing import Any

import msgspec

OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 1, 2, 8, 9, 10

_json = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


def dispatch(
    answers: dict[Any, asyncio.Future[dict[str, Any]]],
    on_frame: Callable[[bytes], None] | None,
    payload: bytes,
) -> None:
    """One received frame: the answer to a waiting request, else handed to ``on_frame``
    (shared with bench/relay.py's virtual client)."""
    # Answers are rare and short; events are many: look for an id only in small ok/err.
    head = payload[:16]
    if answers and (b'"ok"' in head or b'"err"' in head):
        frame = _json.decode(payload)
        fut = answers.pop(frame.get("id"), None)
        if fut is not None and not fut.done():
            fut.set_result(frame)
            return
    if on_frame is not None:
        on_frame(payload)


class Event(msgspec.Struct):
    """The fields of an ``event`` frame the benchmarks look at."""

    t: str
    seq: int = 0
    block: dict[str, Any] = msgspec.field(default_factory=dict)
    id: Any = None


_event = msgspec.json.Decoder(Event)


def stamp_of(block: dict[str, Any]) -> int | None:
    """The synthetic adapter's yield time (monotonic ns) carried in a text delta."""
    text = block.get("text")
    if isinstance(text, str) and len(text) > 20 and text[20] == " ":
        try:
            return int(text[:20])
        except ValueError:
            return None
    return None


def _mask(payload: bytes) -> tuple[bytes, bytes]:
    key = os.urandom(4)
    n = len(payload)
    if not n:
        return key, payload
    repeated = (key * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big")
    return key, masked


def encode_frame(opcode: int, payload: bytes) -> bytes:
    key, masked = _mask(payload)
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + key + masked


class LeanClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.on_frame: Callable[[bytes], None] | None = None
        self.frames = 0
        self.close_code: int | None = None
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._task = asyncio.get_running_loop().create_task(self._read())
        self.closed = asyncio.Event()

    @classmethod
    async def connect(
        cls, port: int, *, host: str = "127.0.0.1", path: str = "/v1/ws"
    ) -> LeanClient:
        reader, writer = await asyncio.open_connection(host, port, limit=2**20)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: bridge.v1.json\r\n\r\n"
            ).encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split()[1])
        if status != 101:
            writer.close()
            raise ConnectionError(f"handshake answered {status}")
        return cls(reader, writer)

    async def hello(self, token: str) -> None:
        await self.request("hello", protocol=1, token=token, client={"name": "bench"})

    # ---- requests -------------------------------------------------------------------------

    def send_json(self, obj: dict[str, Any]) -> None:
        self.writer.write(encode_frame(OP_TEXT, _enc.encode(obj)))

    async def call(self, method: str, timeout: float = 60.0, **fields: Any) -> dict[str, Any]:
        rid = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[rid] = fut
        self.send_json({"t": method, "id": rid, **fields})
        return await asyncio.wait_for(fut, timeout)

    async def request(self, method: str, timeout: float = 60.0, **fields: Any) -> Any:
        frame = await self.call(method, timeout, **fields)
        if frame.get("t") != "ok":
            raise RuntimeError(f"{method}: {frame}")
        return frame["result"]

    # ---- reading ------------------------------------------------------------------------------

    def _dispatch(self, payload: bytes) -> None:
        self.frames += 1
        dispatch(self._answers, self.on_frame, payload)

    async def _read(self) -> None:
        buf = bytearray()
        reader = self.reader
        try:
            while True:
                chunk = await reader.read(1 << 20)
                if not chunk:
                    break
                buf += chunk
                pos = 0
                end = len(buf)
                while end - pos >= 2:
                    b1 = buf[pos]
                    n = buf[pos + 1] & 0x7F
                    start = pos + 2
                    if n == 126:
                        if end - pos < 4:
                            break
                        n = (buf[pos + 2] << 8) | buf[pos + 3]
                        start = pos + 4
                    elif n == 127:
                        if end - pos < 10:
                            break
                        n = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                        start = pos + 10
                    if end - start < n:
                        break
                    op = b1 & 0x0F
                    payload = bytes(buf[start : start + n])
                    pos = start + n
                    if op in (OP_TEXT, OP_BINARY):
                        self._dispatch(payload)
                    elif op == OP_PING:
                        self.writer.write(encode_frame(OP_PONG, payload))
                    elif op == OP_CLOSE:
                        self.close_code = struct.unpack("!H", payload[:2])[0] if n >= 2 else 1005
                        return
                del buf[:pos]
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for fut in self._answers.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"closed ({self.close_code})"))
            self._answers.clear()
            self.closed.set()

    async def close(self) -> None:
        if not self.closed.is_set():
            with contextlib.suppress(OSError, RuntimeError):
                self.writer.write(encode_frame(OP_CLOSE, b"\x03\xe8"))
        self.writer.close()
        self._task.cancel()
        with contextlib.suppress(OSError, TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(self.writer.wait_closed(), 2)


def decode_event(payload: bytes) -> Event:
    return _event.decode(payload)


def now_ns() -> int:
    return time.monotonic_ns()
