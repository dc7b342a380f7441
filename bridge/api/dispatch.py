"""Which handler answers which request, with what, and whether its ``ok`` waits for the commit.

One ``Routes`` table holds every request type the daemon serves, each once: the server's own
(bridge/api/requests.py), projects and workspaces (bridge/api/projects.py) and notifications
(bridge/attention). ``dispatch`` runs a request's handler and answers it; for a durable
request (what it changed must be on disk when the client hears ``ok``) it awaits the store's
commit barrier first, so no handler has to remember to.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from bridge.hub import HubError
from bridge.logs import get_logger
from bridge.server.connection import Connection
from bridge.wire.protocol import Hello, Request, Result
from bridge.wire.results import Empty

log = get_logger("bridge.server")

Handler = Callable[[Connection, Any], Awaitable[Result]]

#: What a handler returns when it sent its answer itself (compared by identity).
ALREADY_ANSWERED = Empty()


@dataclass(frozen=True)
class Route:
    request: type
    handler: Handler
    #: The answer's type (bridge/wire/results.py), as the protocol names it.
    result: type[Result]
    #: ``ok`` promises that what the request changed is committed (create, attach, send,
    #: permission, close).
    durable: bool


class Routes:
    def __init__(self, barrier: Callable[[], Awaitable[None]]) -> None:
        """``barrier`` resolves once everything stored so far is committed (raising
        ``HubError`` if it cannot be)."""
        self._barrier = barrier
        self._routes: dict[type, Route] = {}

    def add(
        self, request: type, handler: Handler, result: type[Result], *, durable: bool = False
    ) -> None:
        if request in self._routes:
            raise ValueError(f"{request.__name__} already has a handler")
        self._routes[request] = Route(request, handler, result, durable)

    def __iter__(self) -> Iterator[Route]:
        return iter(self._routes.values())

    def get(self, request: type) -> Route | None:
        return self._routes.get(request)

    async def dispatch(self, conn: Connection, req: Request) -> None:
        if isinstance(req, Hello):
            conn.error(req.id, "bad_request", "hello was already received")
            return
        route = self._routes.get(type(req))
        if route is None:
            conn.error(req.id, "unknown_method", f"unknown request `{type(req).__name__}`")
            return
        try:
            result = await route.handler(conn, req)
            if route.durable:
                await self._barrier()
        except HubError as exc:
            conn.error(req.id, exc.code, str(exc), exc.hint, exc.output)
        except Exception as exc:
            log.exception("request_failed", method=type(req).__name__)
            conn.error(req.id, "internal", f"internal error: {type(exc).__name__}")
        else:
            if result is not ALREADY_ANSWERED:
                conn.reply(req.id, result)
