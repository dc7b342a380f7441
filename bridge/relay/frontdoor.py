"""The ports `relay serve` opens to phones, in front of nats-server and the page.

A phone behind a strict network may reach one port only, so the web port carries both: a
request for ``/nats`` is nats-server's WebSocket (the request, its upgrade and every byte after
it are copied to nats-server's WebSocket listener, which listens on loopback only), any other
request is the web client's (copied to bridge/relay/webserve.py's listener, also on loopback).
The WebSocket port (``--ws-port``) stays for links made before: everything on it is copied to
nats-server's listener. TLS ends here, so a renewed certificate is taken by one
``load_cert_chain`` (bridge/relay/autotls.py).

Copying costs no measurable throughput (bench/relay.py's "behind a Python splice" figures,
docs/benchmarks.md): the daemon sends bursts as BATCH messages, so there are few large writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from bridge.logs import get_logger
from bridge.server.endpoint import tls_context

log = get_logger("bridge.relay.door")

#: the path of nats-server's WebSocket on the web port
NATS_PATH = "/nats"
#: a request head longer than this, or slower than HEAD_TIMEOUT_S, is dropped
MAX_HEAD = 16 * 1024
HEAD_TIMEOUT_S = 10.0
TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
)
#: bytes copied per read
CHUNK = 1 << 16


async def splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    target: tuple[str, int],
    first: bytes = b"",
) -> None:
    """Copy both ways between a client and ``target`` (``first`` goes first) until either
    side closes; then both are closed."""
    try:
        up_reader, up_writer = await asyncio.open_connection(*target)
    except OSError as exc:
        log.warning("relay_door_upstream_down", port=target[1], error=str(exc))
        writer.close()
        return
    up_writer.write(first)
    await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


def route(head: bytes) -> bool:
    """Whether a request head (up to its blank line) asks for nats-server's WebSocket."""
    line = head.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    if len(parts) != 3:
        return False
    path = parts[1].split(b"?", 1)[0]
    return path == NATS_PATH.encode()


class FrontDoor:
    """The web port and the WebSocket port, TLS when a certificate is given."""

    def __init__(self, nats_ws_port: int, page_port: int | None) -> None:
        self.nats = ("127.0.0.1", nats_ws_port)
        self.page = ("127.0.0.1", page_port) if page_port else None
        self.tls: ssl.SSLContext | None = None
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(
        self, host: str, ws_port: int, web_port: int, tls_cert: str = "", tls_key: str = ""
    ) -> None:
        """Listen on ``ws_port``, and on ``web_port`` when the page is served."""
        self.tls = tls_context(tls_cert, tls_key) if tls_cert else None
        listen = asyncio.start_server
        self._servers.append(await listen(self._on_ws, host, ws_port, ssl=self.tls))
        if self.page is not None:
            web = await listen(self._on_web, host, web_port, ssl=self.tls, limit=MAX_HEAD)
            self._servers.append(web)

    def reload_tls(self, tls_cert: str, tls_key: str) -> None:
        """A renewed certificate: the next handshakes present it."""
        if self.tls is not None:
            self.tls.load_cert_chain(tls_cert, tls_key)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.gather(*self._tasks, return_exceptions=True), timeout=5.0
            )

    def _own(self, work: asyncio.Task[None]) -> None:
        # each connection's copying is this door's task: cancelled when it closes
        self._tasks.add(work)
        work.add_done_callback(self._tasks.discard)

    async def _on_ws(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._own(task)
        await splice(reader, writer, self.nats)

    async def _on_web(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._own(task)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            writer.write(TOO_LARGE)
            writer.close()
            return
        except (TimeoutError, asyncio.IncompleteReadError, OSError):
            writer.close()  # slow or cut short: nothing to answer
            return
        assert self.page is not None
        await splice(reader, writer, self.nats if route(head) else self.page, first=head)
