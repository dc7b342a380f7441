"""``session.fork``: plan a fork from the parent's stored events, start the fork's agent, and
copy the history (where it ends and what a replay carries: bridge/hub/fork.py).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from bridge.blocks import AgentInfoBlock, Block, SystemBlock, block_from_json
from bridge.loading.registry import AgentEntry
from bridge.store.store import StoreUnavailable
from bridge.wire.agent_types import ForkPoint
from bridge.wire.protocol import ForkedFrom, ForkRecord

from .fanout import REPLAY_CHUNK, UNCOMMITTED_HIGH
from .fork import ForkCut
from .state import HubError, Session
from .turns import TurnRunner


@dataclass
class ForkPlan:
    """A fork decided: where it ends, the blocks it copies, and how the agent gets them."""

    cut: ForkCut
    history: list[Block]
    #: "native" (the agent forks its own session) or "replay"
    how: str


class Forks:
    """``session.fork``: plan it from the parent's stored events, start the fork's agent, copy
    the history. The hub creates and registers the new session in between."""

    def __init__(self, turns: TurnRunner) -> None:
        self.turns = turns
        self.store = turns.store
        self.fanout = turns.fanout

    async def plan(self, parent: Session, at_seq: int | None, *, native: bool = True) -> ForkPlan:
        """Where the fork ends and how; ``native``: the agent may fork its own session."""
        last = parent.next_seq - 1
        at = last if at_seq is None else at_seq
        if at < 0 or at > last:
            raise HubError("bad_request", f"`at_seq` must be 0 to {last}, the session's last seq")
        how = getattr(self.turns.cls(parent), "cap_fork", "replay")
        if how not in ("native", "replay"):
            raise HubError("bad_request", f"sessions of `{parent.rec.agent}` cannot be forked")
        if not native and how == "native":
            how = "replay"
        cut, history = await self._history(parent, at)
        if how == "native" and cut.turns and not parent.rec.agent_session_id:
            raise HubError(
                "conflict",
                "the agent has not reported its own session yet: fork once its first turn ends",
            )
        return ForkPlan(cut=cut, history=history, how=how if cut.turns else "replay")

    async def _history(self, parent: Session, at_seq: int) -> tuple[ForkCut, list[Block]]:
        with contextlib.suppress(StoreUnavailable):
            await self.store.barrier()  # the parent's latest events are on disk
        cut = ForkCut(at_seq=at_seq)
        kept: list[tuple[int, Block]] = []
        after = 0
        while not cut.done:
            events = await self.store.read_events(parent.id, after, REPLAY_CHUNK)
            if not events:
                cut.finish()
                break
            for ev in events:
                after = ev.seq
                try:
                    block = block_from_json(ev.block_json)
                except Exception:  # noqa: S112 - an unreadable stored block is not copied
                    continue
                kept.append((ev.seq, block))
                cut.feed(ev.seq, block)
                if cut.done:
                    break
        return cut, [block for seq, block in kept if seq <= cut.seq]

    async def start(
        self, s: Session, parent: Session, plan: ForkPlan, entry: AgentEntry
    ) -> AgentInfoBlock:
        """The fork's record, and its agent started (a native fork is made by its first turn)."""
        s.rec.title = f"Fork of {parent.rec.title}"[:80] if parent.rec.title else ""
        s.rec.fork = ForkRecord(origin=ForkedFrom(session=parent.id, seq=plan.cut.seq))
        if plan.how == "native" and parent.rec.agent_session_id:
            s.rec.fork.native = ForkPoint(
                agent_session_id=parent.rec.agent_session_id, turns=plan.cut.turns
            )
        return await self.turns.start_adapter(s, entry)

    async def fill(self, s: Session, plan: ForkPlan, info: AgentInfoBlock) -> None:
        """The fork's first block says where it came from; the copied history follows."""
        assert s.rec.fork is not None
        origin = s.rec.fork.origin
        name = self.turns.cls(s).display_name
        told = (
            f"{name} forked its own session there"
            if plan.how == "native"
            else "the agent is given this conversation as context with the first message"
            if plan.cut.turns
            else "nothing to carry over"
        )
        emit = self.fanout.emit
        emit(
            s,
            SystemBlock(
                code="forked",
                text=f"forked from session {origin.session} at seq {origin.seq} ({told})",
                data={
                    "session": origin.session,
                    "seq": origin.seq,
                    "fork": plan.how,
                    "turns": plan.cut.turns,
                },
            ),
        )
        for block in plan.history:
            emit(s, block)
            if s.uncommitted >= UNCOMMITTED_HIGH:
                await self.fanout.backpressure(s)
        if plan.cut.turns and plan.how == "replay":
            s.rec.fork.replay_seq = s.next_seq - 1
        emit(s, info)
        self.store.save_session(s.rec)
