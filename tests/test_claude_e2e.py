"""Claude Code end to end: the real ``claude`` CLI, driven through a real daemon over WebSocket,
against the fake Anthropic server. One fake server and one daemon serve the whole module; a
second daemon with a 3 s idle timeout serves the stall and missing-binary cases.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import realcli
from tests.fakes import CallTool, FakeAnthropic, Reply
from tests.harness import (
    UNKNOWN_SESSION,
    Harness,
    agent_config,
    assert_tool_calls_paired,
    create,
    daemon_env,
    deltas,
    finish_turn,
    of,
    run_turn,
    symlink_to,
    user,
    wait_for_block,
)
from tests.wsclient import text_of

BINARY = realcli.claude_bin()
#: A real model name: Claude Code picks its plan tools (TaskCreate/TaskUpdate) by model.
MODEL = "claude-sonnet-4-5"
pytestmark = [
    pytest.mark.realcli,
    pytest.mark.timeout(180),
    pytest.mark.skipif(BINARY is None, reason=realcli.missing_reason("claude")),
]
#: a valid 2x2 PNG (Codex drops images it cannot decode)
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000002000000020802000000fdd49a73000000104944"
        "4154789c63f8cfc000440c100a001fee03fd8b5f14d40000000049454e44ae426082"
    )
).decode()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as srv:
        yield srv


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("claude-e2e")


@pytest.fixture(scope="module")
def cli_env(root: Path, fake: FakeAnthropic) -> dict[str, str]:
    return realcli.claude_env(root / "cli", fake.base_url, cwd=root / "cli" / "work")


@pytest.fixture(scope="module")
def harness(root: Path, cli_env: dict[str, str]) -> Iterator[Harness]:
    assert BINARY is not None
    h = Harness(
        root / "daemon", daemon_env(cli_env), agent_config("claude", BINARY, f'model = "{MODEL}"\n')
    )
    yield h
    h.stop()


@pytest.fixture(scope="module")
def strict(root: Path, cli_env: dict[str, str]) -> Iterator[tuple[Harness, Path]]:
    """A daemon with a 3 s idle timeout whose claude binary is a symlink a test can delete."""
    assert BINARY is not None
    link = symlink_to(BINARY, root / "bin" / "claude")
    h = Harness(
        root / "strict",
        daemon_env(cli_env),
        agent_config("claude", str(link), f'model = "{MODEL}"\nidle_timeout = 3\n'),
    )
    yield h, link
    h.stop()


async def test_plain_answer_streams_deltas_and_thinking_then_a_second_turn_resumes(
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        Reply(
            text="Hello! Streaming in several pieces.",
            thinking="The user greets me.",
            chunks=4,
            when=user("PLAIN-1"),
        ),
        Reply(text="Second answer.", when=user("PLAIN-2")),
    )
    async with harness.client() as c:
        session, info = await create(c, "claude", project)
        assert info["agent"] == "claude" and info["version"].startswith(realcli.VERSIONS["claude"])
        assert info["capabilities"]["permissions"] and info["capabilities"]["interrupt"]
        image = {"name": "dot.png", "mime": "image/png", "data": PNG}
        first = await run_turn(c, session, "PLAIN-1 say hello", attachments=[image])
        texts = deltas(first)
        assert len(texts) >= 2 and len({b["id"] for b in texts}) == 1  # real deltas
        assert text_of(first) == "Hello! Streaming in several pieces."
        assert text_of(first, "thinking") == "The user greets me."
        closing = [b for b in of(first, "text") if b["done"]]
        assert len(closing) == 1 and closing[0]["id"] == texts[0]["id"]
        usage = of(first, "usage")[-1]
        assert usage["input_tokens"] > 0 and usage["cost_usd"] > 0
        end = of(first, "session_end")[-1]
        assert end["reason"] == "completed" and end["agent_session_id"]
        assert fake.agent_requests[-1].contains(PNG)  # the attachment reached the model
        assert fake.agent_requests[-1].view.model == MODEL == info["model"]

        second = await run_turn(c, session, "PLAIN-2 and again")
        assert text_of(second) == "Second answer."
        assert of(second, "session_end")[-1]["agent_session_id"] == end["agent_session_id"]
        assert not of(second, "agent_info")  # the same process carried on
        request = fake.agent_requests[-1]
        assert request.contains("Hello! Streaming in several pieces.")  # history kept
        listed = await c.request("sessions.list", include_external=False)
        mine = next(s for s in listed["sessions"] if s["session"] == session)
        assert mine["agent_session_id"] == end["agent_session_id"]
        usage_now = (await c.request("usage.get", session=session))["usage"]
        assert usage_now["input_tokens"] > usage["input_tokens"]


async def test_tool_call_runs_in_the_project_and_returns_its_output(
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        CallTool("Bash", {"command": "ls", "description": "List files"}, when=user("TOOL-1")),
        Reply(text="I listed the files.", when="tool_result"),
    )
    async with harness.client() as c:
        session, _ = await create(c, "claude", project)
        frames = await run_turn(c, session, "TOOL-1 list the files")
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
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    notes, fresh = project / "notes.txt", project / "fresh.txt"
    fake.clear_script()
    fake.script(
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
    )
    asked: list[dict[str, object]] = []

    def approve(request: dict[str, object]) -> str:
        asked.append(request)
        return "allow"

    async with harness.client() as c:
        session, _ = await create(c, "claude", project)
        frames = await run_turn(c, session, "EDIT-1 edit the notes", answer=approve)
    assert_tool_calls_paired(frames)
    assert [r["title"] for r in asked] == ["Allow Edit: notes.txt?", "Allow Write: fresh.txt?"]
    edit, write = of(frames, "diff")
    assert edit["path"] == str(notes) and edit["old_text"] == "hello\nworld\n"
    assert edit["new_text"] == notes.read_text() == "hello\nthere\n"
    assert "-world" in edit["unified"] and "+there" in edit["unified"]
    assert write["path"] == str(fresh) and write["old_text"] is None
    assert write["new_text"] == fresh.read_text() == "brand new\n"
    tool_ids = {b["id"] for b in of(frames, "tool_call") if b["name"] in ("Edit", "Write")}
    assert {edit["tool_call_id"], write["tool_call_id"]} == tool_ids


async def test_permission_denied_from_the_client_stops_the_tool(
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        CallTool(
            "Bash",
            {"command": "touch denied.txt", "description": "Create a file"},
            when=user("DENY-1"),
        ),
        Reply(text="OK, I did not create it.", when="tool_result"),
    )
    async with harness.client() as c:
        session, _ = await create(c, "claude", project)
        frames = await run_turn(c, session, "DENY-1 create denied.txt", answer="deny")
    assert_tool_calls_paired(frames)
    (request,) = of(frames, "permission_request")
    assert request["title"] == "Allow Bash: touch denied.txt?"
    assert {o["kind"] for o in request["options"]} >= {"allow_once", "reject_once"}
    final = [b for b in of(frames, "tool_call") if b["status"] != "running"]
    assert final[0]["status"] == "error" and of(frames, "tool_result")[0]["is_error"]
    assert not (project / "denied.txt").exists()
    assert text_of(frames) == "OK, I did not create it."


async def test_task_tools_become_a_plan(
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    fake.clear_script()
    fake.script(
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
    )
    async with harness.client() as c:
        session, _ = await create(c, "claude", project)
        frames = await run_turn(c, session, "PLAN-1 plan it")
    plans = [[(e["content"], e["status"]) for e in p["entries"]] for p in of(frames, "plan")]
    assert plans[-1] == [("Edit notes", "in_progress"), ("Report back", "pending")]
    assert len(plans) == 3


async def test_interrupt_mid_turn_then_the_same_process_goes_on(
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        Reply(
            text="This is a long answer " * 20,
            chunks=20,
            stall_after=4,
            stall=60,
            when=user("STOP-1"),
        ),
        Reply(text="Still here.", when=user("STOP-2")),
    )
    async with harness.client() as c:
        session, _ = await create(c, "claude", project)
        await c.request("session.send", session=session, text="STOP-1 write a lot")
        await wait_for_block(c, session, lambda b: b["type"] == "text" and bool(b["text"]))
        pids = harness.child_pids(BINARY or "")
        started = asyncio.get_running_loop().time()
        await c.request("session.interrupt", session=session)
        frames = await finish_turn(c, session, timeout=30)
        assert asyncio.get_running_loop().time() - started < 10
        fake.release()
        end = of(frames, "session_end")[-1]
        assert end["reason"] == "interrupted"
        assert not [e for e in of(frames, "error") if e["code"] == "interrupt_forced"]
        after = await run_turn(c, session, "STOP-2 are you there")
        assert text_of(after) == "Still here."
        assert harness.child_pids(BINARY or "") == pids  # not restarted


async def test_sigkill_mid_turn_ends_the_turn_and_the_next_turn_resumes(
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        Reply(text="Remember KILL-42.", when=user("KILL-0")),
        Reply(
            text="I will be killed " * 20, chunks=20, stall_after=4, stall=60, when=user("KILL-1")
        ),
        Reply(text="Back again.", when=user("KILL-2")),
    )
    async with harness.client() as c:
        others = set(harness.child_pids(BINARY or ""))  # earlier sessions' processes
        session, _ = await create(c, "claude", project)
        first = await run_turn(c, session, "KILL-0 remember")
        sid = of(first, "session_end")[-1]["agent_session_id"]
        await c.request("session.send", session=session, text="KILL-1 talk")
        await wait_for_block(c, session, lambda b: b["type"] == "text" and bool(b["text"]))
        (pid,) = set(harness.child_pids(BINARY or "")) - others  # this session's claude
        os.kill(pid, signal.SIGKILL)
        frames = await finish_turn(c, session, timeout=30)
        fake.release()
        (error,) = [e for e in of(frames, "error") if e["code"] == "agent_crashed"]
        assert "-9" in error["message"]
        end = of(frames, "session_end")[-1]
        assert end["reason"] == "error" and end["exit_code"] == -9
        assert await c.request("ping") == {}
        again = await run_turn(c, session, "KILL-2 hello again")
        assert text_of(again) == "Back again."
        assert of(again, "session_end")[-1]["agent_session_id"] == sid
        assert fake.agent_requests[-1].contains("Remember KILL-42.")  # resumed with history


async def test_daemon_restart_then_a_turn_resumes_the_agent_session(
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        Reply(text="Noted RESTART-7.", when=user("RESTART-1")),
        Reply(text="Resumed after restart.", when=user("RESTART-2")),
    )
    async with harness.client() as c:
        session, _ = await create(c, "claude", project)
        first = await run_turn(c, session, "RESTART-1 note this")
        sid = of(first, "session_end")[-1]["agent_session_id"]
    harness.restart()
    async with harness.client() as c:
        listed = await c.request("sessions.list", include_external=False)
        mine = next(s for s in listed["sessions"] if s["session"] == session)
        assert mine["agent_session_id"] == sid and mine["state"] == "idle"
        await c.request("session.subscribe", session=session, after_seq=mine["last_seq"])
        frames = await run_turn(c, session, "RESTART-2 where were we")
    assert of(frames, "agent_info")  # a new claude process, started with --resume
    assert text_of(frames) == "Resumed after restart."
    assert of(frames, "session_end")[-1]["agent_session_id"] == sid
    assert fake.agent_requests[-1].contains("Noted RESTART-7.")


async def test_unknown_stored_session_resets_once_then_answers(
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    fake.clear_script()
    fake.script(Reply(text="Fresh start.", when=user("RESET-1")))
    async with harness.client() as c:
        session, _ = await create(c, "claude", project, resume=UNKNOWN_SESSION)
        frames = await run_turn(c, session, "RESET-1 hello")
        (reset,) = [b for b in of(frames, "system") if b["code"] == "session_reset"]
        assert reset["level"] == "warn" and UNKNOWN_SESSION in reset["text"]
        assert text_of(frames) == "Fresh start."
        end = of(frames, "session_end")[-1]
        assert end["reason"] == "completed" and end["agent_session_id"] not in (
            None,
            UNKNOWN_SESSION,
        )
        listed = await c.request("sessions.list", include_external=False)
        mine = next(s for s in listed["sessions"] if s["session"] == session)
        assert mine["agent_session_id"] == end["agent_session_id"]


async def test_a_model_that_stalls_past_the_idle_timeout(
    strict: tuple[Harness, Path], fake: FakeAnthropic, project: Path
) -> None:
    h, _ = strict
    fake.clear_script()
    fake.script(Reply(text="too late", delay=60, when=user("STALL-1")))
    async with h.client() as c:
        session, _ = await create(c, "claude", project)
        started = asyncio.get_running_loop().time()
        frames = await run_turn(c, session, "STALL-1 hello", timeout=60)
        took = asyncio.get_running_loop().time() - started
        fake.release()
        (error,) = of(frames, "error")
        assert error["code"] == "timeout" and error["detail"] == "idle_timeout"
        assert of(frames, "session_end")[-1]["reason"] == "timeout"
        assert 3 <= took < 30
        assert await c.request("ping") == {}
    for _ in range(50):  # the stalled claude process was stopped
        if not h.child_pids(BINARY or ""):
            break
        await asyncio.sleep(0.1)
    assert not h.child_pids(BINARY or "")


async def test_a_missing_binary_is_a_clear_error(
    strict: tuple[Harness, Path], fake: FakeAnthropic, project: Path
) -> None:
    h, link = strict
    async with h.client() as c:
        session, _ = await create(c, "claude", project)
        link.unlink()  # the CLI disappears (uninstalled, moved)
        await c.request("session.send", session=session, text="/model haiku")
        frames = await run_turn(c, session, "MISSING-1 hello", timeout=30)
        error = next(e for e in of(frames, "error"))
        assert error["code"] == "agent_unavailable" and str(link) in error["message"]
        assert "does not exist" in error["message"]
        assert of(frames, "session_end")[-1]["reason"] == "error"
        failed = await c.call("session.create", agent="claude", cwd=str(project))
        assert failed["t"] == "err" and failed["code"] == "agent_unavailable"
        assert str(link) in failed["message"]
        check = await c.request("agents.check", agent="claude")
        assert check["status"] == "fail"
        assert any(x["code"] == "binary_missing" for x in check["checks"])
        assert await c.request("ping") == {}
