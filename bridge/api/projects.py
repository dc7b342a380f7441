"""The requests of "Projects, workspace, modes": ``projects.list``, ``workspace.*``,
``session.mode`` and the ``mode`` of ``session.create`` (the latter two live in the hub).

``ProjectsApi.register`` adds them to the server's ``Routes`` (bridge/api/dispatch.py); the work is
done in ``bridge/workspace/projects.py``, ``bridge/workspace/views.py`` and ``bridge/hub/modes.py``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from bridge.api.dispatch import Routes
from bridge.config import Config
from bridge.wire.protocol import (
    ProjectsList,
    SessionMode,
    WorkspaceDiff,
    WorkspaceFile,
    WorkspaceStatus,
)
from bridge.wire.results import (
    ProjectsListResult,
    SessionModeResult,
    WorkspaceDiffResult,
    WorkspaceFileResult,
    WorkspaceStatusResult,
    as_result,
)
from bridge.workspace.branch import branch_diff
from bridge.workspace.git import linked_worktrees
from bridge.workspace.projects import Projects, usage_from_sessions
from bridge.workspace.views import WorkspaceError, diff, read_file, real_dir, status

if TYPE_CHECKING:
    from bridge.hub import Hub


def make_projects(config: Config, hub: Hub | None) -> Projects:
    async def usage() -> list[tuple[str, float | None]]:
        if hub is None:
            return []
        own = [(cwd, at) for cwd, at in await hub.session_dirs()]
        external = await usage_from_sessions(hub.external_sessions)
        return own + external

    return Projects(config.projects, usage)


class ProjectsApi:
    def __init__(self, config: Config, hub: Hub) -> None:
        self.hub = hub
        self.projects = make_projects(config, hub)

    def register(self, routes: Routes) -> None:
        routes.add(ProjectsList, self.projects_list, ProjectsListResult)
        routes.add(WorkspaceStatus, self.workspace_status, WorkspaceStatusResult)
        routes.add(WorkspaceDiff, self.workspace_diff, WorkspaceDiffResult)
        routes.add(WorkspaceFile, self.workspace_file, WorkspaceFileResult)
        routes.add(SessionMode, self.session_mode, SessionModeResult)

    async def close(self) -> None:
        await self.projects.close()

    # ---- requests -------------------------------------------------------------------------

    async def projects_list(self, _conn: Any, _req: ProjectsList) -> ProjectsListResult:
        listing = await self.projects.listing()
        for project in listing:
            if project.get("git"):  # its worktrees, each with the sessions working in it
                found = await asyncio.to_thread(linked_worktrees, project["path"])
                if found:
                    project["worktrees"] = [
                        {**w, "sessions": self.hub.sessions_in(str(w["path"]))} for w in found
                    ]
        return as_result({"projects": listing}, ProjectsListResult)

    async def workspace_status(self, _conn: Any, req: WorkspaceStatus) -> WorkspaceStatusResult:
        root = await self.allowed(req.path)
        return as_result(await self._guard(status(root)), WorkspaceStatusResult)

    async def workspace_diff(self, _conn: Any, req: WorkspaceDiff) -> WorkspaceDiffResult:
        root = await self.allowed(req.path)
        if req.base is not None:  # the whole branch (bridge/workspace/branch.py)
            got = await self._guard(branch_diff(root, req.base, req.file))
            return as_result(got, WorkspaceDiffResult)
        return as_result(await self._guard(diff(root, req.file, req.staged)), WorkspaceDiffResult)

    async def workspace_file(self, _conn: Any, req: WorkspaceFile) -> WorkspaceFileResult:
        root = await self.allowed(req.path)
        got = await self._guard(asyncio.to_thread(read_file, root, req.file))
        return as_result(got, WorkspaceFileResult)

    async def session_mode(self, _conn: Any, req: SessionMode) -> SessionModeResult:
        return await self.hub.set_mode(req.session, req.mode)

    # ---- confinement ------------------------------------------------------------------------

    async def _session_dirs(self) -> set[str]:
        out: set[str] = set()
        for cwd in {cwd for cwd, _at in await self.hub.session_dirs()}:
            try:
                out.add(os.path.realpath(cwd))
            except (OSError, ValueError):
                continue
        return out

    async def allowed(self, path: str) -> str:
        """The real path of ``path`` if it is a project or a session's cwd, else a refusal."""
        from bridge.hub import HubError

        try:
            root = real_dir(path)
        except WorkspaceError as exc:
            raise HubError(exc.code, str(exc)) from None
        if self.projects.known(root) or root in await self._session_dirs():
            return root
        await self.projects.listing()  # the cached list: cheap when warm
        if self.projects.known(root):
            return root
        raise HubError("not_found", f"`{path}` is not a project or a session's directory")

    async def _guard(self, work: Awaitable[Any]) -> Any:
        from bridge.hub import HubError

        try:
            return await work
        except WorkspaceError as exc:
            raise HubError(exc.code, str(exc)) from None
