"""What the real CLIs with a stored session do alike, each driven through a real daemon over
WebSocket against its fake model server: an unknown stored session id is reset once (Claude
Code, Codex, Pi, Droid), a daemon restart resumes the agent session, and a model that stalls
past the idle timeout ends the turn (Claude Code and Codex, whose process lives across turns).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import realcli_session
from tests.fakes import FakeServer, Reply
from tests.harness import of, user
from tests.realcli_session import CliHarness
from tests.wsclient import text_of

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(240)]

cli, fake, harness = realcli_session.module_fixtures("claude", "codex", "pi", "droid")
strict = realcli_session.strict_fixture
#: Droid takes several seconds per run
TURN_TIMEOUT = {"droid": 120.0}
#: the agents whose process stays up between turns (Pi's restart goes with its interrupt test)
RESIDENT = ["claude", "codex"]


async def test_unknown_stored_session_resets_once_then_answers(
    cli: str, harness: CliHarness, fake: FakeServer, project: Path
) -> None:
    fake.rescript(Reply(text="Fresh start.", when=user("RESET-1")))
    async with harness.client() as c:
        session, frames, end = await realcli_session.reset_turn(
            c, cli, project, "RESET-1 hello", timeout=TURN_TIMEOUT.get(cli, 90.0)
        )
        assert text_of(frames) == "Fresh start."
        assert end["reason"] == "completed"
        mine = await realcli_session.listed_session(c, session)
        assert mine["agent_session_id"] == end["agent_session_id"]


@pytest.mark.parametrize("cli", RESIDENT, indirect=True)
async def test_daemon_restart_then_a_turn_resumes_the_agent_session(
    cli: str, harness: CliHarness, fake: FakeServer, project: Path
) -> None:
    fake.rescript(
        Reply(text="Noted RESTART-7.", when=user("RESTART-1")),
        Reply(text="Resumed after restart.", when=user("RESTART-2")),
    )
    _, frames = await realcli_session.restart_and_turn(
        harness, cli, project, ("RESTART-1 note this", "RESTART-2 where were we")
    )
    if cli == "claude":
        assert of(frames, "agent_info")  # a new claude process, started with --resume
    assert text_of(frames) == "Resumed after restart."
    assert fake.agent_requests[-1].contains("Noted RESTART-7.")


@pytest.mark.parametrize("cli", RESIDENT, indirect=True)
async def test_a_model_that_stalls_past_the_idle_timeout(
    strict: tuple[CliHarness, Path], project: Path
) -> None:
    await realcli_session.stall_past_idle_timeout(strict[0], project)
