"""What the agents cost: one row per turn that reported usage, and ``usage.summary`` over them.

A session's ``usage`` blocks are running totals for the whole session (bridge/hub/turns.py
``session_usage``: what earlier adapters and daemons counted is added), and a turn may report
several. So the row kept per turn is the turn's last total, and a turn's spend is its total less
the one before it in the same session. A total lower than the one before (stores written before
totals spanned adapters, when a new process counted from zero) starts again from zero: the
turn's spend is its whole total. Rows are written by the store's writer thread in the same
transaction as their events, built once for a store from before them, and kept when retention
cuts events (spend history outlives the transcript), until the session is removed whole.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import msgspec

from bridge.store.eventrows import EventLike

GroupBy = Literal["day", "agent", "project", "session"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS usage_turns (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL,
    input INTEGER NOT NULL,
    output INTEGER NOT NULL,
    cached INTEGER NOT NULL,
    cost REAL NOT NULL,
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
"""

_INSERT = "INSERT OR REPLACE INTO usage_turns VALUES (?, ?, ?, ?, ?, ?, ?)"


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    cost_usd: float | None = None


_dec_usage = msgspec.json.Decoder(_Usage)
_USAGE = b'{"type":"usage"'
_END = b'{"type":"session_end"'

#: (session, seq, ts_unix, input, output, cached, cost): a turn's last running total
UsageRow = tuple[str, int, float, int, int, int, float]


class TurnUsage:
    """The last usage total of each turn, when the turn ends (sans-I/O)."""

    def __init__(self) -> None:
        self._latest: dict[str, UsageRow] = {}

    def feed(self, ev: EventLike, out: list[UsageRow]) -> None:
        data = ev.block_json
        if data.startswith(_USAGE):
            self.usage(ev)
        elif data.startswith(_END):
            self.end(ev, out)

    def usage(self, ev: EventLike) -> None:
        try:
            u = _dec_usage.decode(ev.block_json)
        except msgspec.DecodeError:
            return
        self._latest[ev.session] = (
            ev.session,
            ev.seq,
            ev.ts_unix,
            u.input_tokens or 0,
            u.output_tokens or 0,
            u.cached_input_tokens or 0,
            u.cost_usd or 0.0,
        )

    def end(self, ev: EventLike, out: list[UsageRow]) -> None:
        row = self._latest.pop(ev.session, None)
        if row is not None:
            out.append(row)


def insert(conn: sqlite3.Connection, rows: Iterable[UsageRow]) -> None:
    conn.executemany(_INSERT, rows)


def prune(conn: sqlite3.Connection) -> None:
    """Rows of sessions removed whole go (retention's other cuts keep them)."""
    conn.execute("DELETE FROM usage_turns WHERE session NOT IN (SELECT id FROM sessions)")


# ---- usage.summary -----------------------------------------------------------------------------

_ROWS = "SELECT * FROM usage_turns ORDER BY session, seq"


def stored_rows(conn: sqlite3.Connection) -> Iterator[UsageRow]:
    """Every turn's row, in order per session (what ``summary`` reads)."""
    yield from conn.execute(_ROWS)


@dataclass(slots=True)
class Totals:
    key: str
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0


def day_of(ts: float) -> str:
    """The UTC day of a Unix time, as ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(ts, UTC).date().isoformat()


def deltas(rows: Iterable[UsageRow]) -> Iterator[UsageRow]:
    """Each turn's own spend, from rows in order per session: its total less the session's
    total before it (a field lower than before counts from zero)."""
    session: str | None = None
    before = (0, 0, 0, 0.0)
    for sid, seq, ts, inp, out, cached, cost in rows:
        if sid != session:
            session, before = sid, (0, 0, 0, 0.0)
        now = (inp, out, cached, cost)
        spent = [v - b if b <= v else v for v, b in zip(now, before, strict=True)]
        before = now
        yield sid, seq, ts, int(spent[0]), int(spent[1]), int(spent[2]), round(spent[3], 10)


def summary(
    rows: Iterable[UsageRow],
    since: float | None,
    until: float | None,
    group_by: GroupBy,
    session_of: Callable[[str], tuple[str, str] | None],
) -> list[Totals]:
    """Rows per key from every turn's row (in order per session): days oldest first, the
    others by cost then tokens, largest first. ``session_of(id)`` is a session's (agent, cwd),
    None for one the store no longer has."""
    lo = float("-inf") if since is None else since
    hi = float("inf") if until is None else until
    groups: dict[str, Totals] = {}
    for session, _seq, ts, inp, out, cached, cost in deltas(rows):
        if not lo <= ts < hi:
            continue
        if group_by == "day":
            key = day_of(ts)
        elif group_by == "session":
            key = session
        else:
            known = session_of(session)
            if known is None:
                continue
            key = known[0] if group_by == "agent" else known[1]
        add(groups, key, inp, out, cached, cost)
    return ordered(groups, group_by)


def add(groups: dict[str, Totals], key: str, inp: int, out: int, cached: int, cost: float) -> None:
    row = groups.get(key)
    if row is None:
        row = groups[key] = Totals(key)
    row.turns += 1
    row.input_tokens += inp
    row.output_tokens += out
    row.cached_input_tokens += cached
    row.cost_usd = round(row.cost_usd + cost, 10)


def ordered(groups: dict[str, Totals], group_by: GroupBy) -> list[Totals]:
    if group_by == "day":
        return sorted(groups.values(), key=lambda t: t.key)
    return sorted(
        groups.values(),
        key=lambda t: (t.cost_usd, t.input_tokens + t.output_tokens, t.key),
        reverse=True,
    )
