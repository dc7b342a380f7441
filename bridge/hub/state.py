"""The hub's data and its one state machine, with no I/O.

A session is in one of four states, with one writer: ``idle`` (the bridge may write),
``running`` (a bridge turn is in progress), ``parked`` (a terminal owns it, or is about to:
messages queue, a mirror streams its activity) and ``ended`` (closed). Its ``intent`` is
``handoff`` from the moment a handoff is recorded (before any process is stopped) until a
terminal takes the session or the bridge takes it back.

Every change of state, writer or intent is one of the events of ``TRANSITIONS`` (h11 style):
the table names, for each (state, writer, intent), the events allowed there and where each
leads. Anything else is a bug, and ``transition()`` raises ``TransitionError`` instead of
letting two writers loose on one session.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, Protocol

from bridge.adapters.base import BaseAdapter
from bridge.blocks import AgentInfoBlock, Block, EndReason, UsageBlock
from bridge.hub.retry import RetryWatch
from bridge.invariants import TurnGuard
from bridge.process import TaskOwner
from bridge.store.records import MessageRecord, SessionRecord, StoredEvent
from bridge.wire.protocol import EncodedEvent, Outgoing, SessionState, Writer

Intent = Literal["handoff"] | None

#: What changes a session's state, writer or intent.
Event = Literal[
    "turn_start",  # a queued message starts a bridge turn
    "turn_end",  # the turn ended (also: the daemon died during it)
    "handoff_asked",  # session.handoff recorded its intent; nothing is stopped yet
    "handed_off",  # the bridge's side stopped: parked, waiting for a terminal
    "park",  # a terminal owns the session (it resumed it unasked, or was attached)
    "terminal_took",  # the terminal a handoff waited for took the session
    "reattach",  # the terminal let go (or never came): back to the bridge
    "close",  # session.close
]

Key = tuple[SessionState, Writer, Intent]

_INTENTS: tuple[Intent, ...] = (None, "handoff")


def _table() -> dict[tuple[SessionState, Writer, Intent, Event], Key]:
    t: dict[tuple[SessionState, Writer, Intent, Event], Key] = {}
    t["idle", "bridge", None, "turn_start"] = ("running", "bridge", None)
    for intent in _INTENTS:
        # A handoff asked during a turn lets the turn end (interrupted) before parking.
        t["running", "bridge", intent, "turn_end"] = ("idle", "bridge", intent)
    for state in ("idle", "running"):
        t[state, "bridge", None, "handoff_asked"] = (state, "bridge", "handoff")
        # From running only when the turn did not stop within its grace: the turn's end
        # then finds the session parked and leaves it so.
        t[state, "bridge", "handoff", "handed_off"] = ("parked", "none", "handoff")
    t["idle", "bridge", None, "park"] = ("parked", "terminal", None)
    t["parked", "none", "handoff", "terminal_took"] = ("parked", "terminal", None)
    # Parked, the writer says whether a handoff still waits for its terminal.
    for parked in PARKED:
        t[(*parked, "reattach")] = ("idle", "bridge", None)
    for key in (*LIVE, *PARKED):
        t[(*key, "close")] = ("ended", "none", key[2])
    return t


#: The keys a session can be in before it ends (an ended one keeps its last intent).
LIVE: tuple[Key, ...] = tuple(
    (state, "bridge", intent) for state in ("idle", "running") for intent in _INTENTS
)
PARKED: tuple[Key, ...] = (("parked", "none", "handoff"), ("parked", "terminal", None))

#: (state, writer, intent, event) -> (state, writer, intent). Nothing else is allowed.
TRANSITIONS = _table()


class HubError(Exception):
    """A request the hub refuses; ``code`` is one of the protocol's error codes."""

    def __init__(
        self, code: str, message: str, hint: str | None = None, output: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        #: one sentence: what to do; and what git or a hook printed (the ship requests)
        self.hint = hint
        self.output = output


class TransitionError(RuntimeError):
    """An event the transition table does not allow in the session's current state."""


def key_of(rec: SessionRecord) -> Key:
    return (rec.state, rec.writer, rec.intent)


def transition(rec: SessionRecord, event: Event) -> Key:
    """Apply ``event`` to the record (state, writer, intent); the previous key is returned."""
    old = key_of(rec)
    new = TRANSITIONS.get((*old, event))
    if new is None:
        state, writer, intent = old
        raise TransitionError(
            f"`{event}` is not allowed in state {state} (writer {writer}, intent {intent})"
        )
    rec.state, rec.writer, rec.intent = new
    return old


class Subscriber(Protocol):
    """What the hub needs of a connection."""

    def push(self, item: Outgoing) -> None:
        """Queue without waiting; a connection that cannot keep up closes itself (4408)."""

    def push_many(self, items: list[Outgoing]) -> None:
        """``push`` each of ``items``, in order, at once (one committed run of events)."""

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

    def offer_run(self, items: list[Outgoing], afters: list[int], backlog_limit: int) -> None:
        """``offer`` each item of one committed run (events in seq order, each followed by its
        state frame if any; ``afters[i]`` is the seq item ``i`` follows). A live subscription
        takes the run whole: per subscriber the cost is one call, not one per event."""
        if self.conn.closed:
            return
        first = items[0]
        if self.live and isinstance(first, EncodedEvent) and first.seq > self.sent_seq:
            self.sent_seq = afters[-1]
            self.conn.push_many(items)
            return
        for item, after in zip(items, afters, strict=True):
            self.offer(item, after, backlog_limit)

    def backlog_from(self) -> float:
        """The seq of the first event the backlog holds (infinity when it holds none)."""
        for _after, item in self.backlog:
            if isinstance(item, EncodedEvent):
                return item.seq
        return float("inf")


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
    #: What the attempt produced, for the automatic retry (bridge/hub/retry.py).
    watch: RetryWatch = field(default_factory=RetryWatch)
    #: The adapter took the turn's message: from now on a steered message may follow it.
    sent: bool = False


@dataclass
class Session:
    rec: SessionRecord
    next_seq: int = 1
    queue: deque[MessageRecord] = field(default_factory=deque)
    answered: dict[str, bool] = field(default_factory=dict)
    #: The messages of ``answered`` that entered a running turn (``session.send`` ``steer``).
    steered: set[str] = field(default_factory=set)
    #: Senders still waiting to learn whether their message (the queue's head) starts at once
    #: or waits: the queue runner answers after its ownership check (TurnRunner.admit).
    deciding: dict[str, asyncio.Future[bool]] = field(default_factory=dict)
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
    #: the session's usage when its adapter started, which that adapter does not count
    #: (``session_usage`` in bridge/hub/turns.py)
    usage_before: UsageBlock | None = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    #: A warm start under way (bridge/hub/warm.py): a turn waits for it and uses its agent.
    warming: asyncio.Task[None] | None = None
    #: What the warm start's ``start()`` said, emitted by the next turn where a cold start
    #: would have emitted its own: a warm start adds no event.
    warm_info: AgentInfoBlock | None = None

    @property
    def id(self) -> str:
        return self.rec.id

    def ended(self) -> bool:
        """Asked again after an await (a plain comparison would stay narrowed for mypy)."""
        return self.rec.state == "ended"

    @property
    def running_queue(self) -> bool:
        """Its queue runner is between turns or in one."""
        return self.runner is not None and not self.runner.done()

    def tasks(self) -> tuple[asyncio.Task[None] | None, ...]:
        return (self.runner, self.watcher, self.mirror, self.warming)


class Tasks(TaskOwner):
    """Every background task of the hub (turns, queue runners, replays, mirrors, watchers),
    owned by it: cancelled and waited for together at shutdown."""

    def __init__(self) -> None:
        super().__init__("hub")


_iso_second: tuple[int, str] = (-1, "")
_MILLIS = tuple(f".{ms:03d}Z" for ms in range(1000))


def iso(ts: float) -> str:
    """UTC, to the millisecond (truncated, as JavaScript's ``toISOString`` does)."""
    # Formatting a datetime per event was a measurable share of emit(); the second is cached.
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
