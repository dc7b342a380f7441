"""The web client served by `agent-bridge relay serve`, so a phone away from home loads the page
from the relay machine rather than from a daemon it cannot reach.

The same files and headers as the daemon's (bridge/server/web.py), over websockets' HTTP/1.1 parser
like the daemon's port; every request is answered before any upgrade, so there is no WebSocket
and no daemon API here: the page talks only to workstations paired through the relay. It
listens on loopback: phones reach it through the web port (bridge/relay/frontdoor.py), which
ends TLS and sends ``/nats`` to nats-server instead. ``/healthz`` tells the page that it is
`relay serve`'s, and the port of the previews' own origin (bridge/relay/previeworigin.py) when
there is one.
"""

from __future__ import annotations

import asyncio
import contextlib

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from bridge import __version__
from bridge.logs import get_logger
from bridge.server.endpoint import json_response
from bridge.server.web import WebClient, builtin_client

log = get_logger("bridge.relay.web")


class LoopbackSite:
    """A listener on loopback that answers every request itself (no upgrade, no WebSocket):
    GET and HEAD only, what ``respond`` gives, else 404."""

    def __init__(self) -> None:
        self.server: Server | None = None

    def respond(self, connection: ServerConnection, request: Request) -> Response | None:
        raise NotImplementedError

    def answer(self, connection: ServerConnection, request: Request) -> Response:
        try:
            if request.method not in ("GET", "HEAD"):
                return json_response(405, {"ok": False, "error": "method not allowed"})
            found = self.respond(connection, request)
            return found or json_response(404, {"ok": False, "error": "not found"})
        except Exception:
            log.exception("relay_web_request_failed", path=request.path)
            return json_response(500, {"ok": False, "error": "internal error"})

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen; the port actually bound."""
        self.server = await serve(
            _never,
            host,
            port,
            process_request=self.answer,
            server_header=f"agent-bridge/{__version__}",
            close_timeout=3,
        )
        return int(next(iter(self.server.sockets)).getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5.0)


class RelayWeb(LoopbackSite):
    """The client's files and ``/healthz``."""

    def __init__(self, client: WebClient, preview_port: int = 0) -> None:
        super().__init__()
        self.client = client
        self.preview_port = preview_port

    def respond(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            # the previews' origin's port, where the page shows previews (docs/protocol.md)
            previews = {"preview_port": self.preview_port} if self.preview_port else {}
            return json_response(200, {"ok": True, "relay": True, **previews})
        return self.client(connection, request)


async def _never(_ws: ServerConnection) -> None:
    """Unreachable: ``answer`` replies to every request before an upgrade."""


def relay_web(preview_port: int = 0) -> RelayWeb | None:
    client = builtin_client()
    return RelayWeb(client, preview_port) if client is not None else None
