"""The session hub: one state machine per session, ordered durable events, fan-out.

Data flows one way: adapter -> ``TurnGuard`` (invariants) -> ``_emit`` (seq, store) ->
``_committed`` (after the store commits) -> every subscription. The hub owns sessions and
their state; the store owns durability; connections own their sockets and queues.

States: ``idle`` (the bridge may write), ``running`` (a bridge turn is in progress),
``parked`` (a terminal owns the session; messages queue, a mirror streams its activity),
``ended`` (closed). Every change is pushed as a ``state`` frame and logged as a ``system``
block with code ``state``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import structlog

from bridge import retry
from bridge.adapters.base import BaseAdapter, ResumeCommand, cwd_matches, instantiate
from bridge.blocks import (
    AgentInfoBlock,
    AttachmentRef,
    Block,
    EndReason,
    ErrorBlock,
    PermissionRequestBlock,
    SessionEndBlock,
    SystemBlock,
    UsageBlock,
    UserBlock,
    block_from_json,
    block_to_json,
    is_block,
)
from bridge.commands import SlashCommand, help_text, parse_command
from bridge.config import Config
from bridge.failures import bridge_failure
from bridge.invariants import TurnGuard
from bridge.logs import get_logger
from bridge.protocol import (
    Attachment,
    EncodedEvent,
    EncodedFrame,
    Outgoing,
    SessionObject,
    SessionState,
    StateFrame,
    Writer,
)
from bridge.registry import AgentEntry, Registry
from bridge.store import AttachmentData, MessageRecord, SessionRecord, Store, StoredEvent

log = get_logger("bridge.sessions")

UNCOMMITTED_HIGH = 4000
UNCOMMITTED_LOW = 1000
REPLAY_CHUNK = 1000
#: Blocks a turn emits before it lets other tasks run (fewer than a sender's burst).
YIELD_EVERY = 64
#: The longest a turn waits, per YIELD_EVERY blocks, for a subscriber that is far behind.
PACE_WAIT_S = 0.02
PARK_POLL_S = 1.0
EXTERNAL_CACHE_S = 5.0
HANDOFF_WAIT_S = 300.0
MIRROR_DRAIN_S = 5.0
#: How often sessions the bridge holds are checked for a terminal that took them anyway, and
#: how many of the most recently active ones (each check may scan /proc).
SWEEP_S = 3.0
SWEEP_MAX = 32


#: What adapter code may raise without taking the daemon down: an adapter that calls
#: sys.exit() (CLI code pasted into an adapter) fails its turn, not the process.
ADAPTER_FAILURES = (Exception, SystemExit)
_T = TypeVar("_T")


class _SendTimeout(Exception):
    """``send()`` did not return within the idle timeout (not the turn's own deadline)."""


class AdapterExited(RuntimeError):
    """Adapter code raised SystemExit."""


async def _contained(aw: Awaitable[_T]) -> _T:
    """Await adapter code. A task that raises SystemExit re-raises it into the event loop,
    which stops the daemon, so it becomes an ordinary error before it reaches the task."""
    try:
        return await aw
    except SystemExit as exc:
        raise AdapterExited(f"the adapter called sys.exit({exc.code!r})") from None


class HubError(Exception):
    """A request the hub refuses; ``code`` is one of the protocol's error codes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Subscriber(Protocol):
    """What the hub needs of a connection."""

    msgpack: bool

    def push(self, item: Outgoing) -> None:
        """Queue without waiting; a connection that cannot keep up closes itself (4408)."""

    async def put(self, item: Outgoing) -> None:
        """Queue, waiting while the connection's queue is full (used for replay)."""

    @property
    def behind(self) -> bool:
        """Its queue is more than half full."""

    async def catch_up(self, timeout: float) -> None:
        """Wait, at most ``timeout`` seconds, until its queue is down to a quarter."""

    def cut_off(self) -> None:
        """Close it as too far behind (4408): it reconnects and replays with ``after_seq``."""

    @property
    def closed(self) -> bool: ...


_iso_second: tuple[int, str] = (-1, "")
_MILLIS = tuple(f".{ms:03d}Z" for ms in range(1000))


def iso(ts: float) -> str:
    """UTC, to the millisecond (truncated, as JavaScript's ``toISOString`` does)."""
    # Formatting a datetime per event was a measurable share of _emit; the second is cached.
    global _iso_second
    second = int(ts)
    cached = _iso_second
    if cached[0] != second:
        text = datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")
        cached = _iso_second = (second, text.replace("+00:00", ""))
    return cached[1] + _MILLIS[int((ts - second) * 1000)]


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._ -]+")


