"""The rows of ``event_chunks``: runs of one session's events, MessagePack-encoded, cut every
``CHUNK_EVENTS`` events or ``CHUNK_BYTES`` bytes, and inserted a few statements per batch.

Sans-I/O but for ``insert_chunks``, which runs the statements on the writer's connection
(bridge/store/store.py).
"""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Sequence
from itertools import groupby
from typing import Any, Protocol, TypeVar

import msgspec


class EventLike(Protocol):
    """What a row needs of a stored event (bridge/store/store.py ``StoredEvent``)."""

    session: str
    seq: int
    ts: str
    ts_unix: float
    block_json: bytes


E = TypeVar("E", bound=EventLike)

_enc = msgspec.msgpack.Encoder()
#: Consecutive events of one session per row, at most. A row per event cost the writer
#: thread a GIL hand-over per row (sqlite3 releases it around every step), and while the event
#: loop was busy each hand-over waited for the interpreter's switch interval: the writer fell
#: behind the hub (docs/benchmarks.md, T7). A row per run of events costs one.
CHUNK_EVENTS = 512
#: ... and at most about this many bytes of blocks per row.
CHUNK_BYTES = 1024 * 1024
_CHUNK_ITEM = operator.attrgetter("seq", "ts", "ts_unix", "block_json")
_SESSION_OF = operator.attrgetter("session")
DEC_CHUNK = msgspec.msgpack.Decoder(list[tuple[int, str, float, bytes]])
INSERT_CHUNK = (
    "INSERT OR IGNORE INTO event_chunks (session, first_seq, last_seq, last_ts, events)"
    " VALUES (?, ?, ?, ?, ?)"
)
#: Rows per multi-row INSERT, largest first: many sessions' runs in one batch still take a
#: few statements, not a GIL hand-over per row (192 rows are 960 parameters, within the
#: 999 that SQLite before 3.32 allows).
_ROWS_PER_INSERT = (192, 48, 12, 3, 1)
_INSERT_CHUNKS = {n: INSERT_CHUNK + ", (?, ?, ?, ?, ?)" * (n - 1) for n in _ROWS_PER_INSERT}


def _parts(run: list[E]) -> list[list[E]]:
    """Cut a run every CHUNK_EVENTS events or CHUNK_BYTES bytes (a row of large blocks stays
    small enough to read a piece of history at a time)."""
    parts: list[list[E]] = []
    part: list[E] = []
    size = 0
    for ev in run:
        if part and (len(part) >= CHUNK_EVENTS or size >= CHUNK_BYTES):
            parts.append(part)
            part, size = [], 0
        part.append(ev)
        size += len(ev.block_json)
    if part:
        parts.append(part)
    return parts


def chunk_rows(events: Sequence[EventLike]) -> list[tuple[str, int, int, float, bytes]]:
    """Rows for ``event_chunks``: each run of one session's events, cut every CHUNK_EVENTS
    (or CHUNK_BYTES)."""
    if len(events) == 1:  # a paced agent's delta: its own commit, its own row
        ev = events[0]
        return [(ev.session, ev.seq, ev.seq, ev.ts_unix, _enc.encode([_CHUNK_ITEM(ev)]))]
    rows = []
    for session, group in groupby(events, key=_SESSION_OF):
        for part in _parts(list(group)):
            items = _enc.encode(list(map(_CHUNK_ITEM, part)))
            rows.append((session, part[0].seq, part[-1].seq, part[-1].ts_unix, items))
    return rows


