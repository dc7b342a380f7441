"""The store without a disk (``store.backend = "memory"``, and the tests' hub): the same
interface as the SQLite store, kept in dictionaries, gone when the daemon stops."""

from __future__ import annotations

import asyncio
import time

from bridge.store import finds, inline
from bridge.store.health import StoreHealth
from bridge.store.records import Loaded, MessageRecord, SessionRecord, StoredEvent
from bridge.store.store import Store


class MemoryStore(finds.MemoryReads, Store):
    """Everything in memory: same semantics, nothing survives the process."""

    def __init__(self) -> None:
        self._events: dict[str, list[StoredEvent]] = {}
        self._sessions: dict[str, SessionRecord] = {}
        self._messages: dict[tuple[str, str], MessageRecord] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[StoredEvent] = []
        self._scheduled = False
        self._held = False
        self._last_commit = 0.0
        self.health = StoreHealth()

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def load(self) -> tuple[list[SessionRecord], list[MessageRecord], dict[str, int]]:
        return [], [], {}

    def append_event(self, event: StoredEvent) -> None:
        self._events.setdefault(event.session, []).append(event)
        self._pending.append(event)
        if not self._scheduled and not self._held and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._commit)

    def hold(self) -> None:
        self._held = True

    def release(self) -> None:
        # As the SQLite store: a rare batch now, a stream's on the next pass, in one run.
        self._held = False
        if not self._pending or self._scheduled:
            return
        if time.monotonic() - self._last_commit >= inline.GAP_S:
            self._commit()
        elif self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._commit)

    def _commit(self) -> None:
        batch, self._pending, self._scheduled = self._pending, [], False
        self._last_commit = time.monotonic()
        if self.on_commit is not None and batch:
            self.on_commit(batch)

    def save_session(self, record: SessionRecord) -> None:
        self._sessions[record.id] = record

    def save_message(self, record: MessageRecord) -> None:
        self._messages[(record.session, record.client_msg_id)] = record

    async def read_events(self, session: str, after_seq: int, limit: int) -> list[StoredEvent]:
        events = self._events.get(session, [])
        lo, hi = 0, len(events)
        while lo < hi:
            mid = (lo + hi) // 2
            if events[mid].seq <= after_seq:
                lo = mid + 1
            else:
                hi = mid
        return events[lo : lo + limit]

    async def first_seq(self, session: str) -> int | None:
        events = self._events.get(session)
        return events[0].seq if events else None

    async def load_session(self, session: str) -> Loaded | None:
        rec = self._sessions.get(session)
        if rec is None:
            return None
        messages = sorted(
            (m for (sid, _), m in self._messages.items() if sid == session),
            key=lambda m: m.created_at,
        )
        events = self._events.get(session)
        return rec, messages, events[-1].seq if events else 0

    def _ended(self) -> list[SessionRecord]:
        return [r for r in self._sessions.values() if r.state == "ended"]

    async def list_ended(self, before: tuple[float, str], limit: int) -> list[SessionRecord]:
        found = sorted(
            (r for r in self._ended() if (r.updated_at, r.id) < before),
            key=lambda r: (r.updated_at, r.id),
            reverse=True,
        )
        return found[:limit]

    async def ended_dirs(self) -> list[tuple[str, str, float]]:
        return [(r.id, r.cwd, r.updated_at) for r in self._ended()]

    def prune(self, max_events: int, max_age_s: float, ended_max_age_s: float = 0.0) -> None:
        if ended_max_age_s > 0:
            gone = time.time() - ended_max_age_s
            for rec in [r for r in self._ended() if r.updated_at < gone]:
                del self._sessions[rec.id]
                self._events.pop(rec.id, None)
                for key in [k for k in self._messages if k[0] == rec.id]:
                    del self._messages[key]
        cutoff = time.time() - max_age_s
        for session, events in self._events.items():
            keep = [e for e in events[-max_events:] if e.ts_unix >= cutoff]
            self._events[session] = keep

    async def flush(self) -> None:
        if self._pending:
            self._commit()

    async def close(self) -> None:
        await self.flush()
