"""Wire frames of protocol v1 and their two encodings (JSON text, MessagePack binary).

Client requests are one tagged union on the field ``t``, each answered by an ``ok`` frame whose
``result`` is declared in ``bridge/wire/results.py``; server frames are encoded once per event and
shared by every subscriber (``EncodedFrame``). Decoding is strict about types and
lenient about unknown fields, so newer clients keep working.
"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

import msgspec

from bridge.blocks import Block, LimitsBlock
from bridge.wire.agent_types import ForkPoint

PROTOCOL_VERSION = 1
SUBPROTOCOL_JSON = "bridge.v1.json"
SUBPROTOCOL_MSGPACK = "bridge.v1.msgpack"

RequestId = int | str | None
SessionState = Literal["idle", "running", "parked", "ended"]
Writer = Literal["bridge", "terminal", "none"]

ERROR_CODES = (
    "unauthorized",
    "bad_request",
    "unknown_method",
    "not_found",
    "conflict",
    "too_large",
    "rate_limited",
    "agent_unavailable",
    "internal",
)

CLOSE_SHUTDOWN = 1001
CLOSE_PROTOCOL = 4400
CLOSE_UNAUTHORIZED = 4401
CLOSE_TOO_SLOW = 4408


# ---- client requests ---------------------------------------------------------------------------


class _Request(msgspec.Struct, kw_only=True, tag_field="t"):
    id: RequestId = None


class ClientInfo(msgspec.Struct, kw_only=True):
    name: str = ""
    version: str = ""


class Hello(_Request, tag="hello", kw_only=True):
    protocol: int
    token: str | None = None
    client: ClientInfo | None = None


class AgentsList(_Request, tag="agents.list", kw_only=True):
    pass


class AgentsCheck(_Request, tag="agents.check", kw_only=True):
    agent: str


class ModelsList(_Request, tag="models.list", kw_only=True):
    agent: str


class SessionsList(_Request, tag="sessions.list", kw_only=True):
    include_external: bool = True
    #: Sessions per page (default and most: bridge/hub/hub.py LIST_DEFAULT, LIST_MAX).
    limit: int | None = None
    #: ``next_cursor`` of the page before; None: the first page.
    cursor: str | None = None


class WorktreeSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``session.create``'s ``worktree``: a new branch in a worktree of its own."""

    branch: str
    #: the branch or commit it starts from; None: the repository's current branch
    base: str | None = None


class SessionCreate(_Request, tag="session.create", kw_only=True):
    agent: str
    cwd: str
    model: str | None = None
    effort: str | None = None
    resume: str | None = None
    mode: str | None = None
    worktree: WorktreeSpec | None = None


class SessionAttach(_Request, tag="session.attach", kw_only=True):
    agent: str
    agent_session_id: str
    cwd: str


class SessionSubscribe(_Request, tag="session.subscribe", kw_only=True):
    session: str
    after_seq: int = 0


class SessionUnsubscribe(_Request, tag="session.unsubscribe", kw_only=True):
    session: str


class Attachment(msgspec.Struct, kw_only=True):
    name: str
    mime: str
    data: bytes


class SessionSend(_Request, tag="session.send", kw_only=True):
    session: str
    text: str
    attachments: list[Attachment] = msgspec.field(default_factory=list)
    client_msg_id: str | None = None
    #: into the running turn, where the agent can take it; else as without (queued or a turn)
    steer: bool = False


class SessionFork(_Request, tag="session.fork", kw_only=True):
    """A new session whose history is this one's up to ``at_seq`` (default: its last event)."""

    session: str
    at_seq: int | None = None
    worktree: WorktreeSpec | None = None


class SessionInterrupt(_Request, tag="session.interrupt", kw_only=True):
    session: str


class SessionPermission(_Request, tag="session.permission", kw_only=True):
    session: str
    request_id: str
    option_id: str


class SessionHandoff(_Request, tag="session.handoff", kw_only=True):
    session: str
    dry_run: bool = False  # only answer the command; hand nothing off


