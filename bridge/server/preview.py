"""Previews: a dev server on this machine's loopback, shown through the daemon
(docs/protocol.md, "Preview"; docs/security.md, "Preview").

Each open preview has a listener of its own on the daemon's address (a new port: a separate
origin, so nothing a previewed page runs can read the web client's storage, tokens or service
worker), whose connections bridge/server/httpproxy.py proxies to ``localhost:PORT`` only. A
preview closes on ``preview.close``, after ``IDLE_S`` without a request, and with the daemon.
``preview.ports`` says which ports the processes working in a session's directory listen on
(bridge/server/listening.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import ssl
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from bridge.hub import HubError
from bridge.logs import get_logger
from bridge.process import TaskOwner
from bridge.server.httpproxy import KEY_PATH, Bounds, ProxyConnection
from bridge.server.listening import listeners_under
from bridge.server.pairing import pairing_host
from bridge.wire.protocol import PreviewClose, PreviewList, PreviewOpen, PreviewPorts
from bridge.wire.results import (
    Empty,
    PreviewListResult,
    PreviewObject,
    PreviewOpenResult,
    PreviewPortsResult,
    as_result,
)

if TYPE_CHECKING:
    from bridge.api.dispatch import Routes
    from bridge.server.connection import Connection

log = get_logger("bridge.preview")

#: a preview closes after this long without a request
IDLE_S = 30 * 60.0
#: previews open at once, at most
MAX_PREVIEWS = 16
#: connections one preview's listener holds at once, at most
MAX_CONNECTIONS = 64


class Preview:
    def __init__(self, port: int, cwd: str | None, session: str | None, clock: Callable[[], float]):
        self.id = "pv_" + secrets.token_hex(6)
        self.port = port
        self.key = secrets.token_urlsafe(24)
        self.cwd = cwd
        self.session = session
        self.clock = clock
        self.last = clock()
        self.listener: asyncio.Server | None = None
        self.listen_port = 0
        self.url = ""
        #: its browser connections, each a task: closing the preview ends them
        self.connections = TaskOwner(f"preview {self.id}")

    @property
    def cookie(self) -> str:
        return f"abpv_{self.id}"

    def touch(self) -> None:
        self.last = self.clock()

    def idle_for(self) -> float:
        return self.clock() - self.last

    def described(self, idle_s: float) -> PreviewObject:
        left = max(0.0, idle_s - self.idle_for())
        expires = datetime.fromtimestamp(time.time() + left, UTC)
        return PreviewObject(
            id=self.id,
            port=self.port,
            url=self.url,
            expires_at=expires.isoformat(timespec="seconds").replace("+00:00", "Z"),
            cwd=self.cwd,
            session=self.session,
        )

    async def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        await self.connections.close()
        if self.listener is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.listener.wait_closed(), 5.0)


class Previews:
    """The open previews of one daemon."""

    def __init__(
        self,
        host: Callable[[], tuple[str, int] | None],
        tls: Callable[[], ssl.SSLContext | None],
        where: Callable[[str | None, str | None], Any],
        *,
        idle_s: float = IDLE_S,
        clock: Callable[[], float] = time.monotonic,
        bounds: Bounds | None = None,
    ) -> None:
        #: the daemon's TCP address (the previews listen on the same host)
        self.host = host
        self.tls = tls
        #: the directory a request means (``cwd`` confined, or ``session``'s): awaitable
        self.where = where
        self.idle_s = idle_s
        self.clock = clock
        self.bounds = bounds
        self.open_previews: dict[str, Preview] = {}
        self.tasks = TaskOwner("previews")
        self._reaper: asyncio.Task[None] | None = None

    def register(self, routes: Routes) -> None:
        routes.add(PreviewOpen, self.handle_open, PreviewOpenResult)
        routes.add(PreviewList, self.handle_list, PreviewListResult)
        routes.add(PreviewClose, self.handle_close, Empty)
        routes.add(PreviewPorts, self.handle_ports, PreviewPortsResult)

    # ---- requests ------------------------------------------------------------------------

    async def handle_open(self, _conn: Connection, req: PreviewOpen) -> PreviewOpenResult:
        if not 1 <= req.port <= 65535:
            raise HubError("bad_request", "`port` must be a TCP port (1 to 65535)")
        if not req.path.startswith("/") or req.path.startswith("//") or "\n" in req.path:
            raise HubError("bad_request", "`path` must start with one /")
        if self.own_port(req.port):
            raise HubError("bad_request", f"port {req.port} is the daemon's own")
        cwd = await self.where(req.cwd, req.session) if (req.cwd or req.session) else None
        preview = await self.open(req.port, cwd, req.session, req.path)
        return PreviewOpenResult(preview=preview.described(self.idle_s))

    async def handle_list(self, _conn: Connection, _req: PreviewList) -> PreviewListResult:
        return PreviewListResult(
            previews=[p.described(self.idle_s) for p in self.open_previews.values()]
        )

    async def handle_close(self, _conn: Connection, req: PreviewClose) -> Empty:
        if not await self.close_one(req.preview):
            raise HubError("not_found", f"no preview `{req.preview}`")
        return Empty()

    async def handle_ports(self, _conn: Connection, req: PreviewPorts) -> PreviewPortsResult:
        cwd = await self.where(req.cwd, req.session)
        found = await asyncio.to_thread(listeners_under, cwd)
        ports = [
            {"port": x.port, "pid": x.pid, "command": x.command}
            for x in found
            if not self.own_port(x.port)
        ]
        return as_result({"ports": ports}, PreviewPortsResult)

    # ---- previews ------------------------------------------------------------------------

    def own_port(self, port: int) -> bool:
        address = self.host()
        mine = {address[1]} if address else set()
        mine |= {p.listen_port for p in self.open_previews.values()}
        return port in mine

    async def open(self, port: int, cwd: str | None, session: str | None, path: str) -> Preview:
        if len(self.open_previews) >= MAX_PREVIEWS:
            raise HubError("conflict", f"{MAX_PREVIEWS} previews are open", "close one first")
        address = self.host()
        if address is None:
            raise HubError("conflict", "the daemon has no TCP listener to show a preview on")
        host = address[0]
        preview = Preview(port, cwd, session, self.clock)

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if len(preview.connections) > MAX_CONNECTIONS:
                writer.close()
                return
            await ProxyConnection(preview, reader, writer, self.bounds).run()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # each connection is owned by its preview, so closing it ends them all
            preview.connections.spawn(accepted(reader, writer), name="connection")

        tls = self.tls()
        preview.listener = await asyncio.start_server(serve, host, 0, ssl=tls)
        preview.listen_port = preview.listener.sockets[0].getsockname()[1]
        shown = pairing_host(host)
        shown = f"[{shown}]" if ":" in shown else shown
        scheme = "https" if tls else "http"
        to = quote(path, safe="/?&=%:@-._~!$'()*+,;")
        preview.url = (
            f"{scheme}://{shown}:{preview.listen_port}{KEY_PATH}{preview.key}?to={quote(to)}"
        )
        self.open_previews[preview.id] = preview
        log.info("preview_opened", preview=preview.id, port=port, listen=preview.listen_port)
        if self._reaper is None or self._reaper.done():
            self._reaper = self.tasks.spawn(self._reap(), name="preview reaper")
        return preview

    async def close_one(self, preview_id: str) -> bool:
        preview = self.open_previews.pop(preview_id, None)
        if preview is None:
            return False
        await preview.close()
        log.info("preview_closed", preview=preview.id, port=preview.port)
        return True

    async def expire(self) -> list[str]:
        """Close the previews without a request for ``idle_s``; their ids."""
        gone = [p.id for p in self.open_previews.values() if p.idle_for() >= self.idle_s]
        for preview_id in gone:
            await self.close_one(preview_id)
        return gone

    async def _reap(self) -> None:
        while self.open_previews:
            await asyncio.sleep(min(30.0, self.idle_s / 4))
            await self.expire()

    async def close(self) -> None:
        for preview_id in list(self.open_previews):
            await self.close_one(preview_id)
        await self.tasks.close()


def confined_where(
    session_cwd: Callable[[str], str], allowed: Callable[[str], Any]
) -> Callable[[str | None, str | None], Any]:
    """The directory a preview request means: ``session``'s, or ``cwd`` when it is a project
    or a session's directory (``allowed``, as for the workspace views)."""

    async def where(cwd: str | None, session: str | None) -> str:
        if session is not None:
            return session_cwd(session)
        if not cwd:
            raise HubError("bad_request", "`session` or `cwd` is required")
        return str(await allowed(os.path.expanduser(cwd)))

    return where
