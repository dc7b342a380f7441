"""The requests of "Ship from the phone": a session in a worktree of its own, the review's
comments sent back to the agent, and ``workspace.commit``/``push``/``pr``/``worktree_remove``.

The work is bridge/workspace/gitwrite.py's (git and gh, as the person's terminal runs them);
here are the daemon's rules around it (docs/protocol.md, "Ship from the phone"): a path must
be a project or a session's directory (as for the read-only views), and a write waits for no
one: while a turn runs there or a terminal holds a session there, it is refused ``conflict``
naming who holds it. A failure is an ``err`` frame with a ``hint`` (and git's ``output``).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from bridge.api.dispatch import Routes
from bridge.blocks import SystemBlock
from bridge.config import Config
from bridge.hub import HubError
from bridge.logs import get_logger
from bridge.wire.protocol import (
    ReviewComment,
    SessionCreate,
    SessionReview,
    WorkspaceCommit,
    WorkspacePr,
    WorkspacePush,
    WorkspaceWorktreeRemove,
    WorktreeObject,
)
from bridge.wire.results import (
    SessionReviewResult,
    WorkspaceCommitResult,
    WorkspacePrResult,
    WorkspacePushResult,
    WorkspaceWorktreeRemoveResult,
    as_result,
)
from bridge.workspace import gitwrite, names
from bridge.workspace.gitwrite import ShipError

if TYPE_CHECKING:
    from bridge.api.projects import ProjectsApi
    from bridge.hub import Hub
    from bridge.server.connection import Connection

log = get_logger("bridge.ship")

_T = TypeVar("_T")

#: a repository's own setup for new worktrees, run when ``[workspace] setup`` is empty
SETUP_FILE = os.path.join(".agent-bridge", "worktree-setup")
#: setup output kept in the session's block
SETUP_SHOWN = 4000


def checked(why: str | None) -> None:
    """A client's value that a check of bridge/workspace/names.py refused: ``bad_request``."""
    if why is not None:
        raise HubError("bad_request", why)


async def shipped(work: Awaitable[_T]) -> _T:
    """``work``'s result, its ShipError as the protocol's error with a hint."""
    try:
        return await work
    except ShipError as exc:
        raise HubError(exc.code, str(exc), exc.hint, exc.output or None) from None


def review_text(comments: list[ReviewComment]) -> str:
    """The one message a review's comments reach the agent as: each with its file, lines and
    the lines it is about."""
    n = len(comments)
    parts = [f"Review of your changes: {n} comment{'s' if n != 1 else ''}. Please address each."]
    for c in comments:
        lines = (
            f"line {c.line}"
            if not c.end_line or c.end_line == c.line
            else (f"lines {c.line}-{c.end_line}")
        )
        part = f"{c.file}, {lines}:"
        if c.excerpt:
            part += "\n" + "\n".join(f"> {ln}" for ln in c.excerpt.splitlines()[:40])
        parts.append(f"{part}\n{c.text.strip()}")
    return "\n\n".join(parts)


