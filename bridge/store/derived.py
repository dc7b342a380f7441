"""The tables read off the events as they are written: the search index (bridge/store/search.py),
each turn's usage (bridge/store/spend.py) and each session's latest limits
(bridge/store/limitrows.py).

The store's writer calls ``Derived.rows`` for each batch and ``insert`` in the same transaction
as the batch's events, so they are on disk together or not at all; and ``prune`` after
retention. A batch that failed to commit is handed in again as it was: its rows are
remembered, so a retry neither loses nor repeats any (the collectors keep state across events).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

from bridge.store import limitrows, search, spend
from bridge.store.eventrows import EventLike

_META_KEY = "derived_tables"
_TEXT = b'{"type":"text"'
_USER = b'{"type":"user"'
_USAGE = b'{"type":"usage"'
_END = b'{"type":"session_end"'
_LIMITS = b'{"type":"limits"'
#: Bumped when what is derived changes: the tables are then built again once.
VERSION = "2"


@dataclass(slots=True)
class Found:
    text: list[search.IndexRow] = field(default_factory=list)
    usage: list[spend.UsageRow] = field(default_factory=list)
    limits: list[limitrows.LimitRow] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.text or self.usage or self.limits)


class Derived:
    def __init__(self) -> None:
        self._text = search.Indexer()
        self._usage = spend.TurnUsage()
        self._last: tuple[object, Found] | None = None

    def rows(self, batch: object, events: Sequence[EventLike]) -> Found:
        last = self._last
        if last is not None and last[0] is batch:
            return last[1]
        found = Found()
        for ev in events:
            self._feed(ev, found)
        self._last = (batch, found)
        return found

    def _feed(self, ev: EventLike, found: Found) -> None:
        # Blocks are written with their tag first: one look at the start says which collector
        # wants the event; most events (text deltas) are the first asked.
        data = ev.block_json
        if data.startswith(_TEXT):
            self._text.text(ev, found.text)
        elif data.startswith(_USER):
            self._text.user(ev, found.text)
        elif data.startswith(_USAGE):
            self._usage.usage(ev)
        elif data.startswith(_END):
            self._text.end(ev, found.text)
            self._usage.end(ev, found.usage)
        elif data.startswith(_LIMITS):
            limitrows.feed(ev, found.limits)


def insert(conn: sqlite3.Connection, found: Found) -> None:
    if found.text:
        search.insert(conn, found.text)
    if found.usage:
        spend.insert(conn, found.usage)
    if found.limits:
        limitrows.insert(conn, found.limits)


def prune(conn: sqlite3.Connection) -> None:
    search.prune_index(conn)
    spend.prune(conn)
    limitrows.prune(conn)


def ensure(conn: sqlite3.Connection) -> int | None:
    """Create the tables, and fill them from the stored events the first time (the number of
    rows written then; None when they were there already)."""
    conn.executescript(search.SCHEMA + spend.SCHEMA + limitrows.SCHEMA)
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_META_KEY,)).fetchone()
    if row is not None and row[0] == VERSION:
        return None
    derived = Derived()
    written = 0
    conn.execute("BEGIN")
    try:
        conn.execute("DELETE FROM search_rows")
        conn.execute("DELETE FROM usage_turns")
        conn.execute("DELETE FROM limits_latest")
        for events in search.stored_events(conn):
            found = Found()
            for ev in events:
                derived._feed(ev, found)
            insert(conn, found)
            written += len(found.text) + len(found.usage) + len(found.limits)
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (_META_KEY, VERSION))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return written
