"""The daemon's listening sockets: HTTP (``/healthz``, the web client's static files) and the
WebSocket endpoint, whose connections ``BridgeServer.serve`` runs over a
``WebSocketTransport``.

Everything about a request before the upgrade is decided here: a repeated header, the origin,
and whether a connection slot is free (bridge/server/admission.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import Callable, Collection
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol

from websockets.asyncio.server import Server, ServerConnection, serve, unix_serve
from websockets.datastructures import Headers
from websockets.http11 import Request as HttpRequest
from websockets.http11 import Response as HttpResponse

from bridge import __version__
from bridge.config import Config
from bridge.logs import get_logger
from bridge.server.admission import Admission
from bridge.server.auth import token_matches
from bridge.server.connection import Connection
from bridge.server.sockbuf import fix_send_buffer
from bridge.server.tokens import TokenWatch
from bridge.server.transport import FrameTransport
from bridge.server.wstransport import WRITE_LIMIT, WebSocketTransport, peer_of
from bridge.util.logthrottle import Throttle
from bridge.wire.protocol import SUBPROTOCOL_JSON, SUBPROTOCOL_MSGPACK

log = get_logger("bridge.server")

WS_PATH = "/v1/ws"

#: Headers a request must not repeat (which one would count is ambiguous).
SINGLE_HEADERS = ("Host", "Origin", "Authorization", "Sec-WebSocket-Key")

HttpHandler = Callable[[ServerConnection, HttpRequest], HttpResponse | None]


def json_response(status: int, body: dict[str, Any]) -> HttpResponse:
    data = json.dumps(body).encode()
    headers = Headers(
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
            ("Cache-Control", "no-store"),
        ]
    )
    return HttpResponse(status, HTTPStatus(status).phrase, headers, data)


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server's TLS: this certificate and key, TLS 1.2 at least."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def bearer(header: str) -> str:
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


class Served(Protocol):
    """What the endpoint needs of the server (bridge/server/server.py) behind it."""

    config: Config
    tokens: TokenWatch
    admission: Admission

    @property
    def connections(self) -> Collection[Connection]: ...

    def healthz(self) -> tuple[int, dict[str, Any]]: ...

    async def serve(
        self, transport: FrameTransport, *, trusted: bool, header_token: str | None = None
    ) -> None: ...


class Endpoint:
    """The TCP listener (and the Unix socket, whose peers are trusted) of one server."""

    def __init__(self, server: Served) -> None:
        self.server = server
        self.config = server.config
        self._servers: list[Server] = []
        #: Tried in order for any path other than /healthz and the WebSocket's
        #: (bridge/server/web.py).
        self.http_handlers: list[HttpHandler] = []
        self.tcp_address: tuple[str, int] | None = None
        self.unix_path: Path | None = None
        #: a page retries every few seconds: its refused origin is logged once in ten minutes
        self._refused_origins = Throttle(every_s=600)

    # ---- listening ----------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext | None:
        conf = self.config.server
        if not conf.tls_cert:
            return None
        return tls_context(conf.tls_cert, conf.tls_key)

    def _serve_kwargs(self) -> dict[str, Any]:
        conf = self.config.server
        return {
            "process_request": self._checked_request,
            "select_subprotocol": self._select_subprotocol,
            "subprotocols": [SUBPROTOCOL_JSON, SUBPROTOCOL_MSGPACK],
            "max_size": self.config.limits.max_frame_bytes,
            "ping_interval": conf.ping_interval,
            "ping_timeout": conf.ping_timeout,
            "close_timeout": 3,
            "max_queue": 64,
            "write_limit": WRITE_LIMIT,
            "server_header": f"agent-bridge/{__version__}",
        }

    async def start(self, host: str, port: int, unix_path: Path | None) -> None:
        tls = self._ssl_context()
        tcp = await serve(self._handle_tcp, host, port, ssl=tls, **self._serve_kwargs())
        self._servers.append(tcp)
        sock = next(iter(tcp.sockets))
        self.tcp_address = (host, sock.getsockname()[1])
        if unix_path is not None:
            unix_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with contextlib.suppress(FileNotFoundError):
                unix_path.unlink()
            unix = await unix_serve(self._handle_unix, str(unix_path), **self._serve_kwargs())
            unix_path.chmod(0o600)
            self._servers.append(unix)
            self.unix_path = unix_path

    @property
    def url(self) -> str:
        assert self.tcp_address is not None
        host, port = self.tcp_address
        scheme = "wss" if self.config.server.tls_cert else "ws"
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{port}{WS_PATH}"

    async def close(self) -> None:
        """Stop listening; the connections were closed with their codes before."""
        for srv in self._servers:
            srv.close(close_connections=False)
        for srv in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(srv.wait_closed(), 5.0)
        if self.unix_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.unix_path.unlink()

    # ---- HTTP, before the upgrade ---------------------------------------------------------------

    def _select_subprotocol(self, _conn: ServerConnection, offered: Any) -> str | None:
        for name in offered:
            if name in (SUBPROTOCOL_JSON, SUBPROTOCOL_MSGPACK):
                return str(name)
        return None

    def _admit(self, connection: ServerConnection, request: HttpRequest) -> HttpResponse | None:
        """Connection slots: see bridge/server/admission.py."""
        server = self.server
        unix = peer_of(connection) == "unix"
        header = request.headers.get("Authorization")
        token = bearer(header) if header is not None else None
        if unix or (token is not None and token_matches(server.tokens.token, token)):
            owned = sum(1 for c in server.connections if c.authenticated or c.trusted)
            if owned >= self.config.limits.max_connections:
                return json_response(503, {"ok": False, "error": "too many connections"})
            return None
        if not server.admission.room_for_one():
            error = "too many unauthenticated connections"
            return json_response(503, {"ok": False, "error": error})
        return None

    def origin_allowed(self, origin: str, host_header: str | None) -> bool:
        allowed = self.config.server.allowed_origins
        if origin in allowed or "*" in allowed:
            return True
        # The daemon's own web client, served from this host:port, is always allowed.
        if host_header:
            for scheme in ("http", "https"):
                if origin == f"{scheme}://{host_header}":
                    return True
        return False

    def _checked_request(
        self, connection: ServerConnection, request: HttpRequest
    ) -> HttpResponse | None:
        """Refuse an ambiguous request (a header that must be single, repeated) with 400, and
        answer anything unexpected with a JSON 500, both logged: never a plain traceback."""
        for name in SINGLE_HEADERS:
            if len(request.headers.get_all(name)) > 1:
                log.warning(
                    "http_bad_request", peer=peer_of(connection), header=name, why="repeated header"
                )
                return json_response(400, {"ok": False, "error": f"repeated {name} header"})
        try:
            return self._process_request(connection, request)
        except Exception:
            log.exception("http_request_failed", peer=peer_of(connection), path=request.path)
            return json_response(500, {"ok": False, "error": "internal error"})

    def _process_request(
        self, connection: ServerConnection, request: HttpRequest
    ) -> HttpResponse | None:
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            status, body = self.server.healthz()
            return json_response(status, body)
        if path != WS_PATH:
            for handler in self.http_handlers:
                response = handler(connection, request)
                if response is not None:
                    return response
            return json_response(404, {"ok": False, "error": "not found"})
        origin = request.headers.get("Origin")
        if origin is not None and not self.origin_allowed(origin, request.headers.get("Host")):
            return self._refuse_origin(connection, origin)
        return self._admit(connection, request)

    def _refuse_origin(self, connection: ServerConnection, origin: str) -> HttpResponse:
        hint = f"add {origin} to server.allowed_origins in config.toml, then restart the daemon"
        left_out = self._refused_origins.take(origin)
        if left_out is not None:
            log.warning(
                "origin_refused",
                origin=origin,
                peer=peer_of(connection),
                hint=hint,
                **({"left_out": left_out} if left_out > 0 else {}),
            )
        response = json_response(403, {"ok": False, "error": "origin not allowed", "hint": hint})
        # A browser hides why a WebSocket failed; the page asks again with fetch() (CORS) to
        # tell "refused" from "offline". The answer says nothing the page could abuse.
        response.headers["Access-Control-Allow-Origin"] = "*"
        return response

    # ---- the WebSocket ------------------------------------------------------------------------

    async def _handle_tcp(self, ws: ServerConnection) -> None:
        await self._handle(ws, trusted=False)

    async def _handle_unix(self, ws: ServerConnection) -> None:
        await self._handle(ws, trusted=True)

    async def _handle(self, ws: ServerConnection, *, trusted: bool) -> None:
        fix_send_buffer(ws.transport, self.config.limits.socket_send_buffer)
        header = ws.request.headers.get("Authorization") if ws.request else None
        await self.server.serve(
            WebSocketTransport(ws),
            trusted=trusted,
            header_token=bearer(header) if header is not None else None,
        )
