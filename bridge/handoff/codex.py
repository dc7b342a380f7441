"""Codex sessions started in a terminal: listing, ownership, mirror, resume.

Files (``$CODEX_HOME``, default ``~/.codex``):

- ``sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl``: one file per thread, appended
  line by line; ``codex resume`` and ``codex exec resume`` append to the same file and keep
  the id. The first line (``session_meta``) carries the cwd.
- ``thread-writer-locks/<thread id>.lock``: Codex (0.171 here) takes an exclusive ``flock``
  on it while a process has the thread loaded, and refuses a second writer ("already has an
  active writer"). That lock is the ownership signal: its holder, read from ``/proc/locks``,
  owns the thread unless it is one of the daemon's own children. Without a lock directory
  (older Codex) a ``codex`` process holding the rollout open counts instead.

The interactive TUI normally talks to a shared background app-server (the "managed daemon",
``codex app-server --managed-daemon``) that holds the lock and keeps the thread loaded for
about a minute after the TUI exits; the bridge waits for it. ``codex --no-daemon`` makes the
TUI hold the thread itself, so the resume command offered for a handoff uses it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.blocks import (
    Block,
    TextBlock,
    ThinkingBlock,
    UserBlock,
)
from bridge.handoff import procscan
from bridge.handoff.files import StatCache, head_lines, loads
from bridge.handoff.listing import MAX_LISTED, newest_first, one_line_title
from bridge.handoff.mirror import TranscriptMirror, found_once
from bridge.handoff.tail import Dedupe
from bridge.handoff.turns import MirrorTurns
from bridge.wire.agent_types import ExternalSession, ResumeCommand

_THREAD = re.compile(r"([0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12})$")
_NOT_PROMPT = ("<environment_context>", "<user_instructions>", "<skills_instructions>", "# AGENTS")
_EXIT = re.compile(r"Process exited with code (-?\d+)")
_is_codex = procscan.argv_names("codex")


def home() -> Path:
    value = os.environ.get("CODEX_HOME")
    return Path(value).expanduser() if value else Path.home() / ".codex"


def thread_of(path: Path) -> str | None:
    """The thread id at the end of a rollout file's name."""
    m = _THREAD.search(path.stem)
    return m.group(1) if m else None


def rollouts(base: Path | None = None) -> list[tuple[float, Path, os.stat_result]]:
    """Every rollout file with its stat, newest first."""
    return newest_first(((base or home()) / "sessions").glob("*/*/*/rollout-*.jsonl"))


def rollout_path(sid: str, base: Path | None = None) -> Path | None:
    if not _THREAD.search(sid):
        return None
    root = (base or home()) / "sessions"
    for path in root.glob(f"*/*/*/rollout-*-{sid}.jsonl"):
        return path
    return None


# ---- ownership -------------------------------------------------------------------------------


def owner_pid(sid: str, base: Path | None = None, own: set[int] | None = None) -> int | None:
    """The pid of a process (not the bridge's) that has thread ``sid`` loaded, if any."""
    codex_home = base or home()
    lock = codex_home / "thread-writer-locks" / f"{sid}.lock"
    if lock.parent.is_dir():
        for pid in sorted(procscan.lock_holders(lock)):
            if procscan.alive(pid) and not procscan.is_own(pid, own):
                return pid
        return None
    # Older Codex without writer locks: a codex process holding the rollout open.
    rollout = rollout_path(sid, codex_home)
    if rollout is None:
        return None
    wanted = str(rollout)
    for proc in procscan.scan(_is_codex, with_files=True, own=own):
        if wanted in proc.files:
            return proc.pid
    return None


def is_owned(cwd: str, sid: str | None, base: Path | None = None) -> bool:
    if not sid:
        return False
    return owner_pid(sid, base) is not None


def resume_command(sid: str, cwd: str | None, binary: str = "codex") -> ResumeCommand | None:
    if not _THREAD.search(sid):
        return None
    # --no-daemon: the TUI holds the thread itself and lets go the moment it exits.
    return ResumeCommand(argv=[binary, "--no-daemon", "resume", sid], cwd=cwd or os.getcwd())


# ---- listing ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Summary:
    sid: str
    cwd: str
    title: str
    source: str


def _message_text(payload: dict[str, Any]) -> str | None:
    """A person's prompt from ``item_completed``/``user_message`` (None for anything else)."""
    kind = payload.get("type")
    if kind == "item_completed":
        item = payload.get("item")
        if not isinstance(item, dict) or item.get("type") != "UserMessage":
            return None
        parts = [
            c["text"]
            for c in item.get("content") or []
            if isinstance(c, dict) and isinstance(c.get("text"), str)
        ]
        text = "\n".join(parts).strip()
    elif kind == "user_message":
        message = payload.get("message")
        text = message.strip() if isinstance(message, str) else ""
    else:
        return None
    if not text or text.startswith(_NOT_PROMPT):
        return None
    return text


def _summarize(path: Path, previous: _Summary | None) -> _Summary:
    if previous is not None and previous.cwd and previous.title:
        return previous
    sid, cwd, title, source = thread_of(path) or "", "", "", ""
    for n, line in enumerate(head_lines(path)):
        entry = loads(line)
        if entry is None:
            continue
        payload = entry.get("payload")
        if not isinstance(payload, dict):
            continue
        if entry.get("type") == "session_meta":
            cwd = str(payload.get("cwd") or cwd)
            sid = str(payload.get("id") or sid)
            source = str(payload.get("source") or "")
        elif entry.get("type") == "event_msg" and not title:
            title = _message_text(payload) or ""
        if (cwd and title) or n > 2000:
            break
    return _Summary(sid, cwd, title, source)


_CACHE: StatCache[_Summary] = StatCache()


