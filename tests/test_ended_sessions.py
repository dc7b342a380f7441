"""Memory follows live sessions: an ended session leaves memory (past the few used last) and
is read back from the store when a request names it; start-up loads no ended session; and
``sessions.list`` pages through them all, most recently changed first."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from bridge.hub import Hub, HubError
from bridge.hub.hub import ENDED_IN_MEMORY
from bridge.store.records import SessionRecord
from bridge.store.store import SqliteStore
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge
from tests.hubkit import Sub, make_hub, project_dir, until
from tests.wsclient import Client

CHURN = 2000


async def _open(path: Path) -> tuple[Hub, SqliteStore]:
    store = SqliteStore(path)
    hub, _ = await make_hub(store)  # type: ignore[arg-type]
    return hub, store


async def _stop(hub: Hub, store: SqliteStore) -> None:
    await hub.shutdown()
    await store.close()


async def _turn(hub: Hub, sid: str, text: str) -> None:
    await hub.send(sid, text, [], f"m-{sid}")
    await until(lambda: hub.get(sid).rec.state == "idle" and not hub.get(sid).queue)


async def _history(hub: Hub, sid: str, after_seq: int = 0) -> Sub:
    sub = Sub()
    result, begin = await hub.subscribe(sid, sub, after_seq)
    begin()
    await until(lambda: hub.get(sid).subs[id(sub)].live, what="the replay")
    assert result.last_seq == hub.get(sid).next_seq - 1
    return sub


async def test_ended_sessions_leave_memory_and_come_back_from_the_store(tmp_path: Path) -> None:
    db = tmp_path / "bridge.sqlite3"
    cwd = project_dir(tmp_path)
    hub, store = await _open(db)
    try:
        first, _ = await hub.create("demo", cwd)
        await _turn(hub, first.session, "echo hello from the first one")
        await hub.close(first.session)
        seen = await _history(hub, first.session)  # what a client saw before it left memory
        await hub.unsubscribe(first.session, seen)
        live, _ = await hub.create("demo", cwd)
        for _ in range(CHURN):
            created, _ = await hub.create("demo", cwd)
            await hub.close(created.session)
        # Memory holds the live session and a bounded few of the ended ones, not thousands.
        assert len(hub.sessions) <= ENDED_IN_MEMORY + 1, len(hub.sessions)
        assert first.session not in hub.sessions and live.session in hub.sessions

        # Read back, the first one's history is whole, and requests answer as before.
        again = await _history(hub, first.session)
        texts = [b.get("text") for b in again.blocks("text")]
        assert "".join(t or "" for t in texts).strip() == "You said: hello from the first one"
        assert again.events() == seen.events()
        assert again.notices("state")[-1]["data"]["state"] == "ended"
        tail = await _history(hub, first.session, after_seq=3)
        assert [seq for seq, _ in tail.events()] == [seq for seq, _ in seen.events()][3:]
        for sub in (again, tail):
            await hub.unsubscribe(first.session, sub)
        assert await hub.send(first.session, "again", [], f"m-{first.session}") is False
        try:
            await hub.send(first.session, "new", [], "another")
            raise AssertionError("a send to an ended session was taken")
        except HubError as exc:
            assert exc.code == "conflict"
        listed, _ = await hub.list_sessions(False, limit=CHURN + 10)
        obj = next(o for o in listed if o.session == first.session)
        assert (obj.state, obj.last_seq) == ("ended", seen.events()[-1][0])
        assert len(listed) == CHURN + 2
    finally:
        await _stop(hub, store)

    hub, store = await _open(db)
    try:
        # A restart loads the live session only; the ended ones are read when asked for.
        assert set(hub.sessions) == {live.session}
        after = await _history(hub, first.session)
        assert after.events() == seen.events()
        listed, _ = await hub.list_sessions(False, limit=CHURN + 10)
        assert len(listed) == CHURN + 2
    finally:
        await _stop(hub, store)


async def test_sessions_list_pages_by_cursor_while_sessions_are_created(tmp_path: Path) -> None:
    cwd = project_dir(tmp_path)
    hub, store = await _open(tmp_path / "bridge.sqlite3")
    try:
        made = []
        for i in range(30):
            created, _ = await hub.create("demo", cwd)
            made.append(created.session)
            if i % 2:
                await hub.close(created.session)
        for _ in range(2 * CHURN // ENDED_IN_MEMORY):  # push the closed ones out of memory
            created, _ = await hub.create("demo", cwd)
            await hub.close(created.session)
        everything, _ = await hub.list_sessions(False, limit=5000)
        order = [o.session for o in everything]
        assert [o.updated_at for o in everything] == sorted(
            (o.updated_at for o in everything), reverse=True
        )
        paged: list[str] = []
        cursor: str | None = None
        while True:
            page, cursor = await hub.list_sessions(False, limit=7, cursor=cursor)
            assert len(page) <= 7
            paged += [o.session for o in page]
            await hub.create("demo", cwd)  # newer than the cursor: on no later page
            if cursor is None:
                break
        assert paged == order  # no duplicate, no gap, same order
        assert set(made) <= set(paged)
        first, cursor = await hub.list_sessions(False)
        assert cursor is None or len(first) == 1000
        for bad in ("nonsense", "nan:x", "1.5:"):
            try:
                await hub.list_sessions(False, cursor=bad)
                raise AssertionError(f"cursor {bad!r} was taken")
            except HubError as exc:
                assert exc.code == "bad_request"
    finally:
        await _stop(hub, store)


async def test_sessions_list_limit_and_cursor_over_the_protocol(
    daemon_factory: Any, project: Path
) -> None:
    d: DaemonProcess = daemon_factory(config='[server]\nunix_socket = "off"\n').start()
    c = await Client.open(d.url, d.token)
    try:
        ids = []
        for _ in range(5):
            s = (await c.request("session.create", agent="demo", cwd=str(project)))["session"]
            await c.request("session.close", session=s["session"])
            ids.append(s["session"])
        old = await c.request("sessions.list", include_external=False)  # a client of before
        assert [s["session"] for s in old["sessions"]] == ids[::-1]
        assert old["next_cursor"] is None
        page = await c.request("sessions.list", include_external=False, limit=2)
        assert [s["session"] for s in page["sessions"]] == ids[:2:-1]
        rest = await c.request(
            "sessions.list", include_external=False, limit=10, cursor=page["next_cursor"]
        )
        assert [s["session"] for s in rest["sessions"]] == ids[2::-1]
        assert rest["next_cursor"] is None
        err = await c.call("sessions.list", limit=0)
        assert (err["t"], err["code"]) == ("err", "bad_request"), err
        # `agent-bridge sessions --all` follows the cursors; `--limit` alone is one page.
        for extra, want in ((["--all"], ids[::-1]), ([], ids[:2:-1])):
            out = run_bridge(
                "sessions", "--json", "--no-external", "--limit", "2", *extra, env=d.env
            )
            assert out.returncode == 0, out.stderr
            assert [s["session"] for s in json.loads(out.stdout)] == want
    finally:
        await c.close()
        assert d.stop() == 0


async def test_an_ended_session_with_a_subscriber_stays_in_memory(tmp_path: Path) -> None:
    cwd = project_dir(tmp_path)
    hub, store = await _open(tmp_path / "bridge.sqlite3")
    try:
        watched, _ = await hub.create("demo", cwd)
        sub = await _history(hub, watched.session)
        await hub.close(watched.session)
        for _ in range(ENDED_IN_MEMORY + 5):
            created, _ = await hub.create("demo", cwd)
            await hub.close(created.session)
        assert watched.session in hub.sessions  # its subscriber still reads it
        hub.drop_connection(sub)
        created, _ = await hub.create("demo", cwd)
        await hub.close(created.session)
        assert watched.session not in hub.sessions  # free now, and the one used longest ago
        assert len(hub.sessions) == ENDED_IN_MEMORY
    finally:
        await _stop(hub, store)


async def test_a_database_from_before_gets_the_session_columns(tmp_path: Path) -> None:
    """Sessions saved before the plain columns existed: start-up still loads only the ones not
    ended, and the ended one is listed and read back."""
    import math
    import sqlite3

    import msgspec

    db = tmp_path / "bridge.sqlite3"
    old = sqlite3.connect(db)
    old.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, data BLOB NOT NULL)")
    for rec in (
        SessionRecord(id="done", agent="demo", cwd="/", state="ended", updated_at=5.0),
        SessionRecord(id="open", agent="demo", cwd="/", updated_at=6.0),
    ):
        old.execute("INSERT INTO sessions VALUES (?, ?)", (rec.id, msgspec.msgpack.encode(rec)))
    old.commit()
    old.close()
    store = SqliteStore(db)
    store.open(asyncio.get_running_loop())
    try:
        assert [r.id for r in store.load()[0]] == ["open"]
        assert [r.id for r in await store.list_ended((math.inf, ""), 10)] == ["done"]
        loaded = await store.load_session("done")
        assert loaded is not None and loaded[0].state == "ended"
    finally:
        await store.close()
