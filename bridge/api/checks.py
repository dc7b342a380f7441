"""The requests of a branch's CI: ``workspace.checks`` and ``workspace.check_log``.

The work is bridge/workspace/checks.py's (gh, as ``workspace.pr`` runs it); here are the
daemon's rules around it: a ``path`` must be a project or a session's directory (as for every
view), or ``session`` names the session whose directory it is; gh missing, not logged in or on
no forge is an ``err`` with a ``hint``, never a crash.

A ``workspace.checks`` answer with a pending check starts a watch of that directory: gh is
asked again every ``[workspace] checks_poll_s`` until none is pending, then ``on_finished``
is told (bridge/attention sends the notification, unless a person looks at the session). One
watch per directory; it gives up after ``WATCH_MAX_S`` or ``WATCH_ERRORS`` failed asks in a row.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridge.api.dispatch import Routes
from bridge.api.ship import checked, shipped
from bridge.hub import HubError
from bridge.logs import get_logger
from bridge.process import TaskOwner
from bridge.wire.protocol import WorkspaceCheckLog, WorkspaceChecks
from bridge.wire.results import WorkspaceCheckLogResult, WorkspaceChecksResult, as_result
from bridge.workspace import checks, names
from bridge.workspace.gitwrite import ShipError

if TYPE_CHECKING:
    from bridge.api.projects import ProjectsApi
    from bridge.hub import Hub
    from bridge.server.connection import Connection

log = get_logger("bridge.checks")

#: how long a watch waits for pending checks at most, and how many failed asks end it
WATCH_MAX_S = 3 * 3600.0
WATCH_ERRORS = 3

#: told when a watched branch's checks have all finished: the session working there (the
#: first, when several do), the notification's title and its body
Finished = Callable[[str, str, str], None]


def summary(result: dict[str, Any]) -> tuple[str, str]:
    """A finished branch's notification: its title and its body."""
    found = result["checks"]
    failed = [c["name"] for c in found if c["state"] == "failure"]
    pr = result.get("pr")
    on = f" on pull request #{pr['number']}" if pr else ""
    if failed:
        names_ = ", ".join(failed[:5]) + (" and more" if len(failed) > 5 else "")
        return f"CI failed{on}", f"{len(failed)} of {len(found)} checks failed: {names_}"
    return f"CI passed{on}", f"all {len(found)} checks finished without a failure"


class ChecksApi:
    def __init__(self, hub: Hub, projects: ProjectsApi, poll_s: float = 30.0) -> None:
        self.hub = hub
        self.projects = projects
        self.poll_s = poll_s
        self.on_finished: Finished | None = None
        self.tasks = TaskOwner("checks watch")
        self.watched: set[str] = set()

    def register(self, routes: Routes) -> None:
        routes.add(WorkspaceChecks, self.checks, WorkspaceChecksResult)
        routes.add(WorkspaceCheckLog, self.check_log, WorkspaceCheckLogResult)

    async def where(self, path: str | None, session: str | None) -> str:
        """The directory a request means: ``path`` (confined), or ``session``'s."""
        if session is not None:
            if path is not None:
                raise HubError("bad_request", "give `path` or `session`, not both")
            path = self.hub.get(session).rec.cwd
        if not path:
            raise HubError("bad_request", "`path` or `session` is required")
        checked(names.directory_problem("`path`", path))
        return await self.projects.allowed(path)

    async def checks(self, _conn: Connection, req: WorkspaceChecks) -> WorkspaceChecksResult:
        root = await self.where(req.path, req.session)
        got = await shipped(checks.checks(root))
        if _pending(got) and root not in self.watched:
            self.watched.add(root)
            self.tasks.spawn(self._watch(root), name=f"checks watch {os.path.basename(root)}")
        return as_result(got, WorkspaceChecksResult)

    async def _watch(self, root: str) -> None:
        """Ask again until nothing is pending, then tell ``on_finished``."""
        try:
            until = time.monotonic() + WATCH_MAX_S
            errors = 0
            while time.monotonic() < until and errors < WATCH_ERRORS:
                await asyncio.sleep(self.poll_s)
                try:
                    got = await checks.checks(root)
                except ShipError as exc:
                    errors += 1
                    log.info("checks_watch_failed", path=root, error=str(exc))
                    continue
                errors = 0
                if not _pending(got):
                    sessions = self.hub.sessions_in(root)
                    if self.on_finished is not None and sessions and got["checks"]:
                        self.on_finished(sessions[0], *summary(got))
                    return
        finally:
            self.watched.discard(root)

    async def close(self) -> None:
        await self.tasks.close()

    async def check_log(self, _conn: Connection, req: WorkspaceCheckLog) -> WorkspaceCheckLogResult:
        checked(names.text_problem("`check`", req.check, lines=False))
        if not req.check.strip():
            raise HubError("bad_request", "`check` names the failed check")
        root = await self.where(req.path, req.session)
        got = await shipped(checks.check_log(root, req.check))
        return as_result(got, WorkspaceCheckLogResult)


def _pending(result: dict[str, Any]) -> bool:
    return any(c["state"] == "pending" for c in result["checks"])
