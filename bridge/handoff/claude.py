"""Claude Code sessions started in a terminal: listing, ownership, mirror, resume.

Files (``$CLAUDE_CONFIG_DIR``, default ``~/.claude``):

- ``projects/<slug>/<session>.jsonl``: the transcript, appended line by line. The slug cannot
  be decoded back into a path, so the cwd is read from the lines. Files pass 60 MB (every API
  request is snapshotted), so listing reads a bounded head and tail only.
- ``sessions/<pid>.json``: the live registry, written by every running Claude process at
  start-up (before any prompt) and removed at exit. A crash leaves a stale file and pids get
  reused, so an entry counts only while its pid runs *and* started at the recorded tick
  (``procStart``, or ``startedAt`` within a few seconds). The bridge's own headless children
  register too (``entrypoint: sdk-cli``); ``procscan.is_own`` skips them.

Lineage: a terminal process can move to another session id (``/clear``, ``/resume``) while it
runs. The registry shows the move (same pid, new ``sessionId``), so the module remembers which
process held a session; the session stays owned while that process lives, the mirror follows
it to the new transcript, and ``latest_sid`` answers the id the process held last.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from bridge.blocks import Block, SystemBlock, UserBlock
from bridge.handoff import procscan
from bridge.handoff.files import StatCache, head_lines, loads, tail_lines
from bridge.handoff.listing import MAX_LISTED, newest_first, one_line_title
from bridge.handoff.mirror import TranscriptMirror
from bridge.handoff.tail import Dedupe
from bridge.wire.agent_types import ExternalSession, ResumeCommand

#: ``startedAt`` (ms, written by Claude's JS) may trail the exec by this much.
STARTED_AT_SLACK_S = 10.0

_SID = re.compile(r"^[0-9a-fA-F-]{16,64}$")
#: Lines the mirror and the lister never need; recognised by their first bytes, never decoded.
_SKIP_PREFIXES = (
    b'{"type":"api-request',
    b'{"type":"file-history-snapshot',
    b'{"type":"queue-operation',
    b'{"type":"atis-latch',
    b'{"type":"cost-state',
    b'{"type":"tools-used',
)
_NOT_PROMPT = ("<command-", "<local-command-", "<system-reminder>", "Caveat: ", "<bash-")
_INTERRUPTED = "[Request interrupted by user"
_encode = msgspec.json.Encoder().encode


def config_dir() -> Path:
    value = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(value).expanduser() if value else Path.home() / ".claude"


def project_slug(cwd: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def transcript_path(sid: str, cwd: str | None = None, base: Path | None = None) -> Path | None:
    """Where session ``sid``'s transcript is (the slug dir first, then any project dir)."""
    if not _SID.match(sid):
        return None
    projects = (base or config_dir()) / "projects"
    if cwd:
        guess = projects / project_slug(cwd) / f"{sid}.jsonl"
        if guess.is_file():
            return guess
    for found in projects.glob(f"*/{sid}.jsonl"):
        return found
    return None


# ---- the live registry ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LiveClaude:
    pid: int
    start_ticks: int
    session_id: str
    cwd: str
    status: str
    entrypoint: str
    kind: str


def _start_matches(entry: dict[str, Any], pid: int, ticks: int) -> bool:
    proc_start = entry.get("procStart")
    if isinstance(proc_start, str | int) and str(proc_start).isdigit():
        return int(proc_start) == ticks
    started = entry.get("startedAt")
    if isinstance(started, int | float) and not isinstance(started, bool):
        real = procscan.started_at(pid)
        return real is None or abs(real - started / 1000.0) <= STARTED_AT_SLACK_S
    return True


