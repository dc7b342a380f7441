"""``sessions.search``: the full-text index over user messages and agent text, kept as events
are written, built once for an older store, cut by retention; the query parser never lets a
person's text become an FTS5 error; and the daemon, its CLI and ended sessions."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec

from bridge.blocks import SessionEndBlock, TextBlock, ToolCallBlock, UserBlock
from bridge.store import search
from bridge.store.records import SessionRecord, StoredEvent
from bridge.store.store import SqliteStore
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge, subscribed_session
from tests.wsclient import Client

_enc = msgspec.json.Encoder()


class Writer:
    """Events of one session appended to a store, seq after seq."""

    def __init__(self, store: SqliteStore, session: str, agent: str = "claude", cwd: str = "/p"):
        self.store, self.session, self.seq = store, session, 0
        store.save_session(SessionRecord(id=session, agent=agent, cwd=cwd, title=f"t-{session}"))

    def add(self, block: Any, at: float | None = None) -> int:
        self.seq += 1
        when = time.time() if at is None else at
        data = _enc.encode(block)
        self.store.append_event(StoredEvent(self.session, self.seq, "x", data, when))
        return self.seq

    def turn(self, user: str, *answer: str, at: float | None = None) -> tuple[int, int]:
        """A user message and an agent reply in deltas; the seqs of both."""
        asked = self.add(UserBlock(id=f"u{self.seq}", text=user), at)
        first = 0
        for part in answer:
            seq = self.add(TextBlock(id=f"m{asked}", text=part), at)
            first = first or seq
        self.add(ToolCallBlock(id=f"c{asked}", name="Bash", input={"command": "zebra"}), at)
        self.add(TextBlock(id=f"m{asked}", text="", done=True), at)
        self.add(SessionEndBlock(), at)
        return asked, first


async def _open(path: Path) -> SqliteStore:
    store = SqliteStore(path)
    store.open(asyncio.get_running_loop())
    return store


def _places(hits: list[Any]) -> list[tuple[str, int]]:
    return [(h.session, h.seq) for h in hits]


async def test_user_messages_and_joined_agent_text_are_found_where_they_start(
    tmp_path: Path,
) -> None:
    store = await _open(tmp_path / "s.db")
    try:
        a = Writer(store, "a")
        asked, answered = a.turn("please fix the login bug", "I fixed the lo", "gin handler")
        b = Writer(store, "b", agent="codex", cwd="/q")
        b.turn("what about logout", "the logout path is fine")
        await store.flush()
        assert sorted(_places(await store.search("login", limit=10))) == [
            ("a", asked),
            ("a", answered),
        ]
        # deltas are joined: a word cut between two of them, and a phrase, are found
        assert _places(await store.search('"login handler"', limit=10)) == [("a", answered)]
        # tool calls are not indexed
        assert await store.search("zebra", limit=10) == []
        assert _places(await store.search("logout", limit=10, agent="codex")) == [
            ("b", 1),
            ("b", 2),
        ]
        assert await store.search("logout", limit=10, agent="claude") == []
        assert len(await store.search("logout", limit=10, cwd="/q")) == 2
        assert await store.search("logout", limit=1) != []
        assert len(await store.search("logout", limit=1)) == 1
        hit = (await store.search("handler", limit=10))[0]
        assert (hit.title, hit.agent, hit.cwd) == ("t-a", "claude", "/p")
        assert "login handler" in hit.snippet
        assert hit.ts.endswith("Z")
        assert await store.search("handler", limit=5, since=time.time() + 60) == []
    finally:
        await store.close()


async def test_nothing_a_person_types_is_an_fts5_error(tmp_path: Path) -> None:
    store = await _open(tmp_path / "s.db")
    try:
        Writer(store, "a").turn('say "AND" OR NOT near(x) col:umn *', "fine")
        await store.flush()
        nasty = [
            "AND",
            "OR",
            "NOT",
            '"',
            '""',
            '"unclosed',
            'a"b',
            "NEAR(a b)",
            "col:umn",
            "*",
            "-x",
            "^start",
            "a + b",
            "(",
            ")",
            "{a b}",
            "x:y:z",
            "'",
            "\\",
            "\x00",
            "a*b",
            "**",
            "é",
            "🙂",
            "AND AND",
            'NOT "AND"',
            "a OR",
            ":",
            "a:",
            "NEAR",
            "%",
            "_",
            "'; DROP TABLE",
        ]
        for query in nasty:
            await store.search(query, limit=5)  # never raises
        assert len(await store.search("AND", limit=5)) == 1  # a word like any other
        assert len(await store.search("near(x)", limit=5)) == 1
        assert len(await store.search("col:umn", limit=5)) == 1
        assert len(await store.search('"unclosed', limit=5)) == 0
    finally:
        await store.close()


def test_the_query_is_words_and_phrases() -> None:
    assert search.terms('fix "login bug" now') == [
        ("fix", False),
        ("login bug", True),
        ("now", False),
    ]
    assert search.terms('"open to the end') == [("open to the end", True)]
    assert search.terms('  ""  ') == []
    assert search.match_expression("") is None
    assert search.match_expression('a"b') == '"a""b"'
    assert search.match_expression("log*") == '"log"*'
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
    for query in ['a"b', "log*", '"x y" z', "NEAR(", "*", "AND"]:
        expression = search.match_expression(query)
        if expression is not None:
            conn.execute("SELECT * FROM t WHERE t MATCH ?", (expression,)).fetchall()


async def test_an_ended_session_is_found_and_the_index_survives_a_restart(tmp_path: Path) -> None:
    store = await _open(tmp_path / "s.db")
    w = Writer(store, "a")
    asked, _ = w.turn("the flaky websocket test", "it is flaky because of a sleep")
    store.save_session(SessionRecord(id="a", agent="claude", cwd="/p", state="ended"))
    await store.close()
    store = await _open(tmp_path / "s.db")
    try:
        assert _places(await store.search("flaky websocket", limit=5))[0] == ("a", asked)
    finally:
        await store.close()


async def test_an_older_store_is_indexed_once_when_opened(tmp_path: Path) -> None:
    store = await _open(tmp_path / "s.db")
    w = Writer(store, "a")
    asked, answered = w.turn("migrate the billing tables", "billing tables migrated")
    await store.close()
    # What a store from before the index looks like: no derived tables, no mark.
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.executescript(
        "DROP TABLE search_rows; DROP TABLE search_text; DROP TABLE usage_turns;"
        " DELETE FROM meta WHERE key = 'derived_tables';"
    )
    conn.close()
    store = await _open(tmp_path / "s.db")
    try:
        assert sorted(_places(await store.search("billing", limit=5))) == [
            ("a", asked),
            ("a", answered),
        ]
        Writer(store, "b").turn("billing again", "ok")
        await store.flush()
        assert len(await store.search("billing", limit=5)) == 3
    finally:
        await store.close()


async def test_retention_takes_the_index_with_the_events(tmp_path: Path) -> None:
    store = await _open(tmp_path / "s.db")
    try:
        old = time.time() - 10 * 86400
        w = Writer(store, "a")
        w.turn("ancient pelican notes", "pelican answer", at=old)
        recent, _ = w.turn("recent pelican notes", "pelican again")
        gone = Writer(store, "g")
        gone.turn("pelican in an ended session", "ok", at=old)
        store.save_session(
            SessionRecord(id="g", agent="claude", cwd="/p", state="ended", updated_at=old)
        )
        await store.flush()
        assert len(await store.search("pelican", limit=50)) == 5
        store.prune(max_events=10_000, max_age_s=86400, ended_max_age_s=5 * 86400)
        await store.flush()
        assert {h.seq for h in await store.search("pelican", limit=50)} == {recent, recent + 1}
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        assert conn.execute("SELECT COUNT(*) FROM search_rows").fetchone()[0] == 2
        assert conn.execute("SELECT COUNT(*) FROM search_text").fetchone()[0] == 2
    finally:
        conn.close()


async def test_search_over_the_protocol_and_the_cli(daemon_factory: Any, project: Path) -> None:
    d: DaemonProcess = daemon_factory(config='[server]\nunix_socket = "off"\n').start()
    c = await Client.open(d.url, d.token)
    try:
        sid = await subscribed_session(c, project)
        await c.request(
            "session.send", session=sid, text="echo the quokka protocol", client_msg_id="m1"
        )
        await c.turn(sid)
        await c.request("session.close", session=sid)
        result = await c.request("sessions.search", query="quokka")
        hits = result["hits"]
        assert [h["session"] for h in hits] == [sid, sid], hits
        assert {"session", "seq", "ts", "snippet", "title", "agent", "cwd"} <= set(hits[0])
        assert hits[0]["agent"] == "demo" and hits[0]["cwd"] == str(project)
        # the user message's seq: a client opens the session there
        replay = await c.request("session.subscribe", session=sid, after_seq=hits[-1]["seq"] - 1)
        assert replay is not None
        for bad in ({"since": "yesterday"}, {"limit": 0}, {"query": "x" * 2000}):
            fields = {"query": "quokka", **bad}
            err = await c.call("sessions.search", **fields)
            assert (err["t"], err["code"]) == ("err", "bad_request"), err
        err = await c.call("sessions.search")
        assert (err["t"], err["code"]) == ("err", "bad_request"), err
        out = run_bridge("search", "quokka", "--json", env=d.env)
        assert out.returncode == 0, out.stderr
        assert [h["seq"] for h in json.loads(out.stdout)] == [h["seq"] for h in hits]
        out = run_bridge("search", "quokka", env=d.env)
        assert "quokka" in out.stdout and sid in out.stdout
    finally:
        await c.close()
        assert d.stop() == 0


async def test_a_query_matching_very_many_messages_ranks_the_newest(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(search, "RANKED_AT_MOST", 3)
    store = await _open(tmp_path / "s.db")
    try:
        w = Writer(store, "a")
        for n in range(6):
            w.add(UserBlock(id=f"u{n}", text=f"common word {n}"))
        w.add(UserBlock(id="rare", text="common"))  # the best match, and the newest
        await store.flush()
        hits = await store.search("common", limit=10)
        assert next(h.seq for h in hits) == 7
        assert sorted(h.seq for h in hits) == [5, 6, 7]  # the 3 newest matches, ranked
        # a filter reads every match (no cut): the agent filter here
        assert len(await store.search("common", limit=10, agent="claude")) == 7
    finally:
        await store.close()
