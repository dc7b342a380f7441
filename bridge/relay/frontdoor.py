"""The ports `relay serve` opens to phones, in front of nats-server and the page.

A phone behind a strict network may reach one port only, so the web port carries both: a
request for ``/nats`` is nats-server's WebSocket (the request, its upgrade and every byte after
it are copied to nats-server's WebSocket listener, which listens on loopback only), any other
request is the web client's (copied to bridge/relay/webserve.py's listener, also on loopback).
The WebSocket port (``--ws-port``) stays for links made before: every request on it is copied
to nats-server's listener. The preview port (``--preview-port``) is the previews' own origin:
every request on it is copied to bridge/relay/previeworigin.py's listener. TLS ends here, so a
renewed certificate is taken by one ``load_cert_chain`` (bridge/relay/autotls.py).

Anyone may connect, so a connection gets ``HEAD_TIMEOUT_S`` from its accept to finish its TLS
handshake and send its request head, and only so many may be waiting for that at once, per
address and in all (bridge/relay/doorcap.py); one beyond is closed at once, counted, and said
in the log once in a while.

Copying costs no measurable throughput (bench/relay.py's "behind a Python splice" figures,
docs/benchmarks.md): the daemon sends bursts as BATCH messages, so there are few large writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl
from typing import Any

from bridge.logs import get_logger
from bridge.relay import acceptor
from bridge.relay.doorcap import PendingCap
from bridge.server.endpoint import tls_context
from bridge.util.logthrottle import Throttle

log = get_logger("bridge.relay.door")

#: the path of nats-server's WebSocket on the web port
NATS_PATH = "/nats"
#: a request head longer than this is answered 431; a TLS handshake and request head not done
#: HEAD_TIMEOUT_S after the accept are dropped
MAX_HEAD = 16 * 1024
HEAD_TIMEOUT_S = 10.0
TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
)
#: why a connection was closed at once, by the bound it met (doorcap.PendingCap.admit)
REFUSED = {
    "address": "too many connections from one address have sent no request yet",
    "all": "too many connections have sent no request yet",
}
#: bytes copied per read
CHUNK = 1 << 16
#: how long a connection that sent its request waits for a descriptor to reach nats-server
#: or the page with
UPSTREAM_WAIT_S = 5.0


async def splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    target: tuple[str, int],
    first: bytes = b"",
    throttle: Throttle | None = None,
) -> None:
    """Copy both ways between a client and ``target`` (``first`` goes first) until either
    side closes; then both are closed."""
    try:
        up_reader, up_writer = await _dial(target)
    except OSError as exc:
        # out of descriptors, every connection fails alike: said once in a while
        left_out = (throttle or Throttle()).take(("upstream", target[1], exc.errno))
        if left_out is not None:
            log.warning(
                "relay_door_upstream_down",
                port=target[1],
                error=str(exc),
                left_out=max(left_out, 0),
            )
        writer.transport.abort()
        return
    up_writer.write(first)
    await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))


async def _dial(target: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``target``. Out of descriptors, a phone whose request is in waits for
    one (others leave) up to UPSTREAM_WAIT_S, rather than being dropped at once."""
    deadline = asyncio.get_running_loop().time() + UPSTREAM_WAIT_S
    pause = acceptor.PAUSE_FIRST_S
    while True:
        try:
            return await asyncio.open_connection(*target)
        except OSError as exc:
            late = asyncio.get_running_loop().time() + pause > deadline
            if exc.errno not in acceptor.OUT_OF_RESOURCES or late:
                raise
        await asyncio.sleep(pause)
        pause = min(acceptor.PAUSE_MOST_S, pause * 2)


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

    def __init__(
        self,
        nats_ws_port: int,
        page_port: int | None,
        pending: PendingCap | None = None,
        preview_page_port: int | None = None,
    ) -> None:
        self.nats = ("127.0.0.1", nats_ws_port)
        self.page = ("127.0.0.1", page_port) if page_port else None
        self.preview = ("127.0.0.1", preview_page_port) if preview_page_port else None
        self.tls: ssl.SSLContext | None = None
        #: connections that have not yet sent a complete request
        self.pending = pending or PendingCap()
        self._throttle = Throttle()
        self._listeners: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(
        self,
        host: str,
        ws_port: int,
        web_port: int,
        tls_cert: str = "",
        tls_key: str = "",
        preview_port: int = 0,
    ) -> None:
        """Listen on ``ws_port``, on ``web_port`` when the page is served, and on
        ``preview_port`` when the previews' origin is."""
        self.tls = tls_context(tls_cert, tls_key) if tls_cert else None
        ports = [(ws_port, "nats")] + ([(web_port, "web")] if self.page is not None else [])
        if self.preview is not None:
            ports.append((preview_port, "preview"))
        for port, kind in ports:
            for listener in acceptor.listening_sockets(host, port):
                self._listeners.append(listener)
                take = functools.partial(self._take, kind=kind)
                work = acceptor.accept_forever(listener, take, self._throttle)
                self._own(asyncio.create_task(work))

    def reload_tls(self, tls_cert: str, tls_key: str) -> None:
        """A renewed certificate: the next handshakes present it."""
        if self.tls is not None:
            self.tls.load_cert_chain(tls_cert, tls_key)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for listener in self._listeners:
            listener.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.gather(*self._tasks, return_exceptions=True), timeout=5.0
            )

    def _own(self, work: asyncio.Task[None]) -> None:
        # each connection's copying is this door's task: cancelled when it closes
        self._tasks.add(work)
        work.add_done_callback(self._tasks.discard)

    def _take(self, conn: socket.socket, peer: Any, *, kind: str) -> None:
        """A connection just accepted: closed at once past the bounds, else served."""
        key, bound = self.pending.admit(peer)
        if key is None:
            conn.close()
            self._refused(peer, bound)
            return
        self._own(asyncio.create_task(self._attach(conn, key, kind)))

    async def _attach(self, conn: socket.socket, key: str, kind: str) -> None:
        """Streams on ``conn``, served by ``_serve`` (a server side's: it may start TLS)."""
        reader = asyncio.StreamReader(limit=MAX_HEAD)
        serve = functools.partial(self._serve, key, kind)
        protocol = asyncio.StreamReaderProtocol(reader, serve)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(lambda: protocol, conn)
        except BaseException:
            self.pending.release(key)
            conn.close()
            raise

    async def _serve(
        self, key: str, kind: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._own(task)
        try:
            try:
                head = await self._head(reader, writer)
            finally:
                self.pending.release(key)
            if head is None:
                return
            await splice(reader, writer, self._target(kind, head), head, self._throttle)
        except asyncio.CancelledError:
            # the door is closing; ended here, not re-raised: asyncio 3.11's callback on a
            # connection's task logs a traceback for a cancelled one
            writer.transport.abort()

    def _target(self, kind: str, head: bytes) -> tuple[str, int]:
        """Where a request goes: the previews' origin takes all of its port's (never
        nats-server's), the web port's page all but ``/nats``."""
        if kind == "preview" and self.preview is not None:
            return self.preview
        if kind == "web" and self.page is not None and not route(head):
            return self.page
        return self.nats

    async def _head(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bytes | None:
        """A new connection's TLS handshake and request head, within HEAD_TIMEOUT_S; None when
        it is closed instead (slow, silent, cut short, too long)."""
        try:
            async with asyncio.timeout(HEAD_TIMEOUT_S):
                if self.tls is not None:
                    await writer.start_tls(self.tls)
                return await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            writer.write(TOO_LARGE)
            writer.close()
        except (TimeoutError, asyncio.IncompleteReadError, ssl.SSLError, OSError):
            # nothing to answer, and no TLS goodbye to wait for
            writer.transport.abort()
        return None

    def _refused(self, peer: object, bound: str) -> None:
        left_out = self._throttle.take(("refused", bound))
        if left_out is not None:
            log.warning(
                "relay_door_refused",
                why=REFUSED[bound],
                peer=str(peer[0]) if isinstance(peer, tuple) and peer else "",
                waiting=self.pending.waiting,
                refused=self.pending.refused[bound],
                left_out=max(left_out, 0),
            )
