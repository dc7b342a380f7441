"""Codex end to end: the real ``codex app-server``, driven through a real daemon over WebSocket,
against the fake Responses server. One fake server and one daemon serve the whole module; a
second daemon with a 3 s idle timeout serves the stall and missing-binary cases.

Codex is configured with the model name ``gpt-5.5`` (so it offers ``apply_patch``) and
``[tools.update_plan] enabled = true``; the adapter runs with ``approval_policy = "untrusted"``
so that commands and patches ask the client first.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from tests import realcli, realcli_session
from tests.fakes import CallTool, FakeResponses, RecordedRequest, Reply
from tests.harness import assert_tool_calls_paired, create, of, user
from tests.realcli_session import CliHarness
from tests.wsclient import text_of

MODEL = realcli.CODEX_MODEL
pytestmark = realcli_session.suite_marks("codex", timeout=180)
OPTIONS = '[agents.codex.options]\napproval_policy = "untrusted"\n'


cli, fake, harness = realcli_session.module_fixtures(
    "codex", extra=OPTIONS, extra_toml="[tools.update_plan]\nenabled = true\n"
)
strict = realcli_session.strict_fixture


def after(text: str) -> Callable[[RecordedRequest], bool]:
    """Answer the model call that follows a tool result containing ``text``."""
    return lambda r: r.view.last_is_tool_result and text in "".join(r.view.tool_results[-1:])


async def test_plain_answer_streams_deltas_and_reasoning_then_a_second_turn_resumes(
    harness: CliHarness, fake: FakeResponses, project: Path
) -> None:
    async with harness.client() as c:
        session, info, first, _ = await realcli_session.plain_turns(c, fake, "codex", project)
        assert info["agent"] == "codex" and realcli.VERSIONS["codex"] in info["version"]
        usage = of(first, "usage")[-1]
        assert usage["input_tokens"] > 0 and usage["context_size"]
        models = (await c.request("models.list", agent="codex"))["models"]
        assert MODEL in [m["id"] for m in models]
        usage_now = (await c.request("usage.get", session=session))["usage"]
        assert usage_now["input_tokens"] > usage["input_tokens"]


async def test_tool_call_runs_in_the_project_and_returns_its_output(
    harness: CliHarness, fake: FakeResponses, project: Path
) -> None:
    steps = [
        CallTool("exec_command", {"cmd": "ls"}, when=user("TOOL-1")),
        Reply(text="I listed the files.", when=after("README.md")),
    ]
    frames = await realcli_session.one_turn(harness, project, "TOOL-1 list the files", steps)
    assert_tool_calls_paired(frames)
    running, done = of(frames, "tool_call")
    assert running["name"] == "shell" and running["input"]["command"] == "ls"
    assert running["input"]["cwd"] == str(project) and done["status"] == "done"
    (result,) = of(frames, "tool_result")
    assert "README.md" in result["content"] and "notes.txt" in result["content"]
    assert text_of(frames) == "I listed the files."


async def test_a_patch_arrives_as_diffs_matching_the_files_after_approval(
    harness: CliHarness, fake: FakeResponses, project: Path
) -> None:
    patch = (
        "*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+there\n"
        "*** Add File: fresh.txt\n+brand new\n*** End Patch\n"
    )
    call = CallTool("apply_patch", {"input": patch}, when=user("EDIT-1"))
    approve = realcli_session.Asked("allow")
    frames = await realcli_session.tool_turn(
        harness, project, "EDIT-1 edit the notes", call, "Edited.", answer=approve
    )
    assert_tool_calls_paired(frames)
    assert approve.titles == ["Apply changes to fresh.txt, notes.txt?"]
    diffs = {Path(d["path"]).name: d for d in of(frames, "diff")}
    notes, fresh = diffs["notes.txt"], diffs["fresh.txt"]
    assert notes["old_text"] == "hello\nworld\n"
    assert notes["new_text"] == (project / "notes.txt").read_text() == "hello\nthere\n"
    assert "-world" in notes["unified"] and "+there" in notes["unified"]
    assert fresh["old_text"] is None
    assert fresh["new_text"] == (project / "fresh.txt").read_text() == "brand new\n"
    (patch_call,) = {b["id"] for b in of(frames, "tool_call")}
    assert notes["tool_call_id"] == fresh["tool_call_id"] == patch_call


async def test_permission_denied_from_the_client_stops_the_command(
    harness: CliHarness, fake: FakeResponses, project: Path
) -> None:
    touch = {"cmd": "touch denied.txt"}
    request = await realcli_session.denied_touch(harness, project, "exec_command", touch)
    assert request["title"] == "Run `touch denied.txt`?"


async def test_update_plan_becomes_a_plan(
    harness: CliHarness, fake: FakeResponses, project: Path
) -> None:
    steps = [
        {"step": "Edit notes", "status": "in_progress"},
        {"step": "Report back", "status": "pending"},
    ]
    call = CallTool("update_plan", {"explanation": "two steps", "plan": steps}, when=user("PLAN-1"))
    frames = await realcli_session.tool_turn(harness, project, "PLAN-1 plan it", call, "Planned.")
    (plan,) = of(frames, "plan")
    assert [(e["content"], e["status"]) for e in plan["entries"]] == [
        ("Edit notes", "in_progress"),
        ("Report back", "pending"),
    ]
    assert text_of(frames) == "Planned."


async def test_interrupt_mid_turn(harness: CliHarness, fake: FakeResponses, project: Path) -> None:
    fake.rescript(*realcli_session.stop_steps(stall_after=5))
    async with harness.client() as c:
        session, _ = await create(c, "codex", project)
        await realcli_session.interrupt_then_go_on(c, fake, session)


async def test_sigkill_mid_turn_ends_the_turn_and_the_next_turn_resumes(
    harness: CliHarness, fake: FakeResponses, project: Path
) -> None:
    fake.rescript(*realcli_session.kill_steps(stall_after=5))
    async with harness.client() as c:
        session, _ = await create(c, "codex", project)

        def between() -> None:
            assert not harness.wait_no_children(harness.cli.binary)  # per turn: none between turns

        def kill() -> None:
            (pid,) = harness.child_pids(harness.cli.binary)
            os.kill(pid, signal.SIGKILL)

        await realcli_session.kill_then_resume(c, fake, session, kill, between)


async def test_a_missing_binary_is_a_clear_error(
    strict: tuple[CliHarness, Path], project: Path
) -> None:
    frames = await realcli_session.missing_binary_turn(strict, project)
    (error,) = of(frames, "error")
    assert error["code"] == "binary_missing" and str(strict[1]) in error["message"]
