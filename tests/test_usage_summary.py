"""``usage.summary``: each turn's spend is its running total less the one before, summed per
day, agent, project or session, over a store filled across several simulated days; correct
across a daemon restart (totals that go on) and for older stores (totals that start again)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import msgspec

from bridge.blocks import SessionEndBlock, UsageBlock, UserBlock
from bridge.store.memory import MemoryStore
from bridge.store.records import SessionRecord, StoredEvent
from bridge.store.spend import day_of
from bridge.store.store import SqliteStore, Store
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge, subscribed_session
from tests.wsclient import Client

_enc = msgspec.json.Encoder()
DAY = 86400.0


class Session:
    def __init__(self, store: Store, sid: str, agent: str, cwd: str) -> None:
        self.store, self.sid, self.seq = store, sid, 0
        store.save_session(SessionRecord(id=sid, agent=agent, cwd=cwd))

    def turn(self, at: float, *totals: tuple[int, int, float]) -> None:
        """A turn reporting these running totals (input, output, cost), several per turn."""
        self._add(UserBlock(id=f"u{self.seq}", text="go"), at)
        for inp, out, cost in totals:
            self._add(UsageBlock(input_tokens=inp, output_tokens=out, cost_usd=cost), at)
        self._add(SessionEndBlock(), at)

    def _add(self, block: Any, at: float) -> None:
        self.seq += 1
        event = StoredEvent(self.sid, self.seq, "x", _enc.encode(block), at)
        self.store.append_event(event)


def _fill(store: Store, now: float) -> None:
    """Three days: a Claude session over two days in /a, a Codex one in /b."""
    claude = Session(store, "c1", "claude", "/a")
    claude.turn(now - 2 * DAY, (100, 10, 0.01), (150, 20, 0.02))  # last total counts: 150/20
    claude.turn(now - 2 * DAY, (400, 50, 0.05))  # 250/30
    # a daemon restart in between: totals go on from the stored one (bridge/hub/turns.py)
    claude.turn(now - DAY, (1000, 100, 0.10))  # 600/50
    codex = Session(store, "x1", "codex", "/b")
    codex.turn(now - DAY, (70, 7, 0.0))
    # a store from before totals spanned adapters: a new process counted from zero
    codex.turn(now, (30, 3, 0.0))  # 30/3, not -40
    Session(store, "quiet", "claude", "/a").turn(now)  # a turn without usage counts nothing


def _rows(result: list[Any]) -> dict[str, tuple[int, int, int, float]]:
    return {r.key: (r.turns, r.input_tokens, r.output_tokens, round(r.cost_usd, 6)) for r in result}


async def _check(store: Store, now: float) -> None:
    by_agent = _rows(await store.usage_summary(None, None, "agent"))
    assert by_agent == {"claude": (3, 1000, 100, 0.1), "codex": (2, 100, 10, 0.0)}
    assert _rows(await store.usage_summary(None, None, "project")) == {
        "/a": (3, 1000, 100, 0.1),
        "/b": (2, 100, 10, 0.0),
    }
    assert _rows(await store.usage_summary(None, None, "session")).keys() == {"c1", "x1"}
    days = await store.usage_summary(None, None, "day")
    assert [r.key for r in days] == [day_of(now - 2 * DAY), day_of(now - DAY), day_of(now)]
    assert [(r.turns, r.input_tokens) for r in days] == [(2, 400), (2, 670), (1, 30)]
    recent = _rows(await store.usage_summary(now - DAY - 1, None, "agent"))
    assert recent == {"claude": (1, 600, 50, 0.05), "codex": (2, 100, 10, 0.0)}
    until = _rows(await store.usage_summary(None, now - DAY - 1, "agent"))
    assert until == {"claude": (2, 400, 50, 0.05)}


async def test_usage_summary_from_the_sqlite_store_and_after_it_is_opened_again(
    tmp_path: Path,
) -> None:
    now = time.time()
    store = SqliteStore(tmp_path / "s.db")
    store.open(asyncio.get_running_loop())
    _fill(store, now)
    await store.flush()
    await _check(store, now)
    await store.close()
    store = SqliteStore(tmp_path / "s.db")
    store.open(asyncio.get_running_loop())
    try:
        await _check(store, now)
    finally:
        await store.close()


async def test_usage_summary_from_the_memory_store() -> None:
    now = time.time()
    store = MemoryStore()
    store.open(asyncio.get_running_loop())
    _fill(store, now)
    await store.flush()
    await _check(store, now)


async def test_usage_summary_over_the_protocol_across_a_restart(
    daemon_factory: Any, project: Path
) -> None:
    config = '[server]\nunix_socket = "off"\n'
    d: DaemonProcess = daemon_factory(config=config).start()
    c = await Client.open(d.url, d.token)
    sid = await subscribed_session(c, project)
    for n in range(2):
        await c.request("session.send", session=sid, text=f"echo {n}", client_msg_id=f"m{n}")
        await c.turn(sid)
    await c.close()
    assert d.stop() == 0
    d = daemon_factory(config=config).start()
    c = await Client.open(d.url, d.token)
    try:
        await c.request("session.subscribe", session=sid)
        for _ in range(2):  # the replay of the turns before the restart
            await c.turn(sid)
        await c.request("session.send", session=sid, text="echo 2", client_msg_id="m2")
        frames = await c.turn(sid)
        last = [f["block"] for f in frames if f["block"]["type"] == "usage"][-1]
        result = await c.request("usage.summary", group_by="session")
        (row,) = result["rows"]
        # three turns, and their sum is the session's running total: nothing counted twice
        assert (row["key"], row["turns"]) == (sid, 3), row
        assert row["input_tokens"] == last["input_tokens"]
        assert row["output_tokens"] == last["output_tokens"]
        assert abs(row["cost_usd"] - last["cost_usd"]) < 1e-9
        err = await c.call("usage.summary", group_by="week")
        assert (err["t"], err["code"]) == ("err", "bad_request"), err
        err = await c.call("usage.summary", since="last tuesday")
        assert (err["t"], err["code"]) == ("err", "bad_request"), err
        out = run_bridge("usage", "--by", "agent", "--json", env=d.env)
        assert out.returncode == 0, out.stderr
        assert [(r["key"], r["turns"]) for r in json.loads(out.stdout)] == [("demo", 3)]
        out = run_bridge("usage", "--since", "7d", env=d.env)
        assert out.returncode == 0 and "total" in out.stdout, out.stderr
        out = run_bridge("usage", "--since", "soon", env=d.env)
        assert out.returncode != 0
    finally:
        await c.close()
        assert d.stop() == 0