class ShipApi:
    def __init__(self, config: Config, hub: Hub, projects: ProjectsApi) -> None:
        self.config = config
        self.hub = hub
        self.projects = projects

    def register(self, routes: Routes) -> None:
        routes.add(WorkspaceCommit, self.commit, WorkspaceCommitResult)
        routes.add(WorkspacePush, self.push, WorkspacePushResult)
        routes.add(WorkspacePr, self.pr, WorkspacePrResult)
        routes.add(WorkspaceWorktreeRemove, self.worktree_remove, WorkspaceWorktreeRemoveResult)
        routes.add(SessionReview, self.review, SessionReviewResult, durable=True)

    # ---- a session in a new worktree (session.create's ``worktree``) -----------------------

    async def new_worktree(self, req: SessionCreate) -> tuple[str, WorktreeObject, str | None]:
        """Make the worktree and run its setup: the session's cwd, its record, and what the
        setup said (for the session's first block)."""
        assert req.worktree is not None
        conf = self.config.workspace
        checked(names.directory_problem("`cwd`", req.cwd))
        made = await shipped(
            gitwrite.add_worktree(req.cwd, req.worktree.branch, req.worktree.base, conf.worktrees)
        )
        worktree = WorktreeObject(
            repo=made.repo, branch=made.branch, base=made.base, path=made.path
        )
        argv = list(conf.setup)
        own = os.path.join(made.path, SETUP_FILE)
        if not argv and os.access(own, os.X_OK) and os.path.isfile(own):
            argv = [own]
        said = None
        if argv:
            code, output, took = await gitwrite.setup(made.path, argv, conf.setup_timeout_s)
            verdict = "done" if code == 0 else f"failed (status {code})"
            said = f"worktree setup `{' '.join(argv)}` {verdict} in {took:.1f} s"
            if output:
                said += "\n" + output[-SETUP_SHOWN:]
        return made.path, worktree, said

    async def drop_worktree(self, worktree: WorktreeObject) -> None:
        """A worktree whose session could not start goes again, with its branch."""
        try:
            await gitwrite.remove_worktree(worktree.path, force=True)
            await gitwrite.git(worktree.repo, "branch", "-D", "--", worktree.branch)
        except ShipError as exc:
            log.warning("worktree_not_removed", path=worktree.path, error=str(exc))

    def setup_said(self, session: str, text: str) -> None:
        self.hub.note(session, SystemBlock(code="worktree_setup", text=text))

    # ---- requests ----------------------------------------------------------------------------

    async def _allowed(self, path: str) -> str:
        """``path``'s real directory when a write may happen there (a project or a session's
        directory, named plainly), else a refusal."""
        checked(names.directory_problem("`path`", path))
        return await self.projects.allowed(path)

    async def _writable(self, path: str) -> str:
        root = await self._allowed(path)
        why = self.hub.busy_in(root)
        if why is not None:
            raise HubError("conflict", f"not now: {why}", "try again once the turn has ended")
        return root

    async def commit(self, _conn: Connection, req: WorkspaceCommit) -> WorkspaceCommitResult:
        root = await self._writable(req.path)
        files = req.files
        if files:
            from bridge.workspace.views import WorkspaceError, confine

            try:
                files = [confine(root, f)[0] for f in files]
            except WorkspaceError as exc:
                raise HubError(exc.code, str(exc)) from None
        got = await shipped(gitwrite.commit(root, req.message, files, req.stage_all))
        return as_result(got, WorkspaceCommitResult)

    async def push(self, _conn: Connection, req: WorkspacePush) -> WorkspacePushResult:
        root = await self._allowed(req.path)
        return as_result(await shipped(gitwrite.push(root, req.remote)), WorkspacePushResult)

    async def pr(self, _conn: Connection, req: WorkspacePr) -> WorkspacePrResult:
        root = await self._allowed(req.path)
        got = await shipped(gitwrite.pull_request(root, req.title, req.body, req.base))
        return as_result(got, WorkspacePrResult)

    async def worktree_remove(
        self, _conn: Connection, req: WorkspaceWorktreeRemove
    ) -> WorkspaceWorktreeRemoveResult:
        root = await self._allowed(req.path)
        working = self.hub.sessions_in(root)
        if working:
            raise HubError(
                "conflict",
                f"session {working[0]} works in this worktree",
                "end the session first (session.close), then remove the worktree",
            )
        got = await shipped(gitwrite.remove_worktree(root, req.force))
        return as_result(got, WorkspaceWorktreeRemoveResult)

    async def review(self, _conn: Connection, req: SessionReview) -> SessionReviewResult:
        if not req.comments:
            raise HubError("bad_request", "a review needs at least one comment")
        if any(not c.text.strip() or c.line < 1 for c in req.comments):
            raise HubError("bad_request", "each comment needs a text and a line from 1")
        text = review_text(req.comments)
        queued = await self.hub.send(req.session, text, [], req.client_msg_id)
        return SessionReviewResult(queued=queued)
