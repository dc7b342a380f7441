"""Events out: numbering, storing, publishing after commit, state frames, pacing, replay.

Data flows one way: ``emit`` (seq, store) -> the store commits -> ``committed`` -> every
subscription. A subscriber that connects late replays from the store, then switches to live
delivery without an await in between, so it sees every event once and in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from bridge.blocks import Block, EndReason, SystemBlock, UsageBlock, block_to_json
from bridge.config import Config
from bridge.hub.textsafe import encode_block
from bridge.invariants import TurnGuard
from bridge.store.records import StoredEvent
from bridge.store.store import Store
from bridge.wire.protocol import EncodedEvent, EncodedFrame, Outgoing, StateFrame
from bridge.wire.results import SessionSubscribeResult

from .state import (
    Event,
    HubError,
    Session,
    Subscriber,
    Subscription,
    Tasks,
    iso,
    transition,
)

#: Events waiting for the store above which a turn pauses, and below which it goes on.
UNCOMMITTED_HIGH = 4000
UNCOMMITTED_LOW = 1000
REPLAY_CHUNK = 1000
#: The longest a turn waits, per burst of blocks, for a subscriber that is far behind.
PACE_WAIT_S = 0.02


def _deliver(subs: list[Subscription], run: list[Outgoing], afters: list[int], limit: int) -> None:
    for sub in subs:
        sub.offer_run(run, afters, limit)


class Fanout:
    def __init__(
        self, config: Config, store: Store, sessions: dict[str, Session], tasks: Tasks
    ) -> None:
        self.config = config
        self.store = store
        self.sessions = sessions
        self.tasks = tasks
        #: Also given every committed batch, after the subscribers (bridge/attention).
        self.on_committed: Callable[[list[StoredEvent]], None] | None = None
        #: Set when a session may have become one for the terminal sweep to watch (a state
        #: change, an agent session id, a drop-in adapter with handoff hooks loaded).
        self.sweep_wake = asyncio.Event()
        store.on_commit = self.committed

    # ---- events ------------------------------------------------------------------------------

    def emit(self, s: Session, block: Block) -> None:
        """Number, store and (after commit) publish one block."""
        block_json = encode_block(block)  # before numbering: a block that fails takes no seq
        seq = s.next_seq
        s.next_seq += 1
        now = time.time()
        s.rec.last_seq = seq
        s.rec.updated_at = now
        if isinstance(block, UsageBlock):
            s.usage = block
            s.rec.usage = block_json
        s.uncommitted += 1
        if s.uncommitted >= UNCOMMITTED_HIGH:
            s.drained.clear()
        event = StoredEvent(s.id, seq, iso(now), block_json, now)
        s.last_pending = event
        self.store.append_event(event)

    def finish(
        self, s: Session, guard: TurnGuard, reason: EndReason, exit_code: int | None = None
    ) -> None:
        """Close what the turn left open and end it (once)."""
        for block in guard.finish(reason, exit_code, silent=True):
            self.emit(s, block)

    def committed(self, batch: list[StoredEvent]) -> None:
        limit = self.config.limits.send_queue_frames
        s: Session | None = None
        subs: list[Subscription] = []
        touched: dict[str, Session] = {}
        # A batch is mostly runs of one session's events: look things up, and hand the run's
        # frames to each subscriber, per run (per event and subscriber, with 20 subscribers,
        # was most of a turn's cost: docs/benchmarks.md, T10).
        run: list[Outgoing] = []
        afters: list[int] = []
        for ev in batch:
            if s is None or s.id != ev.session:
                if run:
                    _deliver(subs, run, afters, limit)
                    run, afters = [], []
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
                run.append(EncodedEvent(ev.session, ev.seq, ev.ts, ev.block_json))
                afters.append(ev.seq)
                if ev.after is not None:
                    run.append(ev.after)
                    afters.append(ev.seq)
        if run:
            _deliver(subs, run, afters, limit)
        for s in touched.values():
            if s.uncommitted <= UNCOMMITTED_LOW:
                s.drained.set()
        if self.on_committed is not None:
            self.on_committed(batch)

    async def pace(self, s: Session) -> None:
        """Give subscribers far behind a moment to catch up, all at once and bounded (one
        PACE_WAIT_S per burst, however many), and no more waiting for one whose socket took
        nothing (``catch_up``) until its queue overflows and it is cut off. Agents rarely
        stream that fast; a synthetic one does, and without this it buried a client reading
        at full speed."""
        waits = [
            sub.conn.catch_up(PACE_WAIT_S)
            for sub in list(s.subs.values())
            if sub.live and sub.conn.behind and not sub.conn.closed
        ]
        if len(waits) == 1:
            await waits[0]
        elif waits:
            # At once, not one after the other: twenty subscribers far behind cost the turn
            # one PACE_WAIT_S, not twenty.
            await asyncio.gather(*waits)

    async def backpressure(self, s: Session) -> None:
        if s.uncommitted >= UNCOMMITTED_HIGH:
            await s.drained.wait()

    def push_state(self, s: Session) -> None:
        frame = EncodedFrame(
            StateFrame(
                session=s.id,
                state=s.rec.state,
                writer=s.rec.writer,
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

    def transition(self, s: Session, event: Event, why: str) -> None:
        """Apply one event of the transition table; a change of state or writer is stored,
        logged as a ``system`` block with code ``state`` and pushed as a ``state`` frame."""
        old_state, old_writer, _ = transition(s.rec, event)
        state, writer = s.rec.state, s.rec.writer
        if (state, writer) == (old_state, old_writer):
            self.store.save_session(s.rec)  # the intent changed
            return
        self.emit(
            s,
            SystemBlock(
                code="state",
                text=f"{old_state} -> {state} (writer: {writer}): {why}",
                data={"state": state, "writer": writer, "queued": len(s.queue)},
            ),
        )
        self.store.save_session(s.rec)
        self.push_state(s)
        self.sweep_wake.set()
        if state == "running":
            s.idle.clear()
        else:
            s.idle.set()

    # ---- subscriptions -------------------------------------------------------------------------

    def subscribe(
        self, s: Session, conn: Subscriber, after_seq: int
    ) -> tuple[SessionSubscribeResult, Callable[[], None]]:
        key = id(conn)
        if key not in s.subs and len(s.subs) >= self.config.limits.max_subscribers_per_session:
            raise HubError("conflict", "this session has too many subscribers")
        old = s.subs.pop(key, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        sub = Subscription(conn=conn, session=s, sent_seq=max(0, after_seq))
        s.subs[key] = sub
        result = SessionSubscribeResult(last_seq=s.next_seq - 1, state=s.rec.state)

        def begin() -> None:
            sub.task = self.tasks.spawn(self.replay(sub, after_seq))

        return result, begin

    def unsubscribe(self, s: Session, conn: Subscriber) -> None:
        sub = s.subs.pop(id(conn), None)
        if sub is not None and sub.task is not None and not sub.task.done():
            sub.task.cancel()

    def drop_connection(self, conn: Subscriber) -> None:
        for s in self.sessions.values():
            self.unsubscribe(s, conn)

    async def replay(self, sub: Subscription, after_seq: int) -> None:
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
            if sub.backlog_from() <= cursor + 1:
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
