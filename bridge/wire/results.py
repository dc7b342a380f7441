"""What each request answers: the ``result`` of its ``ok`` frame (docs/protocol.md).

Every answer is a :class:`~bridge.wire.protocol.Result`, so ``Ok.result`` is typed and the schema
(``bridge/wire/schema.py``) lists each one. A field that is sometimes absent from the wire (not
``null``) defaults to ``msgspec.UNSET``. Answers built elsewhere as dicts (the workspace, the
projects list, the notifier) are converted at the edge with :func:`as_result`; keep their
fields here in step with those dicts, or a key is dropped from the answer.
"""

from __future__ import annotations

from typing import Literal, TypeVar

import msgspec

from bridge.blocks import AgentInfoBlock, UsageBlock
from bridge.wire.agent_types import Check, ModelInfo
from bridge.wire.protocol import AgentObject, Result, SessionObject, SessionState

R = TypeVar("R", bound=Result)


def as_result(data: object, result: type[R]) -> R:
    """``data`` (a dict built by another module) as the answer ``result``."""
    return msgspec.convert(data, result)


class Empty(Result, kw_only=True):
    """``{}``: done (``session.unsubscribe``, ``session.interrupt``, ``session.permission``,
    ``session.close``, ``ping``, ``client.presence``, ``webpush.subscribe``,
    ``webpush.unsubscribe``)."""


# ---- the core requests ---------------------------------------------------------------------------


class ServerInfo(msgspec.Struct, kw_only=True):
    name: str
    version: str
    #: The daemon user's home directory: where a client can start its working-directory field.
    home: str


class HelloResult(Result, kw_only=True):
    """The answer to ``hello``."""

    protocol: int
    server: ServerInfo


class AgentsListResult(Result, kw_only=True):
    """The answer to ``agents.list``."""

    agents: list[AgentObject]


class AgentsCheckResult(Result, kw_only=True):
    """The answer to ``agents.check``."""

    status: Literal["pass", "warn", "fail"]
    checks: list[Check]
    tested_at: str


class ModelsListResult(Result, kw_only=True):
    """The answer to ``models.list``: empty where the agent provides none."""

    models: list[ModelInfo]


class SessionsListResult(Result, kw_only=True):
    """The answer to ``sessions.list``."""

    sessions: list[SessionObject]
    #: Pass as ``cursor`` for the next page; None after the last page.
    next_cursor: str | None = None


class SessionCreateResult(Result, kw_only=True):
    """The answer to ``session.create``."""

    session: SessionObject
    info: AgentInfoBlock


class SessionAttachResult(Result, kw_only=True):
    """The answer to ``session.attach``."""

    session: SessionObject


class SessionSubscribeResult(Result, kw_only=True):
    """The answer to ``session.subscribe`` (the replay follows it)."""

    last_seq: int
    state: SessionState


class SessionSendResult(Result, kw_only=True):
    """The answer to ``session.send``: ``queued`` false when the message started a turn at
    once or entered the running turn; ``steered`` (only when the send asked to ``steer``)
    whether it entered it."""

    queued: bool
    steered: bool | msgspec.UnsetType = msgspec.UNSET


class SessionForkResult(Result, kw_only=True):
    """The answer to ``session.fork``: the new session."""

    session: SessionObject


class SessionReviewResult(Result, kw_only=True):
    """The answer to ``session.review``: as ``session.send``'s."""

    queued: bool


class SessionHandoffResult(Result, kw_only=True):
    """The answer to ``session.handoff``: the terminal command, and ``argv`` as one line."""

    argv: list[str]
    cwd: str
    command: str


class UsageGetResult(Result, kw_only=True):
    """The answer to ``usage.get``."""

    usage: UsageBlock | None


# ---- projects, workspace, modes ---------------------------------------------------------------


class ProjectGit(msgspec.Struct, kw_only=True):
    branch: str | None
    dirty: bool
    ahead: int
    behind: int


