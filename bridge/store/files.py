"""The SQLite store's files: its tables, and its database kept the owner's alone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS event_chunks (
    session TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    last_ts REAL NOT NULL,
    events BLOB NOT NULL,
    PRIMARY KEY (session, first_seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    session TEXT NOT NULL,
    client_msg_id TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (session, client_msg_id)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def private_files(path: Path) -> None:
    """The database and its companions are the owner's alone (0600), whatever the umask or
    the directory: SQLite creates ``-wal`` and ``-shm`` with the database file's mode, so the
    database is created 0600 before SQLite opens it, and files left wider are tightened."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    os.close(fd)
    for suffix in ("", "-wal", "-shm", "-journal"):
        name = Path(f"{path}{suffix}")
        try:
            if stat.S_IMODE(name.stat().st_mode) & 0o077:
                os.chmod(name, 0o600)
        except FileNotFoundError:
            continue
