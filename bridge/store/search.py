"""Full-text search over what people and agents wrote: user messages and agent text.

An SQLite FTS5 table beside the events, written by the store's writer thread in the same
transaction as the events it comes from, so the index is never behind what is on disk and never
needs a rescan (bridge/store/derived.py, which also reads a store from before the index through
once when it is opened). Retention cuts a session's events from its start only
(bridge/store/eventrows.py ``prune_rows``), so ``prune_index`` drops what lies below each
session's first kept event, and the rows of sessions removed whole.

An agent's text arrives as deltas of one message ``id`` ending with ``done``; the indexer joins
them and indexes the message once, at the seq of its first delta (where a client scrolls to).

The query parser (``match_expression``) is sans-I/O: words and "quoted phrases", each passed to
FTS5 as a quoted string, so nothing a person types is an FTS5 syntax error.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from bridge.store.eventrows import DEC_CHUNK, EventLike

#: At most this much of one message is indexed (a pasted log stays findable by its start).
MAX_INDEXED_CHARS = 32 * 1024
#: Words of context in a snippet.
SNIPPET_TOKENS = 16
#: A query that matches more messages than this ranks the newest this many (by bm25): ranking
#: every match of a common word cost seconds on a large store, and what is best among the
#: newest thousands is what a person looks for. Rowids grow as text is written.
RANKED_AT_MOST = 2000

SCHEMA = """
CREATE TABLE IF NOT EXISTS search_rows (
    id INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS search_rows_at ON search_rows (session, seq);
CREATE VIRTUAL TABLE IF NOT EXISTS search_text USING fts5(
    body, tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS search_rows_gone AFTER DELETE ON search_rows BEGIN
    DELETE FROM search_text WHERE rowid = old.id;
END;
"""

_INSERT_ROW = "INSERT INTO search_rows (session, seq, ts) VALUES (?, ?, ?)"
_INSERT_TEXT = "INSERT INTO search_text (rowid, body) VALUES (?, ?)"


class _Written(msgspec.Struct):
    """The fields of a ``user`` or ``text`` block the index reads (others are ignored)."""

    type: str
    text: str = ""
    id: str = ""
    done: bool = False


_dec_written = msgspec.json.Decoder(_Written)
# Blocks are encoded with their tag first (msgspec), so the kind is known from the first bytes
# and the other blocks (tool calls, results, diffs: most of the bytes) are never decoded.
_USER = b'{"type":"user"'
_TEXT = b'{"type":"text"'
_END = b'{"type":"session_end"'


@dataclass(slots=True)
class _Open:
    """An agent message whose deltas are still arriving: kept as they were stored (JSON), and
    decoded once when it is done; past MAX_INDEXED_CHARS of JSON the rest is not kept."""

    seq: int
    ts: float
    parts: list[bytes] = field(default_factory=list)
    size: int = 0

    def text(self) -> str:
        return "".join(b.text for b in map(_decode, self.parts) if b is not None)


#: (session, seq, ts_unix, text): one row of the index
IndexRow = tuple[str, int, float, str]
_ID_AT = len(b'{"type":"text","id":"')
_DONE = b'"done":true}'


class Indexer:
    """What to index of each event, in order (the writer thread's; sans-I/O). Agent messages
    still open are kept per session until their ``done`` (or the turn's end).

    A text delta is the commonest event of all: it is recognised, grouped by its message ``id``
    and kept without being decoded (msgspec writes a block's fields in order: ``type``, ``id``,
    ``text``, ``done``), so the writer's cost per delta stays a few slices."""

    def __init__(self) -> None:
        self._open: dict[str, dict[bytes, _Open]] = {}

    def feed(self, ev: EventLike, out: list[IndexRow]) -> None:
        data = ev.block_json
        if data.startswith(_TEXT):
            self.text(ev, out)
        elif data.startswith(_USER):
            self.user(ev, out)
        elif data.startswith(_END):
            self.end(ev, out)

    def text(self, ev: EventLike, out: list[IndexRow]) -> None:
        data = ev.block_json
        key = data[_ID_AT : data.find(b'"', _ID_AT)]
        messages = self._open.get(ev.session)
        if messages is None:
            messages = self._open[ev.session] = {}
        message = messages.get(key)
        if message is None:
            message = messages[key] = _Open(ev.seq, ev.ts_unix)
        if message.size < MAX_INDEXED_CHARS:
            message.parts.append(data)
            message.size += len(data)
        if data.endswith(_DONE):
            del messages[key]
            _add(out, ev.session, message.seq, message.ts, message.text())

    def user(self, ev: EventLike, out: list[IndexRow]) -> None:
        block = _decode(ev.block_json)
        if block is not None:
            _add(out, ev.session, ev.seq, ev.ts_unix, block.text)

    def end(self, ev: EventLike, out: list[IndexRow]) -> None:
        # A turn's end closes what it left open (the stream repairs this, a crash may not).
        for message in self._open.pop(ev.session, {}).values():
            _add(out, ev.session, message.seq, message.ts, message.text())


def _decode(data: bytes) -> _Written | None:
    try:
        return _dec_written.decode(data)
    except msgspec.DecodeError:
        return None


def _add(out: list[IndexRow], session: str, seq: int, ts: float, text: str) -> None:
    text = text[:MAX_INDEXED_CHARS].strip()
    if text:
        out.append((session, seq, ts, text))


def insert(conn: sqlite3.Connection, rows: Sequence[IndexRow]) -> None:
    """Add rows, inside the caller's transaction."""
    for session, seq, ts, text in rows:
        cursor = conn.execute(_INSERT_ROW, (session, seq, ts))
        conn.execute(_INSERT_TEXT, (cursor.lastrowid, text))


@dataclass(slots=True)
class Stored:
    """An event read back from ``event_chunks``."""

    session: str
    seq: int
    ts: str
    ts_unix: float
    block_json: bytes


def stored_events(conn: sqlite3.Connection) -> Iterator[list[Stored]]:
    """Every stored event, a row of ``event_chunks`` at a time, in order per session."""
    cursor = conn.execute("SELECT session, events FROM event_chunks ORDER BY session, first_seq")
    for session, blob in cursor:
        yield [Stored(session, q, t, u, bytes(b)) for q, t, u, b in DEC_CHUNK.decode(blob)]


def prune_index(conn: sqlite3.Connection) -> None:
    """After retention (same transaction): entries below each session's first kept event, and
    those of sessions with no events left, go."""
    conn.execute(
        "DELETE FROM search_rows WHERE id IN (SELECT r.id FROM"
        " (SELECT session, MIN(first_seq) AS low FROM event_chunks GROUP BY session) AS c"
        " JOIN search_rows AS r ON r.session = c.session AND r.seq < c.low)"
    )
    conn.execute(
        "DELETE FROM search_rows WHERE session IN (SELECT DISTINCT session FROM search_rows"
        " EXCEPT SELECT session FROM event_chunks)"
    )


# ---- queries ------------------------------------------------------------------------------------

_TERM = re.compile(r'"([^"]*)"?|(\S+)')
_STRAY = re.compile(r'"')


def terms(query: str) -> list[tuple[str, bool]]:
    """The query's words and "quoted phrases", in order: (text, is_phrase). A quote left open
    runs to the end of the query; a phrase of nothing is dropped."""
    out: list[tuple[str, bool]] = []
    # FTS5 reads its query as a C string: a NUL would end it inside a quoted term.
    for match in _TERM.finditer(query.replace("\x00", " ")):
        phrase, word = match.group(1), match.group(2)
        if phrase is not None:
            if phrase.strip():
                out.append((" ".join(phrase.split()), True))
        elif word:
            out.append((word, False))
    return out


def match_expression(query: str) -> str | None:
    """The FTS5 MATCH expression for a person's query (every term required), or None when it
    holds nothing to look for. Each term is an FTS5 string, so no character is syntax; a word
    ending in ``*`` is a prefix."""
    parts = []
    for text, phrase in terms(query):
        prefix = not phrase and text.endswith("*") and len(text.rstrip("*")) > 0
        body = text.rstrip("*") if prefix else text
        quoted = '"' + _STRAY.sub('""', body) + '"'
        parts.append(quoted + ("*" if prefix else ""))
    return " AND ".join(parts) if parts else None


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    limit: int
    agent: str | None = None
    cwd: str | None = None
    #: Unix time: only text written at or after it.
    since: float | None = None


@dataclass(frozen=True, slots=True)
class Found:
    """One hit as the store finds it; the session's own fields are read from its record."""

    session: str
    seq: int
    ts: float
    snippet: str
    score: float
    record: bytes


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_SELECT = (
    "SELECT r.session, r.seq, r.ts, snippet(search_text, 0, '', '', '…', ?), rank, s.data"
    " FROM search_text JOIN search_rows AS r ON r.id = search_text.rowid"
    " JOIN sessions AS s ON s.id = r.session"
    " WHERE search_text MATCH ?"
)


#: The newest matches with their rank, in one pass over the index.
_NEWEST = (
    "SELECT rowid, bm25(search_text) FROM search_text WHERE search_text MATCH ?"
    " ORDER BY rowid DESC LIMIT ?"
)
#: The hits' places and snippets, for the rowids chosen.
_PLACES = (
    "SELECT search_text.rowid, r.session, r.seq, r.ts, snippet(search_text, 0, '', '', '…', ?),"
    " s.data FROM search_text JOIN search_rows AS r ON r.id = search_text.rowid"
    " JOIN sessions AS s ON s.id = r.session"
    " WHERE search_text MATCH ? AND search_text.rowid IN ({})"
)


def search(conn: sqlite3.Connection, query: Query, agent_of: Any) -> list[Found]:
    """Hits best first (FTS5's bm25, then newest). ``agent_of(record)`` reads a session
    record's agent, for the ``agent`` filter (records are MessagePack)."""
    expression = match_expression(query.text)
    if expression is None:
        return []
    if query.agent is None and query.cwd is None and query.since is None:
        return _newest_ranked(conn, expression, query.limit)
    sql = _SELECT
    args: list[Any] = [SNIPPET_TOKENS, expression]
    if query.since is not None:
        sql += " AND r.ts >= ?"
        args.append(query.since)
    if query.cwd is not None:
        sql += " AND s.cwd = ?"
        args.append(query.cwd)
    sql += " ORDER BY rank, r.ts DESC"
    if query.agent is None:
        sql += " LIMIT ?"
        args.append(query.limit)
    out: list[Found] = []
    agents: dict[str, str] = {}
    cursor = conn.execute(sql, args)
    try:
        for session, seq, ts, snippet, rank, data in cursor:
            if query.agent is not None:
                agent = agents.get(session)
                if agent is None:
                    agent = agents[session] = agent_of(data)
                if agent != query.agent:
                    continue
            out.append(Found(session, seq, ts, snippet, -float(rank), bytes(data)))
            if len(out) >= query.limit:
                break
    finally:
        cursor.close()
    return out


def _newest_ranked(conn: sqlite3.Connection, expression: str, limit: int) -> list[Found]:
    """Without filters: the newest RANKED_AT_MOST matches and their ranks in one pass, the best
    ``limit`` of them, then their places and snippets (ranking every match of a common word,
    and going over the index twice, cost a large store hundreds of milliseconds)."""
    ranked = conn.execute(_NEWEST, (expression, RANKED_AT_MOST)).fetchall()
    ranked.sort(key=lambda row: (row[1], -row[0]))
    best = ranked[:limit]
    if not best:
        return []
    sql = _PLACES.format(", ".join("?" * len(best)))
    places = {
        row[0]: row[1:]
        for row in conn.execute(sql, [SNIPPET_TOKENS, expression, *(r for r, _ in best)])
    }
    out = []
    for rowid, rank in best:
        place = places.get(rowid)
        if place is not None:
            session, seq, ts, snippet, data = place
            out.append(Found(session, seq, ts, snippet, -float(rank), bytes(data)))
    return out


def matches_plainly(query: str, text: str) -> float:
    """A stand-in for FTS5 where there is no database (the in-memory store): every term in
    ``text``, case-insensitively; the score is how many times they occur (0: no match)."""
    low = text.casefold()
    score = 0
    for term, _phrase in terms(query):
        count = low.count(term.rstrip("*").casefold())
        if count == 0:
            return 0.0
        score += count
    return float(score)