class SessionClose(_Request, tag="session.close", kw_only=True):
    session: str


class UsageGet(_Request, tag="usage.get", kw_only=True):
    session: str


class Ping(_Request, tag="ping", kw_only=True):
    pass


# ---- search and spend ---------------------------------------------------------------------------


class SessionsSearch(_Request, tag="sessions.search", kw_only=True):
    """Full-text search over user messages and agent text, ended sessions included."""

    query: str
    #: Hits at most (default 50, at most 500).
    limit: int | None = None
    agent: str | None = None
    cwd: str | None = None
    #: ISO 8601: only text written at or after it.
    since: str | None = None


class UsageSummary(_Request, tag="usage.summary", kw_only=True):
    """Tokens and cost per day, agent, project or session, from the stored usage blocks."""

    #: ISO 8601 bounds on when a turn's usage was reported (``until`` excluded).
    since: str | None = None
    until: str | None = None
    group_by: Literal["day", "agent", "project", "session"] = "day"


# ---- projects, workspace, modes (Additions) -----------------------------------------------------


class ProjectsList(_Request, tag="projects.list", kw_only=True):
    pass


class WorkspaceStatus(_Request, tag="workspace.status", kw_only=True):
    path: str


class WorkspaceDiff(_Request, tag="workspace.diff", kw_only=True):
    path: str
    file: str | None = None
    staged: bool = False
    #: the whole branch against this ref (from their merge-base to the work tree)
    base: str | None = None


class WorkspaceCommit(_Request, tag="workspace.commit", kw_only=True):
    path: str
    message: str
    #: paths to stage first (relative to ``path``); with ``all``, everything (``git add -A``)
    files: list[str] | None = None
    stage_all: bool = msgspec.field(default=False, name="all")


class WorkspacePush(_Request, tag="workspace.push", kw_only=True):
    path: str
    remote: str | None = None


class WorkspacePr(_Request, tag="workspace.pr", kw_only=True):
    path: str
    title: str | None = None
    body: str | None = None
    base: str | None = None


class WorkspaceWorktreeRemove(_Request, tag="workspace.worktree_remove", kw_only=True):
    path: str
    force: bool = False


class WorkspaceAllowSetup(_Request, tag="workspace.allow_setup", kw_only=True):
    """Let a repository's ``.agent-bridge/worktree-setup`` run in new worktrees: this exact
    content, by its SHA-256 (what the person looked at)."""

    path: str
    sha256: str


class WorkspaceChecks(_Request, tag="workspace.checks", kw_only=True):
    """The CI checks of the branch checked out at ``path`` (or in ``session``'s directory)."""

    path: str | None = None
    session: str | None = None


class WorkspaceCheckLog(_Request, tag="workspace.check_log", kw_only=True):
    """The tail of a failed check's log."""

    path: str | None = None
    session: str | None = None
    check: str


class PreviewOpen(_Request, tag="preview.open", kw_only=True):
    """Show a dev server on this machine's loopback (``port``) through the daemon."""

    session: str | None = None
    cwd: str | None = None
    port: int
    path: str = "/"


class PreviewList(_Request, tag="preview.list", kw_only=True):
    pass


class PreviewClose(_Request, tag="preview.close", kw_only=True):
    """``preview``: the preview's id (a frame's own ``id`` is the request's)."""

    preview: str


class PreviewPorts(_Request, tag="preview.ports", kw_only=True):
    """The ports the processes working in a session's directory (or ``cwd``) listen on."""

    session: str | None = None
    cwd: str | None = None


