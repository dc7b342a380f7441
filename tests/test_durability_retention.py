"""Retention covers everything stored about a session; start-up reads only what is queued."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bridge.store.records import MessageRecord, SessionRecord, StoredEvent
from bridge.store.store import SqliteStore
from tests.daemon import DaemonProcess
from tests.wsclient import Client

MiB = 1024 * 1024


async def test_start_up_reads_the_bodies_of_queued_messages_only(tmp_path: Path) -> None:
    db = tmp_path / "bridge.sqlite3"
    store = SqliteStore(db)
    store.open(asyncio.get_running_loop())
    store.save_session(SessionRecord(id="s1", agent="demo", cwd="/"))
    for i in range(40):  # 40 MiB of messages whose turns ran long ago
        store.save_message(
            MessageRecord(
                session="s1",
                client_msg_id=f"old{i}",
                text="x" * MiB,
                status="started",
                created_at=i,
                answered_queued=bool(i % 2),
            )
        )
    store.save_message(
        MessageRecord(
            session="s1",
            client_msg_id="waiting",
            text="y" * MiB,
            status="queued",
            created_at=100,
            answered_queued=True,
        )
    )
    await store.close()

    again = SqliteStore(db)
    again.open(asyncio.get_running_loop())
    try:
        tracemalloc.start()
        _, messages, _ = await asyncio.to_thread(again.load)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        await again.close()
    by_id = {m.client_msg_id: m for m in messages}
    assert by_id["waiting"].status == "queued" and by_id["waiting"].spilled
    again = SqliteStore(db)
    again.open(asyncio.get_running_loop())
    try:
        whole = await again.unspill(by_id["waiting"])  # when its turn starts
    finally:
        await again.close()
    assert whole.text == "y" * MiB and not whole.spilled and whole.answered_queued is True
    # The others are known (a retransmit is answered as before), without their bodies.
    assert all(by_id[f"old{i}"].answered_queued == bool(i % 2) for i in range(40))
    assert all(by_id[f"old{i}"].text == "" for i in range(40))
    assert peak < 8 * MiB, f"start-up read {peak / MiB:.0f} MiB of message bodies"


async def test_an_old_ended_session_is_removed_whole(daemon_factory: Any, project: Path) -> None:
    d: DaemonProcess = daemon_factory(config='[server]\nunix_socket = "off"\n').start()
    c = await Client.open(d.url, d.token)
    gone = (await c.request("session.create", agent="demo", cwd=str(project)))["session"]
    kept = (await c.request("session.create", agent="demo", cwd=str(project)))["session"]
    for s in (gone, kept):
        await c.request(
            "session.send",
            session=s["session"],
            text="echo hello",
            client_msg_id=f"m-{s['session']}",
        )
    await asyncio.sleep(1.0)
    await c.request("session.close", session=gone["session"])
    await c.close()
    assert d.stop() == 0
    time.sleep(1.5)
    # Retentions of a second: the ended session is older than that, the open one is kept.
    (d.config_dir / "config.toml").write_text(
        '[server]\nunix_socket = "off"\n[store]\nmax_age_days = 0.00001\n'
        "ended_max_age_days = 0.00001\n"
    )
    d.start()
    c = await Client.open(d.url, d.token)
    listed = (await c.request("sessions.list", include_external=False))["sessions"]
    await c.close()
    assert [s["session"] for s in listed] == [kept["session"]]
    assert d.stop() == 0
    db = sqlite3.connect(d.state_dir / "bridge.sqlite3")
    try:
        for table, column in (
            ("sessions", "id"),
            ("event_chunks", "session"),
            ("messages", "session"),
        ):
            left = db.execute(
                f"SELECT COUNT(*) FROM {table} WHERE {column} = ?", (gone["session"],)
            ).fetchone()[0]
            assert left == 0, f"{left} rows of the removed session left in {table}"
        # The kept session's message body is pruned too (its turn ran; the user block stays).
        assert db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0
    finally:
        db.close()


async def test_ended_sessions_are_kept_unless_their_retention_is_set(tmp_path: Path) -> None:
    """``store.ended_max_age_days`` is off by default: an ended session, however old, stays
    (events retention keeps its newest event); set, it removes only ended sessions older."""
    day = 86400.0
    now = time.time()
    store = SqliteStore(tmp_path / "bridge.sqlite3")
    store.open(asyncio.get_running_loop())
    records = {
        "old_ended": SessionRecord(id="old_ended", agent="demo", cwd="/", state="ended"),
        "new_ended": SessionRecord(id="new_ended", agent="demo", cwd="/", state="ended"),
        "old_idle": SessionRecord(id="old_idle", agent="demo", cwd="/"),
    }
    ages = {"old_ended": 100 * day, "new_ended": 1 * day, "old_idle": 100 * day}
    try:
        for sid, rec in records.items():
            rec.updated_at = now - ages[sid]
            store.save_session(rec)
            store.append_event(StoredEvent(sid, 1, "t", b"{}", now - ages[sid]))
        store.prune(max_events=100_000, max_age_s=30 * day)  # the defaults
        await store.flush()
        assert await store.load_session("old_ended") is not None
        assert [r.id for r in await store.list_ended((math.inf, ""), 10)] == [
            "new_ended",
            "old_ended",
        ]
        store.prune(max_events=100_000, max_age_s=30 * day, ended_max_age_s=50 * day)
        await store.flush()
        assert await store.load_session("old_ended") is None
        assert await store.read_events("old_ended", 0, 10) == []
        assert await store.load_session("new_ended") is not None
        assert await store.load_session("old_idle") is not None  # not ended: never removed
    finally:
        await store.close()


async def test_the_wal_stays_bounded_under_steady_writes(tmp_path: Path, monkeypatch: Any) -> None:
    """Commits that never pause kept every passive checkpoint behind, so SQLite never restarted
    the WAL: it grew by every page written (gigabytes in a 10-minute soak, its index mapped in
    the daemon's memory). Past ``WAL_TRUNCATE_BYTES`` it is checkpointed and started over."""
    from bridge.store import store as store_module

    monkeypatch.setattr(store_module, "CHECKPOINT_EVERY_S", 0.02)
    monkeypatch.setattr(store_module, "WAL_TRUNCATE_BYTES", 1 * MiB)
    db = tmp_path / "bridge.sqlite3"
    store = SqliteStore(db)
    store.open(asyncio.get_running_loop())
    wal = Path(f"{db}-wal")
    largest = 0
    try:
        seq = 0
        # 4 s of writes, and on a busy machine, which writes slower, on to 24 MiB at least
        start = time.monotonic()
        while (  # one commit after another, no pause
            time.monotonic() - start < 4.0 or seq * 4000 < 25 * MiB
        ) and time.monotonic() - start < 120.0:
            for _ in range(4):
                seq += 1
                store.append_event(StoredEvent("s1", seq, "t", b'{"x":"' + b"y" * 4000 + b'"}'))
            await store.barrier()
            largest = max(largest, wal.stat().st_size)
        written = seq * 4000
        assert written > 24 * MiB, "too few writes to tell"
        # Without the truncation it holds every page written (more than the events' bytes).
        assert largest < written / 2, (
            f"the WAL reached {largest / MiB:.0f} MiB of {written / MiB:.0f}"
        )
        assert [e.seq for e in await store.read_events("s1", seq - 2, 10)] == [seq - 1, seq]
    finally:
        await store.close()