def read_registry(base: Path | None = None, own: set[int] | None = None) -> list[LiveClaude]:
    """The registry entries whose process is alive, is who wrote the entry, and is not ours."""
    folder = (base or config_dir()) / "sessions"
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    here_ns = procscan.pid_namespace()
    out: list[LiveClaude] = []
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            entry = loads((folder / name).read_bytes())
        except OSError:
            continue
        if entry is None:
            continue
        pid, sid = entry.get("pid"), entry.get("sessionId")
        if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(sid, str):
            continue
        domain = entry.get("pidDomain")
        if isinstance(domain, str) and here_ns and not domain.endswith(here_ns):
            continue  # written in another pid namespace: its pid means nothing here
        stat = procscan.read_stat(pid)
        if stat is None or stat.exited or not _start_matches(entry, pid, stat.start_ticks):
            continue
        if procscan.is_own(pid, own):
            continue
        out.append(
            LiveClaude(
                pid=pid,
                start_ticks=stat.start_ticks,
                session_id=sid,
                cwd=str(entry.get("cwd") or ""),
                status=str(entry.get("status") or ""),
                entrypoint=str(entry.get("entrypoint") or ""),
                kind=str(entry.get("kind") or ""),
            )
        )
    return out


class _Lineage:
    """Which terminal process held which session, learned from the registry over time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: dict[str, tuple[int, int]] = {}  # sid -> (pid, start ticks)
        self._head: dict[str, str] = {}  # sid -> the sid its owner held last
        self._cwd_head: dict[str, tuple[str, float]] = {}

    def observe(self, sid: str, live: list[LiveClaude]) -> LiveClaude | None:
        """The live process that holds ``sid`` or the session it moved on to, if any."""
        with self._lock:
            for entry in live:
                if entry.session_id == sid:
                    self._owner[sid] = (entry.pid, entry.start_ticks)
                    self._head[sid] = sid
                    return entry
            known = self._owner.get(sid)
            if known is None:
                return None
            for entry in live:
                if (entry.pid, entry.start_ticks) == known:
                    self._head[sid] = entry.session_id
                    self._owner[entry.session_id] = known
                    if entry.cwd:
                        key = os.path.realpath(entry.cwd)
                        self._cwd_head[key] = (entry.session_id, time.time())
                    return entry
            # Claude removes its registry file first and exits after: until the process is
            # really gone it may still write, so it still owns the session.
            pid, ticks = known
            if procscan.alive(pid, ticks) and not procscan.is_own(pid):
                return LiveClaude(
                    pid=pid,
                    start_ticks=ticks,
                    session_id=self._head.get(sid, sid),
                    cwd="",
                    status="exiting",
                    entrypoint="",
                    kind="",
                )
            del self._owner[sid]
            return None

    def head(self, sid: str) -> str:
        with self._lock:
            return self._head.get(sid, sid)

    def head_for_cwd(self, cwd: str) -> str | None:
        with self._lock:
            found = self._cwd_head.get(os.path.realpath(cwd))
        return found[0] if found else None


LINEAGE = _Lineage()


def owner(sid: str, base: Path | None = None) -> LiveClaude | None:
    """The terminal process that owns ``sid`` (directly or through its lineage), if any."""
    return LINEAGE.observe(sid, read_registry(base))


def is_owned(cwd: str, sid: str | None, base: Path | None = None) -> bool:
    """A session with no id yet cannot collide with anything; otherwise ask the registry."""
    if not sid:
        return False
    return owner(sid, base) is not None


def latest_sid(cwd: str) -> str | None:
    """The session the terminal in ``cwd`` held last, when it moved off the one we parked."""
    return LINEAGE.head_for_cwd(cwd)


def resume_command(sid: str, cwd: str | None, binary: str = "claude") -> ResumeCommand | None:
    if not _SID.match(sid):
        return None
    return ResumeCommand(argv=[binary, "--resume", sid], cwd=cwd or os.getcwd())


# ---- listing ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Summary:
    cwd: str
    first_prompt: str
    tail_title: str
    last_prompt: str


def _skip(line: bytes) -> bool:
    return line.startswith(_SKIP_PREFIXES) or b'"attachment":{' in line[:200]


def prompt_text(entry: dict[str, Any]) -> str | None:
    """The text a person typed, from a transcript ``user`` line (None for tool results,
    meta lines, command wrappers and other lines no one typed)."""
    if entry.get("type") != "user" or entry.get("isMeta") or entry.get("isSidechain"):
        return None
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        if any(isinstance(c, dict) and c.get("type") == "tool_result" for c in content):
            return None
        parts = [
            c["text"]
            for c in content
            if isinstance(c, dict) and c.get("type") == "text" and isinstance(c.get("text"), str)
        ]
    else:
        return None
    text = "\n".join(p for p in parts if p).strip()
    if not text or text.startswith(_NOT_PROMPT):
        return None
    return text


#: transcript entries whose ``uuid`` is a link of the conversation's chain
_CHAIN = ("user", "assistant", "system", "attachment")


def turn_end_uuid(lines: Iterator[bytes], turns: int) -> str | None:
    """The ``uuid`` of the last chain entry of the first ``turns`` turns (the turns typed as
    prompts) of a transcript's ``lines``, for ``--resume-session-at``; None when the transcript
    holds no more than that (a fork then keeps all of it)."""
    prompts = 0
    last: str | None = None
    for line in lines:
        entry = loads(line)
        if entry is None or entry.get("isSidechain") or entry.get("type") not in _CHAIN:
            continue
        if prompt_text(entry) is not None:
            prompts += 1
            if prompts > turns:
                return last
        uuid = entry.get("uuid")
        if isinstance(uuid, str) and uuid:
            last = uuid
    return None


def _summarize(path: Path, previous: _Summary | None) -> _Summary:
    if previous is not None and previous.cwd and previous.first_prompt:
        cwd, first = previous.cwd, previous.first_prompt
    else:
        cwd, first = "", ""
        for line in head_lines(path):
            if _skip(line):
                continue
            entry = loads(line)
            if entry is None:
                continue
            if not cwd and isinstance(entry.get("cwd"), str):
                cwd = str(entry["cwd"])
            if not first:
                first = prompt_text(entry) or ""
            if cwd and first:
                break
    tail_title = last_prompt = ""
    for line in tail_lines(path):
        if line.startswith(_SKIP_PREFIXES):
            continue
        entry = loads(line)
        if entry is None:
            continue
        kind = entry.get("type")
        if kind == "custom-title" and isinstance(entry.get("customTitle"), str):
            tail_title = str(entry["customTitle"])
        elif kind in ("ai-title", "summary") and not tail_title:
            value = entry.get("aiTitle") or entry.get("summary") or entry.get("title")
            if isinstance(value, str):
                tail_title = value
        elif kind == "last-prompt" and isinstance(entry.get("lastPrompt"), str):
            last_prompt = str(entry["lastPrompt"])
        if not cwd and isinstance(entry.get("cwd"), str):
            cwd = str(entry["cwd"])
    return _Summary(cwd, first, tail_title, last_prompt)


_CACHE: StatCache[_Summary] = StatCache()


def _transcripts(dirs: list[os.DirEntry[str]]) -> Iterator[Path]:
    """The session transcripts (``<session id>.jsonl``) in the project directories ``dirs``."""
    for d in dirs:
        if not d.is_dir(follow_symlinks=False):
            continue
        try:
            files = list(os.scandir(d.path))
        except OSError:
            continue
        for f in files:
            if f.name.endswith(".jsonl") and _SID.match(f.name[:-6]):
                yield Path(f.path)


def scan(base: Path | None = None, limit: int = MAX_LISTED) -> list[ExternalSession]:
    """Transcripts on disk, newest first, with cwd, title, last activity and ownership."""
    projects = (base or config_dir()) / "projects"
    try:
        dirs = list(os.scandir(projects))
    except OSError:
        return []
    found = newest_first(_transcripts(dirs))
    live = {e.session_id: e for e in read_registry(base)}
    out: list[ExternalSession] = []
    for mtime, path, st in found[:limit]:
        try:
            summary = _CACHE.get(path, _summarize, st)
        except OSError:
            continue
        if not summary.cwd:
            continue
        sid = path.stem
        owner_entry = live.get(sid)
        title = summary.tail_title or summary.first_prompt or summary.last_prompt
        out.append(
            ExternalSession(
                agent_session_id=sid,
                cwd=summary.cwd,
                title=one_line_title(title),
                updated_at=mtime,
                owned=owner_entry is not None,
                owner_pid=owner_entry.pid if owner_entry else None,
            )
        )
    return out


# ---- the mirror ----------------------------------------------------------------------------


class TranscriptParser:
    """Transcript lines -> blocks, sans-I/O. A person's prompt opens a turn (``user`` block,
    ``source: "terminal"``); the end of the model's answer (``stop_reason`` ``end_turn`` or a
    ``turn_duration`` line) closes it with ``session_end``. Tool calls, results and diffs go
    through the stream-json parser, whose shapes the transcript shares."""

    def __init__(self, sid: str, cwd: str | None = None) -> None:
        from bridge.parsers.claude import ClaudeParser

        self.sid = sid
        self._cwd = cwd
        self._parser_cls = ClaudeParser
        self._inner = ClaudeParser(cwd=cwd, session_id=sid)
        self._seen = Dedupe()
        self.turn_open = False

    def feed(self, line: bytes) -> list[Block]:
        if _skip(line):
            return []
        entry = loads(line)
        if entry is None or entry.get("isSidechain"):
            return []
        uuid = entry.get("uuid")
        if isinstance(uuid, str) and not self._seen.first(uuid):
            return []
        kind = entry.get("type")
        if kind == "user":
            return self._user(entry, uuid if isinstance(uuid, str) else None)
        if kind == "assistant":
            out = self._open_turn()
            out += self._inner.feed(_encode({"type": "assistant", "message": entry.get("message")}))
            message = entry.get("message")
            stop = message.get("stop_reason") if isinstance(message, dict) else None
            if stop in ("end_turn", "stop_sequence", "max_tokens", "refusal"):
                out += self._close_turn("completed")
            return out
        if kind == "system":
            subtype = entry.get("subtype")
            if subtype == "turn_duration":
                return self._close_turn("completed")
            if subtype == "compact_boundary":
                return [SystemBlock(code="compacted", text="the terminal compacted the session")]
        return []

    def _user(self, entry: dict[str, Any], uuid: str | None) -> list[Block]:
        text = prompt_text(entry)
        if text is not None:
            if text.startswith(_INTERRUPTED):
                return self._close_turn("interrupted")
            out = self._close_turn("completed")
            out.append(UserBlock(id=uuid or f"t-{len(text)}", text=text, source="terminal"))
            self.turn_open = True
            return out
        message = entry.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        results = isinstance(content, list) and any(
            isinstance(c, dict) and c.get("type") == "tool_result" for c in content
        )
        if entry.get("isMeta") or not results:
            return []  # slash-command wrappers, caveats, reminders: nothing anyone typed
        line = {"type": "user", "message": message}
        if "toolUseResult" in entry:
            line["tool_use_result"] = entry["toolUseResult"]
        out = self._open_turn()
        return out + self._inner.feed(_encode(line))

    def _open_turn(self) -> list[Block]:
        self.turn_open = True
        return []

    def _close_turn(self, reason: Any) -> list[Block]:
        if not self.turn_open:
            return []
        self.turn_open = False
        return self._inner.close_turn(reason)

    def switched(self, path: Path) -> list[Block]:
        out = self._close_turn("completed")
        self.sid = path.stem
        self._inner = self._parser_cls(cwd=self._cwd, session_id=self.sid)
        out.append(
            SystemBlock(
                code="lineage",
                text=f"the terminal continued in session {self.sid}",
                data={"agent_session_id": self.sid},
            )
        )
        return out

    def close(self) -> list[Block]:
        return self._close_turn("interrupted")


def mirror(cwd: str, sid: str, base: Path | None = None) -> TranscriptMirror:
    """Follow ``sid`` (and where its terminal process moves) from the transcript's end now."""

    def resolve() -> Path | None:
        head = LINEAGE.head(sid)
        return transcript_path(head, cwd, base) or (
            transcript_path(sid, cwd, base) if head != sid else None
        )

    return TranscriptMirror(resolve, TranscriptParser(sid, cwd))
