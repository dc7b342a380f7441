"""From committed events to notices: what is worth calling a person back for.

Sans-I/O: :class:`Detector` is fed each committed event of a session (its block as stored JSON)
and answers a :class:`Notice` when one of the four kinds happens:

- ``permission``: a ``permission_request`` waits; the body names the tool and its command or
  path (from the ``tool_call`` it refers to), the notice carries the request's options;
- ``turn_end``: a turn started by the bridge (its ``user`` block) that ran at least
  ``min_turn_s`` ended ``completed``; the body has its duration and the answer's last line;
- ``error``: a turn ended with an ``error`` block that is not retried: one that is not
  ``retryable`` notifies when the turn's ``session_end`` comes; a ``retryable`` one waits for
  what follows, and a ``system`` block ``retrying`` cancels it, while the session leaving
  ``running`` without one sends it;
- ``handoff``: a terminal took the session (the writer became ``terminal``) or gave it back
  (``parked`` -> ``idle``);
- ``limit``: the agent reported a usage window used up (a ``limits`` block, ``reached``); the
  notice carries ``resets_at``, and the notifier says "can run again" when that time comes.

Most events are deltas; they are recognised by the start of their JSON (the block's ``type``
is its first field) and never decoded.
"""

from __future__ import annotations

import os
import socket
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import msgspec

from bridge.util.redact import redact

BODY_MAX = 240
TITLE_MAX = 120
#: Tool calls remembered per session, to describe the permission request that names one.
TOOLS_KEPT = 64
#: The newest text deltas kept per session, undecoded: the answer's last line is in them.
TEXT_KEPT = 64
#: After ``session.attach`` adopts a session a terminal runs, its parking is not a handoff.
ATTACH_QUIET_S = 5.0
#: Error codes that need nobody: the turn was stopped on purpose (by the person, or by the
#: daemon shutting down), or the daemon repaired the agent's output.
QUIET_ERRORS = frozenset({"interrupted", "interrupt_forced", "adapter_contract"})

_decode = msgspec.json.Decoder(dict[str, Any])
_PREFIXES = {
    kind: b'{"type":"' + kind.encode() + b'"'
    for kind in ("user", "text", "tool_call", "permission_request", "system", "error", "limits")
}
_PREFIXES["session_end"] = b'{"type":"session_end"'
_INTERESTING = tuple(_PREFIXES.values())
_TEXT = _PREFIXES["text"]


class Option(msgspec.Struct, kw_only=True):
    id: str
    label: str
    kind: str


class Notice(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The notification payload (Web Push carries it as JSON)."""

    kind: str
    title: str
    body: str
    session: str
    agent: str
    url: str
    request_id: str | None = None
    options: list[Option] | None = None
    #: How many notices this one stands for, when later ones were folded into it.
    count: int = 1
    #: The workstation the daemon runs on (``[relay] name``, else the host name): a person
    #: with several workstations in one client sees which one calls; the title starts with it.
    workstation: str = ""
    #: the page's id of this workstation (``relay:HOST``), for a browser that subscribed
    #: through the relay: a tap opens it there, and an answer goes through it
    ws: str = ""
    #: a ``limit`` notice's window and when it resets (ISO 8601), when the agent said
    window: str | None = None
    resets_at: str | None = None


WORKSTATION_MAX = 40


def workstation_name(config_name: str) -> str:
    """The name notifications give this workstation: the configured one, else the host's."""
    return clean(config_name.strip() or socket.gethostname() or "agent-bridge", WORKSTATION_MAX)


def with_workstation(notice: Notice, workstation: str) -> Notice:
    """``notice`` named after ``workstation`` (once): in the payload and in front of the title."""
    if workstation and not notice.workstation:
        notice.workstation = workstation
        notice.title = f"{workstation} · {notice.title}"
    return notice


def sample_notice(kind: str, url: str, workstation: str) -> Notice:
    """What ``notify.test`` and ``agent-bridge notify test`` send: a ``kind`` notice that says
    the channel works."""
    notice = Notice(
        kind=kind,
        title="agent-bridge test notification",
        body=f"A test of the {kind} notification: this channel works.",
        session="test",
        agent="agent-bridge",
        url=url,
    )
    return with_workstation(notice, workstation)


@dataclass
class SessionInfo:
    agent: str
    cwd: str
    title: str = ""
    #: the agent's display name (``Claude Code``), else its id is said
    agent_name: str = ""


@dataclass
class _Track:
    turn_start: float | None = None
    texts: deque[bytes] = field(default_factory=lambda: deque(maxlen=TEXT_KEPT))
    tools: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)
    error: dict[str, Any] | None = None
    #: a retryable error whose turn ended: sent unless a retry follows
    held_error: dict[str, Any] | None = None
    state: str | None = None
    writer: str | None = None
    #: when the bridge adopted the session (``attached``): a terminal owning it then is no news
    attached_at: float | None = None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def clean(text: str, limit: int) -> str:
    """Redacted like the logs, on one line, at most ``limit`` characters."""
    return shorten(redact(text), limit)


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {sec} s" if sec else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


