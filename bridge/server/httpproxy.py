"""One browser connection to a preview's listener, proxied to a dev server on the loopback.

HTTP/1.1 is parsed with h11 (sans-I/O: bytes in, events out, on both sides); this module only
moves bytes between two sockets and decides. The dev server is only ever 127.0.0.1 (then ::1)
on the preview's port: nothing in a request chooses where it goes. Each request is bounded
(its head, its body, the time to the answer's head and between two reads, the answer's size)
and asked on a new upstream connection (``Connection: close``), so nothing of one request
leaks into another. ``Host`` (and ``Origin``, when sent) are rewritten to what a dev server
on ``localhost:PORT`` expects. A WebSocket upgrade the dev server accepts (its live reload) is
spliced both ways until either side closes or the preview does.

What the browser must show first: the preview's secret, once, at ``/__preview/KEY``; it is
kept as an HttpOnly cookie for this preview alone and never passed to the dev server. A
request without it, or one for a service worker's script (``Service-Worker: script``: a
previewed page registers none) is refused here. docs/security.md, "Preview".
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote, urlsplit

import h11

from bridge.logs import get_logger

log = get_logger("bridge.preview")

#: a request's or an answer's head at most
MAX_HEAD = 64 * 1024
#: a request's body at most (a form, an upload to the dev server)
MAX_REQUEST_BODY = 32 * 1024 * 1024
#: an answer's body at most
MAX_RESPONSE_BODY = 512 * 1024 * 1024
#: seconds: to connect to the dev server, to get its answer's head, between two reads
CONNECT_S = 5.0
ANSWER_S = 60.0
READ_S = 60.0
#: seconds a browser's kept-alive connection may sit without a request
KEEPALIVE_S = 75.0
#: a read fits in one relay STREAM message with room to spare (bridge/relay/tunnel.py)
READ_SIZE = 255 * 1024

KEY_PATH = "/__preview/"

#: headers of one hop only (RFC 9110 7.6.1), never passed on; h11 frames each side itself
HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
}


class Target(Protocol):
    """What a connection needs of its preview (bridge/server/preview.py)."""

    id: str
    port: int
    key: str

    @property
    def cookie(self) -> str: ...

    def touch(self) -> None: ...


class Reader(Protocol):
    """Where the browser's bytes come from: a socket's StreamReader, or a relay stream's."""

    async def read(self, n: int) -> bytes: ...


class Writer(Protocol):
    """Where the browser's bytes go: a socket's StreamWriter, or a relay stream's."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


class Refused(Exception):
    """A request the proxy answers itself (``status``, one line of text)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


@dataclass
class Bounds:
    """What one connection may take; the tests make them small."""

    head: int = MAX_HEAD
    request_body: int = MAX_REQUEST_BODY
    response_body: int = MAX_RESPONSE_BODY
    answer_s: float = ANSWER_S
    read_s: float = READ_S


async def _event(
    conn: h11.Connection, reader: Reader, timeout: float
) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
    """The next event of ``conn``, reading from ``reader`` as it needs."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await asyncio.wait_for(reader.read(READ_SIZE), timeout)
        conn.receive_data(data)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for k, v in headers:
        if k == name:
            return v
    return None


def _head_size(first: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    return len(first) + sum(len(k) + len(v) + 4 for k, v in headers)


def cookie_value(headers: list[tuple[bytes, bytes]], name: str) -> str | None:
    """The value of cookie ``name`` in a request's ``Cookie`` headers."""
    want = name.encode()
    for k, v in headers:
        if k != b"cookie":
            continue
        for part in v.split(b";"):
            key, _, value = part.strip().partition(b"=")
            if key == want:
                return value.decode("latin-1")
    return None


def without_cookie(value: bytes, name: str) -> bytes:
    want = name.encode()
    kept = [p.strip() for p in value.split(b";") if p.strip().partition(b"=")[0] != want]
    return b"; ".join(kept)


