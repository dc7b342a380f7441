"""Pi end to end: the real ``pi`` CLI, one process per turn, driven through a real daemon over
WebSocket against the fake Chat Completions server. One fake server and one daemon serve the
module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import realcli
from tests.fakes import CallTool, FakeChat, Reply
from tests.harness import (
    UNKNOWN,
    Harness,
    agent_toml,
    assert_tool_calls_paired,
    create,
    daemon_env,
    deltas,
    finish_turn,
    kill_agent,
    of,
    run_turn,
    user,
    wait_for_block,
)
from tests.wsclient import text_of

BINARY = realcli.pi_bin()
pytestmark = [
    pytest.mark.realcli,
    pytest.mark.timeout(180),
    pytest.mark.skipif(BINARY is None, reason=realcli.missing_reason("pi")),
]


# ---- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeChat]:
    with FakeChat() as srv:
        yield srv


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory, fake: FakeChat) -> Iterator[Harness]:
    assert BINARY is not None
    root = tmp_path_factory.mktemp("pi-e2e")
    env = realcli.pi_env(root / "cli", fake.base_url)
    h = Harness(root / "daemon", daemon_env(env), agent_toml("pi", BINARY, model="fake/fake-model"))
    yield h
    h.stop()


# ---- tests --------------------------------------------------------------------------------------


async def test_streamed_answer_then_a_second_turn_resumes_the_session(
    harness: Harness, fake: FakeChat, project: Path
) -> None:
    fake.clear_script()
    fake.script(
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
    harness: Harness, fake: FakeChat, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        CallTool("bash", {"command": "ls && echo tool-ran-here"}, when=user("PI-TOOL")),
        Reply(text="Listed.", when="tool_result"),
    )
    async with harness.client() as c:
        session, _ = await create(c, "pi", project)
        frames = await run_turn(c, session, "PI-TOOL list the files")
        assert_tool_calls_paired(frames)
        call = of(frames, "tool_call")[0]
        assert call["name"] == "bash" and call["kind"] == "execute"
        result = of(frames, "tool_result")[0]
        assert "README.md" in result["content"] and "tool-ran-here" in result["content"]
        assert not result["is_error"] and text_of(frames) == "Listed."


async def test_edit_arrives_as_a_diff_matching_the_file(
    harness: Harness, fake: FakeChat, project: Path
) -> None:
    notes = project / "notes.txt"
    fake.clear_script()
    fake.script(
        CallTool(
            "edit",
            {"path": str(notes), "edits": [{"oldText": "world", "newText": "there"}]},
            when=user("PI-EDIT"),
        ),
        Reply(text="Edited.", when="tool_result"),
    )
    async with harness.client() as c:
        session, _ = await create(c, "pi", project)
        frames = await run_turn(c, session, "PI-EDIT change notes")
        assert_tool_calls_paired(frames)
        diff = of(frames, "diff")[0]
        assert notes.read_text() == "hello\nthere\n"
        assert diff["path"] == str(notes) and diff["new_text"] == notes.read_text()
        assert diff["old_text"] == "hello\nworld\n"
        assert "-world" in diff["unified"] and "+there" in diff["unified"]
        assert diff["tool_call_id"] == of(frames, "tool_call")[0]["id"]


async def test_unknown_stored_session_resets_once_then_answers(
    harness: Harness, fake: FakeChat, project: Path
) -> None:
    fake.clear_script()
    fake.script(Reply(text="Fresh start.", when=user("PI-RESET")))
    async with harness.client() as c:
        session, _ = await create(c, "pi", project, resume=UNKNOWN)
        frames = await run_turn(c, session, "PI-RESET hello")
        reset = [b for b in of(frames, "system") if b["code"] == "session_reset"]
        assert len(reset) == 1 and reset[0]["level"] == "warn" and UNKNOWN in reset[0]["text"]
        assert text_of(frames) == "Fresh start."
        end = of(frames, "session_end")[-1]
        assert end["reason"] == "completed" and end["agent_session_id"] not in (None, UNKNOWN)


async def test_pi_killed_mid_turn_ends_the_turn_and_the_daemon_goes_on(
    harness: Harness, fake: FakeChat, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        Reply(
            text="I will be killed " * 10, chunks=10, stall_after=3, stall=60, when=user("PI-DIE")
        ),
        Reply(text="Still here.", when=user("PI-AFTER")),
    )
    async with harness.client() as c:
        session, _ = await create(c, "pi", project)
        await c.request("session.send", session=session, text="PI-DIE talk")
        await wait_for_block(c, session, lambda b: b["type"] == "text" and bool(b["text"]))
        assert BINARY is not None
        await kill_agent(harness, BINARY, title="pi")  # pi renames its process "pi"
        frames = await finish_turn(c, session, timeout=60)
        fake.release()
        error = [e for e in of(frames, "error") if e["code"] == "agent_crashed"]
        assert error and "-9" in error[0]["message"]
        end = of(frames, "session_end")[-1]
        assert end["reason"] == "error" and end["exit_code"] == -9
        assert await c.request("ping") == {}
        again = await run_turn(c, session, "PI-AFTER hello")
        assert text_of(again) == "Still here."


async def test_interrupt_mid_turn_then_a_daemon_restart_resumes_the_session(
    harness: Harness, fake: FakeChat, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        Reply(text="Remember PI-77.", when=user("PI-NOTE")),
        Reply(text="slow " * 20, chunks=20, stall_after=3, stall=60, when=user("PI-STOP")),
        Reply(text="After the restart.", when=user("PI-RESTART")),
    )
    async with harness.client() as c:
        session, _ = await create(c, "pi", project)
        first = await run_turn(c, session, "PI-NOTE remember")
        sid = of(first, "session_end")[-1]["agent_session_id"]
        await c.request("session.send", session=session, text="PI-STOP talk")
        await wait_for_block(c, session, lambda b: b["type"] == "text" and bool(b["text"]))
        await c.request("session.interrupt", session=session)
        stopped = await finish_turn(c, session, timeout=60)
        fake.release()
        assert of(stopped, "session_end")[-1]["reason"] == "interrupted"
        assert not [e for e in of(stopped, "error") if e["code"] == "interrupt_forced"]
    harness.restart()
    async with harness.client() as c:
        await c.request("session.subscribe", session=session, after_seq=10**9)  # live only
        again = await run_turn(c, session, "PI-RESTART hello")
        assert text_of(again) == "After the restart."
        assert of(again, "session_end")[-1]["agent_session_id"] == sid
        assert fake.agent_requests[-1].contains("Remember PI-77.")
