"""Steer and fork with the real pinned CLIs, each through a real daemon over WebSocket against
its fake model server: a message steered into a running turn (Claude Code, Codex) reaches the
model in that turn's next request and is recorded where it entered; a fork at the first of two
turns (Claude Code, Codex, OpenCode, Kilo: each its own fork) gives the fork's next model
request the first turn only, the parent's both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import realcli_session
from tests.fakes import FakeServer, Reply
from tests.fakes.core import RecordedRequest
from tests.harness import create, finish_turn, of, run_turn, user
from tests.realcli_session import CliHarness
from tests.wsclient import text_of

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(240)]

cli, fake, harness = realcli_session.module_fixtures("claude", "codex", "opencode", "kilo")
#: the agents that take a message during a turn
STEERING = ["claude", "codex"]


@pytest.fixture(autouse=True)
def _installed(cli: str) -> None:
    realcli_session.binary_or_skip(cli)


def _steered(marker: str) -> Any:
    """The model request whose latest user text is the steered one."""
    return lambda r: marker in r.view.last_user_text


@pytest.mark.parametrize("cli", STEERING, indirect=True)
async def test_a_steered_message_reaches_the_running_turns_next_model_request(
    cli: str, harness: CliHarness, fake: FakeServer, project: Path
) -> None:
    fake.rescript(
        Reply(text="Working on it.", delay=4, when=user("STEER-1")),
        Reply(text="Switching to French.", when=_steered("STEER-2")),
    )
    async with harness.client() as c:
        session, _ = await create(c, cli, project)
        before = len(fake.agent_requests)
        await c.request("session.send", session=session, text="STEER-1 write a poem")
        await fake.wait_for_async(before + 1)  # the model is answering, slowly
        answer = await c.request(
            "session.send", session=session, text="STEER-2 in French please", steer=True
        )
        assert answer == {"queued": False, "steered": True}
        frames = await finish_turn(c, session)
    ends = of(frames, "session_end")
    assert len(ends) == 1 and ends[0]["reason"] == "completed"
    assert "Switching to French." in text_of(frames)
    users = [f for f in frames if f["block"]["type"] == "user"]
    assert [u["block"]["steer"] for u in users] == [False, True]
    steer = users[1]
    assert steer["block"]["text"] == "STEER-2 in French please"
    assert steer["seq"] < frames[-1]["seq"], "recorded inside the turn it entered"
    asked = [r for r in fake.agent_requests if r.contains("STEER-1")]
    later = [r for r in asked if r.contains("STEER-2")]
    assert later, "the steered text reached the model with the turn's history"
    # Claude Code finishes the answer under way and takes the message after it; Codex cancels
    # the model call under way and asks again with the message (docs/adapters.md).
    assert later[0].contains("Working on it.") == (cli == "claude")
    assert not of(frames, "error")


async def _turn_end(c: Any, session: str, text: str) -> int:
    frames = await run_turn(c, session, text)
    assert of(frames, "session_end")[-1]["reason"] == "completed"
    return int(frames[-1]["seq"])


def _holds(request: RecordedRequest, *needles: str) -> list[str]:
    return [n for n in needles if request.contains(n)]


async def test_a_fork_at_the_first_of_two_turns_carries_that_turn_only(
    cli: str, harness: CliHarness, fake: FakeServer, project: Path
) -> None:
    fake.rescript(
        Reply(text="Answer APPLE.", when=user("FORK-1")),
        Reply(text="Answer BANANA.", when=user("FORK-2")),
        Reply(text="Fork goes on.", when=user("FORK-3")),
        Reply(text="Parent goes on.", when=user("FORK-4")),
    )
    async with harness.client() as c:
        parent, _ = await create(c, cli, project)
        first_end = await _turn_end(c, parent, "FORK-1 remember apples")
        await _turn_end(c, parent, "FORK-2 remember bananas")

        forked = await c.request("session.fork", session=parent, at_seq=first_end)
        fork = forked["session"]
        assert fork["forked_from"]["session"] == parent
        assert fork["forked_from"]["seq"] >= first_end
        await c.request("session.subscribe", session=fork["session"], after_seq=0)
        # The copied history (with the parent's agent_info), then the fork's own agent_info.
        infos: list[int] = []
        history = await c.events_until(
            lambda b: b["type"] == "agent_info" and (infos.append(1) or len(infos) == 2),
            session=fork["session"],
        )
        first = history[0]["block"]
        assert first["type"] == "system" and first["code"] == "forked"
        assert first["data"]["fork"] == "native"
        assert [b["block"]["text"] for b in history if b["block"]["type"] == "user"] == [
            "FORK-1 remember apples"
        ]

        frames = await run_turn(c, fork["session"], "FORK-3 what do you remember")
        assert text_of(frames) == "Fork goes on."
        request = fake.agent_requests[-1]
        assert _holds(request, "FORK-1", "APPLE", "FORK-2", "BANANA") == ["FORK-1", "APPLE"]

        frames = await run_turn(c, parent, "FORK-4 and you")
        assert text_of(frames) == "Parent goes on."
        request = fake.agent_requests[-1]
        assert _holds(request, "FORK-1", "APPLE", "FORK-2", "BANANA", "FORK-3") == [
            "FORK-1",
            "APPLE",
            "FORK-2",
            "BANANA",
        ]


@pytest.mark.parametrize("cli", STEERING, indirect=True)
async def test_an_interrupt_with_a_steered_message_waiting_ends_the_turn_and_leaves_nothing(
    cli: str, harness: CliHarness, fake: FakeServer, project: Path
) -> None:
    fake.rescript(
        Reply(text="Slow start.", delay=4, when=user("STOPS-1")),
        # (Claude Code keeps the interrupted message: the next request's last user text has both)
        Reply(
            text="Steered and slow.",
            delay=4,
            when=lambda r: (
                "STOPS-2" in r.view.last_user_text and "STOPS-3" not in r.view.last_user_text
            ),
        ),
        Reply(text="A clean next turn.", when=user("STOPS-3")),
    )
    async with harness.client() as c:
        session, _ = await create(c, cli, project)
        before = len(fake.agent_requests)
        await c.request("session.send", session=session, text="STOPS-1 begin")
        await fake.wait_for_async(before + 1)
        answer = await c.request("session.send", session=session, text="STOPS-2 more", steer=True)
        assert answer == {"queued": False, "steered": True}
        await c.request("session.interrupt", session=session)
        frames = await finish_turn(c, session)
        ends = of(frames, "session_end")
        assert len(ends) == 1 and ends[0]["reason"] == "interrupted"
        assert not of(frames, "error"), "stopped by the agent, not forced by the daemon"
        # the next turn gets its own answer only: nothing of the interrupted one is left over
        frames = await run_turn(c, session, "STOPS-3 next")
        assert text_of(frames) == "A clean next turn."
        assert of(frames, "session_end")[-1]["reason"] == "completed"