def upstream_headers(
    headers: list[tuple[bytes, bytes]], target: Target, upgrade: bool
) -> list[tuple[bytes, bytes]]:
    """A browser's request headers as the dev server gets them: its Host and Origin, our
    cookie and the hop-by-hop headers gone."""
    here = f"localhost:{target.port}".encode()
    out: list[tuple[bytes, bytes]] = [(b"host", here)]
    for k, v in headers:
        if k in HOP or k == b"host":
            continue
        if k == b"origin":
            v = b"http://" + here
        elif k == b"referer":
            parts = urlsplit(v.decode("latin-1"))
            v = f"http://localhost:{target.port}{parts.path or '/'}".encode()
        elif k == b"cookie":
            v = without_cookie(v, target.cookie)
            if not v:
                continue
        out.append((k, v))
    if upgrade:
        out += [(b"connection", b"Upgrade"), (b"upgrade", b"websocket")]
    else:
        out.append((b"connection", b"close"))
    return out


def downstream_headers(
    headers: list[tuple[bytes, bytes]], target: Target
) -> list[tuple[bytes, bytes]]:
    """A dev server's answer headers as the browser gets them: hop-by-hop headers gone, and
    no cookie of the preview's own name (the page cannot replace the preview's secret)."""
    out = []
    for k, v in headers:
        if k in HOP:
            continue
        if k == b"set-cookie" and v.split(b"=", 1)[0].strip() == target.cookie.encode():
            continue
        out.append((k, v))
    return out


