"""Opening another program's SQLite database without ever writing to it.

OpenCode, Kilo, Hermes and Cursor keep sessions in SQLite (WAL mode). ``mode=ro`` reads the
live database including the WAL; it needs the ``-shm`` file, which the writer creates. When
that fails (no ``-shm`` yet, a read-only directory), ``immutable=1`` reads the main file as it
is, which may miss the last few writes but never blocks or writes anything.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

BUSY_TIMEOUT_S = 0.5


def _uri(path: Path, flags: str) -> str:
    return f"file:{quote(str(path.resolve()))}?{flags}"


def open_ro(path: Path) -> sqlite3.Connection | None:
    """A read-only connection, or None if the file is missing or not a database."""
    if not path.is_file():
        return None
    for flags in ("mode=ro", "mode=ro&immutable=1"):
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                _uri(path, flags), uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False
            )
            conn.execute("PRAGMA query_only = 1")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            conn.row_factory = sqlite3.Row
            return conn
        except sqlite3.Error:
            if conn is not None:
                conn.close()
    return None


@contextlib.contextmanager
def reading(path: Path) -> Iterator[sqlite3.Connection | None]:
    conn = open_ro(path)
    try:
        yield conn
    finally:
        if conn is not None:
            conn.close()


def tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {str(r[0]) for r in rows}
