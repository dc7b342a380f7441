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
