"""Web Push subscriptions, kept with the sessions: a table in the daemon's SQLite database, or
a dict for the in-memory store."""

from __future__ import annotations

import asyncio
import sqlite3
import time

from bridge.store.store import SqliteStore, Store


class PushSubscriptions:
    """Web Push subscriptions, kept with the sessions: a table in the SQLite database, or a dict
    for the in-memory store. Rare, small writes on their own connection and thread, outside the
    event writer's batches; each call returns once its write is committed."""

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS webpush_subscriptions"
        " (endpoint TEXT PRIMARY KEY, data BLOB NOT NULL, created_at REAL NOT NULL)"
    )

    def __init__(self, store: Store) -> None:
        self.path = store.path if isinstance(store, SqliteStore) else None
        self._memory: dict[str, bytes] = {}

    async def push_subscriptions(self) -> list[bytes]:
        if self.path is None:
            return list(self._memory.values())
        return await asyncio.to_thread(self._sqlite, "list", None, None)

    async def save_push_subscription(self, endpoint: str, data: bytes) -> None:
        if self.path is None:
            self._memory[endpoint] = data
        else:
            await asyncio.to_thread(self._sqlite, "save", endpoint, data)

    async def delete_push_subscription(self, endpoint: str) -> None:
        if self.path is None:
            self._memory.pop(endpoint, None)
        else:
            await asyncio.to_thread(self._sqlite, "delete", endpoint, None)

    def _sqlite(self, op: str, endpoint: str | None, data: bytes | None) -> list[bytes]:
        assert self.path is not None
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout=5000")
            conn.execute(self.SCHEMA)
            if op == "list":
                rows = conn.execute("SELECT data FROM webpush_subscriptions ORDER BY created_at")
                return [bytes(row[0]) for row in rows]
            if op == "save":
                conn.execute(
                    "INSERT OR REPLACE INTO webpush_subscriptions (endpoint, data, created_at)"
                    " VALUES (?, ?, ?)",
                    (endpoint, data, time.time()),
                )
            elif op == "delete":
                conn.execute("DELETE FROM webpush_subscriptions WHERE endpoint = ?", (endpoint,))
            return []
        finally:
            conn.close()