class WorktreeListing(msgspec.Struct, kw_only=True):
    """One worktree of a project: its path, branch, and the sessions working in it."""

    path: str
    branch: str | None
    sessions: list[str]


class ProjectObject(msgspec.Struct, kw_only=True):
    """PROJECT."""

    path: str
    name: str
    git: ProjectGit | None
    last_used: str | None
    sessions: int
    worktrees: list[WorktreeListing] | msgspec.UnsetType = msgspec.UNSET


class ProjectsListResult(Result, kw_only=True):
    """The answer to ``projects.list``: most recent first."""

    projects: list[ProjectObject]


class FileObject(msgspec.Struct, kw_only=True):
    """FILE: one changed path of ``workspace.status``."""

    path: str
    status: str
    xy: str
    staged: bool
    unstaged: bool
    orig_path: str | msgspec.UnsetType = msgspec.UNSET  # a rename or copy only
    submodule: bool | msgspec.UnsetType = msgspec.UNSET  # a submodule only (true)


class WorkspaceStatusResult(Result, kw_only=True):
    """The answer to ``workspace.status``."""

    branch: str | None
    head: str | None
    upstream: str | None
    ahead: int
    behind: int
    files: list[FileObject]


class BranchFile(msgspec.Struct, kw_only=True):
    """A file a branch touched: ``added``, ``modified``, ``deleted``, ``renamed``, ``copied``,
    ``type`` (changed kind) or ``untracked`` (new, not yet added)."""

    path: str
    status: str
    orig_path: str | msgspec.UnsetType = msgspec.UNSET


class CommitObject(msgspec.Struct, kw_only=True):
    sha: str
    subject: str
    author: str
    #: unix seconds
    at: int


class WorkspaceDiffResult(Result, kw_only=True):
    """The answer to ``workspace.diff``; with ``base``, the branch's review too."""

    diff: str
    truncated: bool
    base: str | msgspec.UnsetType = msgspec.UNSET
    merge_base: str | msgspec.UnsetType = msgspec.UNSET
    ahead: int | msgspec.UnsetType = msgspec.UNSET
    behind: int | msgspec.UnsetType = msgspec.UNSET
    files: list[BranchFile] | msgspec.UnsetType = msgspec.UNSET
    commits: list[CommitObject] | msgspec.UnsetType = msgspec.UNSET


class WorkspaceCommitResult(Result, kw_only=True):
    """The answer to ``workspace.commit``: the new commit, and what the hooks printed."""

    commit: str
    branch: str
    output: str


class WorkspacePushResult(Result, kw_only=True):
    branch: str
    remote: str
    output: str


class WorkspacePrResult(Result, kw_only=True):
    """``created``: gh opened it; false: ``url`` is the page to open it on (or the one that
    exists). ``checks``: gh's summary of the CI checks, when gh is there."""

    url: str
    created: bool
    checks: str | None = None


class WorkspaceWorktreeRemoveResult(Result, kw_only=True):
    removed: str


class WorkspaceAllowSetupResult(Result, kw_only=True):
    path: str
    sha256: str


class CheckObject(msgspec.Struct, kw_only=True):
    """One CI check of a branch."""

    name: str
    state: Literal["pending", "success", "failure", "cancelled", "skipped"]
    url: str | None
    started_at: str | None
    completed_at: str | None


class PullRequestRef(msgspec.Struct, kw_only=True):
    url: str
    number: int


class WorkspaceChecksResult(Result, kw_only=True):
    """The answer to ``workspace.checks``: the branch's checks, and its pull request (null:
    the HEAD commit's check runs)."""

    checks: list[CheckObject]
    pr: PullRequestRef | None


class WorkspaceCheckLogResult(Result, kw_only=True):
    """The answer to ``workspace.check_log``: the failed check's last lines, secrets masked."""

    check: str
    url: str | None
    log: str
    truncated: bool