def scan(base: Path | None = None, limit: int = MAX_LISTED) -> list[ExternalSession]:
    codex_home = base or home()
    out: list[ExternalSession] = []
    for mtime, path, st in rollouts(codex_home)[:limit]:
        try:
            summary = _CACHE.get(path, _summarize, st)
        except OSError:
            continue
        if not summary.cwd or not summary.sid:
            continue
        pid = owner_pid(summary.sid, codex_home)
        title = one_line_title(summary.title)
        out.append(
            ExternalSession(
                agent_session_id=summary.sid,
                cwd=summary.cwd,
                title=title,
                updated_at=mtime,
                owned=pid is not None,
                owner_pid=pid,
            )
        )
    return out


# ---- the mirror ------------------------------------------------------------------------------


def _json_object(text: Any) -> dict[str, Any]:
    if isinstance(text, str):
        value = loads(text.encode())
        if value is not None:
            return value
    return {}


class RolloutParser(MirrorTurns):
    """Rollout lines -> blocks, sans-I/O. ``task_started`` opens a turn, ``task_complete``
    or ``turn_aborted`` closes it; prompts, answers, reasoning summaries and tool calls in
    between. Both the 0.171 ``item_completed`` events and the older ``user_message``/
    ``agent_message`` events are read; a text seen twice in one turn is shown once."""

    def __init__(self, sid: str) -> None:
        super().__init__(sid)
        self._texts: set[tuple[str, str]] = set()
        self._seen = Dedupe()
        self._n = 0

    def feed(self, line: bytes) -> list[Block]:
        entry = loads(line)
        if entry is None:
            return []
        payload = entry.get("payload")
        if not isinstance(payload, dict):
            return []
        kind, ptype = entry.get("type"), payload.get("type")
        if kind == "event_msg":
            return self._event(payload, ptype)
        if kind == "response_item":
            return self._item(payload, ptype)
        return []

    def _once(self, kind: str, text: str) -> bool:
        key = (kind, text)
        if key in self._texts:
            return False
        self._texts.add(key)
        return True

    def _next_id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self._n}"

    def _event(self, p: dict[str, Any], ptype: Any) -> list[Block]:
        if ptype == "task_started":
            out = self._close("completed")
            self.turn_open = True
            return out
        if ptype in ("task_complete", "turn_complete"):
            return self._close("completed")
        if ptype == "turn_aborted":
            return self._close("interrupted")
        prompt = _message_text(p)
        if prompt is not None:
            if not self._once("user", prompt):
                return []
            self.turn_open = True
            item = p.get("item")
            ident = item.get("id") if isinstance(item, dict) else None
            return [
                UserBlock(
                    id=str(ident or self._next_id("codex-user")), text=prompt, source="terminal"
                )
            ]
        if ptype == "item_completed":
            item = p.get("item")
            if not isinstance(item, dict):
                return []
            itype = item.get("type")
            if itype == "AgentMessage":
                parts = [
                    c["text"]
                    for c in item.get("content") or []
                    if isinstance(c, dict) and isinstance(c.get("text"), str)
                ]
                return self._text("text", "\n".join(parts), item.get("id"))
            if itype == "Reasoning":
                summary = item.get("summary_text")
                if isinstance(summary, list):
                    text = "\n".join(s for s in summary if isinstance(s, str))
                    return self._text("thinking", text, item.get("id"))
            return []
        if ptype == "agent_message":
            return self._text("text", str(p.get("message") or ""), None)
        if ptype == "agent_reasoning":
            return self._text("thinking", str(p.get("text") or ""), None)
        return []

    def _text(self, kind: str, text: str, ident: Any) -> list[Block]:
        if not text.strip() or not self._once(kind, text):
            return []
        self.turn_open = True
        block_id = str(ident or self._next_id(f"codex-{kind}"))
        if kind == "thinking":
            return [ThinkingBlock(id=block_id, text=text, done=True)]
        return [TextBlock(id=block_id, text=text, done=True)]

    def _item(self, p: dict[str, Any], ptype: Any) -> list[Block]:
        if ptype in ("function_call", "custom_tool_call", "local_shell_call"):
            call_id = p.get("call_id") or p.get("id")
            if not isinstance(call_id, str) or not self._seen.first(("call", call_id)):
                return []
            name = str(p.get("name") or ("shell" if ptype == "local_shell_call" else "tool"))
            if ptype == "function_call":
                args = _json_object(p.get("arguments"))
            elif ptype == "custom_tool_call":
                args = {"input": p.get("input")}
            else:
                action = p.get("action")
                args = action if isinstance(action, dict) else {}
            command = args.get("cmd") or args.get("command")
            title = " ".join(map(str, command)) if isinstance(command, list) else command
            kind = "edit" if name == "apply_patch" else "execute" if command else None
            return [self._start_tool(call_id, name, title, kind, args)]
        if ptype in ("function_call_output", "custom_tool_call_output"):
            call_id = p.get("call_id")
            if not isinstance(call_id, str) or not self._seen.first(("out", call_id)):
                return []
            output = p.get("output")
            if isinstance(output, dict):
                output = output.get("content") or output.get("output")
            text = output if isinstance(output, str) else ""
            code = _EXIT.search(text)
            failed = code is not None and code.group(1) != "0"
            return self._end_call(call_id, "tool", text, failed=failed)
        return []

    def _turn_closed(self) -> None:
        self._texts.clear()


def mirror(cwd: str, sid: str, base: Path | None = None) -> TranscriptMirror:
    """Follow thread ``sid``'s rollout from its end now (waits for the file if it is new)."""

    # A thread's rollout never moves, so the glob runs only until it is found.
    return TranscriptMirror(found_once(lambda: rollout_path(sid, base)), RolloutParser(sid))
