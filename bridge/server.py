"""The WebSocket endpoint: handshake, authentication, limits, and request dispatch.

Each connection has one bounded outbox drained by one sender task, so every frame it gets
(answers, events, state) keeps its order, and a client that stops reading fills only its own
outbox and is cut off with 4408 without slowing the agent or anyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import ssl
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve, unix_serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request as HttpRequest
from websockets.http11 import Response as HttpResponse
from websockets.protocol import State

from bridge import __version__
from bridge.admission import Admission
from bridge.agent_types import DAEMON_AGENT, Check, overall_status
from bridge.auth import load_or_create_token, token_matches
from bridge.config import Config
from bridge.dirwatch import DirWatch, WatchUnavailable
from bridge.hub import Hub, HubError
from bridge.logs import get_logger
from bridge.netaddr import is_loopback as is_loopback
from bridge.projects_api import ProjectsApi
from bridge.protocol import (
    CLOSE_PROTOCOL,
    CLOSE_SHUTDOWN,
    CLOSE_TOO_SLOW,
    CLOSE_UNAUTHORIZED,
    PROTOCOL_VERSION,
    SUBPROTOCOL_JSON,
    SUBPROTOCOL_MSGPACK,
    AgentsChanged,
    AgentsCheck,
    AgentsList,
    DaemonFrame,
    EncodedEvent,
    EncodedFrame,
    Err,
    Hello,
    ModelsList,
    Ok,
    Outgoing,
    Ping,
    ProtocolError,
    Request,
    RequestId,
    Result,
    SessionAttach,
    SessionClose,
    SessionCreate,
    SessionHandoff,
    SessionInterrupt,
    SessionPermission,
    SessionSend,
    SessionsList,
    SessionSubscribe,
    SessionUnsubscribe,
    UsageGet,
    decode_request,
)
from bridge.registry import Registry
from bridge.results import (
    AgentsCheckResult,
    AgentsListResult,
    Empty,
    HelloResult,
    ModelsListResult,
    ServerInfo,
    SessionAttachResult,
    SessionCreateResult,
    SessionHandoffResult,
    SessionSendResult,
    SessionsListResult,
    UsageGetResult,
)
from bridge.sockbuf import fix_send_buffer
from bridge.store import StoreUnavailable

log = get_logger("bridge.server")

WS_PATH = "/v1/ws"
TOKEN_CHECK_S = 1.0
#: Bytes a connection's socket buffer may hold before sending waits for the client.
WRITE_LIMIT = 256 * 1024
#: Frames a sender writes at once (one socket write) before it yields to the event loop.
SEND_BURST = 256
#: ... or bytes: a burst of large frames must not overshoot the socket buffer's limit far.
BURST_BYTES = 64 * 1024
#: Largest frame a client may send before its token is checked: a hello is small, and an
#: unauthenticated peer must not make the daemon buffer `max_frame_bytes` per connection.
HELLO_MAX_BYTES = 64 * 1024
#: A connection whose socket took nothing for this long while data waits has stopped reading:
#: turns no longer wait for it (Connection.stalled).
STALLED_S = 0.5
#: Bytes an event frame adds around its block (session id, seq, time stamp).
EVENT_OVERHEAD = 96

#: Headers a request must not repeat (which one would count is ambiguous).
SINGLE_HEADERS = ("Host", "Origin", "Authorization", "Sec-WebSocket-Key")

HttpHandler = Callable[[ServerConnection, HttpRequest], HttpResponse | None]


def _json_response(status: int, body: dict[str, Any]) -> HttpResponse:
    data = json.dumps(body).encode()
    headers = Headers(
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
            ("Cache-Control", "no-store"),
        ]
    )
    return HttpResponse(status, HTTPStatus(status).phrase, headers, data)


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

    def __init__(self, ws: ServerConnection, server: BridgeServer, *, trusted: bool) -> None:
        self.ws = ws
        self.server = server
        self.msgpack = ws.subprotocol == SUBPROTOCOL_MSGPACK
        self.trusted = trusted
        self.authenticated = False
        self.token_used: str | None = None
        self._outbox: deque[Outgoing] = deque()
        self._cap = server.config.limits.send_queue_frames
        self._byte_cap = server.config.limits.send_queue_bytes
        self._bytes = 0
        #: When the socket last took bytes (or the connection opened): see ``stalled``.
        self.progress_at = time.monotonic()
        #: ``_progress_mark()`` after a ``catch_up`` that the client answered with nothing.
        self._unanswered: tuple[float, int] | None = None
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._closed = False
        self.bucket = TokenBucket(
            server.config.limits.requests_per_second, server.config.limits.request_burst
        )
        self.peer = _peer(ws)
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
        """Data waits and the socket has taken none of it for ``STALLED_S``: the client has
        stopped reading, and is not waited for (it is cut off when its outbox is full)."""
        return bool(self._outbox) and time.monotonic() - self.progress_at > STALLED_S

    async def catch_up(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the outbox to drain; not at all for a client that has
        stopped reading, nor again for one whose socket took nothing the last time it was
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
        """Changes whenever the socket takes bytes: when progress_at moves, or the transport's
        buffer shrinks while a blocked send waits for the client."""
        transport = self.ws.transport
        waiting = transport.get_write_buffer_size() if transport is not None else 0
        return self.progress_at, waiting

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
        asyncio.get_running_loop().create_task(self.ws.close(code, reason))

    async def drain_then_close(self, code: int, reason: str, timeout: float = 2.0) -> None:
        """Send what is queued (an error answer, say), then close."""
        deadline = time.monotonic() + timeout
        while self._outbox and not self._closed and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self.close(code, reason)

    async def sender(self) -> None:
        try:
            while not self._closed:
                await self._wake.wait()
                self._wake.clear()
                while self._outbox and not self._closed:
                    if self._writable():
                        self._write_burst()
                        self.progress_at = time.monotonic()
                        await asyncio.sleep(0)  # let other connections and the hub run
                    else:
                        # The socket's buffer is full: send() waits for the client, and raises
                        # once the connection is lost.
                        data = self._pop().encoded(self.msgpack)
                        if not await self._send_unless_stalled(data):
                            return
                        self.progress_at = time.monotonic()
        except ConnectionClosed:
            pass
        finally:
            self._closed = True
            self._space.set()

    async def _send_unless_stalled(self, data: bytes) -> bool:
        """Send one frame through websockets (which waits while the socket's buffer is full);
        False, and the connection closed with 4408, once the socket has taken no byte for
        ``limits.write_stall_s``."""
        stall_s = self.server.config.limits.write_stall_s
        transport = self.ws.transport
        send = asyncio.ensure_future(self.ws.send(data, text=not self.msgpack))
        waiting = transport.get_write_buffer_size()
        moved_at = time.monotonic()
        while True:
            done, _ = await asyncio.wait({send}, timeout=min(1.0, stall_s))
            if done:
                send.result()
                return True
            now = time.monotonic()
            left = transport.get_write_buffer_size()
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

    def _writable(self) -> bool:
        transport = self.ws.transport
        return (
            self.ws.protocol.state is State.OPEN
            and not transport.is_closing()
            and transport.get_write_buffer_size() < WRITE_LIMIT
        )

    def _burst(self) -> Iterator[bytes]:
        """The encoded payloads of up to ``SEND_BURST`` queued frames, or ``BURST_BYTES``."""
        size = 0
        for _ in range(SEND_BURST):
            if not self._outbox or size >= BURST_BYTES:
                return
            data = self._pop().encoded(self.msgpack)
            size += len(data)
            yield data

    def _write_burst(self) -> None:
        """Frame a burst of queued frames and write it to the socket at once.

        An awaited send() per frame, and then a write (a system call) per frame, were most of
        the sender's cost at full speed (docs/benchmarks.md).
        """
        protocol = self.ws.protocol
        transport = self.ws.transport
        if not protocol.extensions:
            # Nothing negotiated (no compression): a server frame is a header and the payload
            # (RFC 6455 section 5.2), which costs a third of going through the protocol object.
            opcode = 0x82 if self.msgpack else 0x81
            parts: list[bytes] = []
            for data in self._burst():
                parts.append(_frame_header(opcode, len(data)))
                parts.append(data)
            transport.write(b"".join(parts))
            return
        # Compression negotiated: websockets frames and compresses.
        frame = protocol.send_binary if self.msgpack else protocol.send_text
        for data in self._burst():
            frame(data)
        chunks = protocol.data_to_send()
        if all(chunks):
            transport.write(b"".join(chunks))
            return
        # An empty chunk asks for end-of-stream; framing data never does, but the protocol
        # decides, so honour it the way websockets does.
        for chunk in chunks:
            if chunk:
                transport.write(chunk)
            elif transport.can_write_eof():
                transport.write_eof()
            else:
                transport.close()


def _frame_header(opcode: int, length: int) -> bytes:
    """FIN, the opcode, and the payload length of an unmasked frame (RFC 6455 section 5.2)."""
    if length < 126:
        return bytes((opcode, length))
    if length < 65536:
        return struct.pack("!BBH", opcode, 126, length)
    return struct.pack("!BBQ", opcode, 127, length)


def _set_max_message(ws: ServerConnection, size: int) -> None:
    # websockets reads the limit when the next frame starts to arrive.
    protocol: Any = ws.protocol
    if hasattr(protocol, "max_message_size"):
        protocol.max_message_size = size
    else:  # websockets < 15
        protocol.max_size = size


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


def _bearer(header: str) -> str:
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def _peer(ws: ServerConnection) -> str:
    try:
        addr = ws.remote_address
    except Exception:
        return "?"
    if isinstance(addr, tuple) and addr:
        return str(addr[0])
    return "unix"


class BridgeServer:
    def __init__(self, config: Config, hub: Hub, registry: Registry, token_path: Path) -> None:
        self.config = config
        self.hub = hub
        self.registry = registry
        self.token_path = token_path
        self.token = load_or_create_token(token_path)
        self._token_mtime = self._mtime()
        #: set while clients are connected: only then does the token file need watching
        self._clients = asyncio.Event()
        self.connections: set[Connection] = set()
        self._servers: list[Server] = []
        self.admission = Admission(
            config.limits.max_unauthenticated, config.limits.auth_failures_per_minute
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self.http_handlers: list[HttpHandler] = []
        #: Called with each connection that closes (presence, for one).
        self.on_disconnect: list[Callable[[Connection], None]] = []
        #: The daemon's own checks (``agents.check`` of DAEMON_AGENT), handed in by the daemon.
        self.daemon_checks: Callable[..., list[Check]] | None = None
        self.tcp_address: tuple[str, int] | None = None
        self.unix_path: Path | None = None
        registry.on_change(self.broadcast_agents_changed)
        hub.store.health.subscribe(self.broadcast_store_health)
        self._handlers: dict[type, Callable[[Connection, Any], Awaitable[Result]]] = {
            AgentsList: self._agents_list,
            AgentsCheck: self._agents_check,
            ModelsList: self._models_list,
            SessionsList: self._sessions_list,
            SessionCreate: self._session_create,
            SessionAttach: self._session_attach,
            SessionSubscribe: self._session_subscribe,
            SessionUnsubscribe: self._session_unsubscribe,
            SessionSend: self._session_send,
            SessionInterrupt: self._session_interrupt,
            SessionPermission: self._session_permission,
            SessionHandoff: self._session_handoff,
            SessionClose: self._session_close,
            UsageGet: self._usage_get,
            Ping: self._ping,
        }
        # projects.list, workspace.*, session.mode (bridge/projects_api.py)
        self.projects_api = ProjectsApi(config, hub)
        self._handlers.update(self.projects_api.handlers())

    # ---- lifecycle ---------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext | None:
        conf = self.config.server
        if not conf.tls_cert:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(conf.tls_cert, conf.tls_key)
        return ctx

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
        self._spawn(self._watch_token())

    @property
    def url(self) -> str:
        assert self.tcp_address is not None
        host, port = self.tcp_address
        scheme = "wss" if self.config.server.tls_cert else "ws"
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{port}{WS_PATH}"

    async def close(self) -> None:
        for conn in list(self.connections):
            conn.close(CLOSE_SHUTDOWN, "daemon shutting down")
        await asyncio.sleep(0)
        for srv in self._servers:
            srv.close(close_connections=False)
        for srv in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(srv.wait_closed(), 5.0)
        for task in list(self._tasks):
            task.cancel()
        await self.projects_api.close()
        if self.unix_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.unix_path.unlink()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- token rotation ---------------------------------------------------------------------

    def _mtime(self) -> float:
        try:
            return self.token_path.stat().st_mtime
        except OSError:
            return 0.0

    async def _watch_token(self) -> None:
        """Re-read the token file when it changes (inotify on its directory), or else once a
        second while clients are connected, so a rotation closes the connections that used
        the old token. Every new connection re-reads it first, so with no client connected
        nothing needs to poll."""
        while True:
            try:
                with DirWatch(self.token_path.parent) as watch:
                    while not watch.gone:
                        await watch.changed()
                        self._refresh_token()
            except WatchUnavailable as exc:
                log.info("token_watch_polls", error=str(exc))
                break
            if not self.token_path.parent.is_dir():
                break
        while True:
            if not self.connections:
                self._clients.clear()
                await self._clients.wait()
            await asyncio.sleep(TOKEN_CHECK_S)
            self._refresh_token()

    def _refresh_token(self) -> None:
        mtime = self._mtime()
        if mtime == self._token_mtime:
            return
        self._token_mtime = mtime
        try:
            token = load_or_create_token(self.token_path)
        except Exception as exc:
            log.error("token_reload_failed", error=str(exc))
            return
        if token == self.token:
            return
        self.token = token
        log.info("token_rotated")
        for conn in list(self.connections):
            if conn.token_used is not None and not token_matches(token, conn.token_used):
                conn.close(CLOSE_UNAUTHORIZED, "the token was rotated")

    # ---- handshake ----------------------------------------------------------------------------

    def _select_subprotocol(self, _conn: ServerConnection, offered: Any) -> str | None:
        for name in offered:
            if name in (SUBPROTOCOL_JSON, SUBPROTOCOL_MSGPACK):
                return str(name)
        return None

    def _admit(self, connection: ServerConnection, request: HttpRequest) -> HttpResponse | None:
        """Connection slots: see bridge/admission.py."""
        unix = _peer(connection) == "unix"
        header = request.headers.get("Authorization")
        bearer = _bearer(header) if header is not None else None
        if unix or (bearer is not None and token_matches(self.token, bearer)):
            owned = sum(1 for c in self.connections if c.authenticated or c.trusted)
            if owned >= self.config.limits.max_connections:
                return _json_response(503, {"ok": False, "error": "too many connections"})
            return None
        if not self.admission.room_for_one():
            error = "too many unauthenticated connections"
            return _json_response(503, {"ok": False, "error": error})
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
                    "http_bad_request", peer=_peer(connection), header=name, why="repeated header"
                )
                return _json_response(400, {"ok": False, "error": f"repeated {name} header"})
        try:
            return self._process_request(connection, request)
        except Exception:
            log.exception("http_request_failed", peer=_peer(connection), path=request.path)
            return _json_response(500, {"ok": False, "error": "internal error"})

    def _process_request(
        self, connection: ServerConnection, request: HttpRequest
    ) -> HttpResponse | None:
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            # `adapters` says whether the first load of drop-in adapters is still running.
            adapters = "loading" if self.registry.loading else "ready"
            if self.hub.store.health.failing:
                return _json_response(503, self._healthz_failing(adapters))
            body = {"ok": True, "version": __version__, "adapters": adapters, "store": "ok"}
            return _json_response(200, body)
        if path != WS_PATH:
            for handler in self.http_handlers:
                response = handler(connection, request)
                if response is not None:
                    return response
            return _json_response(404, {"ok": False, "error": "not found"})
        origin = request.headers.get("Origin")
        if origin is not None and not self.origin_allowed(origin, request.headers.get("Host")):
            return _json_response(403, {"ok": False, "error": "origin not allowed"})
        return self._admit(connection, request)

    async def _handle_tcp(self, ws: ServerConnection) -> None:
        await self._handle(ws, trusted=False)

    async def _handle_unix(self, ws: ServerConnection) -> None:
        await self._handle(ws, trusted=True)

    async def _handle(self, ws: ServerConnection, *, trusted: bool) -> None:
        self._refresh_token()  # not polled while no client is connected
        fix_send_buffer(ws.transport, self.config.limits.socket_send_buffer)
        conn = Connection(ws, self, trusted=trusted)
        header = ws.request.headers.get("Authorization") if ws.request else None
        header_token: str | None = None
        if header is not None:
            header_token = _bearer(header)
            if not token_matches(self.token, header_token):
                await self.admission.penalty(conn.peer)
                await ws.close(CLOSE_UNAUTHORIZED, "unauthorized")
                return
            conn.authenticated = True
            conn.token_used = header_token
        if not (conn.authenticated or trusted):
            _set_max_message(ws, min(HELLO_MAX_BYTES, self.config.limits.max_frame_bytes))
            self.admission.enter(conn)
        self.connections.add(conn)
        self._clients.set()
        sender = asyncio.create_task(conn.sender())
        try:
            if await self._handshake(conn):
                await self._serve(conn)
        except ConnectionClosed:
            pass
        finally:
            self.admission.leave(conn)
            self.connections.discard(conn)
            self.hub.drop_connection(conn)
            for hook in self.on_disconnect:
                hook(conn)
            conn.close(1000, "")
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender

    async def _handshake(self, conn: Connection) -> bool:
        ws = conn.ws
        timeout = self.config.server.hello_timeout
        try:
            raw = await asyncio.wait_for(ws.recv(), timeout)
        except TimeoutError:
            code = CLOSE_PROTOCOL if (conn.authenticated or conn.trusted) else CLOSE_UNAUTHORIZED
            await ws.close(code, "no hello in time")
            return False
        try:
            req = decode_request(raw, conn.msgpack)
        except ProtocolError as exc:
            conn.error(exc.request_id, "bad_request", f"the first frame must be hello: {exc}")
            await conn.drain_then_close(CLOSE_PROTOCOL, "expected hello")
            return False
        conn.said_hello = True
        if not isinstance(req, Hello):
            conn.error(req.id, "bad_request", "the first frame must be hello")
            await conn.drain_then_close(CLOSE_PROTOCOL, "expected hello")
            return False
        if not (conn.authenticated or conn.trusted):
            if not token_matches(self.token, req.token):
                # Slow down guessing: the answer waits longer the more a peer fails, and
                # past the limit the connection keeps its unauthenticated slot meanwhile.
                await self.admission.penalty(conn.peer)
                await ws.close(CLOSE_UNAUTHORIZED, "unauthorized")
                return False
            conn.authenticated = True
            self.admission.leave(conn)
            conn.token_used = req.token
            _set_max_message(ws, self.config.limits.max_frame_bytes)
        elif req.token is not None and not conn.authenticated:
            conn.token_used = req.token if token_matches(self.token, req.token) else None
        if req.protocol != PROTOCOL_VERSION:
            conn.error(
                req.id,
                "bad_request",
                f"this daemon speaks protocol {PROTOCOL_VERSION}, not {req.protocol}",
            )
            await conn.drain_then_close(CLOSE_PROTOCOL, "unsupported protocol")
            return False
        conn.authenticated = True
        server = ServerInfo(name="agent-bridge", version=__version__, home=_home_dir())
        conn.reply(req.id, HelloResult(protocol=PROTOCOL_VERSION, server=server))
        if self.hub.store.health.failing:
            conn.push(self._store_health_frame())
        return True

    async def _serve(self, conn: Connection) -> None:
        async for raw in conn.ws:
            if conn.closed:
                return
            try:
                req = decode_request(raw, conn.msgpack)
            except ProtocolError as exc:
                conn.error(exc.request_id, exc.code, str(exc))
                continue
            if not conn.bucket.take():
                conn.error(req.id, "rate_limited", "too many requests; slow down")
                continue
            self._spawn(self._dispatch(conn, req))

    async def _dispatch(self, conn: Connection, req: Request) -> None:
        if isinstance(req, Hello):
            conn.error(req.id, "bad_request", "hello was already received")
            return
        handler = self._handlers.get(type(req))
        if handler is None:
            conn.error(req.id, "unknown_method", f"unknown request `{type(req).__name__}`")
            return
        try:
            result = await handler(conn, req)
        except HubError as exc:
            conn.error(req.id, exc.code, str(exc))
        except Exception as exc:
            log.exception("request_failed", method=type(req).__name__)
            conn.error(req.id, "internal", f"internal error: {type(exc).__name__}")
        else:
            if result is not _ALREADY_ANSWERED:
                conn.reply(req.id, result)

    def add_handler(
        self, request: type, handler: Callable[[Connection, Any], Awaitable[Result]]
    ) -> None:
        """Serve one more request type (requests other modules own: bridge/attention)."""
        self._handlers[request] = handler

    # ---- the store's health -----------------------------------------------------------------

    def _store_health_frame(self) -> EncodedFrame:
        health = self.hub.store.health
        if health.failing:
            return EncodedFrame(DaemonFrame(store="failing", message=health.message))
        return EncodedFrame(DaemonFrame(store="ok"))

    def broadcast_store_health(self, _failing: bool, _message: str) -> None:
        """Each change, once, to every authenticated connection."""
        frame = self._store_health_frame()
        for conn in list(self.connections):
            if conn.authenticated and not conn.closed:
                conn.push(frame)

    def _healthz_failing(self, adapters: str) -> dict[str, Any]:
        health = self.hub.store.health
        return {
            "ok": False,
            "version": __version__,
            "adapters": adapters,
            "store": "failing",
            "error": health.message,
            "failing_since": health.since,
        }

    def broadcast_agents_changed(self) -> None:
        frame = EncodedFrame(AgentsChanged())
        for conn in list(self.connections):
            if conn.authenticated and not conn.closed:
                conn.push(frame)

    # ---- requests -------------------------------------------------------------------------------

    async def _durable(self) -> None:
        """The commit barrier behind an ``ok`` that promises durability (create, attach,
        send, permission, close): what the request changed is committed before the answer."""
        try:
            await self.hub.store.barrier()
        except StoreUnavailable:
            raise HubError("internal", "the daemon is stopping and could not store this") from None

    async def _agents_list(self, _conn: Connection, _req: AgentsList) -> AgentsListResult:
        await self.registry.wait_detected(1.0)
        agents = [self.registry.agent_object(e) for e in self.registry.entries()]
        return AgentsListResult(agents=agents)

    async def _agents_check(self, _conn: Connection, req: AgentsCheck) -> AgentsCheckResult:
        if req.agent == DAEMON_AGENT and self.daemon_checks is not None:
            # The reserved pseudo-agent: the daemon's own checks, as `agent-bridge doctor` runs.
            checks = await asyncio.to_thread(self.daemon_checks, self.config, listening=self.url)
        elif await self.registry.lookup(req.agent, self.config.adapters.start_timeout) is None:
            raise HubError("not_found", f"no agent `{req.agent}`")
        else:
            checks = await self.registry.check(req.agent)
        return AgentsCheckResult(
            status=overall_status(checks),
            checks=checks,
            tested_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        )

    async def _models_list(self, _conn: Connection, req: ModelsList) -> ModelsListResult:
        return ModelsListResult(models=await self.hub.models(req.agent))

    async def _sessions_list(self, _conn: Connection, req: SessionsList) -> SessionsListResult:
        return SessionsListResult(sessions=await self.hub.list_sessions(req.include_external))

    async def _session_create(self, _conn: Connection, req: SessionCreate) -> SessionCreateResult:
        session, info = await self.hub.create(
            req.agent, req.cwd, req.model, req.effort, req.resume, mode=req.mode
        )
        await self._durable()
        return SessionCreateResult(session=session, info=info)

    async def _session_attach(self, _conn: Connection, req: SessionAttach) -> SessionAttachResult:
        session = await self.hub.attach(req.agent, req.agent_session_id, req.cwd)
        await self._durable()
        return SessionAttachResult(session=session)

    async def _session_subscribe(self, conn: Connection, req: SessionSubscribe) -> Result:
        if req.after_seq < 0:
            raise HubError("bad_request", "`after_seq` must be 0 or more")
        result, begin = self.hub.subscribe(req.session, conn, req.after_seq)
        conn.reply(req.id, result)
        begin()
        return _ALREADY_ANSWERED

    async def _session_unsubscribe(self, conn: Connection, req: SessionUnsubscribe) -> Empty:
        self.hub.unsubscribe(req.session, conn)
        return Empty()

    async def _session_send(self, _conn: Connection, req: SessionSend) -> SessionSendResult:
        queued = await self.hub.send(req.session, req.text, req.attachments, req.client_msg_id)
        await self._durable()
        return SessionSendResult(queued=queued)

    async def _session_interrupt(self, _conn: Connection, req: SessionInterrupt) -> Empty:
        await self.hub.interrupt(req.session)
        return Empty()

    async def _session_permission(self, _conn: Connection, req: SessionPermission) -> Empty:
        await self.hub.permission(req.session, req.request_id, req.option_id)
        await self._durable()
        return Empty()

    async def _session_handoff(
        self, _conn: Connection, req: SessionHandoff
    ) -> SessionHandoffResult:
        cmd = await self.hub.handoff(req.session, dry_run=req.dry_run)
        return SessionHandoffResult(argv=cmd.argv, cwd=cmd.cwd, command=shlex.join(cmd.argv))

    async def _session_close(self, _conn: Connection, req: SessionClose) -> Empty:
        await self.hub.close(req.session)
        await self._durable()
        return Empty()

    async def _usage_get(self, _conn: Connection, req: UsageGet) -> UsageGetResult:
        return UsageGetResult(usage=await self.hub.usage(req.session))

    async def _ping(self, _conn: Connection, _req: Ping) -> Empty:
        return Empty()


#: What a handler returns when it sent its answer itself (compared by identity).
_ALREADY_ANSWERED = Empty()


def _home_dir() -> str:
    """The daemon user's home directory, a starting point for a new session's cwd."""
    import os.path

    return os.path.expanduser("~")
