"""Kimi Code end to end: the real ``kimi acp`` (PyPI kimi-cli 1.51.0, in its own Python >= 3.12
venv) through a real daemon over WebSocket, against the fake Chat Completions server as its
``kimi`` provider (Moonshot's OpenAI-compatible API; tests/realcli.py ``kimi_env``).

Skipped, saying why, where tests/clis/install.sh found no Python >= 3.12 that runs kimi-cli.
What runs everywhere is in tests/test_kimi_acp.py (recorded ACP traffic through the adapter's
mapper, the check, the failure hints).
"""

from __future__ import annotations

from pathlib import Path

from tests import realcli, realcli_session
from tests.fakes import CallTool, FakeChat, HttpError, Reply
from tests.harness import assert_tool_calls_paired, create, deltas, of, run_turn, user
from tests.realcli_session import CliHarness
from tests.wsclient import text_of

pytestmark = realcli_session.suite_marks("kimi", timeout=240)

cli, fake, harness = realcli_session.module_fixtures("kimi")

WRITTEN = "made by kimi\n"


async def test_streamed_answer_then_a_second_turn_resumes_the_session(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        Reply(text="Hello from Kimi, in pieces.", chunks=4, when=user("KIMI-1")),
        Reply(text="Second answer.", when=user("KIMI-2")),
    )
    async with harness.client() as c:
        session, info = await create(c, "kimi", project)
        assert info["agent"] == "kimi" and realcli.VERSIONS["kimi"] in (info["version"] or "")
        first = await run_turn(c, session, "KIMI-1 say hello", timeout=120)
        assert len(deltas(first)) >= 2 and len({b["id"] for b in deltas(first)}) == 1
        assert text_of(first) == "Hello from Kimi, in pieces."
        end = of(first, "session_end")[-1]
        assert end["reason"] == "completed" and end["agent_session_id"]

        second = await run_turn(c, session, "KIMI-2 again")
        assert text_of(second) == "Second answer."
        assert of(second, "session_end")[-1]["agent_session_id"] == end["agent_session_id"]
        assert fake.agent_requests[-1].contains("Hello from Kimi, in pieces.")


async def test_a_write_asks_first_denied_then_allowed(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    made = project / "made.txt"
    args = {"path": str(made), "content": WRITTEN}
    fake.rescript(
        CallTool("WriteFile", args, when=user("KIMI-DENY")),
        Reply(text="Not written.", when="tool_result"),
    )
    async with harness.client() as c:
        session, _ = await create(c, "kimi", project)
        frames = await run_turn(
            c, session, "KIMI-DENY write made.txt", answer=realcli_session.Asked(kind="reject_once")
        )
        assert_tool_calls_paired(frames)
        assert of(frames, "permission_request") and not made.exists()
        assert of(frames, "tool_call")[-1]["status"] == "error"

        fake.rescript(
            CallTool("WriteFile", args, when=user("KIMI-ALLOW")),
            Reply(text="Written.", when="tool_result"),
        )
        frames = await run_turn(
            c, session, "KIMI-ALLOW write made.txt", answer=realcli_session.Asked(kind="allow_once")
        )
        assert_tool_calls_paired(frames)
        assert of(frames, "permission_request")
        assert made.read_text() == WRITTEN
        assert "Written." in text_of(frames)


async def test_an_interrupt_mid_stream_then_the_session_goes_on(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(*realcli_session.stop_steps(stall_after=3))
    async with harness.client() as c:
        session, _ = await create(c, "kimi", project)
        await realcli_session.interrupt_then_go_on(c, fake, session)


async def test_a_daemon_restart_then_the_turn_resumes_the_session(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        Reply(text="Remember KIMI-42.", when=user("RESTART-1")),
        Reply(text="Resumed.", when=user("RESTART-2")),
    )
    _, frames = await realcli_session.restart_and_turn(
        harness, "kimi", project, ("RESTART-1 remember", "RESTART-2 what was it")
    )
    assert text_of(frames) == "Resumed."
    assert fake.agent_requests[-1].contains("Remember KIMI-42.")
    assert not realcli_session.session_reset(frames)


async def test_an_unknown_session_is_reset(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(Reply(text="Fresh start.", when=user("RESET-1")))
    async with harness.client() as c:
        _, frames, _ = await realcli_session.reset_turn(c, "kimi", project, "RESET-1 hello")
        assert text_of(frames) == "Fresh start."


async def test_a_refused_key_is_auth_required_with_the_login_hint(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(HttpError(401, "Invalid Authentication", when=user("KIMI-401")))
    async with harness.client() as c:
        session, _ = await create(c, "kimi", project)
        frames = await run_turn(c, session, "KIMI-401 hello", timeout=120)
        (error,) = of(frames, "error")
        assert error["code"] == "auth_required" and not error["retryable"]
        assert "kimi login" in error["hint"]
        assert of(frames, "session_end")[-1]["reason"] == "error"
