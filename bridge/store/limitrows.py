"""Each session's latest ``limits`` block per window, kept beside the events (written by the
store's writer in the same transaction, bridge/store/derived.py), so an agent's limits are
known again after a daemon restart: ``latest`` answers, per agent and window, the newest."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable

import msgspec

from bridge.store.eventrows import EventLike

SCHEMA = """
CREATE TABLE IF NOT EXISTS limits_latest (
    session TEXT NOT NULL,
    window TEXT NOT NULL,
    ts REAL NOT NULL,
    block BLOB NOT NULL,
    PRIMARY KEY (session, window)
) WITHOUT ROWID;
"""
_INSERT = "INSERT OR REPLACE INTO limits_latest VALUES (?, ?, ?, ?)"
_LIMITS = b'{"type":"limits"'

#: (session, window, ts_unix, block JSON)
LimitRow = tuple[str, str, float, bytes]


class _Window(msgspec.Struct):
    window: str = ""


_dec_window = msgspec.json.Decoder(_Window)


def feed(ev: EventLike, out: list[LimitRow]) -> None:
    if not ev.block_json.startswith(_LIMITS):
        return
    try:
        window = _dec_window.decode(ev.block_json).window
    except msgspec.DecodeError:
        return
    if window:
        out.append((ev.session, window, ev.ts_unix, ev.block_json))


def insert(conn: sqlite3.Connection, rows: Iterable[LimitRow]) -> None:
    conn.executemany(_INSERT, rows)


def prune(conn: sqlite3.Connection) -> None:
    """Rows of sessions removed whole go."""
    conn.execute("DELETE FROM limits_latest WHERE session NOT IN (SELECT id FROM sessions)")


def latest(conn: sqlite3.Connection, agent_of: Callable[[bytes], str]) -> list[tuple[str, bytes]]:
    """(agent, block JSON): the newest block of each agent and window."""
    best: dict[tuple[str, str], tuple[float, bytes]] = {}
    agents: dict[str, str] = {}
    sql = (
        "SELECT l.session, l.window, l.ts, l.block, s.data FROM limits_latest AS l"
        " JOIN sessions AS s ON s.id = l.session"
    )
    for session, window, ts, block, data in conn.execute(sql):
        agent = agents.get(session)
        if agent is None:
            agent = agents[session] = agent_of(data)
        key = (agent, window)
        if key not in best or ts > best[key][0]:
            best[key] = (ts, bytes(block))
    return [(agent, block) for (agent, _w), (_ts, block) in best.items()]
