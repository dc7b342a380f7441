"""A preview's streams on a virtual connection, client side (docs/protocol.md, "Preview
through the relay"): open a stream to a preview, send bytes, read what comes back; and an
HTTP/1.1 GET over one, as a browser's would go, parsed with h11."""

from __future__ import annotations

import asyncio
import itertools
import json

import h11

from bridge.relay import sealing, tunnel
from tests.relaykit import VirtualClient


class Tunnel:
    def __init__(self, vc: VirtualClient) -> None:
        self.vc = vc
        self.ids = itertools.count(1)
        self.inbox: dict[int, asyncio.Queue[bytes | None]] = {}
        #: why each stream ended, when the daemon said
        self.ended: dict[int, dict[str, str]] = {}
        vc.on_stream = self._on

    def _on(self, opened: sealing.Opened) -> None:
        stream, op, data = tunnel.decode(opened.body)
        queue = self.inbox.get(stream)
        if queue is None:
            return
        if op == tunnel.DATA:
            queue.put_nowait(data)
        elif op == tunnel.END:
            self.ended[stream] = json.loads(data) if data else {}
            queue.put_nowait(None)

    async def open(self, preview: str) -> int:
        stream = next(self.ids)
        self.inbox[stream] = asyncio.Queue()
        body = json.dumps({"preview": preview}).encode()
        await self.vc.send_sealed(sealing.STREAM, tunnel.encode(stream, tunnel.OPEN, body))
        return stream

    async def send(self, stream: int, data: bytes) -> None:
        for at in range(0, len(data), tunnel.MAX_DATA):
            chunk = tunnel.encode(stream, tunnel.DATA, data[at : at + tunnel.MAX_DATA])
            await self.vc.send_sealed(sealing.STREAM, chunk)

    async def end(self, stream: int) -> None:
        await self.vc.send_sealed(sealing.STREAM, tunnel.encode(stream, tunnel.END))

    async def recv(self, stream: int, timeout: float = 30.0) -> bytes | None:
        return await asyncio.wait_for(self.inbox[stream].get(), timeout)

    async def get(
        self, preview: str, path: str, headers: list[tuple[str, str]] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """``GET path`` on a stream of its own: status, headers (last of each), body."""
        stream = await self.open(preview)
        conn = h11.Connection(h11.CLIENT)
        head = [("Host", "preview"), *(headers or [])]
        out = conn.send(h11.Request(method="GET", target=path, headers=head)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        await self.send(stream, out)
        status, got, body = 0, {}, bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await self.recv(stream)
                conn.receive_data(data or b"")
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                got = {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        await self.end(stream)
        return status, got, bytes(body)