def insert_chunks(conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    at = 0
    for n in _ROWS_PER_INSERT:
        sql = _INSERT_CHUNKS[n]
        while len(rows) - at >= n:
            conn.execute(sql, [value for row in rows[at : at + n] for value in row])
            at += n


# ---- the sessions table's plain columns ----------------------------------------------------------

#: Beside each session's record: what start-up, ``sessions.list`` and retention filter and sort
#: on without decoding records (only sessions not ended are loaded at start).
_SESSION_COLUMNS = (("state", "TEXT"), ("updated_at", "REAL"), ("cwd", "TEXT"))
SAVE_SESSION = (
    "INSERT OR REPLACE INTO sessions (id, data, state, updated_at, cwd) VALUES (?, ?, ?, ?, ?)"
)
SAVE_MESSAGE = (
    "INSERT OR REPLACE INTO messages"
    " (session, client_msg_id, data, status, answered, created_at) VALUES (?, ?, ?, ?, ?, ?)"
)
SET_MESSAGE_STATE = (
    "UPDATE messages SET status = ?, answered = ? WHERE session = ? AND client_msg_id = ?"
)
#: Ended sessions, newest first, from before a cursor (``updated_at``, ``id``).
LIST_ENDED = (
    "SELECT data FROM sessions WHERE state = 'ended'"
    " AND (updated_at < ? OR (updated_at = ? AND id < ?))"
    " ORDER BY updated_at DESC, id DESC LIMIT ?"
)
#: Sessions that are not ended: what start-up loads.
LIVE = "state IS NOT 'ended'"
LIVE_IDS = "session IN (SELECT id FROM sessions WHERE state IS NOT 'ended')"


def add_session_columns(conn: sqlite3.Connection, decode: Any) -> None:
    """Add the plain columns to a database from before them, filled from each record once."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    if all(name in have for name, _ in _SESSION_COLUMNS):
        return
    conn.execute("BEGIN")
    try:
        for name, kind in _SESSION_COLUMNS:
            if name not in have:
                conn.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")
        for sid, data in conn.execute("SELECT id, data FROM sessions").fetchall():
            rec = decode(data)
            conn.execute(
                "UPDATE sessions SET state = ?, updated_at = ?, cwd = ? WHERE id = ?",
                (rec.state, rec.updated_at, rec.cwd, sid),
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


_MESSAGE_COLUMNS = (("status", "TEXT"), ("answered", "INTEGER"), ("created_at", "REAL"))


def add_message_columns(conn: sqlite3.Connection) -> None:
    """Plain columns beside each message's record, so start-up and retention need not decode
    (or even read) the bodies. Rows from before have them NULL and are read whole once."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(messages)")}
    for name, kind in _MESSAGE_COLUMNS:
        if name not in have:
            conn.execute(f"ALTER TABLE messages ADD COLUMN {name} {kind}")


SESSION_INDEX = "CREATE INDEX IF NOT EXISTS sessions_by_time ON sessions (state, updated_at, id)"


# ---- migration and retention (on the writer's connection) --------------------------------------


class _Event:
    __slots__ = ("block_json", "seq", "session", "ts", "ts_unix")

    def __init__(self, session: str, seq: int, ts: str, block_json: bytes, ts_unix: float) -> None:
        self.session, self.seq, self.ts = session, seq, ts
        self.block_json, self.ts_unix = block_json, ts_unix


def migrate_event_rows(conn: sqlite3.Connection) -> int | None:
    """Databases from before ``event_chunks`` hold a row per event: move them over, once (the
    number of events moved; None when there was nothing to move)."""
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'"
    ).fetchone()
    if found is None:
        return None
    moved = 0
    conn.execute("BEGIN")
    try:
        cursor = conn.execute(
            "SELECT session, seq, ts, ts_unix, block FROM events ORDER BY session, seq"
        )
        while rows := cursor.fetchmany(CHUNK_EVENTS * 8):
            events = [_Event(s, q, t, bytes(b), u) for s, q, t, u, b in rows]
            insert_chunks(conn, chunk_rows(events))
            moved += len(rows)
        conn.execute("DROP TABLE events")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return moved


def prune_rows(
    conn: sqlite3.Connection, max_events: int, cutoff: float, gone: float | None
) -> None:
    """Keep the newest ``max_events`` of each session, and nothing older than ``cutoff``, except
    each session's newest event, so its numbering is never lost. Messages no longer queued
    (their ``user`` blocks are in the events) go after ``cutoff`` too, and an ended session
    last changed before ``gone`` (``store.ended_max_age_days``; None: never) goes whole."""
    if gone is not None:
        ended = "SELECT id FROM sessions WHERE state = 'ended' AND updated_at < ?"
        for (sid,) in conn.execute(ended, (gone,)).fetchall():
            for table, column in (
                ("sessions", "id"),
                ("event_chunks", "session"),
                ("messages", "session"),
            ):
                conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (sid,))  # noqa: S608
    conn.execute(
        "DELETE FROM messages WHERE status IS NOT NULL AND status != 'queued' AND created_at < ?",
        (cutoff,),
    )
    tops = conn.execute("SELECT session, MAX(last_seq) FROM event_chunks GROUP BY session")
    for session, top in tops.fetchall():
        floor = top - max_events  # events up to this seq go
        conn.execute(
            "DELETE FROM event_chunks WHERE session = ?"
            " AND (last_seq <= ? OR (last_ts < ? AND last_seq < ?))",
            (session, floor, cutoff, top),
        )
        # What is left to cut is at the start of the oldest chunk that remains.
        row = conn.execute(
            "SELECT first_seq, events FROM event_chunks WHERE session = ?"
            " ORDER BY first_seq LIMIT 1",
            (session,),
        ).fetchone()
        if row is None:
            continue
        items = DEC_CHUNK.decode(row[1])
        kept = [
            _Event(session, seq, ts, block, ts_unix)
            for seq, ts, ts_unix, block in items
            if seq > floor and (ts_unix >= cutoff or seq == top)
        ]
        if len(kept) < len(items):
            conn.execute(
                "DELETE FROM event_chunks WHERE session = ? AND first_seq = ?",
                (session, row[0]),
            )
            insert_chunks(conn, chunk_rows(kept))
