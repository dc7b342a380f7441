"""The token file, watched: a rotation closes every connection that used the old token.

Re-read when the file changes (inotify on its directory), or else once a second while clients
are connected. Every new connection re-reads it first (``refresh``), so with no client connected
nothing needs to poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path

from bridge.logs import get_logger
from bridge.server.auth import load_or_create_token, token_matches
from bridge.server.connection import Connection
from bridge.util.dirwatch import DirWatch, WatchUnavailable
from bridge.wire.protocol import CLOSE_UNAUTHORIZED

log = get_logger("bridge.server")

TOKEN_CHECK_S = 1.0


class TokenWatch:
    def __init__(self, path: Path, connections: Collection[Connection]) -> None:
        self.path = path
        self.token = load_or_create_token(path)
        self._connections = connections
        self._mtime = self._stat()
        #: set while clients are connected: only then does the token file need polling
        self._clients = asyncio.Event()

    def connected(self) -> None:
        """A client connected: poll again (if inotify is unavailable)."""
        self._clients.set()

    def _stat(self) -> float:
        try:
            return self.path.stat().st_mtime
        except OSError:
            return 0.0

    async def watch(self) -> None:
        while True:
            try:
                with DirWatch(self.path.parent) as watch:
                    while not watch.gone:
                        await watch.changed()
                        self.refresh()
            except WatchUnavailable as exc:
                log.info("token_watch_polls", error=str(exc))
                break
            if not self.path.parent.is_dir():
                break
        while True:
            if not self._connections:
                self._clients.clear()
                await self._clients.wait()
            await asyncio.sleep(TOKEN_CHECK_S)
            self.refresh()

    def refresh(self) -> None:
        mtime = self._stat()
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            token = load_or_create_token(self.path)
        except Exception as exc:
            log.error("token_reload_failed", error=str(exc))
            return
        if token == self.token:
            return
        self.token = token
        log.info("token_rotated")
        for conn in list(self._connections):
            if conn.token_used is not None and not token_matches(token, conn.token_used):
                conn.close(CLOSE_UNAUTHORIZED, "the token was rotated")