def safe_attachment_name(name: str) -> str:
    """A file name that cannot escape a directory: no separators, no leading dots."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = _UNSAFE_NAME.sub("_", base).strip().lstrip(".")
    return base[:200] or "attachment"


@dataclass
class Subscription:
    conn: Subscriber
    session: Session
    live: bool = False
    #: (seq of the event the item follows, item) held back while the replay runs
    backlog: list[tuple[int, Outgoing]] = field(default_factory=list)
    #: the state frames among them, so the replay can send each right after its event
    frames: deque[tuple[int, Outgoing]] = field(default_factory=deque)
    sent_seq: int = 0
    task: asyncio.Task[None] | None = None

    def offer(self, item: Outgoing, after_seq: int, backlog_limit: int) -> None:
        """Deliver an event or state frame now, or after the replay when one is running."""
        if self.conn.closed:
            return
        if self.live:
            if isinstance(item, EncodedEvent):
                if item.seq <= self.sent_seq:
                    # The replay read it from the store between the commit and this
                    # callback (the writer thread commits first): already sent.
                    return
                self.sent_seq = item.seq
            self.conn.push(item)
        elif len(self.backlog) < backlog_limit:
            self.backlog.append((after_seq, item))
            if not isinstance(item, EncodedEvent):
                self.frames.append((after_seq, item))
        else:
            # Its replay cannot keep up with the live stream. Pushed now, the item would
            # arrive amid the replay, out of order.
            self.conn.cut_off()


@dataclass
class Turn:
    guard: TurnGuard
    task: asyncio.Task[None] | None = None
    interrupting: bool = False
    forced: bool = False
    permission_options: dict[str, set[str]] = field(default_factory=dict)
    #: Overrides the reason of the turn's ``session_end`` (``handoff`` when a handoff ended it).
    end_reason: EndReason | None = None
    #: A terminal was seen taking the session during this turn (said once).
    terminal_seen: bool = False
    #: What the attempt produced, for the automatic retry (bridge/retry.py).
    watch: retry.RetryWatch = field(default_factory=retry.RetryWatch)


@dataclass
class Session:
    rec: SessionRecord
    next_seq: int = 1
    queue: deque[MessageRecord] = field(default_factory=deque)
    answered: dict[str, bool] = field(default_factory=dict)
    subs: dict[int, Subscription] = field(default_factory=dict)
    adapter: BaseAdapter | None = None
    adapter_cls: type[BaseAdapter] | None = None
    restart_adapter: bool = False
    turn: Turn | None = None
    runner: asyncio.Task[None] | None = None
    watcher: asyncio.Task[None] | None = None
    mirror: asyncio.Task[None] | None = None
    mirror_source: AsyncIterator[Block] | None = None
    uncommitted: int = 0
    #: the newest seq whose commit has been handed to subscribers
    published_seq: int = 0
    last_pending: StoredEvent | None = None
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    usage: UsageBlock | None = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def id(self) -> str:
        return self.rec.id

    @property
    def state(self) -> str:
        return self.rec.state


class Hub:
    def __init__(self, config: Config, registry: Registry, store: Store) -> None:
        self.config = config
        self.registry = registry
        self.store = store
        self.sessions: dict[str, Session] = {}
        self._external_cache: tuple[float, list[SessionObject]] = (0.0, [])
        self._external_refresh: asyncio.Task[None] | None = None
        self._closing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        store.on_commit = self._committed

    # ---- start-up and shutdown ---------------------------------------------------------------

    async def start(self) -> None:
        sessions, messages, seqs = await asyncio.to_thread(self.store.load)
        for rec in sessions:
            s = Session(rec=rec, next_seq=max(rec.last_seq, seqs.get(rec.id, 0)) + 1)
            s.published_seq = s.next_seq - 1  # everything on disk may be replayed
            s.idle.set()
            self.sessions[rec.id] = s
        for msg in messages:
            owner = self.sessions.get(msg.session)
            if owner is None:
                continue
            s = owner
            queued = msg.status == "queued"
            s.answered[msg.client_msg_id] = queued
            if queued:
                s.queue.append(msg)
        for s in self.sessions.values():
            await self._recover(s)
        self._spawn(self._sweep_terminals())

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
            self._emit(
                s,
                ErrorBlock(
                    code="daemon_restarted",
                    message="the daemon stopped while this turn was running",
                ),
            )
            for block in guard.finish("error", silent=True):
                self._emit(s, block)
            self._set_state(s, "idle", "bridge", "the daemon restarted during a turn")
        if s.rec.intent == "handoff" and s.rec.state not in ("parked", "ended"):
            # The daemon died between recording a handoff and parking: finish the handoff.
            why = "resuming the handoff to a terminal after a restart"
            self._set_state(s, "parked", "none", why)
        if self.registry.may_change(s.rec.agent):
            # A drop-in agent: mirrors, watchers and turns need its class, which the
            # loader brings after the daemon listens.
            self._spawn(self._resume_after_load(s))
        else:
            self._resume(s)

    async def _resume_after_load(self, s: Session) -> None:
        await self.registry.settle(s.rec.agent, self.config.adapters.start_timeout)
        if not self._closing:
            self._resume(s)

    def _resume(self, s: Session) -> None:
        """Restart the mirror and watcher of a parked session; continue the queue."""
        if s.rec.state == "parked":
            self._start_mirror(s)
            self._start_watcher(s, handoff=s.rec.intent == "handoff")
        self._kick(s)

    async def shutdown(self) -> None:
        """Interrupt running turns, stop every adapter, flush the store."""
        self._closing = True
        grace = self.config.adapters.stop_grace
        running = [s for s in self.sessions.values() if s.turn is not None]
        # All at once: a hung agent must not make every other one wait its grace period.
        await asyncio.gather(
            *(self._interrupt(s, "the daemon is shutting down") for s in running),
            return_exceptions=True,
        )
        if running:
            await asyncio.wait(
                [asyncio.create_task(s.idle.wait()) for s in running], timeout=grace + 1
            )
        for s in self.sessions.values():
            for task in (s.runner, s.watcher, s.mirror):
                if task is not None and not task.done():
                    task.cancel()
        await asyncio.gather(
            *(self._stop_adapter(s) for s in self.sessions.values()), return_exceptions=True
        )
        for task in list(self._tasks):
            task.cancel()
        await self.store.flush()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- events ------------------------------------------------------------------------------

    def _emit(self, s: Session, block: Block) -> None:
        """Number, store and (after commit) publish one block."""
        seq = s.next_seq
        s.next_seq += 1
        now = time.time()
        s.rec.last_seq = seq
        s.rec.updated_at = now
        if isinstance(block, UsageBlock):
            s.usage = block
        s.uncommitted += 1
        if s.uncommitted >= UNCOMMITTED_HIGH:
            s.drained.clear()
        event = StoredEvent(s.id, seq, iso(now), block_to_json(block), now)
        s.last_pending = event
        self.store.append_event(event)

    def _committed(self, batch: list[StoredEvent]) -> None:
        limit = self.config.limits.send_queue_frames
        s: Session | None = None
        subs: list[Subscription] = []
        touched: dict[str, Session] = {}
        for ev in batch:
            if s is None or s.id != ev.session:
                # A batch is mostly runs of one session's events: look things up per run.
                s = self.sessions.get(ev.session)
                if s is None:
                    continue
                touched[s.id] = s
                subs = list(s.subs.values())
            s.uncommitted -= 1
            if s.last_pending is ev:
                s.last_pending = None
            s.published_seq = ev.seq
            if subs:
                encoded = EncodedEvent(ev.session, ev.seq, ev.ts, ev.block_json)
                for sub in subs:
                    sub.offer(encoded, ev.seq, limit)
                    if ev.after is not None:
                        sub.offer(ev.after, ev.seq, limit)
        for s in touched.values():
            if s.uncommitted <= UNCOMMITTED_LOW:
                s.drained.set()

    async def _pace(self, s: Session) -> None:
        """Give subscribers far behind a moment to catch up, bounded so that one that stopped
        reading holds the agent to no less than YIELD_EVERY / PACE_WAIT_S blocks a second
        until its queue overflows and it is cut off. Agents rarely stream that fast; a
        synthetic one does, and without this it buried a client reading at full speed."""
        for sub in list(s.subs.values()):
            if sub.live and sub.conn.behind and not sub.conn.closed:
                await sub.conn.catch_up(PACE_WAIT_S)

    async def _backpressure(self, s: Session) -> None:
        if s.uncommitted >= UNCOMMITTED_HIGH:
            await s.drained.wait()

    def _push_state(self, s: Session) -> None:
        frame = EncodedFrame(
            StateFrame(
                session=s.id,
                state=s.rec.state,  # type: ignore[arg-type]
                writer=s.rec.writer,  # type: ignore[arg-type]
                queued=len(s.queue),
            )
        )
        # A state frame follows the events before it: it rides on the newest uncommitted one.
        if s.last_pending is not None:
            s.last_pending.after = frame
            return
        limit = self.config.limits.send_queue_frames
        for sub in list(s.subs.values()):
            sub.offer(frame, s.next_seq - 1, limit)

    def _set_state(self, s: Session, state: SessionState, writer: Writer, why: str) -> None:
        if s.rec.state == state and s.rec.writer == writer:
            return
        old = s.rec.state
        s.rec.state = state
        s.rec.writer = writer
        self._emit(
            s,
            SystemBlock(
                code="state",
                text=f"{old} -> {state} (writer: {writer}): {why}",
                data={"state": state, "writer": writer, "queued": len(s.queue)},
            ),
        )
        self.store.save_session(s.rec)
        self._push_state(s)
        if state == "running":
            s.idle.clear()
        else:
            s.idle.set()

    # ---- queries -----------------------------------------------------------------------------

    def get(self, session_id: str) -> Session:
        s = self.sessions.get(session_id)
        if s is None:
            raise HubError("not_found", f"no session `{session_id}`")
        return s

    def session_object(self, s: Session) -> SessionObject:
        rec = s.rec
        return SessionObject(
            session=rec.id,
            agent=rec.agent,
            cwd=rec.cwd,
            title=rec.title,
            state=rec.state,  # type: ignore[arg-type]
            writer=rec.writer,  # type: ignore[arg-type]
            created_at=iso(rec.created_at),
            updated_at=iso(rec.updated_at),
            last_seq=s.next_seq - 1,
            agent_session_id=rec.agent_session_id,
            external=rec.external,
            queued=len(s.queue),
            model=rec.model,
        )

    async def list_sessions(self, include_external: bool) -> list[SessionObject]:
        own = sorted(
            (self.session_object(s) for s in self.sessions.values()),
            key=lambda o: o.updated_at,
            reverse=True,
        )
        if not include_external:
            return own
        return own + await self._external_sessions()

    async def _external_sessions(self) -> list[SessionObject]:
        stamp, cached = self._external_cache
        if time.monotonic() - stamp > EXTERNAL_CACHE_S:
            if self._external_refresh is None or self._external_refresh.done():
                self._external_refresh = asyncio.create_task(self._scan_external())
            if stamp == 0.0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._external_refresh), 2.0)
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
                items = await asyncio.wait_for(asyncio.to_thread(cls.scan_external_sessions), 10.0)
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
        path = Path(cwd).expanduser()
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
        if len(self.sessions) >= self.config.limits.max_sessions:
            raise HubError(
                "conflict", f"the daemon already holds {len(self.sessions)} sessions (the limit)"
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
    ) -> tuple[SessionObject, AgentInfoBlock]:
        entry = await self._entry(agent)
        cwd = self._check_cwd(cwd)
        s = self._new_record(
            agent,
            cwd,
            model or entry.config.model,
            effort or entry.config.effort,
            resume,
            external=False,
        )
        info = await self._start_adapter(s, entry)
        self.sessions[s.id] = s
        self.store.save_session(s.rec)
        self._emit(s, info)
        return self.session_object(s), info

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
        self._emit(
            s,
            SystemBlock(
                code="attached",
                text=f"attached to {agent} session {agent_session_id} in {cwd}",
            ),
        )
        if await self._externally_owned(s):
            self._park(s, "a terminal process owns this session")
        return self.session_object(s)

    async def close(self, session_id: str) -> None:
        s = self.get(session_id)
        if s.rec.state == "ended":
            return
        if s.turn is not None:
            await self._interrupt(s, "the session is being closed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(s.idle.wait(), self.config.adapters.stop_grace + 2)
        for task in (s.runner, s.watcher, s.mirror):
            if task is not None and not task.done():
                task.cancel()
        await self._stop_adapter(s)
        dropped = len(s.queue)
        for msg in s.queue:
            msg.status = "dropped"
            self.store.save_message(msg)
        s.queue.clear()
        why = "closed by a client" + (f"; {dropped} queued message(s) dropped" if dropped else "")
        self._set_state(s, "ended", "none", why)

    # ---- adapters ----------------------------------------------------------------------------

    def _adapter_config(self, agent: str) -> Any:
        return self.config.agent(agent)

    async def _start_adapter(self, s: Session, entry: AgentEntry | None = None) -> AgentInfoBlock:
        entry = entry or self.registry.get(s.rec.agent)
        # A session keeps the class it started with until it ends, also across adapter
        # restarts (/model, reattach): a reloaded drop-in file only reaches new sessions.
        cls = s.adapter_cls
        if cls is None:
            if entry is None:
                raise HubError("agent_unavailable", f"agent `{s.rec.agent}` is not registered")
            cls = entry.cls
        conf = self._adapter_config(s.rec.agent)
        resume = s.rec.agent_session_id if cwd_matches(s.rec.cwd, s.rec.cwd) else None

        def on_session_id(agent_session_id: str) -> None:
            # The session itself, not a lookup: an adapter may report its id in start(),
            # before session.create has registered the session.
            self._on_agent_session_id(s, agent_session_id)

        values = {
            "cwd": s.rec.cwd,
            "model": s.rec.model,
            "effort": s.rec.effort,
            "binary": conf.binary,
            "resume_session_id": resume,
            "on_session_id": on_session_id,
            "env": dict(conf.env),
            "options": dict(conf.options),
        }
        bound = structlog.contextvars.bound_contextvars(session=s.id, agent=s.rec.agent)
        with bound:
            try:
                adapter = instantiate(cls, values)
                info = await asyncio.wait_for(
                    _contained(adapter.start(s.id)), self.config.adapters.start_timeout
                )
            except HubError:
                raise
            except TimeoutError:
                raise HubError(
                    "agent_unavailable", f"agent `{s.rec.agent}` did not start in time"
                ) from None
            except ADAPTER_FAILURES as exc:
                log.warning("adapter_start_failed", error=repr(exc))
                raise HubError(
                    "agent_unavailable", f"agent `{s.rec.agent}` failed to start: {exc}"
                ) from None
        if not isinstance(info, AgentInfoBlock):
            info = AgentInfoBlock(agent=cls.agent_id, name=cls.display_name)
        s.adapter = adapter
        s.adapter_cls = cls
        s.restart_adapter = False
        return info

    def _on_agent_session_id(self, s: Session, agent_session_id: str) -> None:
        if not agent_session_id or s.rec.agent_session_id == agent_session_id:
            return
        s.rec.agent_session_id = agent_session_id
        if s.turn is not None:
            s.turn.guard.agent_session_id = agent_session_id
        self.store.save_session(s.rec)

    async def _stop_adapter(self, s: Session) -> None:
        adapter, s.adapter = s.adapter, None
        if adapter is None:
            return
        try:
            await asyncio.wait_for(
                _contained(adapter.stop()), self.config.adapters.stop_grace + 2
            )
        except Exception as exc:
            log.warning("adapter_stop_failed", session=s.id, error=repr(exc))

    # ---- sending -----------------------------------------------------------------------------

    def _validate_attachments(
        self, s: Session, attachments: list[Attachment]
    ) -> list[AttachmentData]:
        limits = self.config.limits
        if len(attachments) > limits.max_attachments:
            raise HubError("too_large", f"at most {limits.max_attachments} attachments per message")
        cls = s.adapter_cls or (self.registry.get(s.rec.agent) or AgentEntry(BaseAdapter)).cls
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
        s = self.get(session_id)
        msg_id = client_msg_id or f"m_{uuid.uuid4().hex[:16]}"
        if client_msg_id is not None and msg_id in s.answered:
            return s.answered[msg_id]
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
            self._emit(s, UserBlock(id=msg_id, text=text, source="bridge"))
            await self._run_command(s, command)
            return False
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
        queued = (
            s.rec.state != "idle" or bool(s.queue) or (s.runner is not None and not s.runner.done())
        ) or s.rec.intent == "handoff"
        if not queued and await self._externally_owned(s):
            # Answer truthfully: this message waits for a terminal, it does not start a turn.
            if client_msg_id is not None and msg_id in s.answered:
                return s.answered[msg_id]  # a retransmit arrived while we looked
            if s.rec.state == "idle":
                self._park(s, "a terminal process owns this session")
            queued = True
        s.answered[msg_id] = queued
        if not s.rec.title:
            s.rec.title = " ".join(text.split())[:80]
        s.queue.append(msg)
        self.store.save_message(msg)
        if queued:
            self._push_state(s)
        self._kick(s)
        return queued

    def _kick(self, s: Session) -> None:
        if self._closing or not s.queue or s.rec.state in ("parked", "ended"):
            return
        if s.rec.intent == "handoff":
            return  # a handoff is stopping the bridge's side; the queue waits for the terminal
        if s.runner is None or s.runner.done():
            s.runner = self._spawn(self._run_queue(s))

    async def _run_queue(self, s: Session) -> None:
        with structlog.contextvars.bound_contextvars(session=s.id, agent=s.rec.agent):
            await self.registry.settle(s.rec.agent, self.config.adapters.start_timeout)
            while (
                s.queue
                and not self._closing
                and s.rec.state == "idle"
                and s.rec.intent != "handoff"
            ):
                if await self._externally_owned(s):
                    self._park(s, "a terminal process owns this session")
                    return
                msg = s.queue.popleft()
                try:
                    await self._run_turn(s, msg)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("turn_crashed")
                    if s.rec.state == "running":
                        self._set_state(s, "idle", "bridge", "the turn failed")

    async def _externally_owned(self, s: Session) -> bool:
        return await self._owned_id(s, s.rec.agent_session_id)

    async def _owned_id(self, s: Session, sid: str | None) -> bool:
        cls = s.adapter_cls or (self.registry.get(s.rec.agent) or AgentEntry(BaseAdapter)).cls
        if cls.handoff == "none":
            return False
        try:
            return bool(
                await asyncio.wait_for(
                    asyncio.to_thread(cls.is_cwd_externally_owned, s.rec.cwd, sid), 10.0
                )
            )
        except Exception as exc:
            log.warning("ownership_check_failed", error=repr(exc))
            return False

    def _timeouts(self, agent: str) -> tuple[float, float]:
        conf = self.config.agent(agent)
        return (
            conf.turn_timeout or self.config.adapters.turn_timeout,
            conf.idle_timeout or self.config.adapters.idle_timeout,
        )

    async def _run_turn(self, s: Session, msg: MessageRecord) -> None:
        turn = Turn(guard=TurnGuard(s.rec.agent_session_id))
        s.turn = turn
        msg.status = "started"
        self.store.save_message(msg)
        self._emit(
            s,
            UserBlock(
                id=msg.client_msg_id,
                text=msg.text,
                attachments=[
                    AttachmentRef(name=a.name, mime=a.mime, size=len(a.data))
                    for a in msg.attachments
                ],
                source="bridge",
            ),
        )
        self._set_state(s, "running", "bridge", "a turn started")
        try:
            if s.adapter is None or s.restart_adapter:
                await self._stop_adapter(s)
                try:
                    info = await self._start_adapter(s)
                except HubError as exc:
                    self._emit(s, ErrorBlock(code="agent_unavailable", message=str(exc)))
                    self._finish(s, turn, "error")
                    return
                self._emit(s, info)
            text: str | None = None
            for attempt in range(self.config.adapters.retry_max + 1):
                turn.task = asyncio.create_task(self._consume(s, turn, msg, text))
                try:
                    await asyncio.shield(turn.task)
                except asyncio.CancelledError:
                    if not turn.task.done():
                        turn.task.cancel()
                    raise
                text = await self._retry_wait(s, turn, attempt, msg.text)
                if text is None:
                    break
                turn = s.turn = Turn(guard=TurnGuard(s.rec.agent_session_id))
        finally:
            if not turn.guard.ended:
                reason = turn.end_reason or ("interrupted" if turn.interrupting else "error")
                self._finish(s, turn, reason)
            s.turn = None
            if s.rec.state == "running":
                self._set_state(s, "idle", "bridge", "the turn ended")

    async def _retry_wait(self, s: Session, turn: Turn, attempt: int, text: str) -> str | None:
        """After a failed attempt: the text to send again once the wait is over, or None."""
        retry_max = self.config.adapters.retry_max
        delay = retry.next_delay(turn.watch, attempt, retry_max, s.adapter, turn.interrupting)
        if delay is None or turn.watch.error is None:
            return None
        self._emit(s, retry.retrying_block(turn.watch.error, attempt + 1, retry_max, delay))
        if not await retry.wait(delay, lambda: turn.interrupting or s.rec.state != "running"):
            return None
        if s.adapter is None:
            try:
                self._emit(s, await self._start_adapter(s))
            except HubError as exc:
                self._emit(s, ErrorBlock(code="agent_unavailable", message=str(exc)))
                return None
        return retry.prompt_for(s.adapter, text) if s.adapter is not None else None

    def _finish(
        self, s: Session, turn: TurnGuard | Turn, reason: EndReason, exit_code: int | None = None
    ) -> None:
        guard = turn.guard if isinstance(turn, Turn) else turn
        for block in guard.finish(reason, exit_code, silent=True):
            self._emit(s, block)

    async def _consume(
        self, s: Session, turn: Turn, msg: MessageRecord, text: str | None = None
    ) -> None:
        adapter = s.adapter
        assert adapter is not None
        turn_timeout, idle_timeout = self._timeouts(s.rec.agent)
        guard = turn.guard
        stream: AsyncIterator[Block] | None = None
        failure: tuple[str, str, EndReason] | None = None
        try:
            async with asyncio.timeout(turn_timeout):
                try:
                    await asyncio.wait_for(
                        _contained(
                            adapter.send(msg.text, list(msg.attachments) or None)
                            if text is None or text == msg.text
                            else adapter.send(text, None)
                        ),
                        idle_timeout,
                    )
                except TimeoutError:
                    raise _SendTimeout from None
                stream = aiter(adapter.stream())
                # One idle timer for the whole stream, pushed forward at most every `slack`
                # seconds (never early): a wait_for per block cost a task per block, a quarter
                # of the hub's time at full speed (docs/benchmarks.md).
                loop = asyncio.get_running_loop()
                slack = min(1.0, idle_timeout / 20)
                idle = asyncio.timeout(idle_timeout + slack)
                burst = 0
                try:
                    async with idle:
                        while True:
                            now = loop.time()
                            deadline = idle.when()
                            if deadline is None or deadline - now < idle_timeout:
                                idle.reschedule(now + idle_timeout + slack)
                            try:
                                block = await anext(stream)
                            except StopAsyncIteration:
                                break
                            for out in self._accept(s, turn, block):
                                self._emit(s, out)
                            if guard.ended:
                                break
                            if s.uncommitted >= UNCOMMITTED_HIGH:
                                idle.reschedule(None)  # waiting for the store is not idling
                                await self._backpressure(s)
                            burst += 1
                            if burst >= YIELD_EVERY:
                                # A stream that never waits would keep the loop from the
                                # senders until the store pushes back, and a client reading
                                # at full speed would still fall thousands of frames behind.
                                burst = 0
                                await asyncio.sleep(0)
                                await self._pace(s)
                except TimeoutError:
                    if not idle.expired():
                        raise
                    failure = (
                        "idle_timeout",
                        f"the agent produced nothing for {idle_timeout:g}s",
                        "timeout",
                    )
        except _SendTimeout:
            failure = (
                "idle_timeout",
                f"the agent did not take the message within {idle_timeout:g}s",
                "timeout",
            )
        except TimeoutError:
            failure = ("turn_timeout", f"the turn ran longer than {turn_timeout:g}s", "timeout")
        except asyncio.CancelledError:
            if not turn.forced:
                raise
            failure = None
        except ADAPTER_FAILURES as exc:
            log.warning("adapter_raised", error=repr(exc))
            failure = ("adapter_error", f"{type(exc).__name__}: {exc}", "error")
        finally:
            if stream is not None and hasattr(stream, "aclose"):
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(stream.aclose(), 2.0)
        if turn.forced and not guard.ended:
            self._emit(
                s,
                ErrorBlock(
                    code="interrupt_forced",
                    message="the agent did not stop in time; it was stopped",
                ),
            )
            self._finish(s, turn, "interrupted")
            await self._stop_adapter(s)
        elif failure is not None and not guard.ended:
            code, message, reason = failure
            self._emit(s, bridge_failure(code, message))
            self._finish(s, turn, reason)
            await self._stop_adapter(s)
        elif not guard.ended:
            for out in guard.finish("completed"):
                self._emit(s, out)

    def _accept(self, s: Session, turn: Turn, block: object) -> list[Block]:
        if not is_block(block):
            return [
                ErrorBlock(
                    code="adapter_contract",
                    message=f"the adapter yielded {type(block).__name__}, not a block",
                )
            ]
        typed: Block = block  # type: ignore[assignment]
        turn.watch.see(typed)
        if isinstance(typed, PermissionRequestBlock):
            turn.permission_options[typed.id] = {o.id for o in typed.options}
        elif isinstance(typed, SessionEndBlock) and turn.end_reason is not None:
            typed = SessionEndBlock(
                reason=turn.end_reason,
                exit_code=typed.exit_code,
                agent_session_id=typed.agent_session_id,
            )
        return turn.guard.feed(typed)

    # ---- interrupt, permissions, commands ------------------------------------------------------

    async def interrupt(self, session_id: str) -> None:
        s = self.get(session_id)
        await self._interrupt(s, "interrupted by a client")

    async def _interrupt(self, s: Session, why: str) -> None:
        turn = s.turn
        if turn is None or turn.interrupting:
            return
        turn.interrupting = True
        adapter = s.adapter
        grace = self.config.adapters.stop_grace
        if adapter is not None and getattr(adapter, "cap_interrupt", False):
            try:
                await asyncio.wait_for(_contained(adapter.interrupt()), grace)
            except Exception as exc:
                log.warning("adapter_interrupt_failed", session=s.id, error=repr(exc))
                grace = 0.0
        else:
            grace = 0.0

        async def force() -> None:
            if grace:
                await asyncio.sleep(grace)
            if s.turn is turn and turn.task is not None and not turn.task.done():
                turn.forced = True
                turn.task.cancel()

        self._spawn(force())

    async def permission(self, session_id: str, request_id: str, option_id: str) -> None:
        s = self.get(session_id)
        turn = s.turn
        if turn is None or request_id not in turn.guard.pending_permissions:
            raise HubError("not_found", f"no pending permission request `{request_id}`")
        options = turn.permission_options.get(request_id, set())
        if options and option_id not in options:
            raise HubError(
                "bad_request",
                f"`{option_id}` is not an option of this request ({', '.join(sorted(options))})",
            )
        adapter = s.adapter
        if adapter is None:
            raise HubError("conflict", "the agent is not running")
        try:
            await asyncio.wait_for(adapter.respond_permission(request_id, option_id), 10.0)
        except Exception as exc:
            raise HubError("conflict", f"the agent could not take the answer: {exc}") from None
        turn.guard.pending_permissions.pop(request_id, None)

    async def usage(self, session_id: str) -> UsageBlock | None:
        s = self.get(session_id)
        if s.adapter is not None and s.adapter.provides_usage:
            with contextlib.suppress(Exception):
                got = await asyncio.wait_for(s.adapter.get_usage(), 5.0)
                if isinstance(got, UsageBlock):
                    return got
        return s.usage

    async def _run_command(self, s: Session, command: SlashCommand) -> None:
        name = command.name
        if name == "help":
            self._emit(s, SystemBlock(code="help", text=help_text()))
        elif name == "status":
            text = (
                f"state: {s.rec.state}, writer: {s.rec.writer}, queued: {len(s.queue)}, "
                f"agent session: {s.rec.agent_session_id or '-'}, model: {s.rec.model or '-'}"
            )
            self._emit(s, SystemBlock(code="status", text=text))
            cls = s.adapter_cls or self._cls(s)
            if cls.provides_usage:
                usage = await self.usage(s.id)
                if usage is not None:
                    self._emit(s, usage)
        elif name == "stop":
            running = s.turn is not None
            self._emit(
                s,
                SystemBlock(code="stop", text="interrupting" if running else "no turn is running"),
            )
            if running:
                await self._interrupt(s, "/stop")
        elif name == "model":
            await self._command_model(s, command.argument)
        elif name == "terminal":
            try:
                cmd = await self.handoff(s.id)
            except HubError as exc:
                self._emit(s, ErrorBlock(code=exc.code, message=str(exc)))
            else:
                self._emit(
                    s,
                    SystemBlock(
                        code="terminal",
                        text=shlex.join(cmd.argv),
                        data={"argv": cmd.argv, "cwd": cmd.cwd},
                    ),
                )

    def _cls(self, s: Session) -> type[BaseAdapter]:
        entry = self.registry.get(s.rec.agent)
        return s.adapter_cls or (entry.cls if entry else BaseAdapter)

    async def _command_model(self, s: Session, model: str) -> None:
        cls = self._cls(s)
        if not getattr(cls, "provides_models", False):
            self._emit(
                s, ErrorBlock(code="model", message="this agent does not let you choose a model")
            )
            return
        if not model:
            self._emit(s, ErrorBlock(code="model", message="usage: /model <id>"))
            return
        s.rec.model = model
        s.restart_adapter = True
        self.store.save_session(s.rec)
        self._emit(s, SystemBlock(code="model", text=f"model {model} from the next turn"))

    async def models(self, agent: str) -> list[dict[str, str]]:
        entry = await self.registry.lookup(agent, self.config.adapters.start_timeout)
        if entry is None:
            raise HubError("not_found", f"no agent `{agent}`")
        if not entry.cls.provides_models:
            return []
        try:
            adapter = instantiate(
                entry.cls,
                {
                    "binary": entry.config.binary,
                    "env": dict(entry.config.env),
                    "options": dict(entry.config.options),
                },
            )
            models = await asyncio.wait_for(adapter.list_models(), 15.0)
        except Exception as exc:
            raise HubError("agent_unavailable", f"could not list models: {exc}") from None
        return [{"id": m.id, "label": m.label} for m in models]

    # ---- single writer: parking, mirror, reattach, handoff ---------------------------------------

    def _park(self, s: Session, why: str, *, handoff: bool = False) -> None:
        """Hand the session to a terminal: messages queue, a mirror shows what it does.

        After ``session.handoff`` no terminal holds it yet: the writer is ``none`` until one
        does. The mirror starts now, from the transcript's current end, so the terminal's first
        lines are not lost to the ownership poll's delay.
        """
        self._set_state(s, "parked", "none" if handoff else "terminal", why)
        self._start_mirror(s)
        self._start_watcher(s, handoff=handoff)

    def _start_watcher(self, s: Session, *, handoff: bool) -> None:
        if s.watcher is None or s.watcher.done():
            s.watcher = self._spawn(self._watch_parked(s, handoff))

    def _start_mirror(self, s: Session) -> None:
        if s.mirror is not None and not s.mirror.done():
            return
        cls = self._cls(s)
        sid = s.rec.agent_session_id
        if sid is None or cls.handoff == "none":
            return
        try:
            source = cls.make_transcript_mirror(s.rec.cwd, sid)
        except Exception as exc:
            log.warning("mirror_failed", session=s.id, error=repr(exc))
            return
        if source is not None:
            s.mirror_source = source
            s.mirror = self._spawn(self._run_mirror(s, source))

    async def _run_mirror(self, s: Session, source: AsyncIterator[Block]) -> None:
        """Emit the terminal's activity; each terminal turn is checked like a bridge turn."""
        guard: TurnGuard | None = None
        try:
            async for block in source:
                if isinstance(block, UserBlock):
                    if guard is not None:
                        self._finish(s, guard, "completed")
                    guard = TurnGuard(s.rec.agent_session_id)
                    if block.source != "terminal":
                        block = UserBlock(
                            id=block.id,
                            text=block.text,
                            attachments=block.attachments,
                            source="terminal",
                        )
                    self._emit(s, block)
                elif guard is None and isinstance(block, SystemBlock | SessionEndBlock):
                    if isinstance(block, SystemBlock):
                        self._emit(s, block)
                else:
                    if guard is None:  # mirroring began in the middle of a terminal turn
                        guard = TurnGuard(s.rec.agent_session_id)
                    for out in guard.feed(block):
                        self._emit(s, out)
                    if guard.ended:
                        guard = None
                await self._backpressure(s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("mirror_stopped", session=s.id, error=repr(exc))
        finally:
            if guard is not None:
                self._finish(s, guard, "interrupted")
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(BaseException):
                    await aclose()

    async def _stop_mirror(self, s: Session) -> None:
        """Let the mirror read the terminal's last lines, then stop it."""
        task, source = s.mirror, s.mirror_source
        s.mirror_source = None
        if task is None or task.done():
            return
        close_at_eof = getattr(source, "close_at_eof", None)
        if close_at_eof is not None:
            close_at_eof()
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), MIRROR_DRAIN_S)
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _watch_parked(self, s: Session, handoff: bool) -> None:
        """Mirror while a terminal owns the session; take it back when the terminal lets go."""
        taken = not handoff
        started = time.monotonic()
        released = 0
        try:
            await self._stop_adapter(s)  # the bridge's own process must not hold it meanwhile
            while s.rec.state == "parked" and not self._closing:
                owned = await self._externally_owned(s)
                if owned:
                    released = 0
                    if not taken:
                        taken = True
                        s.rec.intent = None
                        self._set_state(s, "parked", "terminal", "the terminal took the session")
                    self._start_mirror(s)
                elif taken:
                    # Two readings in a row: a registry file being rewritten is not an exit.
                    released += 1
                    if released >= 2 and await self._reattach(s, "the terminal released it"):
                        return
                elif time.monotonic() - started > HANDOFF_WAIT_S and await self._reattach(
                    s, "no terminal took the session"
                ):
                    return
                await asyncio.sleep(PARK_POLL_S)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("watcher_failed", session=s.id)

    async def _sweep_terminals(self) -> None:
        """Notice a terminal that resumed a session on its own (no handoff asked).

        An idle session is parked at once, so the app sees the terminal's turns live instead of
        at its next message. A running one is a second writer already: the bridge's turn is
        stopped (``session_end`` reason ``handoff``) and the session parks before its next turn;
        the person at the terminal wins.
        """
        while not self._closing:
            await asyncio.sleep(SWEEP_S)
            try:
                await self._sweep_once()
            except Exception:
                log.exception("terminal_sweep_failed")

    async def _sweep_once(self) -> None:
        candidates = sorted(
            (
                s
                for s in self.sessions.values()
                if s.rec.state in ("idle", "running")
                and s.rec.agent_session_id
                and s.rec.intent is None
                and self._cls(s).handoff != "none"
            ),
            key=lambda s: s.rec.updated_at,
            reverse=True,
        )[:SWEEP_MAX]
        for s in candidates:
            if s.rec.state not in ("idle", "running") or not await self._externally_owned(s):
                continue
            if s.rec.state == "idle" and (s.runner is None or s.runner.done()):
                self._park(s, "a terminal process resumed this session")
            elif s.turn is not None and not s.turn.interrupting and not s.turn.terminal_seen:
                s.turn.terminal_seen = True
                # Only an adapter that tells this session's owner from any process of the
                # CLI in the same directory (which would also "own" a made-up id) justifies
                # stopping work; otherwise the next turn waits for the terminal.
                precise = not await self._owned_id(s, f"probe-{uuid.uuid4().hex}")
                text = "a terminal resumed this session during the bridge's turn"
                self._emit(
                    s,
                    SystemBlock(
                        level="warn",
                        code="terminal_took_over",
                        text=text + ("; the bridge's turn is stopped" if precise else ""),
                    ),
                )
                if precise:
                    s.turn.end_reason = "handoff"
                    await self._interrupt(s, "a terminal took the session")

    async def _reattach(self, s: Session, why: str) -> bool:
        """Back to the bridge, on the newest session of the lineage; False if that one is
        owned by a terminal (then the session stays parked, following it)."""
        cls = self._cls(s)
        try:
            head = await asyncio.to_thread(cls.latest_sid_for_cwd, s.rec.cwd)
        except Exception:
            head = None
        if head and head != s.rec.agent_session_id:
            self._emit(
                s,
                SystemBlock(
                    code="lineage",
                    text=f"continuing the newest session {head}",
                    data={"agent_session_id": head},
                ),
            )
            s.rec.agent_session_id = head
            self.store.save_session(s.rec)
            if await self._externally_owned(s):
                return False
        await self._stop_mirror(s)
        s.rec.intent = None
        s.restart_adapter = True
        self.store.save_session(s.rec)
        self._set_state(s, "idle", "bridge", why)
        self._kick(s)
        return True

    async def handoff(self, session_id: str) -> ResumeCommand:
        s = self.get(session_id)
        cls = self._cls(s)
        pending = s.rec.state == "parked" and s.rec.intent == "handoff"
        if s.rec.state in ("parked", "ended") and not pending:
            raise HubError("conflict", f"the session is {s.rec.state}")
        if cls.handoff == "none":
            raise HubError("conflict", f"{cls.display_name} cannot continue in a terminal")
        if not s.rec.agent_session_id:
            raise HubError("conflict", "the agent has not reported a session id yet")
        command = cls.terminal_resume_command(s.rec.agent_session_id, s.rec.cwd)
        if command is None:
            raise HubError("conflict", f"{cls.display_name} gave no command to resume with")
        if pending:
            return command  # asked again (a lost answer, a retry): same command, no new stop
        # The intent is durable before any process is stopped, so a crash in between resumes
        # the handoff at the next start instead of forgetting it.
        s.rec.intent = "handoff"
        self.store.save_session(s.rec)
        await self.store.flush()
        self._emit(
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
            await self._interrupt(s, "handoff to a terminal")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(s.idle.wait(), self.config.adapters.stop_grace + 5)
        await self._stop_adapter(s)
        if s.rec.state != "ended":
            self._park(s, "handed off to a terminal", handoff=True)
        await self.store.flush()
        return command

    # ---- subscriptions -------------------------------------------------------------------------

    def subscribe(
        self, session_id: str, conn: Subscriber, after_seq: int
    ) -> tuple[dict[str, Any], Callable[[], None]]:
        s = self.get(session_id)
        key = id(conn)
        if key not in s.subs and len(s.subs) >= self.config.limits.max_subscribers_per_session:
            raise HubError("conflict", "this session has too many subscribers")
        old = s.subs.pop(key, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        sub = Subscription(conn=conn, session=s, sent_seq=max(0, after_seq))
        s.subs[key] = sub
        result = {"last_seq": s.next_seq - 1, "state": s.rec.state}

        def begin() -> None:
            sub.task = self._spawn(self._replay(sub, after_seq))

        return result, begin

    def unsubscribe(self, session_id: str, conn: Subscriber) -> None:
        s = self.get(session_id)
        sub = s.subs.pop(id(conn), None)
        if sub is not None and sub.task is not None and not sub.task.done():
            sub.task.cancel()

    def drop_connection(self, conn: Subscriber) -> None:
        for s in self.sessions.values():
            sub = s.subs.pop(id(conn), None)
            if sub is not None and sub.task is not None and not sub.task.done():
                sub.task.cancel()

    async def _replay(self, sub: Subscription, after_seq: int) -> None:
        s = sub.session
        conn = sub.conn
        # A cursor beyond what exists means "live only"; clamped, so live events still count.
        cursor = min(max(0, after_seq), s.next_seq - 1)
        first = await self.store.first_seq(s.id)
        if first is not None and first > cursor + 1:
            block = SystemBlock(
                level="warn",
                code="gap",
                text=f"events {cursor + 1} to {first - 1} were dropped by retention",
                data={"from_seq": cursor + 1, "to_seq": first - 1},
            )
            await conn.put(EncodedEvent(s.id, first - 1, iso(time.time()), block_to_json(block)))
            cursor = first - 1
        sent_frames: set[int] = set()

        def frames_up_to(seq: int) -> None:
            # State frames go right after the event that records their change.
            while sub.frames and sub.frames[0][0] <= seq:
                frame = sub.frames.popleft()[1]
                sent_frames.add(id(frame))
                conn.push(frame)

        frames_up_to(cursor)
        while not conn.closed:
            # Only events already handed to subscribers: anything newer reaches this
            # subscription through its backlog, with its state frames in place.
            events = [
                ev
                for ev in await self.store.read_events(s.id, cursor, REPLAY_CHUNK)
                if ev.seq <= s.published_seq
            ]
            if not events:
                break
            for ev in events:
                await conn.put(EncodedEvent(s.id, ev.seq, ev.ts, ev.block_json))
                cursor = ev.seq
                frames_up_to(cursor)
            if _backlog_from(sub) <= cursor + 1:
                break  # the backlog goes on from here: no need to chase a live stream
        # Caught up: hand over to live delivery without an await, so nothing slips between.
        frames_up_to(cursor)
        sub.sent_seq = cursor
        for _after, pending in sub.backlog:
            if isinstance(pending, EncodedEvent):
                if pending.seq <= sub.sent_seq:
                    continue
                sub.sent_seq = pending.seq
            elif id(pending) in sent_frames:
                continue
            conn.push(pending)
        sub.backlog.clear()
        sub.frames.clear()
        sub.live = True


def _backlog_from(sub: Subscription) -> float:
    """The seq of the first event the backlog holds (infinity when it holds none)."""
    for _after, item in sub.backlog:
        if isinstance(item, EncodedEvent):
            return item.seq
    return float("inf")


def _not_overridden(cls: type[BaseAdapter], name: str) -> bool:
    mine = getattr(cls, name)
    base = getattr(BaseAdapter, name)
    return getattr(mine, "__func__", mine) is getattr(base, "__func__", base)
