"""Durability: the session registry, queued messages and every session's event log.

The default store is SQLite in WAL mode, written by one thread with group commit: events are
appended without waiting, the writer commits whatever has accumulated in one transaction, and
then hands the committed batch back to the event loop (``on_commit``), which is when the hub
pushes the events to clients. So an event a client has seen is on disk, and a ``kill -9``
loses at most events nobody saw. ``MemoryStore`` has the same interface without a disk.

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
import stat
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from bridge.logs import get_logger
from bridge.store import derived, finds
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
from bridge.wire.protocol import Attachment, ForkRecord, SessionState, WorktreeObject, Writer

log = get_logger("bridge.store")

MAX_BATCH = 5000
CHECKPOINT_EVERY_S = 1.0
#: A WAL this long is checkpointed whole and truncated: under steady writes passive checkpoints
#: never let SQLite restart it, and it grew without end (docs/benchmarks.md, "Session churn").
WAL_TRUNCATE_BYTES = 64 * 1024 * 1024
#: A write that failed is retried after this, doubling up to RETRY_MAX_S.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0
#: How long a stopping daemon keeps retrying a failing write before it gives it up.
CLOSE_GRACE_S = 10.0


class StoreUnavailable(Exception):
    """The store gave up on writes it could not commit (only while the daemon stops)."""


class SessionRecord(msgspec.Struct, kw_only=True):
    id: str
    agent: str
    cwd: str
    model: str | None = None
    effort: str | None = None
    title: str = ""
    state: SessionState = "idle"
    writer: Writer = "bridge"
    created_at: float = 0.0
    updated_at: float = 0.0
    agent_session_id: str | None = None
    external: bool = False
    last_seq: int = 0
    #: A handoff or other intent recorded before any process is stopped.
    intent: Literal["handoff"] | None = None
    #: The agent mode (``session.mode``), one of the adapter's ``modes``; None: its default.
    mode: str | None = None
    #: The session's last ``usage`` block (JSON), for ``usage.get`` of one read back.
    usage: bytes | None = None
    #: The worktree the session was created in (``session.create`` ``worktree``).
    worktree: WorktreeObject | None = None
    #: ``session.fork``: where it came from, and what its first turn still has to do.
    fork: ForkRecord | None = None


#: an attachment is stored as the wire carries it
AttachmentData = Attachment


class MessageRecord(msgspec.Struct, kw_only=True):
    session: str
    client_msg_id: str
    text: str
    attachments: list[AttachmentData] = msgspec.field(default_factory=list)
    #: "queued" (waiting), "started" (its turn began), "steered" (into one), "command" (a /...)
    status: str = "queued"
    created_at: float = 0.0
    #: The ``queued`` its ``session.send`` was answered with: a retransmit, also after a
    #: restart, gets the same answer (None in records from before this field).
    answered_queued: bool | None = None
    #: A stand-in held in memory while the message waits: its text and attachments are on
    #: disk only (``Store.spill``); ``Store.unspill`` reads them back when its turn starts.
    spilled: bool = False


@dataclass(slots=True)
class StoredEvent:
    session: str
    seq: int
    ts: str
    block_json: bytes
    ts_unix: float = field(default_factory=time.time)
    #: A frame to push right after this event (a state change), never stored.
    after: Any = None


CommitCallback = Callable[[list[StoredEvent]], None]
#: A session read back on demand: its record, its messages (stand-ins), its highest stored seq.
Loaded = tuple[SessionRecord, list[MessageRecord], int]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS event_chunks (
    session TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    last_ts REAL NOT NULL,
    events BLOB NOT NULL,
    PRIMARY KEY (session, first_seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    session TEXT NOT NULL,
    client_msg_id TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (session, client_msg_id)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_enc = msgspec.msgpack.Encoder()
#: A read of history (a replay, recovery) returns at most about this many bytes at a time,
#: however many events were asked for: replays stream in bounded pieces.
READ_BYTES = 4 * 1024 * 1024


def _private_files(path: Path) -> None:
    """The database and its companions are the owner's alone (0600), whatever the umask or
    the directory: SQLite creates ``-wal`` and ``-shm`` with the database file's mode, so the
    database is created 0600 before SQLite opens it, and files left wider are tightened."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    os.close(fd)
    for suffix in ("", "-wal", "-shm", "-journal"):
        name = Path(f"{path}{suffix}")
        try:
            if stat.S_IMODE(name.stat().st_mode) & 0o077:
                os.chmod(name, 0o600)
        except FileNotFoundError:
            continue


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


