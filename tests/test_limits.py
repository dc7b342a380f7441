"""Agents' plan and account limits: Claude Code's ``rate_limit_event`` and Codex app-server's
``account/rateLimits/updated`` become ``limits`` blocks (nothing guessed, nothing raised on odd
values); the latest per agent is in ``agents.list``; a window used up notifies, and so does its
reset."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bridge.blocks import LimitsBlock, block_to_json
from bridge.parsers.claude import ClaudeParser
from bridge.parsers.codex import CodexParser
from bridge.store.records import StoredEvent
from tests.test_attention_units import FakeChannel, make, wait_for

RESET = 1_900_000_000
RESET_ISO = datetime.fromtimestamp(RESET, UTC).isoformat().replace("+00:00", "Z")


def claude_event(info: dict[str, Any]) -> str:
    return json.dumps(
        {"type": "rate_limit_event", "rate_limit_info": info, "uuid": "u", "session_id": "s"}
    )


def test_claude_rate_limit_events_become_limits_blocks() -> None:
    parser = ClaudeParser()
    (block,) = parser.feed(
        claude_event(
            {
                "status": "allowed_warning",
                "rateLimitType": "five_hour",
                "utilization": 0.9,
                "resetsAt": RESET,
            }
        )
    )
    assert block == LimitsBlock(window="5h", used_pct=90.0, resets_at=RESET_ISO, reached=False)
    (block,) = parser.feed(claude_event({"status": "rejected", "rateLimitType": "seven_day"}))
    assert block == LimitsBlock(window="week", used_pct=100.0, resets_at=None, reached=True)
    both = parser.feed(
        claude_event(
            {
                "status": "allowed",
                "unifiedWindows": {
                    "five_hour": {"utilization": 0.25, "resetsAt": RESET},
                    "seven_day": {"utilization": 0.5, "resetsAt": RESET + 3600},
                },
            }
        )
    )
    assert [(b.window, b.used_pct) for b in both] == [("5h", 25.0), ("week", 50.0)]
    # as Claude Code 2.x sends it: the event names a window and leaves its numbers to
    # unifiedWindows
    (five, week) = parser.feed(
        claude_event(
            {
                "status": "allowed",
                "resetsAt": RESET,
                "rateLimitType": "five_hour",
                "unifiedWindows": {
                    "five_hour": {"utilization": 0.91, "resetsAt": RESET},
                    "seven_day": {"utilization": 0.4, "resetsAt": RESET},
                },
            }
        )
    )
    assert (five.window, five.used_pct, five.resets_at) == ("5h", 91.0, RESET_ISO)
    assert (week.window, week.used_pct) == ("week", 40.0)
    # nothing reported, nothing shown; odd values are left out, never raised on
    assert parser.feed(claude_event({"status": "allowed"})) == []
    for odd in (
        {"rateLimitType": "five_hour", "utilization": "lots", "resetsAt": -5},
        {"rateLimitType": "five_hour", "utilization": float("1e400"), "resetsAt": 1e300},
        {"rateLimitType": "a_new_one", "utilization": 0.5},
        {"unifiedWindows": ["not", "a", "dict"]},
    ):
        for b in parser.feed(claude_event(odd)):
            assert b.used_pct is None and b.resets_at is None
    assert parser.feed(json.dumps({"type": "rate_limit_event", "rate_limit_info": 7})) == []


def codex_update(primary: Any, secondary: Any = None) -> str:
    snapshot = {"primary": primary, "secondary": secondary, "limitId": "codex"}
    return json.dumps({"method": "account/rateLimits/updated", "params": {"rateLimits": snapshot}})


def test_codex_account_rate_limits_become_limits_blocks() -> None:
    parser = CodexParser()
    blocks = parser.feed(
        codex_update(
            {"usedPercent": 42, "windowDurationMins": 300, "resetsAt": RESET},
            {"usedPercent": 100, "windowDurationMins": 10080, "resetsAt": RESET + 60},
        )
    )
    assert blocks == [
        LimitsBlock(window="5h", used_pct=42.0, resets_at=RESET_ISO, reached=False),
        LimitsBlock(
            window="week",
            used_pct=100.0,
            resets_at=datetime.fromtimestamp(RESET + 60, UTC).isoformat().replace("+00:00", "Z"),
            reached=True,
        ),
    ]
    (odd,) = parser.feed(codex_update({"usedPercent": 7, "windowDurationMins": 120}))
    assert (odd.window, odd.resets_at) == ("2h", None)
    assert parser.feed(codex_update(None)) == []


def limits_event(session: str, seq: int, block: LimitsBlock) -> StoredEvent:
    return StoredEvent(session, seq, "", block_to_json(block), time.time())


async def test_a_window_used_up_notifies_and_its_reset_notifies_again(tmp_path: Path) -> None:
    ch = FakeChannel()
    ch.kinds = ch.kinds | {"limit"}
    a = await make(tmp_path, ch, window_s=0.01)
    try:
        soon = datetime.fromtimestamp(time.time() + 0.5, UTC).isoformat()
        a.on_committed([limits_event("s1", 1, LimitsBlock(window="5h", used_pct=80.0))])
        a.on_committed(
            [
                limits_event(
                    "s1", 2, LimitsBlock(window="5h", used_pct=100.0, resets_at=soon, reached=True)
                )
            ]
        )
        await wait_for(lambda: len(ch.sent) == 1)
        title, body, _ = ch.sent[0]
        assert "reached its 5h limit" in title and soon in body
        await wait_for(lambda: len(ch.sent) == 2)
        assert "can run again" in ch.sent[1][0], ch.sent
        assert "5h" in ch.sent[1][1]
    finally:
        await a.close()


async def test_agents_list_shows_each_agents_latest_limits(
    daemon_factory: Any, project: Path
) -> None:
    """A drop-in agent that reports limits as its turn runs: ``agents.list`` has the latest
    per window, other agents have none; after a restart too."""
    from tests.daemonkit import install_dropin, subscribed_session
    from tests.wsclient import Client

    d = daemon_factory(config='[server]\nunix_socket = "off"\n')
    install_dropin(d.home, "limited.py", LIMITED_AGENT)
    d.start()
    c = await Client.open(d.url, d.token)
    try:
        sid = await subscribed_session(c, project, agent="limited")
        await c.request("session.send", session=sid, text="go", client_msg_id="m1")
        frames = await c.turn(sid)
        assert [f["block"]["window"] for f in frames if f["block"]["type"] == "limits"] == [
            "5h",
            "5h",
            "week",
        ]
        agents = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
        limits = {x["window"]: x for x in agents["limited"]["limits"]}
        assert limits["5h"]["used_pct"] == 97.5 and limits["5h"]["reached"] is False
        assert limits["week"]["resets_at"] == "2030-01-01T00:00:00Z"
        assert agents["demo"]["limits"] == []
    finally:
        await c.close()
        assert d.stop() == 0
    # known again after a restart, before the agent says anything new
    d = daemon_factory(config='[server]\nunix_socket = "off"\n').start()
    c = await Client.open(d.url, d.token)
    try:
        agents = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
        again = {x["window"]: x["used_pct"] for x in agents["limited"]["limits"]}
        assert again == {"5h": 97.5, "week": 10.0}, again
    finally:
        await c.close()
        assert d.stop() == 0


LIMITED_AGENT = """
import asyncio, uuid
from bridge.adapters.base import BaseAdapter
from bridge.blocks import LimitsBlock, SessionEndBlock, TextBlock


class Limited(BaseAdapter):
    agent_id = "limited"
    display_name = "Limited"
    cli_binary = None
    cap_thinking = False
    cap_permissions = False
    cap_interrupt = False
    provides_models = False
    provides_usage = False

    def __init__(self, cwd=None):
        self._q = asyncio.Queue()

    async def start(self, session_id):
        return self.make_agent_info(name="Limited", version="1")

    async def send(self, text, attachments=None):
        await self._q.put(text)

    async def stream(self):
        await self._q.get()
        yield LimitsBlock(window="5h", used_pct=90.0)
        yield TextBlock(id=str(uuid.uuid4()), text="ok", done=True)
        yield LimitsBlock(window="5h", used_pct=97.5)
        yield LimitsBlock(window="week", used_pct=10.0, resets_at="2030-01-01T00:00:00Z")
        yield SessionEndBlock(reason="completed")

    async def stop(self):
        pass
"""
