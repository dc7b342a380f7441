"""The requests of "Ship from the phone": a session in a worktree of its own, the review's
comments sent back to the agent, ``workspace.commit``/``push``/``pr``/``worktree_remove``, and
``workspace.allow_setup`` (a repository's own worktree setup the person trusts, by its hash).

The work is bridge/workspace/gitwrite.py's (git and gh, as the person's terminal runs them);
here are the daemon's rules around it (docs/protocol.md, "Ship from the phone"): every value a
client sends is checked first (bridge/workspace/names.py), a path must be a project or a
session's directory (as for the read-only views), and a write waits for no one: while a turn
runs there or a terminal holds a session there, it is refused ``conflict`` naming who holds it.
A failure is an ``err`` frame with a ``hint`` (and git's ``output``).
"""

from __future__ import annotations

import os
import re
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
    WorkspaceAllowSetup,
    WorkspaceCommit,
    WorkspacePr,
    WorkspacePush,
    WorkspaceWorktreeRemove,
    WorktreeObject,
)
from bridge.wire.results import (
    SessionReviewResult,
    WorkspaceAllowSetupResult,
    WorkspaceCommitResult,
    WorkspacePrResult,
    WorkspacePushResult,
    WorkspaceWorktreeRemoveResult,
    as_result,
)
from bridge.workspace import gitwrite, names, setuptrust
from bridge.workspace.gitwrite import ShipError

if TYPE_CHECKING:
    from bridge.api.projects import ProjectsApi
    from bridge.hub import Hub
    from bridge.server.connection import Connection

log = get_logger("bridge.ship")

_T = TypeVar("_T")

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


def skipped_block(verdict: setuptrust.Verdict) -> SystemBlock:
    """The session's first word on a repository's setup that did not run: why, and how to
    allow it."""
    text = f"worktree setup `{verdict.path}` skipped: {verdict.why}."
    data: dict[str, object] = {"skipped": True, "path": verdict.path, "reason": verdict.why}
    if verdict.sha256:
        command = setuptrust.allow_command(verdict.path)
        text += (
            " A repository's setup runs only when it is the one on the default branch, or you"
            f" allowed this exact file. Read it, then allow it once: `{command}`"
            f" (SHA-256 {verdict.sha256}); run it here yourself if this worktree needs it."
        )
        data.update(sha256=verdict.sha256, command=command)
    return SystemBlock(code="worktree_setup", level="warn", text=text, data=data)