class MemoryStore(finds.MemoryReads, Store):
    """Everything in memory: same semantics, nothing survives the process."""

    def __init__(self) -> None:
        self._events: dict[str, list[StoredEvent]] = {}
        self._sessions: dict[str, SessionRecord] = {}
        self._messages: dict[tuple[str, str], MessageRecord] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[StoredEvent] = []
        self._scheduled = False
        self.health = StoreHealth()

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def load(self) -> tuple[list[SessionRecord], list[MessageRecord], dict[str, int]]:
        return [], [], {}

    def append_event(self, event: StoredEvent) -> None:
        self._events.setdefault(event.session, []).append(event)
        self._pending.append(event)
        if not self._scheduled and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._commit)

    def _commit(self) -> None:
        batch, self._pending, self._scheduled = self._pending, [], False
        if self.on_commit is not None and batch:
            self.on_commit(batch)

    def save_session(self, record: SessionRecord) -> None:
        self._sessions[record.id] = record

    def save_message(self, record: MessageRecord) -> None:
        self._messages[(record.session, record.client_msg_id)] = record

    async def read_events(self, session: str, after_seq: int, limit: int) -> list[StoredEvent]:
        events = self._events.get(session, [])
        lo, hi = 0, len(events)
        while lo < hi:
            mid = (lo + hi) // 2
            if events[mid].seq <= after_seq:
                lo = mid + 1
            else:
                hi = mid
        return events[lo : lo + limit]

    async def first_seq(self, session: str) -> int | None:
        events = self._events.get(session)
        return events[0].seq if events else None

    async def load_session(self, session: str) -> Loaded | None:
        rec = self._sessions.get(session)
        if rec is None:
            return None
        messages = sorted(
            (m for (sid, _), m in self._messages.items() if sid == session),
            key=lambda m: m.created_at,
        )
        events = self._events.get(session)
        return rec, messages, events[-1].seq if events else 0

    def _ended(self) -> list[SessionRecord]:
        return [r for r in self._sessions.values() if r.state == "ended"]

    async def list_ended(self, before: tuple[float, str], limit: int) -> list[SessionRecord]:
        found = sorted(
            (r for r in self._ended() if (r.updated_at, r.id) < before),
            key=lambda r: (r.updated_at, r.id),
            reverse=True,
        )
        return found[:limit]

    async def ended_dirs(self) -> list[tuple[str, str, float]]:
        return [(r.id, r.cwd, r.updated_at) for r in self._ended()]

    def prune(self, max_events: int, max_age_s: float, ended_max_age_s: float = 0.0) -> None:
        if ended_max_age_s > 0:
            gone = time.time() - ended_max_age_s
            for rec in [r for r in self._ended() if r.updated_at < gone]:
                del self._sessions[rec.id]
                self._events.pop(rec.id, None)
                for key in [k for k in self._messages if k[0] == rec.id]:
                    del self._messages[key]
        cutoff = time.time() - max_age_s
        for session, events in self._events.items():
            keep = [e for e in events[-max_events:] if e.ts_unix >= cutoff]
            self._events[session] = keep

    async def flush(self) -> None:
        if self._pending:
            self._commit()

    async def close(self) -> None:
        await self.flush()


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
        conn.execute("PRAGMA busy_timeout=5000")
        return conn

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _private_files(self.path)
        writer = self._connect()
        writer.executescript(_SCHEMA)
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
        try:
            while True:
                # At most one checkpoint a second, and none while nothing was written: an
                # idle daemon's threads do not wake (docs/benchmarks.md, T8).
                self._written.wait()
                if self._checkpoint_stop.wait(CHECKPOINT_EVERY_S):
                    break
                self._written.clear()
                with self._checkpointing, contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            conn.close()

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
        if not self._handover:
            self._handover = True
            loop.call_soon(self._hand_over)

    def _hand_over(self) -> None:
        ops, self._ops, self._handover = self._ops, [], False
        if ops:
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
        await self.flush()
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
        wal = f"{self.path}-wal"
        try:
            while True:
                batch = self._queue.get()
                while len(batch) < MAX_BATCH:
                    try:
                        batch += self._queue.get_nowait()
                    except queue.Empty:
                        break
                if not self._write_until_done(conn, batch):
                    return
                # Checked here, after each batch: a thread that looks now and then fell far
                # behind a busy writer. The truncation waits (busy_timeout) only for readers.
                with contextlib.suppress(OSError, sqlite3.Error):
                    if os.stat(wal).st_size >= WAL_TRUNCATE_BYTES:
                        with self._checkpointing:
                            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            conn.close()

    def _write_until_done(
        self, conn: sqlite3.Connection, batch: Sequence[_Op | StoredEvent]
    ) -> bool:
        """Commit the batch, retrying with backoff while it fails: nothing of it is handed
        back (so nothing is pushed) until it is committed. Only a daemon that is stopping
        gives a failing batch up, and then nothing of it is pushed either."""
        delay = RETRY_FIRST_S
        failing = False
        while True:
            try:
                keep_going = self._write(conn, batch, recovered=failing)
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
                    return self._give_up(batch, message)
                self._wake.wait(delay)
                self._wake.clear()
                delay = min(RETRY_MAX_S, delay * 2)
                continue
            return keep_going

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

    def _write(
        self, conn: sqlite3.Connection, batch: Sequence[_Op | StoredEvent], *, recovered: bool
    ) -> bool:
        """One attempt; raises on failure, after which nothing of the batch is committed.
        ``recovered``: earlier attempts failed; clients hear "ok" before the events."""
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
        self._written.set()
        if recovered:
            self._tell_loop(self.health.set_ok)
        self._tell_loop(self._committed, events, waiters)
        return keep_going

    def _committed(self, events: list[StoredEvent], waiters: list[asyncio.Future[bool]]) -> None:
        if events and self.on_commit is not None:
            self.on_commit(events)
        self._resolve(waiters, True)
