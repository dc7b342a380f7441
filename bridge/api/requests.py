"""The daemon's own requests: agents, sessions, usage, ping; each registered in the server's
``Routes`` (bridge/api/dispatch.py) with its answer type, and durable where ``ok`` promises it.

Thin on purpose: every handler asks the hub or the registry and shapes the answer.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from bridge.api.dispatch import ALREADY_ANSWERED, Routes

if TYPE_CHECKING:
    from bridge.api.ship import ShipApi
from bridge.config import Config
from bridge.hub import Hub, HubError
from bridge.loading.registry import Registry
from bridge.server.connection import Connection
from bridge.wire.agent_types import DAEMON_AGENT, Check, overall_status
from bridge.wire.protocol import (
    AgentsCheck,
    AgentsList,
    ModelsList,
    Ping,
    Result,
    SessionAttach,
    SessionClose,
    SessionCreate,
    SessionFork,
    SessionHandoff,
    SessionInterrupt,
    SessionPermission,
    SessionSend,
    SessionsList,
    SessionSubscribe,
    SessionUnsubscribe,
    UsageGet,
)
from bridge.wire.results import (
    AgentsCheckResult,
    AgentsListResult,
    Empty,
    ModelsListResult,
    SessionAttachResult,
    SessionCreateResult,
    SessionForkResult,
    SessionHandoffResult,
    SessionSendResult,
    SessionsListResult,
    SessionSubscribeResult,
    UsageGetResult,
)


class CoreRequests:
    def __init__(
        self, config: Config, hub: Hub, registry: Registry, url: Callable[[], str]
    ) -> None:
        self.config = config
        self.hub = hub
        self.registry = registry
        self._url = url
        #: worktrees for session.create (bridge/api/ship.py), set by the server
        self.ship: ShipApi | None = None
        #: The daemon's own checks (``agents.check`` of DAEMON_AGENT), handed in by the daemon.
        self.daemon_checks: Callable[..., list[Check]] | None = None

    def register(self, routes: Routes) -> None:
        routes.add(AgentsList, self.agents_list, AgentsListResult)
        routes.add(AgentsCheck, self.agents_check, AgentsCheckResult)
        routes.add(ModelsList, self.models_list, ModelsListResult)
        routes.add(SessionsList, self.sessions_list, SessionsListResult)
        routes.add(SessionCreate, self.session_create, SessionCreateResult, durable=True)
        routes.add(SessionAttach, self.session_attach, SessionAttachResult, durable=True)
        routes.add(SessionSubscribe, self.session_subscribe, SessionSubscribeResult)
        routes.add(SessionUnsubscribe, self.session_unsubscribe, Empty)
        routes.add(SessionSend, self.session_send, SessionSendResult, durable=True)
        routes.add(SessionFork, self.session_fork, SessionForkResult, durable=True)
        routes.add(SessionInterrupt, self.session_interrupt, Empty)
        routes.add(SessionPermission, self.session_permission, Empty, durable=True)
        routes.add(SessionHandoff, self.session_handoff, SessionHandoffResult)
        routes.add(SessionClose, self.session_close, Empty, durable=True)
        routes.add(UsageGet, self.usage_get, UsageGetResult)
        routes.add(Ping, self.ping, Empty)

    async def agents_list(self, _conn: Connection, _req: AgentsList) -> AgentsListResult:
        await self.registry.wait_detected(1.0)
        agents = [self.registry.agent_object(e) for e in self.registry.entries()]
        for agent in agents:
            agent.limits = self.hub.turns.limits.of(agent.agent)
        return AgentsListResult(agents=agents)

    async def agents_check(self, _conn: Connection, req: AgentsCheck) -> AgentsCheckResult:
        if req.agent == DAEMON_AGENT and self.daemon_checks is not None:
            # The reserved pseudo-agent: the daemon's own checks, as `agent-bridge doctor` runs.
            checks = await asyncio.to_thread(self.daemon_checks, self.config, listening=self._url())
        elif await self.registry.lookup(req.agent, self.config.adapters.start_timeout) is None:
            raise HubError("not_found", f"no agent `{req.agent}`")
        else:
            checks = await self.registry.check(req.agent)
        return AgentsCheckResult(
            status=overall_status(checks),
            checks=checks,
            tested_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        )

    async def models_list(self, _conn: Connection, req: ModelsList) -> ModelsListResult:
        return ModelsListResult(models=await self.hub.models(req.agent))

    async def sessions_list(self, _conn: Connection, req: SessionsList) -> SessionsListResult:
        sessions, next_cursor = await self.hub.list_sessions(
            req.include_external, req.limit, req.cursor
        )
        return SessionsListResult(sessions=sessions, next_cursor=next_cursor)

    async def session_create(self, _conn: Connection, req: SessionCreate) -> SessionCreateResult:
        if req.worktree is None or self.ship is None:
            session, info = await self.hub.create(
                req.agent, req.cwd, req.model, req.effort, req.resume, mode=req.mode
            )
            return SessionCreateResult(session=session, info=info)
        cwd, worktree, said = await self.ship.new_worktree(req)
        try:
            session, info = await self.hub.create(
                req.agent, cwd, req.model, req.effort, req.resume, req.mode, worktree
            )
        except BaseException:
            await self.ship.drop_worktree(worktree)
            raise
        if said is not None:
            self.ship.setup_said(session.session, said)
        return SessionCreateResult(session=session, info=info)

    async def session_attach(self, _conn: Connection, req: SessionAttach) -> SessionAttachResult:
        session = await self.hub.attach(req.agent, req.agent_session_id, req.cwd)
        return SessionAttachResult(session=session)

    async def session_subscribe(self, conn: Connection, req: SessionSubscribe) -> Result:
        """Answered here, before the replay starts: the answer precedes the events."""
        if req.after_seq < 0:
            raise HubError("bad_request", "`after_seq` must be 0 or more")
        result, begin = await self.hub.subscribe(req.session, conn, req.after_seq)
        conn.reply(req.id, result)
        begin()
        return ALREADY_ANSWERED

    async def session_unsubscribe(self, conn: Connection, req: SessionUnsubscribe) -> Empty:
        await self.hub.unsubscribe(req.session, conn)
        return Empty()

    async def session_send(self, _conn: Connection, req: SessionSend) -> SessionSendResult:
        queued, steered = await self.hub.deliver(
            req.session, req.text, req.attachments, req.client_msg_id, steer=req.steer
        )
        if not req.steer:
            return SessionSendResult(queued=queued)
        return SessionSendResult(queued=queued, steered=steered)

    async def session_fork(self, _conn: Connection, req: SessionFork) -> SessionForkResult:
        if req.worktree is None or self.ship is None:
            return SessionForkResult(session=await self.hub.fork(req.session, req.at_seq))
        parent = await self.hub.find(req.session)
        spec = SessionCreate(agent=parent.rec.agent, cwd=parent.rec.cwd, worktree=req.worktree)
        cwd, worktree, said = await self.ship.new_worktree(spec)
        try:
            session = await self.hub.fork(req.session, req.at_seq, cwd, worktree)
        except BaseException:
            await self.ship.drop_worktree(worktree)
            raise
        if said is not None:
            self.ship.setup_said(session.session, said)
        return SessionForkResult(session=session)

    async def session_interrupt(self, _conn: Connection, req: SessionInterrupt) -> Empty:
        await self.hub.interrupt(req.session)
        return Empty()

    async def session_permission(self, _conn: Connection, req: SessionPermission) -> Empty:
        await self.hub.permission(req.session, req.request_id, req.option_id)
        return Empty()

    async def session_handoff(self, _conn: Connection, req: SessionHandoff) -> SessionHandoffResult:
        cmd = await self.hub.handoff(req.session, dry_run=req.dry_run)
        return SessionHandoffResult(argv=cmd.argv, cwd=cmd.cwd, command=shlex.join(cmd.argv))

    async def session_close(self, _conn: Connection, req: SessionClose) -> Empty:
        await self.hub.close(req.session)
        return Empty()

    async def usage_get(self, _conn: Connection, req: UsageGet) -> UsageGetResult:
        return UsageGetResult(usage=await self.hub.usage(req.session))

    async def ping(self, _conn: Connection, _req: Ping) -> Empty:
        return Empty()
