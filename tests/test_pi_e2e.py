"""Pi end to end: the real ``pi`` CLI, one process per turn, driven through a real daemon over
WebSocket against the fake Chat Completions server. One fake server and one daemon serve the
module.
"""

from __future__ import annotations

from pathlib import Path

from tests import realcli, realcli_session
from tests.fakes import CallTool, FakeChat, Reply
from tests.harness import assert_tool_calls_paired, create, deltas, kill_agent, of, run_turn, user
from tests.realcli_session import CliHarness
from tests.wsclient import text_of

pytestmark = realcli_session.suite_marks("pi", timeout=180)


# ---- fixtures ----------------------------------------------------------------------------------


cli, fake, harness = realcli_session.module_fixtures("pi")


# ---- tests --------------------------------------------------------------------------------------


async def test_streamed_answer_then_a_second_turn_resumes_the_session(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        Reply(
            text="Hello from pi, in pieces.", thinking="A greeting.", chunks=4, when=user("PI-1")
        ),
        Reply(text="Second answer.", when=user("PI-2")),
    )
    async with harness.client() as c:
        session, info = await create(c, "pi", project)
        assert info["agent"] == "pi" and info["version"] == realcli.VERSIONS["pi"]
        assert info["model"] == "fake/fake-model" and info["capabilities"]["interrupt"]
        first = await run_turn(c, session, "PI-1 say hello")
        assert len(deltas(first)) >= 2 and len({b["id"] for b in deltas(first)}) == 1
        assert text_of(first) == "Hello from pi, in pieces."
        assert text_of(first, "thinking") == "A greeting."
        usage = of(first, "usage")[-1]
        assert usage["input_tokens"] > 0 and usage["cost_usd"] is not None
        end = of(first, "session_end")[-1]
        assert end["reason"] == "completed" and end["agent_session_id"]

        second = await run_turn(c, session, "PI-2 again")
        assert text_of(second) == "Second answer."
        assert of(second, "session_end")[-1]["agent_session_id"] == end["agent_session_id"]
        assert fake.agent_requests[-1].contains("Hello from pi, in pieces.")  # history resumed
        assert not of(second, "system") or all(
            b["code"] != "session_reset" for b in of(second, "system")
        )
        status = await c.request("usage.get", session=session)
        assert status["usage"]["input_tokens"] >= usage["input_tokens"]


async def test_tool_call_runs_in_the_project_and_returns_its_output(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    call = CallTool("bash", {"command": "ls && echo tool-ran-here"}, when=user("PI-TOOL"))
    frames = await realcli_session.tool_turn(
        harness, project, "PI-TOOL list the files", call, "Listed."
    )
    assert_tool_calls_paired(frames)
    call = of(frames, "tool_call")[0]
    assert call["name"] == "bash" and call["kind"] == "execute"
    result = of(frames, "tool_result")[0]
    assert "README.md" in result["content"] and "tool-ran-here" in result["content"]
    assert not result["is_error"] and text_of(frames) == "Listed."


async def test_edit_arrives_as_a_diff_matching_the_file(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    notes = project / "notes.txt"
    call = CallTool(
        "edit",
        {"path": str(notes), "edits": [{"oldText": "world", "newText": "there"}]},
        when=user("PI-EDIT"),
    )
    frames = await realcli_session.tool_turn(
        harness, project, "PI-EDIT change notes", call, "Edited."
    )
    assert_tool_calls_paired(frames)
    diff = of(frames, "diff")[0]
    assert notes.read_text() == "hello\nthere\n"
    assert diff["path"] == str(notes) and diff["new_text"] == notes.read_text()
    assert diff["old_text"] == "hello\nworld\n"
    assert "-world" in diff["unified"] and "+there" in diff["unified"]
    assert diff["tool_call_id"] == of(frames, "tool_call")[0]["id"]


async def test_pi_killed_mid_turn_ends_the_turn_and_the_daemon_goes_on(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        Reply(
            text="I will be killed " * 10, chunks=10, stall_after=3, stall=60, when=user("PI-DIE")
        ),
        Reply(text="Still here.", when=user("PI-AFTER")),
    )
    async with harness.client() as c:
        session, _ = await create(c, "pi", project)
        await realcli_session.send_until_streaming(c, session, "PI-DIE talk")
        await kill_agent(harness, harness.cli.binary, title="pi")  # pi renames its process "pi"
        frames = await realcli_session.killed_turn(c, fake, session)
        assert of(frames, "session_end")[-1]["exit_code"] == -9
        again = await run_turn(c, session, "PI-AFTER hello")
        assert text_of(again) == "Still here."


async def test_interrupt_mid_turn_then_a_daemon_restart_resumes_the_session(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        Reply(text="Remember PI-77.", when=user("PI-NOTE")),
        Reply(text="slow " * 20, chunks=20, stall_after=3, stall=60, when=user("PI-STOP")),
        Reply(text="After the restart.", when=user("PI-RESTART")),
    )
    async with harness.client() as c:
        session, _ = await create(c, "pi", project)
        first = await run_turn(c, session, "PI-NOTE remember")
        sid = of(first, "session_end")[-1]["agent_session_id"]
        await realcli_session.send_until_streaming(c, session, "PI-STOP talk")
        stopped = await realcli_session.interrupt(c, session, timeout=60)
        fake.release()
        realcli_session.assert_interrupted(stopped)
    harness.restart()
    async with harness.client() as c:
        await c.request("session.subscribe", session=session, after_seq=10**9)  # live only
        again = await run_turn(c, session, "PI-RESTART hello")
        assert text_of(again) == "After the restart."
        assert of(again, "session_end")[-1]["agent_session_id"] == sid
        assert fake.agent_requests[-1].contains("Remember PI-77.")
