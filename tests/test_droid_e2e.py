"""Factory Droid end to end: the real ``droid`` CLI (offline, with a custom model), one process
per turn, through a real daemon over WebSocket against the fake Chat Completions server.

Offline, ``droid exec -s <id>`` cannot resume (it needs a Factory login), so a second turn
continues the conversation with ``--fork <id>``; the ``-s`` path itself is covered with
recorded output in test_droid_recorded.py. Droid takes several seconds per run, so the tool
call and the edit share one turn.
"""

from __future__ import annotations

from pathlib import Path

from tests import realcli, realcli_session
from tests.fakes import CallTool, FakeChat, Reply, ToolCall
from tests.harness import assert_tool_calls_paired, create, kill_agent, of, run_turn, user
from tests.realcli_session import CliHarness
from tests.wsclient import text_of

pytestmark = realcli_session.suite_marks("droid", timeout=240)


cli, fake, harness = realcli_session.module_fixtures("droid")


async def test_answer_then_a_second_turn_continues_the_conversation(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        Reply(text="Droid says hello.", thinking="Greet.", when=user("DROID-1")),
        Reply(text="Second droid answer.", when=user("DROID-2")),
    )
    async with harness.client() as c:
        session, info = await create(c, "droid", project)
        assert info["agent"] == "droid" and info["version"] == realcli.VERSIONS["droid"]
        models = (await c.request("models.list", agent="droid"))["models"]
        assert {"id": "custom:fake-model", "label": "Fake"} in models
        first = await run_turn(c, session, "DROID-1 say hello")
        assert text_of(first) == "Droid says hello."
        assert text_of(first, "thinking") == "Greet."  # printed twice by droid, shown once
        assert of(first, "usage")[-1]["input_tokens"] == 12
        end = of(first, "session_end")[-1]
        assert end["reason"] == "completed" and end["agent_session_id"]

        second = await run_turn(c, session, "DROID-2 again")
        assert text_of(second) == "Second droid answer."
        assert fake.agent_requests[-1].contains("Droid says hello.")  # the history went along
        assert not [b for b in of(second, "system") if b["code"] == "session_reset"]
        assert of(second, "session_end")[-1]["agent_session_id"] != end["agent_session_id"]


async def test_tool_call_and_edit_in_one_turn(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    notes = project / "notes.txt"
    execute = {
        "summary": "List the project files",
        "command": "ls && echo droid-tool-ran",
        "riskLevelReason": "Only lists files",
        "riskLevel": "low",
    }
    edit = {"file_path": str(notes), "old_str": "world", "new_str": "there"}
    steps = [
        Reply(tool_calls=[ToolCall("Execute", execute)], when=user("DROID-WORK")),
        CallTool("Edit", edit, when="tool_result"),
        Reply(text="Listed and edited.", when="tool_result"),
    ]
    frames = await realcli_session.one_turn(harness, project, "DROID-WORK list then edit", steps)
    assert_tool_calls_paired(frames)
    calls = [b for b in of(frames, "tool_call") if b["status"] == "running"]
    assert [b["name"] for b in calls] == ["Execute", "Edit"]
    results = {b["tool_call_id"]: b for b in of(frames, "tool_result")}
    listing = results[calls[0]["id"]]
    assert "README.md" in listing["content"] and "droid-tool-ran" in listing["content"]
    diff = of(frames, "diff")[0]
    assert notes.read_text() == "hello\nthere\n"
    assert diff["path"] == str(notes) and diff["new_text"] == notes.read_text()
    assert diff["old_text"] == "hello\nworld\n" and "+there" in diff["unified"]
    assert diff["tool_call_id"] == calls[1]["id"]
    assert text_of(frames) == "Listed and edited."


async def test_droid_killed_mid_turn_ends_the_turn_and_the_daemon_goes_on(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(Reply(text="never finished", stall_after=1, stall=60, when=user("DROID-DIE")))
    async with harness.client() as c:
        session, _ = await create(c, "droid", project)
        seen = len(fake.agent_requests)
        await c.request("session.send", session=session, text="DROID-DIE talk")
        await fake.wait_for_async(seen + 1, timeout=60)  # droid is waiting for the model
        await kill_agent(harness, harness.cli.binary)
        await realcli_session.killed_turn(c, fake, session)
        agents = (await c.request("agents.list"))["agents"]
        assert any(a["agent"] == "droid" and a["available"] for a in agents)
