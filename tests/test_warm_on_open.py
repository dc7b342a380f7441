"""Warm start on open (``adapters.warm_on_open``, bridge/hub/warm.py) with a real daemon and a
drop-in persistent adapter whose agent process is a real ``sleep`` child: after the daemon
stopped a session's agent, opening the session (``session.subscribe``) starts the process before
anything is sent, and the next turn uses it; a session nobody opens is not started; the resident
cap holds (the longest-idle agent makes room, a busy one never does); a failed warm start leaves
the session as it was; an agent nobody writes to is stopped again after ``idle_stop_s``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.harness import make_project
from tests.keeperkit import Keepers, keeper_daemon, listed, until
from tests.wsclient import Client

#: ``after_seq`` beyond the end: live events only
LIVE = 1_000_000


@asynccontextmanager
async def client(d: DaemonProcess) -> AsyncIterator[Client]:
    c = await Client.open(d.url, d.token)
    try:
        yield c
    finally:
        await c.close()


async def session_with_a_turn(c: Client, cwd: Path) -> tuple[str, str]:
    """A keeper session that ran one turn: (session, the agent's session id)."""
    created = await c.request("session.create", agent="keeper", cwd=str(cwd))
    session = created["session"]["session"]
    await c.request("session.subscribe", session=session, after_seq=0)
    await c.request("session.send", session=session, text="one")
    await c.turn(session)
    sid = (await listed(c))[session]["agent_session_id"]
    assert sid
    return session, sid


async def stopped(c: Client, keepers: Keepers, session: str, sid: str, stops: int = 1) -> None:
    """Wait until the daemon stopped the session's agent (not resident, no process, noted)."""

    async def check() -> bool:
        return (
            not (await listed(c))[session]["resident"]
            and not keepers.alive(sid)
            and len(keepers.stops(sid)) >= stops
        )

    await until(check, f"the agent of {session} to be stopped")


async def test_opening_a_stopped_session_starts_its_agent_before_anything_is_sent(
    daemon_factory: Any, tmp_path: Path
) -> None:
    d, keepers = keeper_daemon(daemon_factory, tmp_path, "[adapters]\nidle_stop_s = 3\n")
    async with client(d) as c:
        opened, opened_sid = await session_with_a_turn(c, make_project(tmp_path / "a"))
        unopened, unopened_sid = await session_with_a_turn(c, make_project(tmp_path / "b"))
        await c.request("session.unsubscribe", session=opened)
        await c.request("session.unsubscribe", session=unopened)
        await stopped(c, keepers, opened, opened_sid)
        await stopped(c, keepers, unopened, unopened_sid)
        before = await listed(c)

    async with client(d) as phone:
        last_seq = before[opened]["last_seq"]
        got = await phone.request("session.subscribe", session=opened, after_seq=last_seq)
        assert got["state"] == "idle"

        async def running() -> bool:
            return bool(keepers.alive(opened_sid))

        # The agent process runs before anything is sent, on the same agent session.
        await until(running, "the opened session's agent to start")
        assert len(keepers.starts(opened_sid)) == 2
        now = await listed(phone)
        assert now[opened]["resident"] is True
        # No turn, no event, no other change a client could see.
        assert now[opened]["state"] == "idle"
        assert now[opened]["last_seq"] == before[opened]["last_seq"]
        # The session nobody opened was not started.
        assert now[unopened]["resident"] is False
        assert len(keepers.starts(unopened_sid)) == 1 and not keepers.alive(unopened_sid)

        await phone.request("session.send", session=opened, text="two")
        frames = await phone.turn(opened)
        blocks = [f["block"] for f in frames if f["session"] == opened]
        assert [b["text"] for b in blocks if b["type"] == "text"] == ["echo two"]
        # The turn used the process the warm start began, and said so once, as a cold start
        # would have: its agent_info follows the user block.
        assert len(keepers.starts(opened_sid)) == 2
        kinds = [b["type"] for b in blocks]
        assert kinds.count("agent_info") == 1
        assert kinds.index("user") < kinds.index("agent_info") < kinds.index("text")
    assert len(keepers.starts(unopened_sid)) == 1


async def test_an_agent_warmed_for_nothing_is_stopped_again_after_idle_stop_s(
    daemon_factory: Any, tmp_path: Path
) -> None:
    d, keepers = keeper_daemon(daemon_factory, tmp_path, "[adapters]\nidle_stop_s = 2\n")
    async with client(d) as c:
        session, sid = await session_with_a_turn(c, make_project(tmp_path / "a"))
        await c.request("session.unsubscribe", session=session)
        await stopped(c, keepers, session, sid)

    async with client(d) as phone:
        await phone.request("session.subscribe", session=session, after_seq=0)

        async def warmed() -> bool:
            return len(keepers.starts(sid)) == 2 and bool(keepers.alive(sid))

        await until(warmed, "the warm start")
    # The client went away without sending: the idle timer stops the agent as usual.
    started = time.monotonic()
    async with client(d) as c:
        await stopped(c, keepers, session, sid, stops=2)
        assert time.monotonic() - started < 15
        assert (await listed(c))[session]["state"] == "idle"
        assert len(keepers.starts(sid)) == 2


async def test_a_failed_warm_start_leaves_the_next_turn_to_report_it(
    daemon_factory: Any, tmp_path: Path
) -> None:
    d, keepers = keeper_daemon(daemon_factory, tmp_path, "[adapters]\nidle_stop_s = 1\n")
    async with client(d) as c:
        session, sid = await session_with_a_turn(c, make_project(tmp_path / "a"))
        await c.request("session.unsubscribe", session=session)
        await stopped(c, keepers, session, sid)
        last_seq = (await listed(c))[session]["last_seq"]
        (keepers.here / "fail").touch()

        await c.request("session.subscribe", session=session, after_seq=last_seq)
        await asyncio.sleep(1.0)  # the warm start tries and fails
        state = (await listed(c))[session]
        assert (state["state"], state["resident"], state["last_seq"]) == ("idle", False, last_seq)

        await c.request("session.send", session=session, text="two")
        frames = await c.turn(session)
        errors = [f["block"] for f in frames if f["block"]["type"] == "error"]
        assert [e["code"] for e in errors] == ["agent_unavailable"]
        assert "the keeper refuses to start" in errors[0]["message"]

        (keepers.here / "fail").unlink()
        await c.request("session.send", session=session, text="three")
        frames = await c.turn(session)
        assert any(f["block"].get("text") == "echo three" for f in frames)


async def test_warm_starts_keep_within_the_cap(daemon_factory: Any, tmp_path: Path) -> None:
    """Cap 2: opening a third stopped session stops the longest-idle agent for it; with every
    resident agent busy, opening one starts nothing."""
    config = "[adapters]\nidle_stop_s = 600\n[limits]\nmax_agent_processes = 2\n"
    d, keepers = keeper_daemon(daemon_factory, tmp_path, config)
    async with client(d) as c:
        sessions = {}
        for name in "ABC":
            sessions[name], _ = await session_with_a_turn(c, make_project(tmp_path / name))
    sids = await _sids(d, sessions)
    # A daemon restart stops every agent: all three sessions hold none now.
    d.stop()
    assert not keepers.alive()
    d.start()

    async def resident(c: Client) -> str:
        state = await listed(c)
        return "".join(n for n in "ABC" if state[sessions[n]]["resident"])

    peak = 0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, len(keepers.alive()))
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    try:
        async with client(d) as c:
            for name, want in (("A", "A"), ("B", "AB"), ("C", "BC")):
                await c.request("session.subscribe", session=sessions[name], after_seq=LIVE)

                async def settled(want: str = want) -> bool:
                    return await resident(c) == want and len(keepers.alive()) == len(want)

                await until(settled, f"resident agents {want}")
            assert keepers.stops(sids["A"])  # A, the longest idle, made room for C

            # Both resident agents busy: opening A starts nothing.
            for name in "BC":
                await c.request("session.send", session=sessions[name], text="hold on")
            await c.request("session.subscribe", session=sessions["A"], after_seq=LIVE)
            await asyncio.sleep(1.0)
            assert await resident(c) == "BC"
            assert len(keepers.starts(sids["A"])) == 2  # its first turn, its first warm start
            (keepers.here / "release").touch()
            # both turns end, in either order (waiting for one would drop the other's end)
            waiting = {sessions["B"], sessions["C"]}
            deadline = time.monotonic() + 60
            while waiting:
                frame = await c.next_push(max(0.1, deadline - time.monotonic()))
                if frame.get("t") == "event" and frame["block"]["type"] == "session_end":
                    waiting.discard(frame["session"])
    finally:
        sampler.cancel()
    assert peak <= 2


async def _sids(d: DaemonProcess, sessions: dict[str, str]) -> dict[str, str]:
    async with client(d) as c:
        state = await listed(c)
    return {n: state[s]["agent_session_id"] for n, s in sessions.items()}
