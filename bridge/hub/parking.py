"""The single writer: parking, the transcript mirror, the terminal sweep, reattach, handoff.

While a terminal owns a session the hub parks it: messages queue, a mirror streams what the
terminal does (each terminal turn checked like a bridge turn), and a watcher polls ownership
until the terminal lets go, then reattaches on the newest session of the lineage. A sweep
notices terminals that resumed a session the bridge holds without a handoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
import uuid
from collections.abc import AsyncIterator

from bridge.adapters.base import ResumeCommand
from bridge.blocks import Block, SessionEndBlock, SystemBlock, TextBlock, UserBlock
from bridge.invariants import TurnGuard
from bridge.logs import get_logger

from .fanout import Fanout
from .state import HubError, Session
from .turns import ADAPTER_FAILURES, TurnRunner, call_adapter

log = get_logger("bridge.hub")

#: Deadline of one ownership check or lineage lookup (each may scan /proc or a directory).
OWNERSHIP_TIMEOUT_S = 10.0


class Parking:
    def __init__(self, fanout: Fanout, turns: TurnRunner) -> None:
        self.fanout = fanout
        self.turns = turns
        # The hub's own, shared by every stage: reached through the fan-out below.
        self.config = fanout.config
        self.store = fanout.store
        self.tasks = fanout.tasks
        self.sessions = fanout.sessions

    # ---- ownership ---------------------------------------------------------------------------

    async def externally_owned(self, s: Session) -> bool:
        return await self.owned_id(s, s.rec.agent_session_id)

    async def owned_id(self, s: Session, sid: str | None) -> bool:
        cls = self.turns.cls(s)
        if cls.handoff == "none":
            return False
        try:
            return bool(
                await call_adapter(
                    asyncio.to_thread(cls.is_cwd_externally_owned, s.rec.cwd, sid),
                    OWNERSHIP_TIMEOUT_S,
                )
            )
        except Exception as exc:
            log.warning("ownership_check_failed", error=repr(exc))
            return False

    async def park_if_owned(self, s: Session) -> bool:
        """Before a turn: park the session if a terminal owns it (True: no turn now)."""
        if not await self.externally_owned(s):
            return False
        if s.rec.state == "idle" and s.rec.intent is None:
            self.park(s, "a terminal process owns this session")
        return True

    # ---- parking -----------------------------------------------------------------------------

    def park(self, s: Session, why: str, *, handoff: bool = False) -> None:
        """Hand the session to a terminal: messages queue, a mirror shows what it does.

        After ``session.handoff`` no terminal holds it yet: the writer is ``none`` until one
        does. The mirror starts now, from the transcript's current end, so the terminal's first
        lines are not lost to the ownership poll's delay.
        """
        self.fanout.transition(s, "handed_off" if handoff else "park", why)
        self.start_mirror(s)
        self.start_watcher(s, handoff=handoff)

    def start_watcher(self, s: Session, *, handoff: bool) -> None:
        if s.watcher is None or s.watcher.done():
            s.watcher = self.tasks.spawn(self.watch_parked(s, handoff))

    def start_mirror(self, s: Session) -> None:
        if s.mirror is not None and not s.mirror.done():
            return
        cls = self.turns.cls(s)
        sid = s.rec.agent_session_id
        if sid is None or cls.handoff == "none":
            return
        try:
            source = cls.make_transcript_mirror(s.rec.cwd, sid)
        except ADAPTER_FAILURES as exc:
            log.warning("mirror_failed", session=s.id, error=repr(exc))
            return
        if source is not None:
            s.mirror_source = source
            s.mirror = self.tasks.spawn(self.run_mirror(s, source))

    async def run_mirror(self, s: Session, source: AsyncIterator[Block]) -> None:
        """Emit the terminal's activity; each terminal turn is checked like a bridge turn."""
        emit = self.fanout.emit
        guard: TurnGuard | None = None
        # A mirror whose transcript marks no turn end: a turn that got its answer ended
        # normally when the mirror stops; one still without an answer was cut off.
        answered = False
        try:
            async for block in source:
                if isinstance(block, UserBlock):
                    if guard is not None:
                        self.fanout.finish(s, guard, "completed")
                    guard = TurnGuard(s.rec.agent_session_id)
                    answered = False
                    if block.source != "terminal":
                        block = UserBlock(
                            id=block.id,
                            text=block.text,
                            attachments=block.attachments,
                            source="terminal",
                        )
                    emit(s, block)
                elif guard is None and isinstance(block, SystemBlock | SessionEndBlock):
                    if isinstance(block, SystemBlock):
                        emit(s, block)
                else:
                    if guard is None:  # mirroring began in the middle of a terminal turn
                        guard = TurnGuard(s.rec.agent_session_id)
                    answered = answered or isinstance(block, TextBlock)
                    for out in guard.feed(block):
                        emit(s, out)
                    if guard.ended:
                        guard = None
                await self.fanout.backpressure(s)
        except asyncio.CancelledError:
            raise
        except ADAPTER_FAILURES as exc:
            log.warning("mirror_stopped", session=s.id, error=repr(exc))
            answered = False
        finally:
            if guard is not None:
                self.fanout.finish(s, guard, "completed" if answered else "interrupted")
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(BaseException):
                    await aclose()

    async def stop_mirror(self, s: Session) -> None:
        """Let the mirror read the terminal's last lines, then stop it."""
        task, source = s.mirror, s.mirror_source
        s.mirror_source = None
        if task is None or task.done():
            return
        close_at_eof = getattr(source, "close_at_eof", None)
        if close_at_eof is not None:
            close_at_eof()
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), self.config.hub.mirror_drain)
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def watch_parked(self, s: Session, handoff: bool) -> None:
        """Mirror while a terminal owns the session; take it back when the terminal lets go."""
        conf = self.config.hub
        taken = not handoff
        started = time.monotonic()
        released = 0
        try:
            await self.turns.stop_adapter(s)  # the bridge's own process must not hold it now
            while s.rec.state == "parked" and not self.tasks.closing:
                owned = await self.externally_owned(s)
                if owned:
                    released = 0
                    if not taken:
                        taken = True
                        self.fanout.transition(s, "terminal_took", "the terminal took the session")
                    self.start_mirror(s)
                elif taken:
                    # Two readings in a row: a registry file being rewritten is not an exit.
                    released += 1
                    if released >= 2 and await self.reattach(s, "the terminal released it"):
                        return
                elif time.monotonic() - started > conf.handoff_wait and await self.reattach(
                    s, "no terminal took the session"
                ):
                    return
                await asyncio.sleep(conf.park_poll)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("watcher_failed", session=s.id)

    async def reattach(self, s: Session, why: str) -> bool:
        """Back to the bridge, on the newest session of the lineage; False if that one is
        owned by a terminal (then the session stays parked, following it)."""
        cls = self.turns.cls(s)
        try:
            head = await call_adapter(
                asyncio.to_thread(cls.latest_sid_for_cwd, s.rec.cwd), OWNERSHIP_TIMEOUT_S
            )
        except Exception:
            head = None
        if head and head != s.rec.agent_session_id:
            self.fanout.emit(
                s,
                SystemBlock(
                    code="lineage",
                    text=f"continuing the newest session {head}",
                    data={"agent_session_id": head},
                ),
            )
            s.rec.agent_session_id = head
            self.store.save_session(s.rec)
            if await self.externally_owned(s):
                return False
        await self.stop_mirror(s)
        if s.rec.state != "parked":
            return True  # closed meanwhile
        s.restart_adapter = True
        self.fanout.transition(s, "reattach", why)
        self.turns.kick(s)
        return True

    # ---- the sweep ---------------------------------------------------------------------------

    async def sweep_terminals(self) -> None:
        """Notice a terminal that resumed a session on its own (no handoff asked).

        An idle session is parked at once, so the app sees the terminal's turns live instead of
        at its next message. A running one is a second writer already: the bridge's turn is
        stopped (``session_end`` reason ``handoff``) and the session parks before its next turn;
        the person at the terminal wins.
        """
        wake = self.fanout.sweep_wake
        while not self.tasks.closing:
            if not any(self._sweepable(s) for s in self.sessions.values()):
                # Nothing a terminal could take: no timer until a session changes state or
                # learns its agent's session id (an idle daemon does not wake for this).
                wake.clear()
                await wake.wait()
            await asyncio.sleep(self.config.hub.sweep_interval)
            try:
                await self.sweep_once()
            except Exception:
                log.exception("terminal_sweep_failed")

    def _sweepable(self, s: Session) -> bool:
        return bool(
            s.rec.state in ("idle", "running")
            and s.rec.agent_session_id
            and s.rec.intent is None
            and self.turns.cls(s).handoff != "none"
        )

    async def sweep_once(self) -> None:
        candidates = sorted(
            (s for s in self.sessions.values() if self._sweepable(s)),
            key=lambda s: s.rec.updated_at,
            reverse=True,
        )[: self.config.hub.sweep_max]
        for s in candidates:
            if s.rec.state not in ("idle", "running") or not await self.externally_owned(s):
                continue
            if s.rec.intent is not None:
                continue  # a handoff began during the check: it parks the session itself
            if s.rec.state == "idle" and not s.running_queue:
                self.park(s, "a terminal process resumed this session")
            elif s.turn is not None and not s.turn.interrupting and not s.turn.terminal_seen:
                s.turn.terminal_seen = True
                # Only an adapter that tells this session's owner from any process of the
                # CLI in the same directory (which would also "own" a made-up id) justifies
                # stopping work; otherwise the next turn waits for the terminal.
                precise = not await self.owned_id(s, f"probe-{uuid.uuid4().hex}")
                text = "a terminal resumed this session during the bridge's turn"
                self.fanout.emit(
                    s,
                    SystemBlock(
                        level="warn",
                        code="terminal_took_over",
                        text=text + ("; the bridge's turn is stopped" if precise else ""),
                    ),
                )
                if precise:
                    s.turn.end_reason = "handoff"
                    await self.turns.interrupt(s, "a terminal took the session")

    # ---- handoff -----------------------------------------------------------------------------

    async def handoff(self, s: Session, *, dry_run: bool = False) -> ResumeCommand:
        cls = self.turns.cls(s)
        pending = s.rec.state == "parked" and s.rec.intent == "handoff"
        if s.rec.state in ("parked", "ended") and not pending:
            raise HubError("conflict", f"the session is {s.rec.state}")
        if cls.handoff == "none":
            raise HubError("conflict", f"{cls.display_name} cannot continue in a terminal")
        if not s.rec.agent_session_id:
            raise HubError("conflict", "the agent has not reported a session id yet")
        try:
            command = cls.terminal_resume_command(s.rec.agent_session_id, s.rec.cwd)
        except ADAPTER_FAILURES as exc:
            why = f"{cls.display_name} failed to give a command to resume with: {exc}"
            raise HubError("conflict", why) from None
        if command is None:
            raise HubError("conflict", f"{cls.display_name} gave no command to resume with")
        if pending or dry_run or s.rec.intent == "handoff":
            return command  # asked again (a lost answer, a retry), or only asked: no stop
        # The intent is durable before any process is stopped, so a crash in between resumes
        # the handoff at the next start instead of forgetting it.
        self.fanout.transition(s, "handoff_asked", "handoff to a terminal")
        await self.store.flush()
        self.fanout.emit(
            s,
            SystemBlock(
                code="handoff",
                text=f"continue in a terminal: cd {shlex.quote(command.cwd)} && "
                f"{shlex.join(command.argv)}",
                data={"argv": command.argv, "cwd": command.cwd},
            ),
        )
        turn = s.turn
        if turn is not None:
            turn.end_reason = "handoff"
            await self.turns.interrupt(s, "handoff to a terminal")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(s.idle.wait(), self.config.adapters.stop_grace + 5)
        await self.turns.stop_adapter(s)
        if s.rec.state in ("idle", "running"):
            self.park(s, "handed off to a terminal", handoff=True)
        await self.store.flush()
        return command
