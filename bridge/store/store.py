"""Durability: the session registry, queued messages and every session's event log.

The default store is SQLite in WAL mode with group commit: events are appended without
waiting, whatever has accumulated (a pass of the event loop's, at least) is committed in one
transaction, and only then is the committed batch handed to ``on_commit``, which is when the
hub pushes the events to clients. So an event a client has seen is on disk, and a ``kill -9``
loses at most events nobody saw. A small batch of one session's events, 5 ms or more after
the last commit, is committed on the event loop's thread itself when the writer thread has
nothing in hand (bridge/store/inline.py); the others, one that failed, and the rare
operations (retention, resetting the WAL, stopping) go to the writer thread, in order.
``MemoryStore`` (bridge/store/memory.py) has the same interface without a disk.

Events are stored in runs: a row of ``event_chunks`` holds up to ``CHUNK_EVENTS`` consecutive
events of one session, MessagePack-encoded (bridge/store/eventrows.py), so a commit is one statement
however many events it carries. Retention cuts inside a row where it must, so what is kept is exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from bridge.logs import get_logger
from bridge.store import derived, files, finds, inline
from bridge.store.eventrows import (
    DEC_CHUNK,
    INSERT_CHUNK,
    LIST_ENDED,
    LIVE,
    LIVE_IDS,
    SAVE_MESSAGE,
    SAVE_SESSION,
    SESSION_INDEX,
    SET_MESSAGE_STATE,
    add_message_columns,
    add_session_columns,
    chunk_rows,
    insert_chunks,
    migrate_event_rows,
    prune_rows,
)
from bridge.store.health import StoreHealth
from bridge.store.records import (
    CommitCallback,
    Loaded,
    MessageRecord,
    SessionRecord,
    StoredEvent,
)

log = get_logger("bridge.store")

MAX_BATCH = 5000
CHECKPOINT_EVERY_S = 1.0
#: How often the checkpoint thread looks at the WAL's length while it is past half its bound
#: and writes go on (else once a second).
WAL_CHECK_S = 0.1
#: A WAL this long is checkpointed whole and started over (written again from its start): under
#: steady writes passive checkpoints never let SQLite restart it, and it grew without end
#: (docs/benchmarks.md, "Session churn"). A file grown past twice this is also cut back to it.
WAL_TRUNCATE_BYTES = 64 * 1024 * 1024
#: Passive checkpoints (beside the writes) first copy the WAL into the database, back to back,
#: until one had at most this much to copy; the writer then copies the rest and starts the WAL
#: over between two batches, which holds events back only that long (docs/benchmarks.md, T13).
#: After CATCH_UP_PASSES passes, or once the WAL is twice WAL_TRUNCATE_BYTES long, it does so
#: anyway (a disk slower than the writes: then the writes wait, and the WAL stays bounded).
WAL_REST_BYTES = 1024 * 1024
CATCH_UP_PASSES = 8
#: The longest the checkpoint thread waits for the writer's reset before it goes on.
RESET_WAIT_S = 5.0
#: How long the writer thread waits for a lock held by another connection (then retries).
BUSY_TIMEOUT_MS = 5000
#: A write that failed is retried after this, doubling up to RETRY_MAX_S.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0
#: How long a stopping daemon keeps retrying a failing write before it gives it up.
CLOSE_GRACE_S = 10.0


class StoreUnavailable(Exception):
    """The store gave up on writes it could not commit (only while the daemon stops)."""


_enc = msgspec.msgpack.Encoder()
#: A read of history (a replay, recovery) returns at most about this many bytes at a time,
#: however many events were asked for: replays stream in bounded pieces.
READ_BYTES = 4 * 1024 * 1024


_dec_session = msgspec.msgpack.Decoder(SessionRecord)
_dec_message = msgspec.msgpack.Decoder(MessageRecord)


class Store(finds.Reads):
    """Interface shared by the SQLite and in-memory stores."""

    on_commit: CommitCallback | None = None
    #: Whether writes succeed; see bridge/store/health.py.
    health: StoreHealth

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        raise NotImplementedError

    def load(self) -> tuple[list[SessionRecord], list[MessageRecord], dict[str, int]]:
        """Sessions not ended, their messages (oldest first), and the highest stored seq per
        session. Ended sessions stay on disk until asked for (``load_session``)."""
        raise NotImplementedError

    async def load_session(self, session: str) -> Loaded | None:
        """One session (an ended one, typically), or None if the store has none of that id."""
        raise NotImplementedError

    async def list_ended(self, before: tuple[float, str], limit: int) -> list[SessionRecord]:
        """Ended sessions whose (``updated_at``, ``id``) is below ``before``, newest first."""
        raise NotImplementedError

    async def ended_dirs(self) -> list[tuple[str, str, float]]:
        """(``id``, ``cwd``, ``updated_at``) of every ended session."""
        raise NotImplementedError

    def append_event(self, event: StoredEvent) -> None:
        raise NotImplementedError

    def hold(self) -> None:
        """Until ``release``, what is put waits for ``release`` instead of the loop's next
        pass (a turn emitting one block's events)."""

    def release(self) -> None:
        """Commit what was put since ``hold`` now, if it is a batch the event loop's thread
        commits (bridge/store/inline.py); else hand it over on the loop's next pass, as usual.
        A paced agent's delta then reaches its clients in the pass that emitted it: one pass
        of the event loop less per delta (docs/benchmarks.md, T12)."""

    def save_session(self, record: SessionRecord) -> None:
        raise NotImplementedError

    def save_message(self, record: MessageRecord) -> None:
        raise NotImplementedError

    def spill(self, record: MessageRecord) -> MessageRecord:
        """What to keep in memory of a message handed to ``save_message``: by default the
        record itself; the SQLite store keeps only a stand-in (its body is on disk)."""
        return record

    async def unspill(self, record: MessageRecord) -> MessageRecord:
        """The whole message for a stand-in made by ``spill``."""
        return record

    async def read_events(self, session: str, after_seq: int, limit: int) -> list[StoredEvent]:
        raise NotImplementedError

    async def first_seq(self, session: str) -> int | None:
        raise NotImplementedError

    def prune(self, max_events: int, max_age_s: float, ended_max_age_s: float = 0.0) -> None:
        """Retention (bridge/store/eventrows.py ``prune_rows``); ``ended_max_age_s`` 0 keeps ended
        sessions."""
        raise NotImplementedError

    async def flush(self) -> None:
        raise NotImplementedError

    async def barrier(self) -> None:
        """Return once everything handed to the store before this call is committed (the
        commit barrier behind every ``ok`` that promises durability). It rides on the group
        commit: concurrent barriers share one transaction. While writes fail it waits; it
        raises ``StoreUnavailable`` only if the store gave up on those writes."""
        await self.flush()

    def closing(self, grace_s: float) -> None:
        """The daemon is stopping: writes still failing ``grace_s`` from now are given up."""

    async def close(self) -> None:
        raise NotImplementedError


class _Op:
    __slots__ = ("args", "kind")

    def __init__(self, kind: str, args: Any) -> None:
        self.kind = kind
        self.args = args


class SqliteStore(finds.SqliteReads, Store):
    """SQLite (WAL) written off the event loop by one thread with group commit."""

    _decode_record = staticmethod(_dec_session.decode)

    def __init__(self, path: Path) -> None:
        self.path = path
        self._queue: queue.SimpleQueue[list[_Op | StoredEvent]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._ops: list[_Op | StoredEvent] = []
        self._handover = False
        #: between ``hold`` and ``release``: operations wait for ``release``, not for a pass
        self._held = False
        self._read_lock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        # Reads run on their own thread: on the shared default executor a replay waited
        # behind slow `--version` probes and other blocking calls (docs/benchmarks.md, T6).
        self._read_pool = ThreadPoolExecutor(1, thread_name_prefix="bridge-store-read")
        self._checkpoint_stop = threading.Event()
        #: set after each write: the checkpoint thread sleeps on it while nothing is written
        self._written = threading.Event()
        #: one checkpoint at a time: a truncation that met a running passive one gave up busy
        self._checkpointing = threading.Lock()
        #: set by the writer after a reset of the WAL it was asked for (the checkpoint thread
        #: waits for it)
        self._reset = threading.Event()
        #: the writer's connection, for commits on the event loop's thread (None once closing)
        self._inline: sqlite3.Connection | None = None
        #: lists of operations handed to the writer thread, and those it has finished with
        #: (both counted on the event loop): equal, the writer thread holds nothing
        self._handed = 0
        self._finished = 0
        #: when the last commit was handed back to the event loop (monotonic)
        self._last_commit = 0.0
        self._closed = False
        self.health = StoreHealth()
        #: monotonic time after which a failing write is given up (set while stopping)
        self._give_up_at: float | None = None
        self._wake = threading.Event()
        self._derived = derived.Derived()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return conn

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        files.private_files(self.path)
        writer = self._connect()
        writer.executescript(files.SCHEMA)
        moved = migrate_event_rows(writer)
        if moved is not None:
            log.info("store_migrated", events=moved, to="event_chunks")
        add_message_columns(writer)
        add_session_columns(writer, _dec_session.decode)
        writer.execute(SESSION_INDEX)
        derived.ensure(writer)
        # Checkpoints (copying the WAL into the database, with an fsync) run on their own
        # connection and thread: done by the writer on commit, they held back every event
        # behind them by 5 to 70 ms (docs/benchmarks.md, T3).
        writer.execute("PRAGMA wal_autocheckpoint=0")
        # A commit on the event loop's thread never waits for a lock another connection holds:
        # it fails at once and goes to the writer thread, which waits (BUSY_TIMEOUT_MS).
        writer.execute("PRAGMA busy_timeout=0")
        self._inline = writer
        self._reader = self._connect()
        self._thread = threading.Thread(
            target=self._run, args=(writer,), name="bridge-store", daemon=True
        )
        self._thread.start()
        threading.Thread(
            target=self._checkpoints, name="bridge-store-checkpoint", daemon=True
        ).start()

    def _checkpoints(self) -> None:
        conn = self._connect()
        page = int(conn.execute("PRAGMA page_size").fetchone()[0])
        long = False
        try:
            while True:
                # A passive checkpoint once a second while writes go on, and none while nothing
                # is written (an idle daemon's threads do not wake: docs/benchmarks.md, T8);
                # every WAL_CHECK_S while the WAL is past half its bound.
                self._written.wait()
                every = min(WAL_CHECK_S if long else CHECKPOINT_EVERY_S, CHECKPOINT_EVERY_S)
                if self._checkpoint_stop.wait(every):
                    break
                self._written.clear()
                with contextlib.suppress(sqlite3.Error, OSError):
                    _busy, frames, copied = self._passive(conn)
                    long = frames * page >= WAL_TRUNCATE_BYTES // 2
                    if frames * page >= WAL_TRUNCATE_BYTES:
                        self._catch_up(conn, page, copied)
                        long = False
        finally:
            conn.close()

    def _passive(self, conn: sqlite3.Connection) -> tuple[int, int, int]:
        """One passive checkpoint: (busy, frames in the WAL, frames copied into the database).
        It runs beside the writes and never holds them back."""
        with self._checkpointing:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(busy), int(frames), int(copied)

    def _catch_up(self, conn: sqlite3.Connection, page: int, before: int) -> None:
        """The WAL is long: copy it into the database with passive checkpoints beside the
        writes until one had little to copy, then ask the writer to copy the rest and start
        the WAL over between two batches. A truncation that copied most of the WAL itself held
        every session's events back for 80 to 130 ms (docs/benchmarks.md, T13)."""
        for _ in range(CATCH_UP_PASSES):
            busy, frames, copied = self._passive(conn)
            if copied < before:
                before = 0  # the WAL was started over meanwhile
            if not busy and copied >= frames and (frames - before) * page <= WAL_REST_BYTES:
                break
            if frames * page >= 2 * WAL_TRUNCATE_BYTES:
                break
            before = copied
        self._reset.clear()
        self._tell_loop(self._put, _Op("wal_reset", None))
        self._reset.wait(RESET_WAIT_S)

    def load(self) -> tuple[list[SessionRecord], list[MessageRecord], dict[str, int]]:
        assert self._reader is not None
        with self._read_lock:
            sessions = [
                _dec_session.decode(row[0])
                for row in self._reader.execute("SELECT data FROM sessions WHERE " + LIVE)  # noqa: S608
            ]
            messages = self._load_messages(self._reader, LIVE_IDS)
            seqs = dict(
                self._reader.execute(
                    "SELECT session, MAX(last_seq) FROM event_chunks WHERE "  # noqa: S608
                    + LIVE_IDS
                    + " GROUP BY session"
                )
            )
        messages.sort(key=lambda m: m.created_at)
        return sessions, messages, seqs

    @staticmethod
    def _load_messages(
        conn: sqlite3.Connection, where: str, args: tuple[Any, ...] = ()
    ) -> list[MessageRecord]:
        """Stand-ins read from plain columns (state, answer, time): start-up reads no message
        body; a queued message's body is read when its turn starts (``unspill``). Rows
        written before those columns existed are read whole, once."""
        out = [
            _dec_message.decode(row[0])
            for row in conn.execute(
                "SELECT data FROM messages WHERE status IS NULL AND " + where,  # noqa: S608
                args,
            )
        ]
        plain = "SELECT session, client_msg_id, status, answered, created_at FROM messages"
        for session, msg_id, status, answered, created in conn.execute(
            plain + " WHERE status IS NOT NULL AND " + where,
            args,
        ):
            # Queued ones are stand-ins too: their bodies are read when their turns start.
            out.append(
                MessageRecord(
                    session=session,
                    client_msg_id=msg_id,
                    text="",
                    status=status,
                    created_at=created or 0.0,
                    answered_queued=None if answered is None else bool(answered),
                    spilled=True,
                )
            )
        return out

    def _put(self, op: _Op | StoredEvent) -> None:
        # Operations reach the writer once per event-loop pass, in order, as one list: a put
        # per event woke the writer thread per event, and that GIL ping-pong cost the loop
        # more than SQLite itself (docs/benchmarks.md, T1/T7).
        loop = self._loop
        if loop is None or loop.is_closed():
            self._hand_over()
            self._queue.put([op])
            return
        if threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self._put, op)
            return
        self._ops.append(op)
        if not self._handover and not self._held:
            self._handover = True
            loop.call_soon(self._hand_over)

    def hold(self) -> None:
        self._held = True

    def release(self) -> None:
        self._held = False
        if not self._ops or self._handover:
            return  # nothing held, or a hand-over already due takes it
        if self._inline_now(self._ops):
            self._hand_over(inline_now=True)
        else:
            self._handover = True
            assert self._loop is not None
            self._loop.call_soon(self._hand_over)

    def _inline_now(self, ops: list[_Op | StoredEvent]) -> bool:
        # Nothing in the writer thread's hands, so nothing can be committed out of order.
        return (
            self._inline is not None
            and self._handed == self._finished
            and time.monotonic() - self._last_commit >= inline.GAP_S
            and inline.fits(ops)
        )

    def _hand_over(self, *, inline_now: bool = False) -> None:
        ops, self._ops, self._handover = self._ops, [], False
        if not ops:
            return
        conn = self._inline
        if conn is not None and (inline_now or self._inline_now(ops)):
            try:
                events, waiters, _ = self._commit(conn, ops)
            except (sqlite3.Error, OSError):
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                # Nothing of it is committed: the writer thread retries it (and reports it).
            else:
                if not self._written.is_set():  # a lock and a notify per commit, else
                    self._written.set()
                self._committed(events, waiters, 0)
                return
        self._handed += 1
        self._queue.put(ops)

    def append_event(self, event: StoredEvent) -> None:
        self._put(event)  # the commonest operation goes unwrapped

    def save_session(self, record: SessionRecord) -> None:
        row = (record.id, _enc.encode(record), record.state, record.updated_at, record.cwd)
        self._put(_Op("session", row))

    def save_message(self, record: MessageRecord) -> None:
        answered = None if record.answered_queued is None else int(record.answered_queued)
        if record.spilled:  # a stand-in: the body on disk stays, the state changes
            self._put(
                _Op(
                    "message_state",
                    (record.status, answered, record.session, record.client_msg_id),
                )
            )
            return
        self._put(
            _Op(
                "message",
                (
                    record.session,
                    record.client_msg_id,
                    _enc.encode(record),
                    record.status,
                    answered,
                    record.created_at,
                ),
            )
        )

    def spill(self, record: MessageRecord) -> MessageRecord:
        if record.spilled:
            return record
        return msgspec.structs.replace(record, text="", attachments=[], spilled=True)

    async def unspill(self, record: MessageRecord) -> MessageRecord:
        if not record.spilled:
            return record
        with contextlib.suppress(StoreUnavailable):
            await self.barrier()  # its row may still be on its way to the disk

        def query() -> bytes | None:
            assert self._reader is not None
            with self._read_lock:
                row = self._reader.execute(
                    "SELECT data FROM messages WHERE session = ? AND client_msg_id = ?",
                    (record.session, record.client_msg_id),
                ).fetchone()
            return None if row is None else bytes(row[0])

        data = await asyncio.get_running_loop().run_in_executor(self._read_pool, query)
        if data is None:
            log.error("message_body_missing", session=record.session, message=record.client_msg_id)
            return record
        whole = _dec_message.decode(data)
        return msgspec.structs.replace(
            whole, status=record.status, answered_queued=record.answered_queued, spilled=False
        )

    def prune(self, max_events: int, max_age_s: float, ended_max_age_s: float = 0.0) -> None:
        now = time.time()
        gone = now - ended_max_age_s if ended_max_age_s > 0 else None
        self._put(_Op("prune", (max_events, now - max_age_s, gone)))

    async def flush(self) -> None:
        with contextlib.suppress(StoreUnavailable):
            await self.barrier()

    async def barrier(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            return
        assert self._loop is not None
        done: asyncio.Future[bool] = self._loop.create_future()
        self._put(_Op("flush", done))
        if not await done:
            raise StoreUnavailable("the store could not commit this write")

    def closing(self, grace_s: float) -> None:
        self._give_up_at = time.monotonic() + grace_s
        self._wake.set()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._give_up_at is None:
            self.closing(CLOSE_GRACE_S)
        self._checkpoint_stop.set()
        self._written.set()
        self._reset.set()
        await self.flush()
        self._inline = None  # the writer thread closes the connection after the stop
        self._put(_Op("stop", None))
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
        self._read_pool.shutdown(wait=True)
        if self._reader is not None:
            self._reader.close()

    async def read_events(self, session: str, after_seq: int, limit: int) -> list[StoredEvent]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._read_pool, self._read_events, session, after_seq, limit
        )

    def _read_events(self, session: str, after_seq: int, limit: int) -> list[StoredEvent]:
        assert self._reader is not None
        out: list[StoredEvent] = []
        with self._read_lock:
            rows = self._reader.execute(
                "SELECT events FROM event_chunks WHERE session = ? AND last_seq > ?"
                " ORDER BY first_seq",
                (session, after_seq),
            )
            size = 0
            try:
                for (blob,) in rows:
                    for seq, ts, ts_unix, block in DEC_CHUNK.decode(blob):
                        if seq > after_seq:
                            out.append(StoredEvent(session, seq, ts, block, ts_unix))
                            size += len(block)
                            if size >= READ_BYTES or len(out) >= limit:
                                return out
            finally:
                rows.close()
        return out[:limit]

    async def _query(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``work`` on the reader connection, off the event loop."""

        def run() -> Any:
            assert self._reader is not None
            with self._read_lock:
                return work(self._reader)

        return await asyncio.get_running_loop().run_in_executor(self._read_pool, run)

    async def load_session(self, session: str) -> Loaded | None:
        def work(conn: sqlite3.Connection) -> Loaded | None:
            row = conn.execute("SELECT data FROM sessions WHERE id = ?", (session,)).fetchone()
            if row is None:
                return None
            messages = self._load_messages(conn, "session = ?", (session,))
            messages.sort(key=lambda m: m.created_at)
            top = conn.execute(
                "SELECT MAX(last_seq) FROM event_chunks WHERE session = ?", (session,)
            ).fetchone()
            return _dec_session.decode(row[0]), messages, top[0] or 0

        loaded: Loaded | None = await self._query(work)
        return loaded

    async def list_ended(self, before: tuple[float, str], limit: int) -> list[SessionRecord]:
        at, sid = before
        rows = await self._query(lambda c: c.execute(LIST_ENDED, (at, at, sid, limit)).fetchall())
        return [_dec_session.decode(row[0]) for row in rows]

    async def ended_dirs(self) -> list[tuple[str, str, float]]:
        sql = "SELECT id, cwd, updated_at FROM sessions WHERE state = 'ended'"
        rows: list[tuple[str, str, float]] = await self._query(lambda c: c.execute(sql).fetchall())
        return rows

    async def first_seq(self, session: str) -> int | None:
        def query() -> int | None:
            assert self._reader is not None
            with self._read_lock:
                row = self._reader.execute(
                    "SELECT MIN(first_seq) FROM event_chunks WHERE session = ?", (session,)
                ).fetchone()
            return None if row is None else row[0]

        return await asyncio.get_running_loop().run_in_executor(self._read_pool, query)

    # ---- the writer thread -------------------------------------------------------------------

    def _run(self, conn: sqlite3.Connection) -> None:
        try:
            while True:
                lists = [self._queue.get()]
                size = len(lists[0])
                while size < MAX_BATCH:
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    lists.append(more)
                    size += len(more)
                batch = [op for ops in lists for op in ops]
                if not self._write_until_done(conn, batch, len(lists)):
                    return
        finally:
            conn.close()

    def _write_until_done(
        self, conn: sqlite3.Connection, batch: Sequence[_Op | StoredEvent], lists: int
    ) -> bool:
        """Commit the batch, retrying with backoff while it fails: nothing of it is handed
        back (so nothing is pushed) until it is committed. Only a daemon that is stopping
        gives a failing batch up, and then nothing of it is pushed either. ``lists``: how
        many hand-overs the batch joins (the loop counts them back)."""
        delay = RETRY_FIRST_S
        failing = False
        events: list[StoredEvent] = []
        waiters: list[asyncio.Future[bool]] = []
        keep_going = True
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        while True:
            try:
                events, waiters, keep_going = self._commit(conn, batch)
            except (sqlite3.Error, OSError) as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                message = f"{type(exc).__name__}: {exc}"
                if not failing:
                    failing = True
                    log.error("store_write_failed", batch=len(batch), error=message)
                self._tell_loop(self.health.set_failing, message)
                give_up = self._give_up_at
                if give_up is not None and time.monotonic() >= give_up:
                    keep_going = self._give_up(batch, message)
                    break
                self._wake.wait(delay)
                self._wake.clear()
                delay = min(RETRY_MAX_S, delay * 2)
                continue
            self._written.set()
            if failing:  # clients hear "ok" before the events
                self._tell_loop(self.health.set_ok)
            asked = any(isinstance(op, _Op) and op.kind == "wal_reset" for op in batch)
            if asked or _size(f"{self.path}-wal") >= 2 * WAL_TRUNCATE_BYTES:
                self._tell_loop(self._committed, events, waiters, 0)
                # Past twice its bound (the checkpoint thread fell behind the writes), the
                # reset waits for its pass and for readers, and the writes wait for it.
                self._reset_wal(conn, wait=not asked)
                events, waiters = [], []
            break
        # Back to what a commit on the event loop's thread needs, before the loop hears that
        # this thread is done with the connection.
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA busy_timeout=0")
        self._tell_loop(self._committed, events, waiters, lists)
        return keep_going

    def _reset_wal(self, conn: sqlite3.Connection, *, wait: bool) -> None:
        """Copy into the database what the passive checkpoints left, and start the WAL over
        from its beginning; unless ``wait``, no wait for readers (one in the way: the WAL
        stays long, and is reset at the next request).

        Not ``wal_checkpoint(TRUNCATE)``: truncating the file took 13 to 80 ms by itself here,
        however little was left to copy (freeing the blocks of a file just written, on a
        file system that discards them), and every commit waited. A WAL started over keeps
        its length (WAL_TRUNCATE_BYTES and what was written while it was caught up with);
        only a file that grew past twice that is cut back, paying that once."""
        start = time.monotonic()
        busy: bool | None = None
        cut = _size(f"{self.path}-wal") > 2 * WAL_TRUNCATE_BYTES
        with self._checkpointing, contextlib.suppress(sqlite3.Error, OSError):
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS if wait else 0}")
            busy = bool(conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0])
            if not busy:
                # SQLite starts the WAL over at the next write (and cuts the file to
                # journal_size_limit, if one is set): this one, on this thread.
                if cut:
                    conn.execute(f"PRAGMA journal_size_limit={WAL_TRUNCATE_BYTES}")
                try:
                    conn.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES ('wal_reset', ?)",
                        (str(time.time()),),
                    )
                finally:
                    if cut:
                        conn.execute("PRAGMA journal_size_limit=-1")
        log.info(
            "store_wal_reset",
            ms=round((time.monotonic() - start) * 1000, 1),
            busy=busy,
            cut=cut,
            behind=wait,
        )
        self._reset.set()

    def _give_up(self, batch: Sequence[_Op | StoredEvent], message: str) -> bool:
        events = sum(isinstance(op, StoredEvent) for op in batch)
        log.error("store_write_abandoned", batch=len(batch), events=events, error=message)
        waiters = [op.args for op in batch if isinstance(op, _Op) and op.kind == "flush"]
        self._tell_loop(self._resolve, waiters, False)
        return not any(isinstance(op, _Op) and op.kind == "stop" for op in batch)

    def _tell_loop(self, callback: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(callback, *args)

    @staticmethod
    def _resolve(waiters: list[asyncio.Future[bool]], committed: bool) -> None:
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(committed)

    def _commit(
        self, conn: sqlite3.Connection, batch: Sequence[_Op | StoredEvent]
    ) -> tuple[list[StoredEvent], list[asyncio.Future[bool]], bool]:
        """One attempt, on whichever thread holds the connection; raises on failure, after
        which nothing of the batch is committed. Returns the events, the barriers waiting for
        them, and False if the batch stops the writer."""
        events = [op for op in batch if isinstance(op, StoredEvent)]
        waiters: list[asyncio.Future[bool]] = []
        keep_going = True
        rows = chunk_rows(events)
        found = self._derived.rows(batch, events)
        # The common case, one session's events: one statement, its own transaction.
        single = len(events) == len(batch) and len(rows) == 1 and not found
        if single:
            conn.execute(INSERT_CHUNK, rows[0])
        else:
            conn.execute("BEGIN")
        for op in batch:
            if isinstance(op, StoredEvent):
                continue  # inserted after the other operations, as rows
            if op.kind == "session":
                conn.execute(SAVE_SESSION, op.args)
            elif op.kind == "message":
                conn.execute(SAVE_MESSAGE, op.args)
            elif op.kind == "message_state":
                conn.execute(SET_MESSAGE_STATE, op.args)
            elif op.kind == "prune":
                prune_rows(conn, *op.args)
                derived.prune(conn)
            elif op.kind == "flush":
                waiters.append(op.args)
            elif op.kind == "stop":
                keep_going = False
        if not single:
            insert_chunks(conn, rows)
            derived.insert(conn, found)
            conn.execute("COMMIT")
        return events, waiters, keep_going

    def _committed(
        self, events: list[StoredEvent], waiters: list[asyncio.Future[bool]], lists: int
    ) -> None:
        """On the event loop, in commit order: push, answer the barriers, and count the
        writer thread's hand-overs it is done with."""
        self._finished += lists
        self._last_commit = time.monotonic()
        if events and self.on_commit is not None:
            self.on_commit(events)
        self._resolve(waiters, True)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
