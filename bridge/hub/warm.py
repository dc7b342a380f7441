"""Warm start on open: a session whose agent process was stopped starts it again when a client
opens it, so that the person's typing hides the agent's start (seconds for some agents).

Opening is ``session.subscribe`` (the web page subscribes to the session it shows). A session
qualifies when its agent keeps a process (``persistent_process``), it has a conversation to
resume (``agent_session_id``: it ran before), it holds no adapter now (stopped when idle, over
the cap, or by a daemon restart) and nothing else is about to start one: ``idle``, no handoff,
no turn, nothing queued. ``adapters.warm_on_open = false`` turns it off.

It is no turn and adds no event: the only visible change is SESSION ``resident``. The
``agent_info`` block of its start is kept for the next turn, which emits it where a cold start
would have emitted its own. A turn that begins meanwhile waits for the warm start and uses its
agent; a failed start is logged and forgotten (the turn then starts the agent as it always did,
and reports a failure as it always did). A terminal that owns the session parks it instead, as
the next turn would; a handoff or close that begins during the start gets the agent stopped.

The cap (``limits.max_agent_processes``, bridge/hub/resident.py): the warm start counts from its
first moment; at the cap the longest-idle resident agent is stopped for it, as for a turn (the
session a person opens is the one most recently used); when every resident agent is busy it is
skipped, since unlike a turn it may not exceed the cap. Afterwards the idle timer runs as after a
turn: an agent nobody writes to is stopped again after ``adapters.idle_stop_s``.
"""

from __future__ import annotations

import asyncio

import structlog

from bridge.adapters.base import BaseAdapter
from bridge.blocks import AgentInfoBlock
from bridge.logs import get_logger

from .state import HubError, Session
from .turns import ADAPTER_FAILURES, TurnRunner, call_adapter

log = get_logger("bridge.hub")


class Warmer:
    def __init__(self, turns: TurnRunner) -> None:
        self.turns = turns

    def open(self, s: Session) -> None:
        """A client opened ``s``: start its agent in the background if it qualifies."""
        if not self.turns.config.adapters.warm_on_open or not self._stopped(s):
            return
        if s.warming is None or s.warming.done():
            s.warming = self.turns.tasks.spawn(self._run(s), name="warm start")

    def _stopped(self, s: Session) -> bool:
        """No adapter, a conversation to resume, and nothing that would start one."""
        return (
            s.adapter is None
            and s.rec.agent_session_id is not None
            and s.rec.state == "idle"
            and s.rec.intent is None
            and s.turn is None
            and not s.queue
            and not s.running_queue
            and not self.turns.tasks.closing
        )

    def _still_wanted(self, s: Session) -> bool:
        """After the start: the session may take it (a turn waiting for it included)."""
        return (
            s.adapter is None
            and s.rec.state in ("idle", "running")
            and s.rec.intent is None
            and not self.turns.tasks.closing
        )

    async def _run(self, s: Session) -> None:
        with structlog.contextvars.bound_contextvars(session=s.id, agent=s.rec.agent):
            try:
                await self._warm(s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("warm_start_crashed")

    async def _warm(self, s: Session) -> None:
        turns = self.turns
        timeout = turns.config.adapters.start_timeout
        await turns.registry.settle(s.rec.agent, timeout)  # a drop-in agent after a restart
        await turns.resident.settled(s)  # an idle stop still under way ends first
        if not getattr(turns.cls(s), "persistent_process", False) or not self._stopped(s):
            return
        if await turns.park_if_owned(s) or not self._stopped(s):
            return
        if not turns.resident.reserve(s):
            log.info("warm_start_skipped", reason="every resident agent is busy")
            return
        try:
            await turns.resident.room()
            started = await self._start(s, timeout)
            if started is None:
                return
            adapter, info = started
            if not self._still_wanted(s):
                await turns.stop(adapter, s)  # a handoff or close began meanwhile
                return
            turns.adopt(s, adapter)
            s.warm_info = info
            log.info("agent_warm_started")
        finally:
            turns.resident.release(s)

    async def _start(self, s: Session, timeout: float) -> tuple[BaseAdapter, AgentInfoBlock] | None:
        """A started adapter whose process runs, or None (the failure is logged)."""
        try:
            adapter, info = await self.turns.new_adapter(s)
        except HubError as exc:
            log.info("warm_start_failed", error=str(exc))
            return None
        try:
            await call_adapter(adapter.warm_up(), timeout)
        except BaseException as exc:
            await self.turns.stop(adapter, s)
            if not isinstance(exc, ADAPTER_FAILURES):
                raise  # cancelled (the session closes, the daemon stops)
            log.info("warm_start_failed", error=repr(exc))
            return None
        return adapter, info
