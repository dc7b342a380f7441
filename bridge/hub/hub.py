"""The hub's facade: what the server and the daemon call.

It owns the sessions and wires the stages, each of which knows only those below it::

    hub.py      start-up and recovery, create/attach/close, send, slash commands, listing
    parking.py  park, mirror, watcher, sweep, reattach, handoff
    warm.py     start a stopped agent when a client opens its session
    forks.py    session.fork: plan, start the fork's agent, copy the history (fork.py: the cut)
    turns.py    adapter lifecycle, the queue, the turn runner, call_adapter()
    fanout.py   emit, publish after commit, state frames, pacing, subscribe/replay
    state.py    Session, Turn, Subscription, the transition table
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shlex
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from bridge.adapters.base import BaseAdapter, ResumeCommand, cwd_matches
from bridge.blocks import (
    AgentInfoBlock,
    Block,
    ErrorBlock,
    SystemBlock,
    UsageBlock,
    UserBlock,
    block_from_json,
)
from bridge.config import Config
from bridge.hub import modes
from bridge.hub.commands import SlashCommand, help_text, parse_command
from bridge.invariants import TurnGuard
from bridge.loading.registry import AgentEntry, Registry
from bridge.logs import get_logger
from bridge.store.records import AttachmentData, MessageRecord, SessionRecord
from bridge.store.store import Store, StoreUnavailable
from bridge.wire.agent_types import ModelInfo
from bridge.wire.protocol import Attachment, SessionObject, WorktreeObject
from bridge.wire.results import SessionModeResult, SessionSubscribeResult

from .fanout import REPLAY_CHUNK, Fanout
from .forks import Forks
from .parking import Parking
from .state import HubError, Session, Subscriber, Tasks, iso, safe_attachment_name
from .textsafe import clean_text
from .turns import TurnRunner, call_adapter
from .warm import Warmer

log = get_logger("bridge.hub")

#: The longest the first listing waits for the first scan of terminal sessions.
FIRST_SCAN_WAIT_S = 2.0
#: Deadline of one adapter's scan for terminal sessions (it reads the CLI's files).
SCAN_TIMEOUT_S = 10.0
#: Ended sessions kept in memory, the most recently ended or read: a client reading one right
#: after it ends does not wait for the store. The others are read back when asked for.
ENDED_IN_MEMORY = 64
#: ``sessions.list``: sessions per page when the request names no ``limit``, and the most.
LIST_DEFAULT = 1000
LIST_MAX = 5000


class Hub:
    def __init__(self, config: Config, registry: Registry, store: Store) -> None:
        self.config = config
        self.registry = registry
        self.store = store
        #: Sessions not ended, and the ENDED_IN_MEMORY ended ones used last (``_ended``).
        self.sessions: dict[str, Session] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()
        self.tasks = Tasks()
        self.fanout = Fanout(config, store, self.sessions, self.tasks)
        self.turns = TurnRunner(
            config, registry, store, self.fanout, self.tasks, self._park_if_owned
        )
        self.parking = Parking(self.fanout, self.turns)
        self.resident = self.turns.resident
        self.warm = Warmer(self.turns)
        self.forks = Forks(self.turns)
        registry.on_change(self.fanout.sweep_wake.set)
        self._external_cache: tuple[float, list[SessionObject]] = (0.0, [])
        self._external_refresh: asyncio.Task[None] | None = None

    async def _park_if_owned(self, s: Session) -> bool:
        return await self.parking.park_if_owned(s)

    # ---- start-up and shutdown ---------------------------------------------------------------

    async def start(self) -> None:
        # Sessions not ended; an ended one is read back when a request names it (``find``).
        sessions, messages, seqs = await asyncio.to_thread(self.store.load)
        for rec in sessions:
            self.sessions[rec.id] = _revive(rec, seqs.get(rec.id, 0))
        for msg in messages:
            owner = self.sessions.get(msg.session)
            if owner is not None:
                self._known_message(owner, msg)
        self.turns.limits.restore(await self.store.latest_limits())
        for s in list(self.sessions.values()):
            await self._recover(s)
        self.tasks.spawn(self.parking.sweep_terminals())

    def _known_message(self, s: Session, msg: MessageRecord) -> None:
        queued = msg.status == "queued"
        if msg.status == "steered":
            s.steered.add(msg.client_msg_id)
        s.answered[msg.client_msg_id] = (
            queued if msg.answered_queued is None else msg.answered_queued
        )
        if queued:
            s.queue.append(self.store.spill(msg))

    async def _recover(self, s: Session) -> None:
        """Close a turn the daemon died in, restore parking, and continue the queue."""
        if s.rec.state == "running":
            guard = TurnGuard(s.rec.agent_session_id)
            after = 0
            while True:
                events = await self.store.read_events(s.id, after, REPLAY_CHUNK)
                if not events:
                    break
                for ev in events:
                    after = ev.seq
                    try:
                        block = block_from_json(ev.block_json)
                    except Exception:  # noqa: S112 - an unreadable stored block is skipped
                        continue
                    if isinstance(block, UserBlock) and block.source == "bridge":
                        guard = TurnGuard(s.rec.agent_session_id)
                    guard.feed(block)
            self.fanout.emit(
                s,
                ErrorBlock(
                    code="daemon_restarted",
                    message="the daemon stopped while this turn was running",
                ),
            )
            self.fanout.finish(s, guard, "error")
            self.fanout.transition(s, "turn_end", "the daemon restarted during a turn")
        if s.rec.intent == "handoff" and s.rec.state not in ("parked", "ended"):
            # The daemon died between recording a handoff and parking: finish the handoff.
            why = "resuming the handoff to a terminal after a restart"
            self.fanout.transition(s, "handed_off", why)
        if self.registry.may_change(s.rec.agent):
            # A drop-in agent: mirrors, watchers and turns need its class, which the
            # loader brings after the daemon listens.
            self.tasks.spawn(self._resume_after_load(s))
        else:
            self._resume(s)

    async def _resume_after_load(self, s: Session) -> None:
        await self.registry.settle(s.rec.agent, self.config.adapters.start_timeout)
        if not self.tasks.closing:
            self._resume(s)

    def _resume(self, s: Session) -> None:
        """Restart the mirror and watcher of a parked session; continue the queue."""
        if s.rec.state == "parked":
            self.parking.start_mirror(s)
            self.parking.start_watcher(s, handoff=s.rec.intent == "handoff")
        self.turns.kick(s)

    async def shutdown(self) -> None:
        """Interrupt running turns, stop every adapter, flush the store."""
        self.tasks.closing = True
        self.resident.close()
        grace = self.config.adapters.stop_grace
        running = [s for s in self.sessions.values() if s.turn is not None]
        # All at once: a hung agent must not make every other one wait its grace period.
        await asyncio.gather(
            *(self.turns.interrupt(s, "the daemon is shutting down") for s in running),
            return_exceptions=True,
        )
        if running:
            idle = [self.tasks.spawn(s.idle.wait(), name="idle") for s in running]
            await asyncio.wait(idle, timeout=grace + 1)
        for s in self.sessions.values():
            _cancel(s)
        await asyncio.gather(
            *(self.turns.stop_adapter(s) for s in self.sessions.values()), return_exceptions=True
        )
        await self.tasks.close()
        await self.store.flush()

    # ---- queries -----------------------------------------------------------------------------

    def get(self, session_id: str) -> Session:
        """A session in memory (not ended, or ended lately); ``find`` reads back the others."""
        s = self.sessions.get(session_id)
        if s is None:
            raise HubError("not_found", f"no session `{session_id}`")
        return s

    async def find(self, session_id: str) -> Session:
        """The session, read back from the store if it ended and left memory."""
        s = self.sessions.get(session_id)
        if s is None:
            loaded = await self.store.load_session(session_id)
            if loaded is None:
                raise HubError("not_found", f"no session `{session_id}`")
            s = self.sessions.get(session_id)  # read back meanwhile by another request
            if s is None:
                rec, messages, top = loaded
                s = _revive(rec, top)
                for msg in messages:
                    self._known_message(s, msg)
                self.sessions[s.id] = s
        if s.rec.state == "ended":
            self._remember_ended(s)
        return s

    def _remember_ended(self, s: Session) -> None:
        self._ended[s.id] = None
        self._ended.move_to_end(s.id)
        self.trim()

    def trim(self) -> None:
        """Drop from memory the ended sessions used longest ago beyond ENDED_IN_MEMORY; one
        that a connection still subscribes to, or whose events are not all committed, stays
        until it is free."""
        excess = len(self._ended) - ENDED_IN_MEMORY
        for sid in list(self._ended):
            if excess <= 0:
                return
            s = self.sessions.get(sid)
            if s is not None and (s.subs or s.uncommitted or s.last_pending is not None):
                continue
            del self._ended[sid]
            if s is not None and s.rec.state == "ended":
                del self.sessions[sid]
            excess -= 1

    def forget_ended(self, cutoff: float) -> None:
        """Retention removed the ended sessions last changed before ``cutoff``."""
        for sid, s in list(self.sessions.items()):
            if s.rec.state == "ended" and s.rec.updated_at < cutoff:
                del self.sessions[sid]
                self._ended.pop(sid, None)

    def session_object(self, s: Session) -> SessionObject:
        obj = self._object(s.rec, s.next_seq - 1, len(s.queue), self.resident.resident(s))
        if s.turn is not None and s.turn.guard.pending_permissions and not s.turn.guard.ended:
            obj.needs = "permission"
        return obj

    @staticmethod
    def _object(rec: SessionRecord, last_seq: int, queued: int, resident: bool) -> SessionObject:
        return SessionObject(
            session=rec.id,
            agent=rec.agent,
            cwd=rec.cwd,
            title=rec.title,
            state=rec.state,
            writer=rec.writer,
            created_at=iso(rec.created_at),
            updated_at=iso(rec.updated_at),
            last_seq=last_seq,
            agent_session_id=rec.agent_session_id,
            external=rec.external,
            queued=queued,
            model=rec.model,
            mode=rec.mode,
            resident=resident,
            worktree=rec.worktree,
            forked_from=rec.fork.origin if rec.fork is not None else None,
        )

    async def list_sessions(
        self, include_external: bool, limit: int | None = None, cursor: str | None = None
    ) -> tuple[list[SessionObject], str | None]:
        """One page of the daemon's sessions, most recently changed first, and the cursor of
        the next page (None after the last); external ones follow on the first page."""
        if limit is None:
            limit = LIST_DEFAULT
        if not 1 <= limit <= LIST_MAX:
            raise HubError("bad_request", f"`limit` must be 1 to {LIST_MAX}")
        before = (math.inf, "") if cursor is None else _parse_cursor(cursor)
        found: dict[str, tuple[tuple[float, str], SessionObject]] = {
            s.id: ((s.rec.updated_at, s.id), self.session_object(s))
            for s in self.sessions.values()
            if (s.rec.updated_at, s.id) < before
        }
        for rec in await self.store.list_ended(before, limit + 1):
            if rec.id not in found:
                obj = self._object(rec, rec.last_seq, 0, False)
                found[rec.id] = ((rec.updated_at, rec.id), obj)
        page = sorted(found.values(), key=lambda item: item[0], reverse=True)
        more = len(page) > limit
        page = page[:limit]
        own = [obj for _key, obj in page]
        next_cursor = f"{page[-1][0][0]!r}:{page[-1][0][1]}" if more else None
        if not include_external or cursor is not None:
            return own, next_cursor
        return own + await self.external_sessions(), next_cursor

    def busy_in(self, path: str) -> str | None:
        """Why a write to the repository at ``path`` must wait, or None: a session working at
        or under it runs a turn, or a terminal holds it (the single-writer guard)."""
        top = os.path.realpath(path)
        for s in self.sessions.values():
            try:
                cwd = os.path.realpath(s.rec.cwd)
            except (OSError, ValueError):
                continue
            if cwd != top and not cwd.startswith(top.rstrip(os.sep) + os.sep):
                continue
            if s.rec.state == "running" or s.turn is not None:
                return f"a turn of session {s.id} runs there: wait for it, or stop it"
            if s.rec.state == "parked" or s.rec.writer == "terminal":
                return f"session {s.id} is open in a terminal, which writes there now"
        return None

    def sessions_in(self, path: str) -> list[str]:
        """The sessions (not ended) working at ``path`` or under it."""
        top = os.path.realpath(path)
        return [
            s.id
            for s in self.sessions.values()
            if s.rec.state != "ended"
            and (
                os.path.realpath(s.rec.cwd) == top
                or os.path.realpath(s.rec.cwd).startswith(top.rstrip(os.sep) + os.sep)
            )
        ]

    def note(self, session_id: str, block: Block) -> None:
        """Add a block the daemon itself says to a session (a worktree's setup output)."""
        self.fanout.emit(self.get(session_id), block)

    async def session_dirs(self) -> list[tuple[str, float]]:
        """(``cwd``, ``updated_at``) of every session of the daemon's, ended ones included."""
        out = {s.id: (s.rec.cwd, s.rec.updated_at) for s in self.sessions.values()}
        for sid, cwd, updated in await self.store.ended_dirs():
            out.setdefault(sid, (cwd, updated))
        return list(out.values())

    async def external_sessions(self) -> list[SessionObject]:
        stamp, cached = self._external_cache
        if time.monotonic() - stamp > self.config.hub.external_cache:
            if self._external_refresh is None or self._external_refresh.done():
                self._external_refresh = self.tasks.spawn(self._scan_external())
            if stamp == 0.0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        asyncio.shield(self._external_refresh), FIRST_SCAN_WAIT_S
                    )
                stamp, cached = self._external_cache
        known = {
            (s.rec.agent, s.rec.agent_session_id)
            for s in self.sessions.values()
            if s.rec.state != "ended"
        }
        return [o for o in cached if (o.agent, o.agent_session_id) not in known]

    async def _scan_external(self) -> None:
        found: list[SessionObject] = []
        for entry in self.registry.entries():
            cls = entry.cls
            if _not_overridden(cls, "scan_external_sessions"):
                continue
            try:
                items = await call_adapter(
                    asyncio.to_thread(cls.scan_external_sessions), SCAN_TIMEOUT_S
                )
            except Exception as exc:
                log.warning("scan_external_failed", agent=entry.agent_id, error=repr(exc))
                continue
            for item in items:
                found.append(
                    SessionObject(
                        session=f"ext:{entry.agent_id}:{item.agent_session_id}",
                        agent=entry.agent_id,
                        cwd=item.cwd,
                        title=item.title,
                        state="parked" if item.owned else "idle",
                        writer="terminal" if item.owned else "none",
                        created_at=iso(item.updated_at),
                        updated_at=iso(item.updated_at),
                        last_seq=0,
                        agent_session_id=item.agent_session_id,
                        external=True,
                    )
                )
        found.sort(key=lambda o: o.updated_at, reverse=True)
        self._external_cache = (time.monotonic(), found)

    # ---- create / attach / close -------------------------------------------------------------

    async def _entry(self, agent: str) -> AgentEntry:
        entry = await self.registry.lookup(agent, self.config.adapters.start_timeout)
        if entry is None:
            raise HubError("not_found", f"no agent `{agent}`")
        if entry.detect_done and (entry.detected is None or not entry.detected.available):
            raise HubError(
                "agent_unavailable",
                f"agent `{agent}` is not available here: "
                + (self.registry.agent_object(entry).error or "not detected"),
            )
        if not entry.config.enabled:
            raise HubError("agent_unavailable", f"agent `{agent}` is disabled in the config")
        return entry

    @staticmethod
    def _check_cwd(cwd: str) -> str:
        if not cwd or "\x00" in cwd:
            raise HubError("bad_request", "`cwd` must be a directory path")
        try:
            path = Path(cwd).expanduser()
        except RuntimeError:  # `~user` of no such user
            raise HubError("bad_request", f"`cwd` `{cwd}`: no such user's home") from None
        if not path.is_absolute():
            raise HubError("bad_request", f"`cwd` must be an absolute path, not `{cwd}`")
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError):
            raise HubError("bad_request", f"`cwd` `{cwd}` does not exist") from None
        if not resolved.is_dir():
            raise HubError("bad_request", f"`cwd` `{cwd}` is not a directory")
        if not os.access(resolved, os.R_OK | os.X_OK):
            raise HubError("bad_request", f"`cwd` `{cwd}` is not accessible")
        return str(resolved)

    def _new_record(
        self,
        agent: str,
        cwd: str,
        model: str | None,
        effort: str | None,
        agent_session_id: str | None,
        external: bool,
    ) -> Session:
        live = sum(1 for other in self.sessions.values() if other.rec.state != "ended")
        if live >= self.config.limits.max_sessions:
            raise HubError(
                "conflict", f"the daemon already holds {live} sessions not ended (the limit)"
            )
        now = time.time()
        rec = SessionRecord(
            id=f"s_{uuid.uuid4().hex[:16]}",
            agent=agent,
            cwd=cwd,
            model=model,
            effort=effort,
            created_at=now,
            updated_at=now,
            agent_session_id=agent_session_id,
            external=external,
        )
        s = Session(rec=rec)
        s.idle.set()
        return s

    async def create(
        self,
        agent: str,
        cwd: str,
        model: str | None = None,
        effort: str | None = None,
        resume: str | None = None,
        mode: str | None = None,
        worktree: WorktreeObject | None = None,
    ) -> tuple[SessionObject, AgentInfoBlock]:
        entry = await self._entry(agent)
        if (why := modes.problem(entry.cls, mode)) is not None:
            raise HubError("bad_request", why)
        cwd = self._check_cwd(cwd)
        s = self._new_record(
            agent,
            cwd,
            model or entry.config.model,
            effort or entry.config.effort,
            resume,
            external=False,
        )
        s.rec.mode = mode
        s.rec.worktree = worktree
        info = await self.turns.start_adapter(s, entry)
        self.sessions[s.id] = s
        self.store.save_session(s.rec)
        self.fanout.emit(s, info)
        return self.session_object(s), info

    async def fork(
        self,
        session_id: str,
        at_seq: int | None = None,
        cwd: str | None = None,
        worktree: WorktreeObject | None = None,
    ) -> SessionObject:
        """``session.fork`` (bridge/hub/fork.py), in ``cwd`` (default: the parent's)."""
        parent = await self.find(session_id)
        entry = await self._entry(parent.rec.agent)
        rec = parent.rec
        where = self._check_cwd(cwd) if cwd is not None else rec.cwd
        # An agent's own fork stays where its session is: another directory gets a replay.
        plan = await self.forks.plan(parent, at_seq, native=where == rec.cwd)
        s = self._new_record(rec.agent, where, rec.model, rec.effort, None, external=False)
        s.rec.mode = rec.mode
        s.rec.worktree = worktree
        info = await self.forks.start(s, parent, plan, entry)
        self.sessions[s.id] = s
        await self.forks.fill(s, plan, info)
        return self.session_object(s)

    async def attach(self, agent: str, agent_session_id: str, cwd: str) -> SessionObject:
        entry = await self._entry(agent)
        cwd = self._check_cwd(cwd)
        for s in self.sessions.values():
            if (
                s.rec.agent == agent
                and s.rec.agent_session_id == agent_session_id
                and s.rec.state != "ended"
            ):
                return self.session_object(s)
        found = next(
            (
                o
                for o in self._external_cache[1]
                if o.agent == agent and o.agent_session_id == agent_session_id
            ),
            None,
        )
        if found is not None and not cwd_matches(found.cwd, cwd):
            # Resuming from another directory would not find it, or would fork it there.
            raise HubError(
                "bad_request", f"session `{agent_session_id}` belongs to `{found.cwd}`, not `{cwd}`"
            )
        s = self._new_record(agent, cwd, entry.config.model, None, agent_session_id, True)
        s.rec.title = (found.title if found else "") or f"{entry.cls.display_name} terminal session"
        self.sessions[s.id] = s
        self.store.save_session(s.rec)
        self.fanout.emit(
            s,
            SystemBlock(
                code="attached",
                text=f"attached to {agent} session {agent_session_id} in {cwd}",
            ),
        )
        await self.parking.park_if_owned(s)
        return self.session_object(s)

    async def close(self, session_id: str) -> None:
        s = await self.find(session_id)
        if s.rec.state == "ended":
            return
        if s.turn is not None:
            await self.turns.interrupt(s, "the session is being closed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(s.idle.wait(), self.config.adapters.stop_grace + 2)
        _cancel(s)
        await self.turns.stop_adapter(s)
        if s.ended():
            return  # closed by a concurrent request meanwhile
        dropped = self.turns.drop_queue(s)
        why = "closed by a client" + (f"; {dropped} queued message(s) dropped" if dropped else "")
        self.fanout.transition(s, "close", why)
        with contextlib.suppress(StoreUnavailable):
            await self.store.barrier()  # on disk before it may leave memory
        self._remember_ended(s)

    # ---- sending -----------------------------------------------------------------------------

    def _validate_attachments(
        self, s: Session, attachments: list[Attachment]
    ) -> list[AttachmentData]:
        limits = self.config.limits
        if len(attachments) > limits.max_attachments:
            raise HubError("too_large", f"at most {limits.max_attachments} attachments per message")
        cls = self.turns.cls(s)
        out: list[AttachmentData] = []
        for att in attachments:
            if len(att.data) > limits.max_attachment_bytes:
                raise HubError(
                    "too_large",
                    f"attachment `{safe_attachment_name(att.name)}` is over "
                    f"{limits.max_attachment_bytes} bytes",
                )
            is_image = att.mime.lower().startswith("image/")
            if is_image and not getattr(cls, "cap_images", False):
                raise HubError("bad_request", "this agent does not accept images")
            if not is_image and not getattr(cls, "cap_documents", False):
                raise HubError("bad_request", "this agent does not accept documents")
            out.append(
                AttachmentData(name=safe_attachment_name(att.name), mime=att.mime, data=att.data)
            )
        return out

    async def send(
        self,
        session_id: str,
        text: str,
        attachments: list[Attachment],
        client_msg_id: str | None,
    ) -> bool:
        queued, _steered = await self.deliver(session_id, text, attachments, client_msg_id)
        return queued

    async def deliver(
        self,
        session_id: str,
        text: str,
        attachments: list[Attachment],
        client_msg_id: str | None,
        steer: bool = False,
    ) -> tuple[bool, bool]:
        """``session.send``: (queued, steered). With ``steer``, into the running turn where its
        agent can take it; otherwise, or when it cannot, as any message."""
        s = await self.find(session_id)
        # a lone surrogate (no client sends one: its JSON is refused) could not be stored
        text = clean_text(text)
        msg_id = client_msg_id or f"m_{uuid.uuid4().hex[:16]}"
        if client_msg_id is not None and msg_id in s.answered:
            return s.answered[msg_id], msg_id in s.steered
        if client_msg_id is not None and msg_id in s.deciding:
            queued = await self.turns.answer_of(s, msg_id)  # a retransmit while it is decided
            return queued, msg_id in s.steered
        if s.rec.state == "ended":
            raise HubError("conflict", "the session has ended")
        command = parse_command(text) if not attachments else None
        if command is not None:
            s.answered[msg_id] = False
            self.store.save_message(
                MessageRecord(
                    session=s.id,
                    client_msg_id=msg_id,
                    text=text,
                    status="command",
                    created_at=time.time(),
                )
            )
            self.fanout.emit(s, UserBlock(id=msg_id, text=text, source="bridge"))
            await self._run_command(s, command)
            return False, False
        if len(s.queue) >= self.config.limits.max_queued_messages:
            raise HubError(
                "rate_limited",
                f"{len(s.queue)} messages are already waiting in this session (the limit)",
            )
        data = self._validate_attachments(s, attachments)
        msg = MessageRecord(
            session=s.id,
            client_msg_id=msg_id,
            text=text,
            attachments=data,
            created_at=time.time(),
        )
        if not s.rec.title:
            s.rec.title = " ".join(text.split())[:80]
        if steer and self.turns.may_steer(s):
            return await self.turns.steer(s, msg)
        # Whether it starts or waits (a terminal may own the session) is the queue's call.
        return await self.turns.admit(s, msg), False

    # ---- requests the stages answer --------------------------------------------------------------

    async def interrupt(self, session_id: str) -> None:
        await self.turns.interrupt(await self.find(session_id), "interrupted by a client")

    async def permission(self, session_id: str, request_id: str, option_id: str) -> None:
        await self.turns.permission(await self.find(session_id), request_id, option_id)

    async def usage(self, session_id: str) -> UsageBlock | None:
        return await self.turns.usage(await self.find(session_id))

    async def set_mode(self, session_id: str, mode: str) -> SessionModeResult:
        """``session.mode`` (bridge/hub/modes.py)."""
        s = await self.find(session_id)
        cls = self.turns.cls(s)
        if (why := modes.problem(cls, mode)) is not None:
            raise HubError("bad_request", why)
        if s.rec.state == "ended":
            raise HubError("conflict", "the session has ended")
        return await modes.switch(cls, self.store, self.fanout.emit, s, mode)

    async def models(self, agent: str) -> list[ModelInfo]:
        return await self.turns.models(agent)

    async def handoff(self, session_id: str, *, dry_run: bool = False) -> ResumeCommand:
        return await self.parking.handoff(await self.find(session_id), dry_run=dry_run)

    async def subscribe(
        self, session_id: str, conn: Subscriber, after_seq: int
    ) -> tuple[SessionSubscribeResult, Callable[[], None]]:
        s = await self.find(session_id)
        subscribed = self.fanout.subscribe(s, conn, after_seq)
        self.warm.open(s)
        return subscribed

    async def unsubscribe(self, session_id: str, conn: Subscriber) -> None:
        self.fanout.unsubscribe(await self.find(session_id), conn)
        self.trim()

    def drop_connection(self, conn: Subscriber) -> None:
        self.fanout.drop_connection(conn)
        self.trim()

    # ---- slash commands ----------------------------------------------------------------------

    async def _run_command(self, s: Session, command: SlashCommand) -> None:
        emit = self.fanout.emit
        name = command.name
        if name == "help":
            emit(s, SystemBlock(code="help", text=help_text()))
        elif name == "status":
            text = (
                f"state: {s.rec.state}, writer: {s.rec.writer}, queued: {len(s.queue)}, "
                f"agent session: {s.rec.agent_session_id or '-'}, model: {s.rec.model or '-'}"
            )
            emit(s, SystemBlock(code="status", text=text))
            if self.turns.cls(s).provides_usage:
                usage = await self.usage(s.id)
                if usage is not None:
                    emit(s, usage)
        elif name == "stop":
            running = s.turn is not None
            emit(
                s,
                SystemBlock(code="stop", text="interrupting" if running else "no turn is running"),
            )
            if running:
                await self.turns.interrupt(s, "/stop")
        elif name == "model":
            self._command_model(s, command.argument)
        elif name == "terminal":
            try:
                cmd = await self.handoff(s.id)
            except HubError as exc:
                emit(s, ErrorBlock(code=exc.code, message=str(exc)))
            else:
                emit(
                    s,
                    SystemBlock(
                        code="terminal",
                        text=shlex.join(cmd.argv),
                        data={"argv": cmd.argv, "cwd": cmd.cwd},
                    ),
                )

    def _command_model(self, s: Session, model: str) -> None:
        emit = self.fanout.emit
        if not getattr(self.turns.cls(s), "provides_models", False):
            emit(s, ErrorBlock(code="model", message="this agent does not let you choose a model"))
            return
        if not model:
            emit(s, ErrorBlock(code="model", message="usage: /model <id>"))
            return
        s.rec.model = model
        s.restart_adapter = True
        self.store.save_session(s.rec)
        emit(s, SystemBlock(code="model", text=f"model {model} from the next turn"))


def _revive(rec: SessionRecord, top_seq: int) -> Session:
    """A session read from the store (at start-up, or an ended one asked for)."""
    s = Session(rec=rec, next_seq=max(rec.last_seq, top_seq) + 1)
    s.published_seq = s.next_seq - 1  # everything on disk may be replayed
    s.idle.set()
    if rec.usage is not None:
        with contextlib.suppress(Exception):
            usage = block_from_json(rec.usage)
            s.usage = usage if isinstance(usage, UsageBlock) else None
    return s


def _parse_cursor(cursor: str) -> tuple[float, str]:
    at, sep, sid = cursor.partition(":")
    try:
        when = float(at)
    except ValueError:
        when = math.nan
    if not sep or not sid or not math.isfinite(when):
        raise HubError("bad_request", "`cursor` is not one this daemon gave") from None
    return when, sid


def _cancel(s: Session) -> None:
    for task in s.tasks():
        if task is not None and not task.done():
            task.cancel()


def _not_overridden(cls: type[BaseAdapter], name: str) -> bool:
    mine = getattr(cls, name)
    base = getattr(BaseAdapter, name)
    return getattr(mine, "__func__", mine) is getattr(base, "__func__", base)