class ProxyConnection:
    """One browser connection: its requests one after the other."""

    def __init__(
        self,
        target: Target,
        reader: Reader,
        writer: Writer,
        bounds: Bounds | None = None,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self.target = target
        self.reader = reader
        self.writer = writer
        self.bounds = bounds or Bounds()
        self.on_refused = on_refused
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.bounds.head)

    def _send(self, *events: h11.Event) -> None:
        for event in events:
            data = self.conn.send(event)
            if data:
                self.writer.write(data)

    async def run(self) -> None:
        try:
            while await self._one():
                self.conn.start_next_cycle()
        except (h11.ProtocolError, Refused) as exc:
            status = exc.status if isinstance(exc, Refused) else 400
            if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                with contextlib.suppress(h11.ProtocolError):
                    # said, so that a keep-alive browser does not send its next request here
                    close = [(b"connection", b"close")]
                    self._plain(status, str(exc) or "bad request", close)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    def _plain(
        self, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        body = (text + "\n").encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
            *(extra or []),
        ]
        self._send(h11.Response(status_code=status, headers=headers), h11.Data(data=body))
        self._send(h11.EndOfMessage())

    async def _one(self) -> bool:
        """One request and its answer; False when the connection is done."""
        try:
            event = await _event(self.conn, self.reader, KEEPALIVE_S)
        except TimeoutError:
            return False
        if not isinstance(event, h11.Request):
            return False
        self.target.touch()
        headers = list(event.headers)
        # h11 bounds a head that arrives in pieces; one that arrives whole is measured here
        if _head_size(event.target, headers) > self.bounds.head:
            raise Refused(431, "the request's head is too large for a preview")
        path = event.target.decode("latin-1")
        if path.startswith(KEY_PATH):
            self._enter(path)
            return self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE
        given = cookie_value(headers, self.target.cookie) or ""
        if not hmac.compare_digest(given.encode(), self.target.key.encode()):
            raise Refused(403, "open this preview from agent-bridge first")
        if (_header(headers, b"service-worker") or b"").lower() == b"script":
            raise Refused(403, "a previewed page registers no service worker")
        body = await self._body()
        upgrade = (_header(headers, b"upgrade") or b"").lower() == b"websocket"
        up_headers = upstream_headers(headers, self.target, upgrade)
        # the body was read whole (a chunked one too): its length is said as it is now
        up_headers = [(k, v) for k, v in up_headers if k != b"content-length"]
        if body or event.method not in (b"GET", b"HEAD", b"OPTIONS"):
            up_headers.append((b"content-length", str(len(body)).encode()))
        request = h11.Request(method=event.method, target=event.target, headers=up_headers)
        await self._forward(request, body, upgrade)
        return self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE

    def _enter(self, path: str) -> None:
        """``/__preview/KEY?to=PATH``: the secret becomes this preview's cookie, then PATH."""
        parts = urlsplit(path)
        key = parts.path[len(KEY_PATH) :]
        if not hmac.compare_digest(key.encode(), self.target.key.encode()):
            raise Refused(403, "this preview is closed, or the link is not its own")
        to = "/"
        for pair in parts.query.split("&"):
            name, _, value = pair.partition("=")
            if name == "to":
                to = unquote(value)
        # a path on this preview only: not another host (//, \\), not a header's end
        if not to.startswith("/") or to.startswith("//") or "\\" in to or not to.isprintable():
            to = "/"
        cookie = f"{self.target.cookie}={self.target.key}; Path=/; HttpOnly; SameSite=Strict"
        self._drain_body_sync()
        self._plain(
            303,
            "opening the preview",
            [(b"location", to.encode()), (b"set-cookie", cookie.encode())],
        )

    def _drain_body_sync(self) -> None:
        # a GET has no body; anything else h11 has buffered is dropped with the connection
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA or isinstance(event, h11.EndOfMessage):
                return
            if event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                return

    async def _body(self) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            if self.conn.they_are_waiting_for_100_continue:
                self._send(h11.InformationalResponse(status_code=100, headers=[]))
            event = await _event(self.conn, self.reader, self.bounds.read_s)
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.bounds.request_body:
                    raise Refused(413, "the request's body is too large for a preview")
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            else:
                raise Refused(400, "the request ended early")

    async def _dial(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The dev server: 127.0.0.1, then ::1, on the preview's port (and nowhere else)."""
        last: OSError | None = None
        for host in ("127.0.0.1", "::1"):
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(host, self.target.port), CONNECT_S
                )
            except (OSError, TimeoutError) as exc:
                last = exc if isinstance(exc, OSError) else OSError(str(exc))
        raise Refused(502, f"nothing answers on localhost:{self.target.port} ({last})")

    async def _forward(self, request: h11.Request, body: bytes, upgrade: bool) -> None:
        up_reader, up_writer = await self._dial()
        try:
            up = h11.Connection(h11.CLIENT, max_incomplete_event_size=self.bounds.head)
            out = up.send(request) or b""
            if body:
                out += up.send(h11.Data(data=body)) or b""
            out += up.send(h11.EndOfMessage()) or b""
            up_writer.write(out)
            await up_writer.drain()
            head = await _event(up, up_reader, self.bounds.answer_s)
            if isinstance(head, h11.InformationalResponse) and head.status_code == 101:
                if not upgrade:
                    raise Refused(502, "the dev server switched protocols unasked")
                await self._splice(head, up, up_reader, up_writer)
                return
            if not isinstance(head, h11.Response):
                raise Refused(502, "the dev server closed without an answer")
            if _head_size(head.reason, list(head.headers)) > self.bounds.head:
                raise Refused(502, "the dev server's answer head is too large")
            headers = downstream_headers(list(head.headers), self.target)
            self._send(
                h11.Response(status_code=head.status_code, headers=headers, reason=head.reason)
            )
            size = 0
            while True:
                event = await _event(up, up_reader, self.bounds.read_s)
                if isinstance(event, h11.Data):
                    size += len(event.data)
                    if size > self.bounds.response_body:
                        log.info("preview_answer_too_large", preview=self.target.id)
                        raise ConnectionError("answer too large")  # the browser sees it cut
                    self._send(h11.Data(data=event.data))
                    await self.writer.drain()
                elif isinstance(event, h11.EndOfMessage):
                    self._send(h11.EndOfMessage())
                    await self.writer.drain()
                    return
                else:
                    raise ConnectionError("the dev server's answer ended early")
        except TimeoutError:
            if self.conn.our_state is h11.SEND_RESPONSE:
                raise Refused(504, "the dev server did not answer in time") from None
            raise
        finally:
            up_writer.close()

    async def _splice(
        self,
        head: h11.InformationalResponse,
        up: h11.Connection,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        """A WebSocket the dev server accepted: the 101 to the browser, then bytes both ways."""
        headers = [(k, v) for k, v in head.headers if k not in HOP]
        headers += [(b"connection", b"Upgrade"), (b"upgrade", b"websocket")]
        self._send(h11.InformationalResponse(status_code=101, headers=headers))
        await self.writer.drain()
        down_extra, _ = self.conn.trailing_data
        up_extra, _ = up.trailing_data
        if up_extra:
            self.writer.write(up_extra)
        if down_extra:
            up_writer.write(down_extra)

        async def pipe(src: Reader, dst: Writer) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(READ_SIZE):
                    dst.write(data)
                    await dst.drain()
                    self.target.touch()

        tasks = [
            asyncio.ensure_future(pipe(self.reader, up_writer)),
            asyncio.ensure_future(pipe(up_reader, self.writer)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        raise ConnectionError("websocket ended")
