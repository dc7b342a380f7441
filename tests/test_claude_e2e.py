"""Claude Code end to end: the real ``claude`` CLI, driven through a real daemon over WebSocket,
against the fake Anthropic server. One fake server and one daemon serve the whole module; a
second daemon with a 3 s idle timeout serves the stall and missing-binary cases.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests import realcli, realcli_session
from tests.fakes import CallTool, FakeAnthropic, Reply
from tests.harness import assert_tool_calls_paired, create, deltas, of, user
from tests.realcli_session import CliHarness
from tests.wsclient import text_of

pytestmark = realcli_session.suite_marks("claude", timeout=180)


cli, fake, harness = realcli_session.module_fixtures("claude")
strict = realcli_session.strict_fixture


async def test_plain_answer_streams_deltas_and_thinking_then_a_second_turn_resumes(
    harness: CliHarness, fake: FakeAnthropic, project: Path
) -> None:
    async with harness.client() as c:
        session, info, first, second = await realcli_session.plain_turns(c, fake, "claude", project)
        assert info["agent"] == "claude" and info["version"].startswith(realcli.VERSIONS["claude"])
        assert info["capabilities"]["permissions"] and info["capabilities"]["interrupt"]
        texts = deltas(first)
        closing = [b for b in of(first, "text") if b["done"]]
        assert len(closing) == 1 and closing[0]["id"] == texts[0]["id"]
        usage = of(first, "usage")[-1]
        assert usage["input_tokens"] > 0 and usage["cost_usd"] > 0
        assert fake.agent_requests[-1].view.model == realcli_session.CLAUDE_MODEL == info["model"]
        assert not of(second, "agent_info")  # the same process carried on
        mine = await realcli_session.listed_session(c, session)
        assert mine["agent_session_id"] == of(second, "session_end")[-1]["agent_session_id"]
        usage_now = (await c.request("usage.get", session=session))["usage"]
        assert usage_now["input_tokens"] > usage["input_tokens"]


async def test_tool_call_runs_in_the_project_and_returns_its_output(
    harness: CliHarness, fake: FakeAnthropic, project: Path
) -> None:
    call = CallTool("Bash", {"command": "ls", "description": "List files"}, when=user("TOOL-1"))
    frames = await realcli_session.tool_turn(
        harness, project, "TOOL-1 list the files", call, "I listed the files."
    )
    assert_tool_calls_paired(frames)
    running, done = of(frames, "tool_call")
    assert running["status"] == "running" and running["name"] == "Bash"
    assert running["input"]["command"] == "ls" and running["kind"] == "execute"
    assert done["status"] == "done"
    (result,) = of(frames, "tool_result")
    assert "README.md" in result["content"] and "notes.txt" in result["content"]
    assert fake.agent_requests[-1].view.tool_results[-1].startswith(result["content"])
    assert text_of(frames) == "I listed the files."


async def test_edits_arrive_as_diffs_matching_the_files_after_approval(
    harness: CliHarness, fake: FakeAnthropic, project: Path
) -> None:
    notes, fresh = project / "notes.txt", project / "fresh.txt"
    steps = [
        CallTool("Read", {"file_path": str(notes)}, when=user("EDIT-1")),
        CallTool(
            "Edit",
            {"file_path": str(notes), "old_string": "world", "new_string": "there"},
            when=lambda r: r.view.last_is_tool_result and "hello" in r.view.tool_results[-1],
        ),
        CallTool(
            "Write",
            {"file_path": str(fresh), "content": "brand new\n"},
            when=lambda r: r.view.last_is_tool_result and "updated" in r.view.tool_results[-1],
        ),
        Reply(text="Edited.", when="tool_result"),
    ]
    approve = realcli_session.Asked("allow")
    frames = await realcli_session.one_turn(
        harness, project, "EDIT-1 edit the notes", steps, answer=approve
    )
    assert_tool_calls_paired(frames)
    assert approve.titles == ["Allow Edit: notes.txt?", "Allow Write: fresh.txt?"]
    edit, write = of(frames, "diff")
    assert edit["path"] == str(notes) and edit["old_text"] == "hello\nworld\n"
    assert edit["new_text"] == notes.read_text() == "hello\nthere\n"
    assert "-world" in edit["unified"] and "+there" in edit["unified"]
    assert write["path"] == str(fresh) and write["old_text"] is None
    assert write["new_text"] == fresh.read_text() == "brand new\n"
    tool_ids = {b["id"] for b in of(frames, "tool_call") if b["name"] in ("Edit", "Write")}
    assert {edit["tool_call_id"], write["tool_call_id"]} == tool_ids


async def test_permission_denied_from_the_client_stops_the_tool(
    harness: CliHarness, fake: FakeAnthropic, project: Path
) -> None:
    touch = {"command": "touch denied.txt", "description": "Create a file"}
    request = await realcli_session.denied_touch(harness, project, "Bash", touch)
    assert request["title"] == "Allow Bash: touch denied.txt?"
    assert {o["kind"] for o in request["options"]} >= {"allow_once", "reject_once"}


async def test_task_tools_become_a_plan(
    harness: CliHarness, fake: FakeAnthropic, project: Path
) -> None:
    steps = [
        CallTool(
            "TaskCreate", {"subject": "Edit notes", "description": "edit"}, when=user("PLAN-1")
        ),
        CallTool(
            "TaskCreate",
            {"subject": "Report back", "description": "report"},
            when=lambda r: "Task #1 created" in "".join(r.view.tool_results[-1:]),
        ),
        CallTool(
            "TaskUpdate",
            {"taskId": "1", "status": "in_progress"},
            when=lambda r: "Task #2 created" in "".join(r.view.tool_results[-1:]),
        ),
        Reply(text="Planned.", when="tool_result"),
    ]
    frames = await realcli_session.one_turn(harness, project, "PLAN-1 plan it", steps)
    plans = [[(e["content"], e["status"]) for e in p["entries"]] for p in of(frames, "plan")]
    assert plans[-1] == [("Edit notes", "in_progress"), ("Report back", "pending")]
    assert len(plans) == 3


async def test_interrupt_mid_turn_then_the_same_process_goes_on(
    harness: CliHarness, fake: FakeAnthropic, project: Path
) -> None:
    fake.rescript(*realcli_session.stop_steps(stall_after=4))
    pids: list[int] = []
    async with harness.client() as c:
        session, _ = await create(c, "claude", project)
        await realcli_session.interrupt_then_go_on(
            c, fake, session, lambda: pids.extend(harness.child_pids(harness.cli.binary))
        )
        assert harness.child_pids(harness.cli.binary) == pids  # not restarted


async def test_sigkill_mid_turn_ends_the_turn_and_the_next_turn_resumes(
    harness: CliHarness, fake: FakeAnthropic, project: Path
) -> None:
    fake.rescript(*realcli_session.kill_steps(stall_after=4))
    async with harness.client() as c:
        others = set(harness.child_pids(harness.cli.binary))  # earlier sessions' processes
        session, _ = await create(c, "claude", project)

        def kill() -> None:
            (pid,) = set(harness.child_pids(harness.cli.binary)) - others  # this session's claude
            os.kill(pid, signal.SIGKILL)

        await realcli_session.kill_then_resume(c, fake, session, kill)


async def test_a_missing_binary_is_a_clear_error(
    strict: tuple[CliHarness, Path], project: Path
) -> None:
    frames = await realcli_session.missing_binary_turn(strict, project, "/model haiku")
    error = next(e for e in of(frames, "error"))
    assert error["code"] == "agent_unavailable" and str(strict[1]) in error["message"]
    assert "does not exist" in error["message"]
