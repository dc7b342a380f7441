"""The answers of ``sessions.search`` and ``usage.summary``, read from the tables the writer
derives from the events (bridge/store/derived.py) or, in the in-memory store, from the events
themselves. Each function takes the session records as the store keeps them."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from bridge.store import limitrows, search, spend
from bridge.store.eventrows import EventLike
from bridge.store.search import Query
from bridge.wire.results import SearchHit, UsageRow


class RecordLike(Protocol):
    """What an answer needs of a session's record (bridge/store/store.py ``SessionRecord``)."""

    id: str
    title: str
    agent: str
    cwd: str


Decode = Callable[[bytes], RecordLike]


def hit(rec: RecordLike, seq: int, ts: float, snippet: str, score: float) -> SearchHit:
    return SearchHit(
        session=rec.id,
        seq=seq,
        ts=search.iso(ts),
        snippet=snippet,
        title=rec.title,
        agent=rec.agent,
        cwd=rec.cwd,
        score=round(score, 6),
    )


def usage_rows(totals: Iterable[spend.Totals]) -> list[UsageRow]:
    return [
        UsageRow(
            key=t.key,
            turns=t.turns,
            input_tokens=t.input_tokens,
            output_tokens=t.output_tokens,
            cached_input_tokens=t.cached_input_tokens,
            cost_usd=t.cost_usd,
        )
        for t in totals
    ]


# ---- SQLite: the derived tables ------------------------------------------------------------------


def search_db(conn: sqlite3.Connection, query: Query, decode: Decode) -> list[SearchHit]:
    found = search.search(conn, query, lambda data: decode(data).agent)
    return [hit(decode(f.record), f.seq, f.ts, f.snippet, f.score) for f in found]


def usage_db(
    conn: sqlite3.Connection,
    since: float | None,
    until: float | None,
    group_by: spend.GroupBy,
    decode: Decode,
) -> list[UsageRow]:
    known: dict[str, tuple[str, str] | None] = {}

    def session_of(sid: str) -> tuple[str, str] | None:
        if sid not in known:
            row = conn.execute("SELECT data FROM sessions WHERE id = ?", (sid,)).fetchone()
            rec = None if row is None else decode(row[0])
            known[sid] = None if rec is None else (rec.agent, rec.cwd)
        return known[sid]

    rows = list(spend.stored_rows(conn))
    return usage_rows(spend.summary(rows, since, until, group_by, session_of))


# ---- memory: the events read again ---------------------------------------------------------------


def search_events(
    query: Query,
    events: Mapping[str, Sequence[EventLike]],
    sessions: Mapping[str, RecordLike],
) -> list[SearchHit]:
    """Without an index (the in-memory store: tests and throwaway daemons) every session's
    text is read again, and matched as plain words."""
    scored: list[tuple[float, float, SearchHit]] = []
    for session, evs in events.items():
        rec = sessions.get(session)
        if rec is None or (query.cwd is not None and rec.cwd != query.cwd):
            continue
        if query.agent is not None and rec.agent != query.agent:
            continue
        indexer, texts = search.Indexer(), list[search.IndexRow]()
        for ev in evs:
            indexer.feed(ev, texts)
        for _sid, seq, ts, text in texts:
            score = search.matches_plainly(query.text, text)
            if score and (query.since is None or ts >= query.since):
                scored.append((-score, -ts, hit(rec, seq, ts, text[:200], score)))
    scored.sort(key=lambda item: item[:2])
    return [found for _, _, found in scored[: query.limit]]


def usage_events(
    since: float | None,
    until: float | None,
    group_by: spend.GroupBy,
    events: Mapping[str, Sequence[EventLike]],
    sessions: Mapping[str, RecordLike],
) -> list[UsageRow]:
    rows: list[spend.UsageRow] = []
    for session in sorted(events):
        turns = spend.TurnUsage()
        for ev in events[session]:
            turns.feed(ev, rows)

    def session_of(sid: str) -> tuple[str, str] | None:
        rec = sessions.get(sid)
        return None if rec is None else (rec.agent, rec.cwd)

    return usage_rows(spend.summary(rows, since, until, group_by, session_of))


# ---- the stores' side --------------------------------------------------------------------------


class Reads:
    """The reads every store offers (bridge/store/store.py ``Store``)."""

    async def search(
        self,
        text: str,
        *,
        limit: int,
        agent: str | None = None,
        cwd: str | None = None,
        since: float | None = None,
    ) -> list[SearchHit]:
        """User messages and agent text that match ``text`` (bridge/store/search.py), best
        first; ``since`` is a Unix time."""
        return await self._search(Query(text, limit, agent, cwd, since))

    async def _search(self, query: Query) -> list[SearchHit]:
        raise NotImplementedError

    async def usage_summary(
        self, since: float | None, until: float | None, group_by: spend.GroupBy
    ) -> list[UsageRow]:
        """Each turn's spend added up per day, agent, project or session (spend.py)."""
        raise NotImplementedError

    async def latest_limits(self) -> list[tuple[str, bytes]]:
        """(agent, ``limits`` block JSON): the newest of each agent and window on disk."""
        return []


class MemoryReads(Reads):
    _events: Mapping[str, Sequence[EventLike]]
    _sessions: Mapping[str, RecordLike]

    async def _search(self, query: Query) -> list[SearchHit]:
        return search_events(query, self._events, self._sessions)

    async def usage_summary(
        self, since: float | None, until: float | None, group_by: spend.GroupBy
    ) -> list[UsageRow]:
        return usage_events(since, until, group_by, self._events, self._sessions)


class SqliteReads(Reads):
    """Reads on the SQLite store's reader connection, off the event loop (its ``_query``)."""

    async def _query(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        raise NotImplementedError

    #: a session's record from its stored bytes
    _decode_record: Decode

    async def _search(self, query: Query) -> list[SearchHit]:
        hits: list[SearchHit] = await self._query(
            lambda conn: search_db(conn, query, self._decode_record)
        )
        return hits

    async def usage_summary(
        self, since: float | None, until: float | None, group_by: spend.GroupBy
    ) -> list[UsageRow]:
        rows: list[UsageRow] = await self._query(
            lambda conn: usage_db(conn, since, until, group_by, self._decode_record)
        )
        return rows

    async def latest_limits(self) -> list[tuple[str, bytes]]:
        found: list[tuple[str, bytes]] = await self._query(
            lambda conn: limitrows.latest(conn, lambda data: self._decode_record(data).agent)
        )
        return found
