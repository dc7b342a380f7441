"""The requests of a branch's CI: ``workspace.checks`` and ``workspace.check_log``.

The work is bridge/workspace/checks.py's (gh, as ``workspace.pr`` runs it); here are the
daemon's rules around it: a ``path`` must be a project or a session's directory (as for every
view), or ``session`` names the session whose directory it is; gh missing, not logged in or on
no forge is an ``err`` with a ``hint``, never a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.api.dispatch import Routes
from bridge.api.ship import checked, shipped
from bridge.hub import HubError
from bridge.wire.protocol import WorkspaceCheckLog, WorkspaceChecks
from bridge.wire.results import WorkspaceCheckLogResult, WorkspaceChecksResult, as_result
from bridge.workspace import checks, names

if TYPE_CHECKING:
    from bridge.api.projects import ProjectsApi
    from bridge.hub import Hub
    from bridge.server.connection import Connection


class ChecksApi:
    def __init__(self, hub: Hub, projects: ProjectsApi) -> None:
        self.hub = hub
        self.projects = projects

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
        return as_result(await shipped(checks.checks(root)), WorkspaceChecksResult)

    async def check_log(self, _conn: Connection, req: WorkspaceCheckLog) -> WorkspaceCheckLogResult:
        checked(names.text_problem("`check`", req.check, lines=False))
        if not req.check.strip():
            raise HubError("bad_request", "`check` names the failed check")
        root = await self.where(req.path, req.session)
        got = await shipped(checks.check_log(root, req.check))
        return as_result(got, WorkspaceCheckLogResult)
