"""GitHub Copilot CLI sessions started in a terminal: listing, ownership and the read-only mirror.

Files (``$COPILOT_HOME``, default ``~/.copilot``), one folder per session,
``session-state/<id>/``: ``workspace.yaml`` (``id``, ``cwd``, ``name``: flat ``key: value``
lines), ``events.jsonl`` (the transcript: one ``{"type", "data", "id", …}`` event a line,
appended) and, while a Copilot process holds the session, ``inuse.<pid>.lock``. ``copilot
--resume <id>`` continues the same folder, so the id never changes and a tail sees every event.

Events a mirror reads (Copilot CLI 1.0.102): ``user.message`` (``content``), ``assistant.message``
(``content``, ``reasoningText``, ``toolRequests``), ``tool.execution_complete`` (``success``,
``result.content``), ``assistant.turn_end`` (one per model call: the turn ends after a call that
answered without asking for a tool), ``abort`` (an interrupt) and ``session.error`` (the model
call failed for good; it follows that call's ``assistant.turn_end``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from bridge.blocks import Block, TextBlock, ThinkingBlock, UserBlock
from bridge.handoff import procscan
from bridge.handoff.files import StatCache, head_lines, loads
from bridge.handoff.listing import MAX_LISTED, newest_first, one_line_title
from bridge.handoff.mirror import TranscriptMirror, found_once
from bridge.handoff.tail import Dedupe
from bridge.handoff.turns import MirrorTurns
from bridge.parsers.failures import FailureReport, failure_block
from bridge.wire.agent_types import ExternalSession

_SID = re.compile(r"[A-Za-z0-9_-]{1,200}")
_INUSE = re.compile(r"inuse\.(\d+)\.lock")
#: Copilot's tools by the ACP kind the bridge shows them as
KINDS = {
    "bash": "execute",
    "view": "read",
    "create": "edit",
    "edit": "edit",
    "grep": "search",
    "glob": "search",
}
TITLE_KEYS = ("command", "path", "pattern")


def copilot_home(env: dict[str, str] | None = None) -> Path:
    """``$COPILOT_HOME``, else ``~/.copilot`` (of ``env``, default the daemon's environment)."""
    env = dict(os.environ) if env is None else env
    if env.get("COPILOT_HOME"):
        return Path(env["COPILOT_HOME"]).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".copilot"


def session_dir(sid: str, home: Path | None = None) -> Path | None:
    if not _SID.fullmatch(sid):
        return None
    return (home or copilot_home()) / "session-state" / sid


def holders(sid: str, home: Path | None = None) -> list[int]:
    """The live processes that hold Copilot session ``sid`` (its ``inuse.<pid>.lock`` files)."""
    folder = session_dir(sid, home)
    try:
        names = os.listdir(folder) if folder is not None else []
    except OSError:
        return []
    pids: list[int] = []
    for name in names:
        found = _INUSE.fullmatch(name)
        if found is None:
            continue
        pid = int(found.group(1))
        stat = procscan.read_stat(pid)
        if stat is not None and not stat.exited:  # a killed holder leaves its lock behind
            pids.append(pid)
    return pids


def is_owned(sid: str | None, home: Path | None = None) -> bool:
    """Whether a Copilot process the daemon did not start holds session ``sid``."""
    if sid is None:
        return False
    return any(not procscan.is_own(pid) for pid in holders(sid, home))


# ---- listing ----------------------------------------------------------------------------------


def _workspace(path: Path, previous: dict[str, str] | None) -> dict[str, str]:
    """The flat ``key: value`` lines of a ``workspace.yaml`` (Copilot writes no nesting)."""
    if previous is not None and previous.get("name"):
        return previous
    out: dict[str, str] = {}
    for raw in head_lines(path):
        key, sep, value = raw.decode("utf-8", "replace").partition(":")
        if sep and key.strip() in ("id", "cwd", "name"):
            out[key.strip()] = value.strip().strip("'\"")
    return out


_CACHE: StatCache[dict[str, str]] = StatCache()


def scan(home: Path | None = None, limit: int = MAX_LISTED) -> list[ExternalSession]:
    base = (home or copilot_home()) / "session-state"
    out: list[ExternalSession] = []
    for mtime, events, _ in newest_first(base.glob("*/events.jsonl"))[:limit]:
        folder = events.parent
        meta = folder / "workspace.yaml"
        try:
            workspace = _CACHE.get(meta, _workspace, meta.stat())
        except OSError:
            continue
        sid, cwd = workspace.get("id") or folder.name, workspace.get("cwd")
        if sid != folder.name or not cwd:
            continue
        out.append(
            ExternalSession(
                agent_session_id=sid,
                cwd=cwd,
                title=one_line_title(workspace.get("name") or ""),
                updated_at=mtime,
                owned=is_owned(sid, home),
            )
        )
    return out


# ---- the mirror -------------------------------------------------------------------------------


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


class EventsParser(MirrorTurns):
    """``events.jsonl`` lines -> blocks, sans-I/O. A user message opens a turn; the end of a
    model call that asked for no tool closes it."""

    def __init__(self, sid: str) -> None:
        super().__init__(sid)
        self._seen = Dedupe()
        #: the model call under way answered, and whether it asked for tools
        self._answered = False
        self._asked_tools = False

    def feed(self, line: bytes) -> list[Block]:
        event = loads(line)
        if event is None:
            return []
        ident = event.get("id")
        if isinstance(ident, str) and not self._seen.first(ident):
            return []
        data = event.get("data")
        if not isinstance(data, dict):
            return []
        kind = event.get("type")
        eid = _str(ident)
        if kind == "user.message":
            text = _str(data.get("content")).strip()
            if not text:
                return []
            out = self._close("completed")
            self.turn_open = True
            return [*out, UserBlock(id=eid, text=text, source="terminal")]
        if kind == "assistant.message":
            return self._assistant(eid, data)
        if kind == "tool.execution_complete":
            call_id = data.get("toolCallId")
            if not isinstance(call_id, str):
                return []
            result = data.get("result")
            content = _str(result.get("content")) if isinstance(result, dict) else ""
            failed = data.get("success") is False
            return self._end_call(call_id, "tool", content, failed=failed)
        if kind == "assistant.turn_end":
            done, self._answered = self._answered and not self._asked_tools, False
            return self._close("completed") if done else []
        if kind == "abort":
            return self._close("interrupted")
        if kind == "session.error" and self.turn_open:
            message = _str(data.get("message")) or "the model call failed"
            status = data.get("statusCode")
            report = FailureReport(
                message=message, status=status if isinstance(status, int) else None
            )
            return [failure_block("copilot", report), *self._close("error")]
        return []

    def _assistant(self, eid: str, data: dict[str, Any]) -> list[Block]:
        self.turn_open = True
        self._answered = True
        out: list[Block] = []
        thinking = _str(data.get("reasoningText"))
        if thinking:
            out.append(ThinkingBlock(id=f"{eid}:thinking", text=thinking, done=True))
        text = _str(data.get("content"))
        if text:
            out.append(TextBlock(id=f"{eid}:text", text=text, done=True))
        requests = data.get("toolRequests")
        requests = requests if isinstance(requests, list) else []
        self._asked_tools = False
        for request in requests:
            if not isinstance(request, dict) or not isinstance(request.get("toolCallId"), str):
                continue
            self._asked_tools = True
            name = _str(request.get("name")) or "tool"
            args = request.get("arguments")
            args = args if isinstance(args, dict) else {}
            title = next((args[k] for k in TITLE_KEYS if isinstance(args.get(k), str)), name)
            out.append(self._start_tool(request["toolCallId"], name, title, KINDS.get(name), args))
        return out


def mirror(cwd: str, sid: str, home: Path | None = None) -> TranscriptMirror | None:
    folder = session_dir(sid, home)
    if folder is None:
        return None
    events = folder / "events.jsonl"
    return TranscriptMirror(
        found_once(lambda: events if events.exists() else None), EventsParser(sid)
    )
