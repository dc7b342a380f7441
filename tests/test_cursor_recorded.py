"""Cursor through the whole daemon path on recorded output: Cursor has no custom model
endpoint, so a fake ``cursor-agent`` (tests/fakes_cli/cursor-agent) replays Cursor's
stream-json samples (tests/fixtures/cursor) with their recorded timing.

Covers the two known quirks: the full text repeated after a partial stream (shown once), and
an unknown ``--resume`` id, which Cursor answers with a new chat and exit code 0 (the adapter
notices the changed session id and reports ``session_reset``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import realcli_session
from tests.harness import (
    Harness,
    RecordedHarness,
    agent_toml,
    assert_tool_calls_paired,
    create,
    deltas,
    of,
    run_turn,
)
from tests.wsclient import text_of

pytestmark = pytest.mark.timeout(120)


harness = realcli_session.recorded_fixture("cursor")


async def test_partial_stream_shows_the_text_once_and_the_next_turn_resumes(
    harness: RecordedHarness, project: Path
) -> None:
    async with harness.client() as c:
        session, info = await create(c, "cursor", project)
        assert info["agent"] == "cursor" and info["version"].startswith("2026.06.15")
        first = await run_turn(c, session, "-- say hello")  # a prompt that looks like a flag
        assert text_of(first) == "Hello! I can help with this project."  # not twice
        assert len(deltas(first)) == 4
        assert text_of(first, "thinking") == "The user wants a greeting."
        assert of(first, "usage")[-1]["input_tokens"] == 5120
        end = of(first, "session_end")[-1]
        sid = end["agent_session_id"]
        assert end["reason"] == "completed" and sid
        run = harness.runs()[-1]
        assert run["prompt"] == "-- say hello" and "--stream-partial-output" in run["argv"]
        assert run["argv"][run["argv"].index("--workspace") + 1] == str(project)

        second = await run_turn(c, session, "again")
        assert of(second, "session_end")[-1]["agent_session_id"] == sid
        assert not [b for b in of(second, "system") if b["code"] == "session_reset"]
        run = harness.runs()[-1]
        assert run["argv"][run["argv"].index("--resume") + 1] == sid


async def test_unknown_resume_id_starts_a_new_chat_and_says_session_reset(
    harness: RecordedHarness, project: Path
) -> None:
    async with harness.client() as c:
        session, frames, end = await realcli_session.reset_turn(c, "cursor", project, "hello")
        assert end["reason"] == "completed" and end["exit_code"] == 0
        assert text_of(frames) == "Hello! I can help with this project."
        mine = await realcli_session.listed_session(c, session)
        assert mine["agent_session_id"] == end["agent_session_id"]  # the new id is kept


async def test_shell_tool_and_a_written_file(harness: RecordedHarness, project: Path) -> None:
    async with harness.client() as c:
        session, _ = await create(c, "cursor", project)
        frames = await run_turn(c, session, "run the tool")
        assert_tool_calls_paired(frames)
        call = of(frames, "tool_call")[0]
        assert call["name"] == "shell" and call["title"] == "echo hello-from-tool"
        assert of(frames, "tool_result")[0]["content"] == "hello-from-tool\n"
        assert text_of(frames) == "I'll run the command.The command printed hello-from-tool."

        frames = await run_turn(c, session, "write the notes")
        diff = of(frames, "diff")[0]
        assert diff["path"] == "notes.txt" and diff["old_text"] is None
        assert diff["new_text"] == (project / "notes.txt").read_text() == "hello from cursor\n"


async def test_killed_mid_turn_then_interrupted_mid_turn(
    harness: RecordedHarness, project: Path
) -> None:
    async with harness.client() as c:
        killed, frames = await realcli_session.killed_then_interrupted(
            c, "cursor", project, lambda b: b["type"] == "thinking"
        )
        assert of(killed, "session_end")[-1]["exit_code"] == -9
        assert of(frames, "session_end")[-1]["reason"] == "interrupted"
        assert all(b["done"] for b in of(frames, "thinking")[-1:])


async def test_models_and_environment_check(harness: RecordedHarness) -> None:
    async with harness.client() as c:
        models = (await c.request("models.list", agent="cursor"))["models"]
        assert models[0] == {"id": "auto", "label": "Auto"}
        assert {"id": "gpt-5", "label": "GPT-5"} in models
        check = await c.request("agents.check", agent="cursor")
        codes = {x["code"] for x in check["checks"]}
        assert "binary_found" in codes and "cursor_login_missing" in codes
        assert check["status"] == "warn"


async def test_handoff_gives_the_terminal_command(harness: RecordedHarness, project: Path) -> None:
    async with harness.client() as c:
        session, _ = await create(c, "cursor", project)
        frames = await run_turn(c, session, "hello")
        sid = of(frames, "session_end")[-1]["agent_session_id"]
        command = await c.request("session.handoff", session=session)
        assert command["argv"] == ["cursor-agent", "--resume", sid]
        assert command["cwd"] == str(project)
        await c.request("session.close", session=session)


async def test_binary_gone_between_turns_ends_the_turn_with_an_error(
    tmp_path: Path, project: Path
) -> None:
    link = tmp_path / "bin" / "cursor-agent"
    link.parent.mkdir()
    link.symlink_to(realcli_session.FAKE_CLIS["cursor"])
    h = Harness(tmp_path / "daemon", {}, agent_toml("cursor", str(link)))
    try:
        async with h.client() as c:
            session, _ = await create(c, "cursor", project)
            assert text_of(await run_turn(c, session, "hello"))
            link.unlink()
            frames = await run_turn(c, session, "hello again")
            assert [e["code"] for e in of(frames, "error")] == ["binary_missing"]
            assert of(frames, "session_end")[-1]["reason"] == "error"
            assert await c.request("ping") == {}
    finally:
        h.stop()
