"""The daemon's client side: one ``BridgeServer`` runs every client connection, over any
transport (bridge/server/transport.py), from the hello to the last frame.

It holds what the connections share: the token (bridge/server/tokens.py), the admission of
unauthenticated peers (bridge/server/admission.py), the table of request handlers
(bridge/api/dispatch.py), and the broadcasts every connection gets. Listening and HTTP are the
endpoint's (bridge/server/endpoint.py); the queue and the sender of one connection are
bridge/server/connection.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge import __version__
from bridge.api.checks import ChecksApi
from bridge.api.dispatch import Handler, Routes
from bridge.api.projects import ProjectsApi
from bridge.api.requests import CoreRequests
from bridge.api.search import SearchApi
from bridge.api.ship import ShipApi
from bridge.config import Config
from bridge.hub import Hub, HubError
from bridge.loading.registry import Registry
from bridge.logs import get_logger
from bridge.process import TaskOwner
from bridge.server.admission import Admission
from bridge.server.auth import token_matches
from bridge.server.connection import Connection
from bridge.server.endpoint import Endpoint, HttpHandler, tls_context
from bridge.server.preview import Previews, confined_where
from bridge.server.tokens import TokenWatch
from bridge.server.transport import FrameTransport, TransportClosed
from bridge.store.store import StoreUnavailable
from bridge.wire.agent_types import Check
from bridge.wire.protocol import (
    CLOSE_PROTOCOL,
    CLOSE_SHUTDOWN,
    CLOSE_UNAUTHORIZED,
    PROTOCOL_VERSION,
    AgentsChanged,
    DaemonFrame,
    EncodedFrame,
    Hello,
    ProtocolError,
    Result,
    decode_request,
)
from bridge.wire.results import HelloResult, ServerInfo

log = get_logger("bridge.server")

#: Largest frame a client may send before its token is checked: a hello is small, and an
#: unauthenticated peer must not make the daemon buffer `max_frame_bytes` per connection.
HELLO_MAX_BYTES = 64 * 1024


class BridgeServer:
    def __init__(self, config: Config, hub: Hub, registry: Registry, token_path: Path) -> None:
        self.config = config
        self.hub = hub
        self.registry = registry
        self.connections: set[Connection] = set()
        self.tokens = TokenWatch(token_path, self.connections)
        self.admission = Admission(
            config.limits.max_unauthenticated, config.limits.auth_failures_per_minute
        )
        self.endpoint = Endpoint(self)
        #: the server's tasks: the token watcher, and each connection's close
        self.tasks = TaskOwner("server")
        #: Called with each connection that closes (presence, for one).
        self.on_disconnect: list[Callable[[Connection], None]] = []
        #: More fields of ``/healthz``, each asked at every probe (the daemon's "relay").
        self.healthz_fields: dict[str, Callable[[], Any]] = {}
        registry.on_change(self.broadcast_agents_changed)
        hub.store.health.subscribe(self.broadcast_store_health)
        self.routes = Routes(self._durable)
        self.core = CoreRequests(config, hub, registry, lambda: self.url)
        self.core.register(self.routes)
        # projects.list, workspace.*, session.mode (bridge/api/projects.py)
        self.projects_api = ProjectsApi(config, hub)
        self.projects_api.register(self.routes)
        # worktrees, review, commit, push, pull requests (bridge/api/ship.py)
        self.ship_api = ShipApi(config, hub, self.projects_api)
        self.ship_api.register(self.routes)
        self.core.ship = self.ship_api
        # a branch's CI checks and a failed check's log (bridge/api/checks.py)
        self.checks_api = ChecksApi(hub, self.projects_api, config.workspace.checks_poll_s)
        self.checks_api.register(self.routes)
        conf = config.server
        # a dev server on this machine shown through the daemon (bridge/server/preview.py)
        self.previews = Previews(
            lambda: self.endpoint.tcp_address,
            lambda: tls_context(conf.tls_cert, conf.tls_key) if conf.tls_cert else None,
            confined_where(lambda sid: hub.get(sid).rec.cwd, self.projects_api.allowed),
        )
        self.previews.register(self.routes)
        # sessions.search, usage.summary (bridge/api/search.py)
        SearchApi(hub).register(self.routes)

    # ---- what others read and set --------------------------------------------------------------

    @property
    def token(self) -> str:
        return self.tokens.token

    @property
    def http_handlers(self) -> list[HttpHandler]:
        return self.endpoint.http_handlers

    @property
    def tcp_address(self) -> tuple[str, int] | None:
        return self.endpoint.tcp_address

    @property
    def unix_path(self) -> Path | None:
        return self.endpoint.unix_path

    @property
    def url(self) -> str:
        return self.endpoint.url

    @property
    def daemon_checks(self) -> Callable[..., list[Check]] | None:
        return self.core.daemon_checks

    @daemon_checks.setter
    def daemon_checks(self, checks: Callable[..., list[Check]] | None) -> None:
        self.core.daemon_checks = checks

    def add_handler(
        self, request: type, handler: Handler, result: type[Result], *, durable: bool = False
    ) -> None:
        """Serve one more request type (requests other modules own: bridge/attention)."""
        self.routes.add(request, handler, result, durable=durable)

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self, host: str, port: int, unix_path: Path | None) -> None:
        await self.endpoint.start(host, port, unix_path)
        self._spawn(self.tokens.watch())

    async def close(self) -> None:
        for conn in list(self.connections):
            conn.close(CLOSE_SHUTDOWN, "daemon shutting down")
        await asyncio.sleep(0)
        await self.endpoint.close()
        await self.tasks.close()
        await self.projects_api.close()
        await self.checks_api.close()
        await self.previews.close()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        return self.tasks.spawn(coro)

    # ---- one connection ------------------------------------------------------------------------

    async def serve(
        self, transport: FrameTransport, *, trusted: bool, header_token: str | None = None
    ) -> None:
        """Run one client connection to its end: the hello (or the token a header carried),
        admission, requests, and the cleanup. ``trusted``: the peer is the daemon's user
        already (the Unix socket; a relay's client authenticated by its key), so no token is
        needed."""
        self.tokens.refresh()  # not polled while no client is connected
        conn = Connection(transport, self.config.limits, trusted=trusted, owner=self.tasks)
        if header_token is not None:
            if not token_matches(self.tokens.token, header_token):
                await self.admission.penalty(conn.peer)
                await transport.close(CLOSE_UNAUTHORIZED, "unauthorized")
                return
            conn.authenticated = True
            conn.token_used = header_token
        if not (conn.authenticated or trusted):
            transport.limit_frame_size(min(HELLO_MAX_BYTES, self.config.limits.max_frame_bytes))
            self.admission.enter(conn)
        self.connections.add(conn)
        self.tokens.connected()
        # the connection owns its sender: cancelled at its end and waited for
        sender = asyncio.create_task(conn.sender(), name="connection sender")
        try:
            if await self._handshake(conn):
                await self._requests(conn)
        except TransportClosed:
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
            # The code it was closed with goes out before the endpoint closes what is left.
            await conn.wait_closed()

    async def _handshake(self, conn: Connection) -> bool:
        transport = conn.transport
        timeout = self.config.server.hello_timeout
        try:
            raw = await asyncio.wait_for(transport.recv(), timeout)
        except TimeoutError:
            code = CLOSE_PROTOCOL if (conn.authenticated or conn.trusted) else CLOSE_UNAUTHORIZED
            await transport.close(code, "no hello in time")
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
            if not token_matches(self.tokens.token, req.token):
                # Slow down guessing: the answer waits longer the more a peer fails, and
                # past the limit the connection keeps its unauthenticated slot meanwhile.
                await self.admission.penalty(conn.peer)
                await transport.close(CLOSE_UNAUTHORIZED, "unauthorized")
                return False
            conn.authenticated = True
            self.admission.leave(conn)
            conn.token_used = req.token
            transport.limit_frame_size(self.config.limits.max_frame_bytes)
        elif req.token is not None and not conn.authenticated:
            conn.token_used = req.token if token_matches(self.tokens.token, req.token) else None
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

    async def _requests(self, conn: Connection) -> None:
        """Each request in its own task (a slow one does not hold up the next), rate-limited."""
        while True:
            raw = await conn.transport.recv()
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
            self._spawn(self.routes.dispatch(conn, req))

    async def _durable(self) -> None:
        """The commit barrier behind an ``ok`` that promises durability (create, attach,
        send, permission, close): what the request changed is committed before the answer."""
        try:
            await self.hub.store.barrier()
        except StoreUnavailable:
            raise HubError("internal", "the daemon is stopping and could not store this") from None

    # ---- the store's health, the agents -----------------------------------------------------

    def healthz(self) -> tuple[int, dict[str, Any]]:
        """``/healthz``: `adapters` says whether the first load of drop-in adapters is still
        running; 503 while the store is failing."""
        adapters = "loading" if self.registry.loading else "ready"
        health = self.hub.store.health
        extra = {name: field() for name, field in self.healthz_fields.items()}
        if not health.failing:
            body = {"ok": True, "version": __version__, "adapters": adapters, "store": "ok"}
            return 200, {**body, **extra}
        return 503, {
            "ok": False,
            "version": __version__,
            "adapters": adapters,
            "store": "failing",
            "error": health.message,
            "failing_since": health.since,
            **extra,
        }

    def _store_health_frame(self) -> EncodedFrame:
        health = self.hub.store.health
        if health.failing:
            return EncodedFrame(DaemonFrame(store="failing", message=health.message))
        return EncodedFrame(DaemonFrame(store="ok"))

    def broadcast_store_health(self, _failing: bool, _message: str) -> None:
        """Each change, once, to every authenticated connection."""
        self._broadcast(self._store_health_frame())

    def broadcast_agents_changed(self) -> None:
        self._broadcast(EncodedFrame(AgentsChanged()))

    def _broadcast(self, frame: EncodedFrame) -> None:
        for conn in list(self.connections):
            if conn.authenticated and not conn.closed:
                conn.push(frame)


def _home_dir() -> str:
    """The daemon user's home directory, a starting point for a new session's cwd."""
    import os.path

    return os.path.expanduser("~")