#: Input keys that say what a tool does, in the order they are looked for.
TOOL_KEYS = ("command", "cmd", "file_path", "path", "filePath", "url", "pattern", "query")


def _tool_brief(block: dict[str, Any]) -> dict[str, Any]:
    """What a permission notice needs of a tool call, and no more (a Write's content can be
    megabytes; 64 of them per session would be kept otherwise)."""
    args = _dict(block.get("input"))
    brief = {k: args[k] for k in TOOL_KEYS if k in args}
    for key, value in brief.items():
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        brief[key] = str(value)[: BODY_MAX * 2]
    return {"name": block.get("name"), "title": block.get("title"), "input": brief}


def tool_summary(tool: dict[str, Any] | None, fallback: str) -> str:
    """The tool and its command or path: ``Bash: npm test``, ``Write: src/app.py``."""
    if tool is None:
        return fallback or "a tool"
    name = str(tool.get("name") or "tool")
    args = _dict(tool.get("input"))
    for key in TOOL_KEYS:
        value = args.get(key)
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        if isinstance(value, str) and value.strip():
            return f"{name}: {value.strip()}"
    title = tool.get("title")
    return f"{name}: {title}" if isinstance(title, str) and title else (fallback or name)


class Detector:
    def __init__(self, min_turn_s: float, url_of: Any) -> None:
        self.min_turn_s = min_turn_s
        self.url_of = url_of
        self._tracks: dict[str, _Track] = {}

    def forget(self, session: str) -> None:
        self._tracks.pop(session, None)

    def feed(self, session: str, info: SessionInfo, ts: float, block_json: bytes) -> Notice | None:
        if not block_json.startswith(_INTERESTING):
            return None
        track = self._tracks.get(session)
        if track is None:
            track = self._tracks[session] = _Track()
        if block_json.startswith(_TEXT):
            track.texts.append(block_json)  # decoded only when the turn ends
            return None
        try:
            block = _decode.decode(block_json)
        except msgspec.DecodeError:
            return None
        kind = block.get("type")
        if kind == "user":
            if block.get("source", "bridge") == "bridge":
                track.turn_start = ts
                track.texts.clear()
                track.error = track.held_error = None
            return None
        if kind == "tool_call":
            tid = str(block.get("id"))
            track.tools[tid] = _tool_brief(block)
            track.tools.move_to_end(tid)
            while len(track.tools) > TOOLS_KEPT:
                track.tools.popitem(last=False)
            return None
        if kind == "permission_request":
            return self._permission(session, info, track, block)
        if kind == "error":
            if block.get("code") not in QUIET_ERRORS:
                track.error = block
            return None
        if kind == "session_end":
            return self._turn_end(session, info, track, block, ts)
        if kind == "system":
            return self._system(session, info, track, block, ts)
        if kind == "limits":
            return self._limit(session, info, block)
        return None

    def _limit(self, session: str, info: SessionInfo, block: dict[str, Any]) -> Notice | None:
        if block.get("reached") is not True:
            return None
        window = str(block.get("window") or "usage")
        resets = block.get("resets_at") if isinstance(block.get("resets_at"), str) else None
        name = info.agent_name or info.agent
        body = f"it can run again at {resets}" if resets else "it did not say when it resets"
        notice = self._notice("limit", session, info, f"{name} reached its {window} limit", body)
        notice.window, notice.resets_at = window, resets
        return notice

    def limit_reset(self, notice: Notice, info: SessionInfo) -> Notice:
        """The notice that a window reported reached has reset."""
        name = info.agent_name or info.agent
        body = f"its {notice.window or 'usage'} limit reset"
        again = self._notice("limit", notice.session, info, f"{name} can run again", body)
        again.window = notice.window
        return again

    @staticmethod
    def _answer(track: _Track) -> str:
        """The text of the newest message among the kept deltas."""
        parts: list[str] = []
        last_id: object = None
        for raw in track.texts:
            try:
                block = _decode.decode(raw)
            except msgspec.DecodeError:
                continue
            if block.get("id") != last_id:
                last_id, parts = block.get("id"), []
            parts.append(str(block.get("text") or ""))
        track.texts.clear()
        return "".join(parts)

    def _notice(self, kind: str, session: str, info: SessionInfo, title: str, body: str) -> Notice:
        project = os.path.basename(info.cwd.rstrip("/")) or info.cwd
        return Notice(
            kind=kind,
            title=clean(f"{title} ({project})" if project else title, TITLE_MAX),
            body=clean(body, BODY_MAX),
            session=session,
            agent=info.agent,
            url=self.url_of(session),
        )

    def _permission(
        self, session: str, info: SessionInfo, track: _Track, block: dict[str, Any]
    ) -> Notice:
        tool = track.tools.get(str(block.get("tool_call_id")))
        what = tool_summary(tool, str(block.get("title") or ""))
        notice = self._notice("permission", session, info, f"{info.agent} asks permission", what)
        notice.request_id = str(block.get("id"))
        raw = block.get("options")
        options: list[Any] = raw if isinstance(raw, list) else []
        notice.options = [
            Option(
                id=str(o.get("id")),
                label=clean(str(o.get("label") or o.get("id")), 40),
                kind=str(o.get("kind") or ""),
            )
            for o in options
            if isinstance(o, dict)
        ]
        return notice

    def _error_notice(self, session: str, info: SessionInfo, error: dict[str, Any]) -> Notice:
        code = str(error.get("code") or "error")
        why = error.get("hint") or error.get("message") or ""
        return self._notice("error", session, info, f"{info.agent} failed", f"{code}: {why}")

    def _turn_end(
        self, session: str, info: SessionInfo, track: _Track, block: dict[str, Any], ts: float
    ) -> Notice | None:
        error, track.error = track.error, None
        start, track.turn_start = track.turn_start, None
        if error is not None:
            if error.get("retryable") is True:
                track.held_error = error  # decided by what follows (a retry or not)
                return None
            return self._error_notice(session, info, error)
        if block.get("reason") != "completed" or start is None:
            return None
        took = ts - start
        if took < self.min_turn_s:
            return None
        lines = [line.strip() for line in self._answer(track).splitlines() if line.strip()]
        last = lines[-1] if lines else "the turn ended"
        return self._notice(
            "turn_end", session, info, f"{info.agent} finished", f"after {duration(took)}: {last}"
        )

    def _system(
        self, session: str, info: SessionInfo, track: _Track, block: dict[str, Any], ts: float
    ) -> Notice | None:
        code = block.get("code")
        if code == "retrying":
            track.held_error = None
            return None
        if code == "attached":
            track.attached_at = ts
            return None
        if code != "state":
            return None
        data = _dict(block.get("data"))
        state, writer = data.get("state"), data.get("writer")
        before_writer = track.writer
        # The text says where the state came from ("parked -> idle (writer: ...): why"), so a
        # session this detector has not seen change before still counts.
        text = str(block.get("text") or "")
        before_state = text.split(" -> ", 1)[0] if " -> " in text else track.state
        track.state, track.writer = state, writer
        if state != "running" and track.held_error is not None:
            error, track.held_error = track.held_error, None
            return self._error_notice(session, info, error)
        if state == "ended":
            self.forget(session)
            return None
        just_attached = track.attached_at is not None and ts - track.attached_at < ATTACH_QUIET_S
        if writer == "terminal" and before_writer != "terminal" and not just_attached:
            return self._notice(
                "handoff",
                session,
                info,
                f"{info.agent}: a terminal took the session",
                "The session continues in a terminal; the bridge mirrors it read-only.",
            )
        if before_state == "parked" and state == "idle":
            queued = data.get("queued") or 0
            tail = f"; {queued} queued message(s) run now" if queued else ""
            return self._notice(
                "handoff",
                session,
                info,
                f"{info.agent}: the terminal gave the session back",
                f"The bridge writes to the session again{tail}.",
            )
        return None
