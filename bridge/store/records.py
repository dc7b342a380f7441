"""What the store keeps, as the rest of the daemon handles it: a session's record, a queued
message, an event of a session's log (bridge/store/store.py writes and reads them)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from bridge.wire.protocol import Attachment, ForkRecord, SessionState, WorktreeObject, Writer


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