class ShipApi:
    def __init__(
        self,
        config: Config,
        hub: Hub,
        projects: ProjectsApi,
        allowed_setups: setuptrust.AllowedSetups | None = None,
    ) -> None:
        self.config = config
        self.hub = hub
        self.projects = projects
        self.allowed_setups = allowed_setups or setuptrust.AllowedSetups()

    def register(self, routes: Routes) -> None:
        routes.add(WorkspaceCommit, self.commit, WorkspaceCommitResult)
        routes.add(WorkspacePush, self.push, WorkspacePushResult)
        routes.add(WorkspacePr, self.pr, WorkspacePrResult)
        routes.add(WorkspaceWorktreeRemove, self.worktree_remove, WorkspaceWorktreeRemoveResult)
        routes.add(WorkspaceAllowSetup, self.allow_setup, WorkspaceAllowSetupResult)
        routes.add(SessionReview, self.review, SessionReviewResult, durable=True)

    # ---- a session in a new worktree (session.create's ``worktree``) -----------------------

    async def new_worktree(
        self, req: SessionCreate
    ) -> tuple[str, WorktreeObject, SystemBlock | None]:
        """Make the worktree and run its setup: the session's cwd, its record, and the block
        saying what the setup did (or why the repository's own was skipped)."""
        assert req.worktree is not None
        conf = self.config.workspace
        cwd = os.path.expanduser(req.cwd)  # as session.create's own `cwd`
        checked(names.directory_problem("`cwd`", cwd))
        made = await shipped(
            gitwrite.add_worktree(cwd, req.worktree.branch, req.worktree.base, conf.worktrees)
        )
        worktree = WorktreeObject(
            repo=made.repo, branch=made.branch, base=made.base, path=made.path
        )
        argv = list(conf.setup)  # the person's own configuration: always runs
        if not argv:
            verdict = await shipped(setuptrust.judge(made.path, self.allowed_setups))
            if verdict is None:
                return made.path, worktree, None
            if not verdict.run:
                return made.path, worktree, skipped_block(verdict)
            argv = [verdict.path]
        code, output, took = await gitwrite.setup(made.path, argv, conf.setup_timeout_s)
        verdict_text = "done" if code == 0 else f"failed (status {code})"
        said = f"worktree setup `{' '.join(argv)}` {verdict_text} in {took:.1f} s"
        if output:
            said += "\n" + output[-SETUP_SHOWN:]
        block = SystemBlock(code="worktree_setup", level="info" if code == 0 else "warn", text=said)
        return made.path, worktree, block

    async def drop_worktree(self, worktree: WorktreeObject) -> None:
        """A worktree whose session could not start goes again, with its branch."""
        try:
            await gitwrite.remove_worktree(worktree.path, True, self.config.workspace.worktrees)
            await gitwrite.git(worktree.repo, "branch", "-D", "--", worktree.branch)
        except ShipError as exc:
            log.warning("worktree_not_removed", path=worktree.path, error=str(exc))

    def setup_said(self, session: str, block: SystemBlock) -> None:
        self.hub.note(session, block)

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
        where = self.config.workspace.worktrees
        got = await shipped(gitwrite.remove_worktree(root, req.force, where))
        return as_result(got, WorkspaceWorktreeRemoveResult)

    async def allow_setup(
        self, _conn: Connection, req: WorkspaceAllowSetup
    ) -> WorkspaceAllowSetupResult:
        """Let this exact setup file run in new worktrees: the file at ``path`` (a work tree's
        ``.agent-bridge/worktree-setup``) must still have the SHA-256 the person looked at."""
        checked(names.directory_problem("`path`", req.path))
        if not re.fullmatch(r"[0-9a-f]{64}", req.sha256):
            raise HubError("bad_request", "`sha256` must be 64 lower-case hexadecimal digits")
        suffix = os.sep + setuptrust.SETUP_FILE
        if not req.path.endswith(suffix):
            raise HubError(
                "bad_request",
                f"`path` must be a work tree's {setuptrust.SETUP_FILE}",
                "name the file the skipped setup's message names",
            )
        root = await self._allowed(req.path[: -len(suffix)] or os.sep)
        file = os.path.join(root, setuptrust.SETUP_FILE)
        if os.path.realpath(file) != file:
            raise HubError("bad_request", f"{file} leads elsewhere through a symbolic link")
        try:
            data = setuptrust.read_setup(file)
        except setuptrust.SetupFileError as exc:
            raise HubError("not_found", str(exc)) from None
        digest = setuptrust.sha256(data)
        if digest != req.sha256:
            raise HubError(
                "conflict",
                f"{file} has changed: its SHA-256 is now {digest}",
                "read the file again, then allow what it is now",
            )
        self.allowed_setups.allow(digest, file)
        log.info("worktree_setup_allowed", path=file, sha256=digest)
        return WorkspaceAllowSetupResult(path=file, sha256=digest)

    async def review(self, _conn: Connection, req: SessionReview) -> SessionReviewResult:
        if not req.comments:
            raise HubError("bad_request", "a review needs at least one comment")
        if any(not c.text.strip() or c.line < 1 for c in req.comments):
            raise HubError("bad_request", "each comment needs a text and a line from 1")
        text = review_text(req.comments)
        queued = await self.hub.send(req.session, text, [], req.client_msg_id)
        return SessionReviewResult(queued=queued)
