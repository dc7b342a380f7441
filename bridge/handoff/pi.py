"""Pi sessions started in a terminal: listing and the read-only mirror.

Files (``$PI_CODING_AGENT_DIR``, default ``~/.pi/agent``):
``sessions/--<cwd with / as ->--/<timestamp>_<session id>.jsonl``. Line 1 is the header
``{"type":"session","id","cwd"}``; then entries ``{type, id, parentId, …}`` forming a tree
(the current branch is the chain from the last entry); ``message`` entries carry the
conversation (``user``, ``assistant`` with text/thinking/toolCall parts and ``stopReason``,
``toolResult``). Pi appends with ``appendFileSync`` and ``pi --session <id>`` continues the same
file, so the id never changes and a tail sees every entry.

Pi keeps no lock or registry: ownership is a ``pi`` process in the session's directory
(``cli_running_in`` in bridge/adapters/perturn.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.blocks import Block, TextBlock, ThinkingBlock, UserBlock
from bridge.handoff import procscan
from bridge.handoff.files import StatCache, head_lines, loads
from bridge.handoff.listing import MAX_LISTED, newest_first, one_line_title
from bridge.handoff.mirror import TranscriptMirror, found_once
from bridge.handoff.tail import Dedupe
from bridge.handoff.turns import MirrorTurns
from bridge.parsers.pi import KINDS
from bridge.wire.agent_types import ExternalSession

_SID = re.compile(r"_([0-9a-fA-F-]{16,64})$")
_is_pi = procscan.argv_names("pi")
_END = {"stop": "completed", "length": "completed", "error": "error", "aborted": "interrupted"}


def agent_dir() -> Path:
    value = os.environ.get("PI_CODING_AGENT_DIR")
    return Path(value).expanduser() if value else Path.home() / ".pi" / "agent"


def sid_of(path: Path) -> str | None:
    m = _SID.search(path.stem)
    return m.group(1) if m else None


def session_path(sid: str, base: Path | None = None) -> Path | None:
    if not re.fullmatch(r"[0-9a-fA-F-]{16,64}", sid):
        return None
    for path in ((base or agent_dir()) / "sessions").glob(f"*/*_{sid}.jsonl"):
        return path
    return None


def _text(content: Any, kind: str = "text") -> str:
    if isinstance(content, str):
        return content if kind == "text" else ""
    if not isinstance(content, list):
        return ""
    key = "thinking" if kind == "thinking" else "text"
    return "".join(
        str(c.get(key) or "") for c in content if isinstance(c, dict) and c.get("type") == kind
    )


@dataclass(slots=True)
class _Summary:
    cwd: str
    title: str


def _summarize(path: Path, previous: _Summary | None) -> _Summary:
    if previous is not None and previous.cwd and previous.title:
        return previous
    cwd = title = ""
    for line in head_lines(path):
        entry = loads(line)
        if entry is None:
            continue
        if entry.get("type") == "session" and isinstance(entry.get("cwd"), str):
            cwd = str(entry["cwd"])
        elif entry.get("type") == "session_info" and isinstance(entry.get("name"), str):
            title = str(entry["name"])
        message = entry.get("message")
        if not title and isinstance(message, dict) and message.get("role") == "user":
            title = _text(message.get("content")).strip()
        if cwd and title:
            break
    return _Summary(cwd, title)


_CACHE: StatCache[_Summary] = StatCache()


def scan(base: Path | None = None, limit: int = MAX_LISTED) -> list[ExternalSession]:
    found = newest_first(((base or agent_dir()) / "sessions").glob("*/*.jsonl"))
    # A pi process in a directory is taken to hold that directory's newest session.
    busy = {os.path.realpath(p.cwd) for p in procscan.scan(_is_pi) if p.cwd}
    out: list[ExternalSession] = []
    for mtime, path, st in found[:limit]:
        sid = sid_of(path)
        try:
            summary = _CACHE.get(path, _summarize, st)
        except OSError:
            continue
        if sid is None or not summary.cwd:
            continue
        title = one_line_title(summary.title)
        where = os.path.realpath(summary.cwd)
        owned = where in busy
        busy.discard(where)
        out.append(
            ExternalSession(
                agent_session_id=sid,
                cwd=summary.cwd,
                title=title,
                updated_at=mtime,
                owned=owned,
            )
        )
    return out


class SessionParser(MirrorTurns):
    """Pi session entries -> blocks, sans-I/O. A user message opens a turn; an assistant
    message that stops for a reason other than a tool call closes it."""

    def __init__(self, sid: str) -> None:
        super().__init__(sid)
        self._seen = Dedupe()

    def feed(self, line: bytes) -> list[Block]:
        entry = loads(line)
        if entry is None or entry.get("type") != "message":
            return []
        ident = entry.get("id")
        if isinstance(ident, str) and not self._seen.first(ident):
            return []
        message = entry.get("message")
        if not isinstance(message, dict):
            return []
        role = message.get("role")
        eid = str(ident or "")
        if role == "user":
            text = _text(message.get("content")).strip()
            if not text:
                return []
            out = self._close("completed")
            self.turn_open = True
            return [*out, UserBlock(id=eid, text=text, source="terminal")]
        if role == "assistant":
            return self._assistant(eid, message)
        if role == "toolResult":
            return self._tool_result(message)
        return []

    def _assistant(self, eid: str, message: dict[str, Any]) -> list[Block]:
        self.turn_open = True
        out: list[Block] = []
        for n, part in enumerate(message.get("content") or []):
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text" and part.get("text"):
                out.append(TextBlock(id=f"{eid}:{n}", text=str(part["text"]), done=True))
            elif kind == "thinking" and part.get("thinking"):
                out.append(ThinkingBlock(id=f"{eid}:{n}", text=str(part["thinking"]), done=True))
            elif kind == "toolCall" and isinstance(part.get("id"), str):
                name = str(part.get("name") or "tool")
                args = part.get("arguments")
                args = args if isinstance(args, dict) else {}
                title = args.get("command") or args.get("path") or args.get("file_path")
                out.append(self._start_tool(part["id"], name, title, KINDS.get(name), args))
        reason = _END.get(str(message.get("stopReason") or ""))
        if reason is not None:
            out += self._close(reason)  # type: ignore[arg-type]
        return out

    def _tool_result(self, message: dict[str, Any]) -> list[Block]:
        call_id = message.get("toolCallId")
        if not isinstance(call_id, str):
            return []
        name = str(message.get("toolName") or "tool")
        failed = message.get("isError") is True
        return self._end_call(call_id, name, _text(message.get("content")), failed=failed)


def mirror(cwd: str, sid: str, base: Path | None = None) -> TranscriptMirror:
    return TranscriptMirror(found_once(lambda: session_path(sid, base)), SessionParser(sid))