class ReviewComment(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One comment of ``session.review``: on lines ``line``..``end_line`` of ``file``."""

    file: str
    line: int
    end_line: int | None = None
    text: str
    #: the lines it is about, as the reviewer saw them in the diff
    excerpt: str | None = None


class SessionReview(_Request, tag="session.review", kw_only=True):
    session: str
    comments: list[ReviewComment]
    #: as ``session.send``'s: a retried review is sent once
    client_msg_id: str | None = None


class WorkspaceFile(_Request, tag="workspace.file", kw_only=True):
    path: str
    file: str


class SessionMode(_Request, tag="session.mode", kw_only=True):
    session: str
    mode: str


# ---- attention: presence and notifications (docs/notifications.md) -----------------------------


class ClientPresence(_Request, tag="client.presence", kw_only=True):
    """Whether a person is looking at this client, and which session is in view."""

    visible: bool
    session: str | None = None


class WebpushKey(_Request, tag="webpush.key", kw_only=True):
    pass


class PushKeys(msgspec.Struct, kw_only=True):
    p256dh: str
    auth: str


class PushSubscription(msgspec.Struct, kw_only=True):
    """What the browser's ``PushSubscription.toJSON()`` gives."""

    endpoint: str
    expirationTime: int | float | None = None  # the browser's own field name
    keys: PushKeys


class WebpushSubscribe(_Request, tag="webpush.subscribe", kw_only=True):
    subscription: PushSubscription
    #: the browser's own VAPID private key (base64url, 32 bytes) its subscription was made
    #: with: every workstation of one browser signs with it (docs/security.md, "Pushes from
    #: every workstation"); None: the daemon's own key (``webpush.key``)
    vapid_key: str | None = None
    #: the id the page knows this workstation by (``relay:HOST``): its notifications open it
    ws: str | None = None


class WebpushUnsubscribe(_Request, tag="webpush.unsubscribe", kw_only=True):
    endpoint: str


class NotifyChannels(_Request, tag="notify.channels", kw_only=True):
    """The configured channels (URLs with their secrets masked) and Web Push's state."""


class NotifyTest(_Request, tag="notify.test", kw_only=True):
    """Send a test notification through every channel; the result says what each answered."""

    kind: Literal["permission", "turn_end", "error", "handoff", "checks", "limit"] = "turn_end"
    endpoint: str | None = None


Request = (
    Hello
    | AgentsList
    | AgentsCheck
    | ModelsList
    | SessionsList
    | SessionCreate
    | SessionAttach
    | SessionSubscribe
    | SessionUnsubscribe
    | SessionSend
    | SessionFork
    | SessionInterrupt
    | SessionPermission
    | SessionHandoff
    | SessionClose
    | UsageGet
    | Ping
    | SessionsSearch
    | UsageSummary
    | ProjectsList
    | WorkspaceStatus
    | WorkspaceDiff
    | WorkspaceFile
    | WorkspaceCommit
    | WorkspacePush
    | WorkspacePr
    | WorkspaceWorktreeRemove
    | WorkspaceAllowSetup
    | WorkspaceChecks
    | WorkspaceCheckLog
    | PreviewOpen
    | PreviewList
    | PreviewClose
    | PreviewPorts
    | SessionReview
    | SessionMode
    | ClientPresence
    | WebpushKey
    | WebpushSubscribe
    | WebpushUnsubscribe
    | NotifyChannels
    | NotifyTest
)

#: Every request's ``t``.
METHODS: frozenset[str] = frozenset(str(cls.__struct_config__.tag) for cls in get_args(Request))


# ---- objects in results ------------------------------------------------------------------------


class AgentObject(msgspec.Struct, kw_only=True):
    agent: str
    display_name: str
    source: Literal["builtin", "external"]
    available: bool
    binary: str | None
    version: str | None
    capabilities: dict[str, bool | str]
    provides_models: bool
    provides_usage: bool
    handoff: Literal["per_turn", "persistent", "none"]
    doc: str
    error: str | None = None
    file: str | None = None
    modes: list[dict[str, str]] = msgspec.field(default_factory=list)
    #: The agent's latest ``limits`` block per window, as it reported them (none: it did not)
    limits: list[LimitsBlock] = msgspec.field(default_factory=list)


class SessionObject(msgspec.Struct, kw_only=True):
    session: str
    agent: str
    cwd: str
    title: str
    state: SessionState
    writer: Writer
    created_at: str
    updated_at: str
    last_seq: int
    agent_session_id: str | None
    external: bool
    queued: int = 0
    model: str | None = None
    mode: str | None = None
    #: The session's persistent agent process is running (its next turn starts without delay).
    resident: bool = False
    #: ``"permission"`` while the session waits on an unanswered permission request (or a
    #: question, which agents ask as one), else None: "needs you", shown before ``running``.
    needs: str | None = None
    #: the worktree the session was created in (``session.create`` ``worktree``), else None
    worktree: WorktreeObject | None = None
    #: the session and seq this one was forked from (``session.fork``), else None
    forked_from: ForkedFrom | None = None


class ForkedFrom(msgspec.Struct, kw_only=True):
    """Where a forked session came from: its parent and the parent's seq its history ends at."""

    session: str
    seq: int


class ForkRecord(msgspec.Struct, kw_only=True):
    """A forked session's own record (stored, not sent): where it came from, and what its
    first turn still has to do: make the agent's own fork (``native``), or give the agent the
    session's events up to ``replay_seq`` as context."""

    origin: ForkedFrom
    native: ForkPoint | None = None
    replay_seq: int | None = None


class WorktreeObject(msgspec.Struct, kw_only=True):
    """A session's own worktree: its repository's main work tree, branch, base and path."""

    repo: str
    branch: str
    base: str
    path: str


# ---- server frames -----------------------------------------------------------------------------


class _ServerFrame(msgspec.Struct, kw_only=True, tag_field="t"):
    pass


class Result(msgspec.Struct, kw_only=True):
    """Base of the answers to requests: each request's own is declared in bridge/wire/results.py."""


class Ok(_ServerFrame, tag="ok", kw_only=True):
    id: RequestId
    result: Result


class Err(_ServerFrame, tag="err", kw_only=True):
    id: RequestId
    code: str
    message: str
    #: one sentence: what to do (the ship requests' errors)
    hint: str | msgspec.UnsetType = msgspec.UNSET
    #: what git, gh or a hook printed, when it said why
    output: str | msgspec.UnsetType = msgspec.UNSET


class EventFrame(_ServerFrame, tag="event", kw_only=True):
    session: str
    seq: int
    ts: str
    block: Block


class StateFrame(_ServerFrame, tag="state", kw_only=True):
    session: str
    state: SessionState
    writer: Writer
    queued: int


class AgentsChanged(_ServerFrame, tag="agents_changed", kw_only=True):
    pass


class DaemonFrame(_ServerFrame, tag="daemon", kw_only=True, omit_defaults=True):
    """The daemon's own health: ``store`` is "failing" (with ``message``) or "ok" again."""

    store: Literal["ok", "failing"]
    message: str | None = None


ServerFrame = Ok | Err | EventFrame | StateFrame | AgentsChanged | DaemonFrame


# ---- codecs -----------------------------------------------------------------------------------

_json_enc = msgspec.json.Encoder()
_mp_enc = msgspec.msgpack.Encoder()
_json_req = msgspec.json.Decoder(Request)
_mp_req = msgspec.msgpack.Decoder(Request)
_json_any = msgspec.json.Decoder()
_mp_any = msgspec.msgpack.Decoder()


class ProtocolError(Exception):
    """A frame that cannot be served; carries the id when one could be read."""

    def __init__(self, code: str, message: str, request_id: RequestId = None) -> None:
        super().__init__(message)
        self.code = code
        self.request_id = request_id


def _salvage_id(obj: Any) -> RequestId:
    if isinstance(obj, dict):
        value = obj.get("id")
        if isinstance(value, int | str) and not isinstance(value, bool):
            return value
    return None


def _lenient_json(data: bytes | str) -> Any:
    """What Python's own JSON makes of a frame msgspec refuses (a lone surrogate escape, which
    a browser's JSON.stringify writes): only to answer its ``id``, so the client is told."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def decode_request(data: bytes | str, msgpack: bool) -> Request:
    """Decode one client frame, or raise ``ProtocolError`` saying what is wrong."""
    try:
        if msgpack:
            return _mp_req.decode(data if isinstance(data, bytes) else data.encode())
        return _json_req.decode(data)
    except (UnicodeError, RecursionError) as exc:
        # Lone surrogates in a str, or nesting deeper than the decoder recurses.
        raise ProtocolError("bad_request", f"malformed frame: {exc}") from None
    except msgspec.DecodeError as exc:
        try:
            generic = _mp_any.decode(data) if msgpack else _json_any.decode(data)  # type: ignore[arg-type]
        except (msgspec.DecodeError, TypeError, UnicodeError, RecursionError):
            rid = None if msgpack else _salvage_id(_lenient_json(data))
            raise ProtocolError("bad_request", f"malformed frame: {exc}", rid) from None
        rid = _salvage_id(generic)
        if not isinstance(generic, dict):
            raise ProtocolError("bad_request", "a frame must be an object", rid) from None
        method = generic.get("t")
        if not isinstance(method, str):
            raise ProtocolError("bad_request", "the frame has no string field `t`", rid) from None
        if method not in METHODS:
            raise ProtocolError("unknown_method", f"unknown request `{method}`", rid) from None
        raise ProtocolError("bad_request", f"invalid `{method}`: {exc}", rid) from None


class EncodedFrame:
    """A server frame encoded at most once per encoding, shared by all connections."""

    __slots__ = ("_json", "_msgpack", "frame")

    def __init__(self, frame: ServerFrame) -> None:
        self.frame = frame
        self._json: bytes | None = None
        self._msgpack: bytes | None = None

    def json(self) -> bytes:
        if self._json is None:
            self._json = _json_enc.encode(self.frame)
        return self._json

    def msgpack(self) -> bytes:
        if self._msgpack is None:
            self._msgpack = _mp_enc.encode(self.frame)
        return self._msgpack

    def encoded(self, msgpack: bool) -> bytes:
        return self.msgpack() if msgpack else self.json()


#: The start of each session's ``event`` frames, up to the seq: the same for all of them.
_EVENT_HEADS: dict[str, bytes] = {}
_EVENT_HEADS_KEPT = 4096


def _event_head(session: str) -> bytes:
    head = _EVENT_HEADS.get(session)
    if head is None:
        if len(_EVENT_HEADS) >= _EVENT_HEADS_KEPT:
            _EVENT_HEADS.clear()
        head = b'{"t":"event","session":' + _json_enc.encode(session) + b',"seq":'
        _EVENT_HEADS[session] = head
    return head


class EncodedEvent:
    """An ``event`` frame built around a block already encoded as JSON (as it is stored).

    The JSON frame is assembled around the stored bytes without re-encoding the block, which
    keeps fan-out and replay cheap; MessagePack is produced on first use.
    """

    __slots__ = ("_json", "_msgpack", "block_json", "seq", "session", "ts")

    def __init__(self, session: str, seq: int, ts: str, block_json: bytes) -> None:
        self.session = session
        self.seq = seq
        self.ts = ts
        self.block_json = block_json
        self._json: bytes | None = None
        self._msgpack: bytes | None = None

    def json(self) -> bytes:
        if self._json is None:
            self._json = b"".join(
                (
                    _event_head(self.session),
                    str(self.seq).encode(),
                    b',"ts":',
                    _json_enc.encode(self.ts),
                    b',"block":',
                    self.block_json,
                    b"}",
                )
            )
        return self._json

    def msgpack(self) -> bytes:
        if self._msgpack is None:
            block = _json_any.decode(self.block_json)
            self._msgpack = _mp_enc.encode(
                {
                    "t": "event",
                    "session": self.session,
                    "seq": self.seq,
                    "ts": self.ts,
                    "block": block,
                }
            )
        return self._msgpack

    def encoded(self, msgpack: bool) -> bytes:
        return self.msgpack() if msgpack else self.json()


Outgoing = EncodedFrame | EncodedEvent