class PreviewObject(msgspec.Struct, kw_only=True):
    """An open preview: ``url`` opens it (absolute), ``expires_at`` is when it closes unless
    a request comes first (ISO 8601, UTC)."""

    id: str
    port: int
    url: str
    expires_at: str
    cwd: str | None = None
    session: str | None = None


class PreviewOpenResult(Result, kw_only=True):
    preview: PreviewObject


class PreviewListResult(Result, kw_only=True):
    previews: list[PreviewObject]


class ListeningPort(msgspec.Struct, kw_only=True):
    port: int
    pid: int
    command: str


class PreviewPortsResult(Result, kw_only=True):
    ports: list[ListeningPort]


class WorkspaceFileResult(Result, kw_only=True):
    """The answer to ``workspace.file``: ``text``, or ``base64`` when ``binary``."""

    path: str
    size: int
    truncated: bool
    binary: bool
    text: str | msgspec.UnsetType = msgspec.UNSET
    base64: str | msgspec.UnsetType = msgspec.UNSET


class SessionModeResult(Result, kw_only=True):
    """The answer to ``session.mode``: ``live`` when the running agent switched at once."""

    mode: str
    live: bool


# ---- attention ----------------------------------------------------------------------------------


class WebpushKeyResult(Result, kw_only=True):
    """The answer to ``webpush.key``."""

    public_key: str


class ChannelObject(msgspec.Struct, kw_only=True):
    name: str
    url: str  # its secrets masked
    service: str
    kinds: list[str]


class WebpushState(msgspec.Struct, kw_only=True):
    kinds: list[str]
    subscriptions: int


class NotifyChannelsResult(Result, kw_only=True):
    """The answer to ``notify.channels``."""

    channels: list[ChannelObject]
    problems: list[str]
    webpush: WebpushState
    min_turn_s: float


class ChannelAnswer(msgspec.Struct, kw_only=True):
    channel: str
    ok: bool
    answer: str


class NotifyTestResult(Result, kw_only=True):
    """The answer to ``notify.test``: what each channel answered."""

    results: list[ChannelAnswer]


# ---- search and spend ----------------------------------------------------------------------------


class SearchHit(msgspec.Struct, kw_only=True):
    """One place a query was found: the session, the seq of the event that holds the text."""

    session: str
    seq: int
    ts: str
    snippet: str
    title: str
    agent: str
    cwd: str
    #: Higher is better (FTS5's bm25, negated); comparable across one daemon's hits.
    score: float


class SessionsSearchResult(Result, kw_only=True):
    """The answer to ``sessions.search``: best first."""

    hits: list[SearchHit]


class UsageRow(msgspec.Struct, kw_only=True):
    key: str
    turns: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float


class UsageSummaryResult(Result, kw_only=True):
    """The answer to ``usage.summary``: one row per day, agent, project or session."""

    group_by: Literal["day", "agent", "project", "session"]
    rows: list[UsageRow]


#: Every answer, as the schema lists them.
RESULTS: tuple[type[Result], ...] = (
    Empty,
    HelloResult,
    AgentsListResult,
    AgentsCheckResult,
    ModelsListResult,
    SessionsListResult,
    SessionCreateResult,
    SessionAttachResult,
    SessionSubscribeResult,
    SessionSendResult,
    SessionForkResult,
    SessionReviewResult,
    SessionHandoffResult,
    UsageGetResult,
    ProjectsListResult,
    WorkspaceStatusResult,
    WorkspaceDiffResult,
    WorkspaceFileResult,
    WorkspaceCommitResult,
    WorkspacePushResult,
    WorkspacePrResult,
    WorkspaceWorktreeRemoveResult,
    WorkspaceAllowSetupResult,
    WorkspaceChecksResult,
    WorkspaceCheckLogResult,
    PreviewOpenResult,
    PreviewListResult,
    PreviewPortsResult,
    SessionModeResult,
    WebpushKeyResult,
    NotifyChannelsResult,
    NotifyTestResult,
    SessionsSearchResult,
    UsageSummaryResult,
)
