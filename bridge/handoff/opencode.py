"""OpenCode and Kilo sessions started in a terminal: listing and the read-only mirror.

Both keep sessions in one SQLite database (WAL mode), ``$XDG_DATA_HOME/<app>/<app>.db``
(default ``~/.local/share``; ``opencode`` 1.18, ``kilo`` 7.7 share the schema): ``session``
(``id``, ``directory``, ``title``, ``parent_id`` for sub-agent sessions, ``time_updated`` in ms,
``time_archived``), ``message`` (``data`` JSON with ``role``) and ``part`` (``data`` JSON: ``text``,
``reasoning``, ``tool`` with ``state.status``, ``step-finish`` with ``reason``). Parts are
rewritten in place while they stream, so the mirror polls for parts updated since its last look
and shows each one once, when it is complete. The database is only ever opened read-only.

Neither keeps a lock or registry: ownership is a process of the CLI in the session's directory
(``cli_running_in`` in bridge/adapters/perturn.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from bridge.blocks import Block, TextBlock, ThinkingBlock, UserBlock
from bridge.handoff import procscan
from bridge.handoff.files import loads
from bridge.handoff.listing import MAX_LISTED, one_line_title
from bridge.handoff.mirror import PollingMirror
from bridge.handoff.sqlite_ro import open_ro, reading
from bridge.handoff.turns import MirrorTurns
from bridge.parsers.opencode import KINDS
from bridge.wire.agent_types import ExternalSession

_SID = re.compile(r"^ses_[A-Za-z0-9]{8,64}$")
_DONE_TOOL = ("completed", "error")

#: One part row as the mirror reads it: (part id, message id, part updated ms, part data,
#: message data).
Row = tuple[str, str, int, str, str]


def db_path(app: str) -> Path:
    value = os.environ.get("XDG_DATA_HOME")
    base = Path(value) if value and os.path.isabs(value) else Path.home() / ".local" / "share"
    return base / app / f"{app}.db"


def scan(app: str, db: Path | None = None, limit: int = MAX_LISTED) -> list[ExternalSession]:
    """Top-level, unarchived sessions, newest first."""
    with reading(db or db_path(app)) as conn:
        if conn is None:
            return []
        try:
            rows = conn.execute(
                "SELECT id, directory, title, time_updated FROM session "
                "WHERE parent_id IS NULL AND time_archived IS NULL "
                "ORDER BY time_updated DESC LIMIT ?",
                (limit,),
            ).fetchall()
        except sqlite3.Error:
            return []
    # A process of the CLI in a directory is taken to hold that directory's newest session.
    busy = {os.path.realpath(p.cwd) for p in procscan.scan(procscan.argv_names(app)) if p.cwd}
    out: list[ExternalSession] = []
    for sid, directory, title, updated in rows:
        if not isinstance(sid, str) or not isinstance(directory, str):
            continue
        where = os.path.realpath(directory)
        owned = where in busy
        busy.discard(where)
        out.append(
            ExternalSession(
                agent_session_id=sid,
                cwd=directory,
                title=one_line_title(str(title or "")),
                updated_at=(updated or 0) / 1000.0,
                owned=owned,
            )
        )
    return out


class PartParser(MirrorTurns):
    """Part rows -> blocks, sans-I/O. A user message's text opens a turn; an assistant step
    that finishes for a reason other than tool calls closes it. Each part is shown once, when
    complete (a tool call twice: when it starts and when it finishes)."""

    def __init__(self, sid: str) -> None:
        super().__init__(sid)
        self._shown: set[tuple[str, str]] = set()

    def feed(self, rows: list[Row]) -> list[Block]:
        out: list[Block] = []
        for part_id, message_id, _updated, part_json, message_json in rows:
            part = loads(part_json.encode()) if isinstance(part_json, str) else None
            message = loads(message_json.encode()) if isinstance(message_json, str) else None
            if part is None or message is None:
                continue
            out += self._part(part_id, message_id, part, message)
        return out

    def _once(self, key: str, stage: str) -> bool:
        if (key, stage) in self._shown:
            return False
        self._shown.add((key, stage))
        return True

    def _part(
        self, part_id: str, message_id: str, part: dict[str, Any], message: dict[str, Any]
    ) -> list[Block]:
        kind = part.get("type")
        role = message.get("role")
        if role == "user":
            text = part.get("text")
            if kind != "text" or part.get("synthetic") or not isinstance(text, str):
                return []
            if not text.strip() or not self._once(part_id, "user"):
                return []
            out = self._close("completed")
            self.turn_open = True
            return [*out, UserBlock(id=part_id, text=text, source="terminal")]
        if role != "assistant":
            return []
        ended = isinstance(part.get("time"), dict) and part["time"].get("end") is not None
        if kind in ("text", "reasoning") and ended and self._once(part_id, "done"):
            text = str(part.get("text") or "")
            if not text.strip():
                return []
            self.turn_open = True
            cls = TextBlock if kind == "text" else ThinkingBlock
            return [cls(id=part_id, text=text, done=True)]
        if kind == "tool":
            return self._tool(part)
        finished = kind == "step-finish" and part.get("reason") not in ("tool-calls", "tool_calls")
        if finished and self._once(part_id, "finish"):
            return self._close("completed")
        return []

    def _tool(self, part: dict[str, Any]) -> list[Block]:
        call_id = part.get("callID") or part.get("id")
        state = part.get("state")
        if not isinstance(call_id, str) or not isinstance(state, dict):
            return []
        status = state.get("status")
        out: list[Block] = []
        if call_id not in self._tools and self._once(call_id, "running"):
            name = str(part.get("tool") or "tool")
            args = state.get("input")
            args = args if isinstance(args, dict) else {}
            title = state.get("title") or args.get("description") or args.get("command")
            out.append(self._start_tool(call_id, name, title, KINDS.get(name), args))
        if status in _DONE_TOOL and call_id in self._tools and self._once(call_id, "done"):
            call = self._tools.pop(call_id)
            failed = status == "error"
            result = state.get("error") if failed else state.get("output")
            out += self._end_tool(call, str(result or ""), failed=failed)
        return out


_ROWS = (
    "SELECT p.id, p.message_id, p.time_updated, p.data, m.data FROM part p "
    "JOIN message m ON m.id = p.message_id "
    "WHERE p.session_id = ? AND p.time_updated >= ? ORDER BY p.time_created, p.id"
)


class _Cursor:
    """The mirror's read position: parts updated at or after ``since`` (ms) are read again
    (equal times are possible; the parser shows each stage of a part once)."""

    def __init__(self, db: Path, sid: str, parser: PartParser) -> None:
        self.db, self.sid, self.parser = db, sid, parser
        self.since: int | None = None
        self.conn: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection | None:
        if self.conn is None:
            self.conn = open_ro(self.db)
        return self.conn

    def start(self) -> None:
        """Skip what is there now: the mirror shows what happens from here on."""
        conn = self._connect()
        if conn is None:
            self.since = 0
            return
        try:
            row = conn.execute(
                "SELECT max(time_updated) FROM part WHERE session_id = ?", (self.sid,)
            ).fetchone()
        except sqlite3.Error:
            row = None
        self.since = int(row[0]) + 1 if row and row[0] is not None else 0

    def poll(self) -> list[Block]:
        if self.since is None:
            self.start()
        conn = self._connect()
        if conn is None:
            return []
        try:
            rows = conn.execute(_ROWS, (self.sid, self.since)).fetchall()
        except sqlite3.Error:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            self.conn = None
            return []
        if rows:
            self.since = max(self.since or 0, max(int(r[2]) for r in rows))
        return self.parser.feed([tuple(r) for r in rows])

    def finish(self) -> list[Block]:
        if self.conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self.conn.close()
            self.conn = None
        return self.parser.close()


def mirror(app: str, sid: str, db: Path | None = None) -> PollingMirror | None:
    if not _SID.match(sid):
        return None
    path = db or db_path(app)
    cursor = _Cursor(path, sid, PartParser(sid))
    cursor.start()
    return PollingMirror(cursor, path)
