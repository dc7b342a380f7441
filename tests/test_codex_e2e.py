"""Codex end to end: the real ``codex app-server``, driven through a real daemon over WebSocket,
against the fake Responses server. One fake server and one daemon serve the whole module; a
second daemon with a 3 s idle timeout serves the stall and missing-binary cases.

Codex is configured with the model name ``gpt-5.5`` (so it offers ``apply_patch``) and
``[tools.update_plan] enabled = true``; the adapter runs with ``approval_policy = "untrusted"``
so that commands and patches ask the client first.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import realcli
from tests.fakes import CallTool, FakeResponses, RecordedRequest, Reply
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
    wait_for_block,
)
from tests.wsclient import text_of

BINARY = realcli.codex_bin()
MODEL = realcli.CODEX_MODEL
pytestmark = [
    pytest.mark.realcli,
    pytest.mark.timeout(180),
    pytest.mark.skipif(BINARY is None, reason=realcli.missing_reason("codex")),
]
OPTIONS = '[agents.codex.options]\napproval_policy = "untrusted"\n'
#: a valid 2x2 PNG (Codex drops images it cannot decode)
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000002000000020802000000fdd49a73000000104944"
        "4154789c63f8cfc000440c100a001fee03fd8b5f14d40000000049454e44ae426082"
    )
).decode()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeResponses]:
    with FakeResponses() as srv:
        yield srv


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("codex-e2e")


@pytest.fixture(scope="module")
def cli_env(root: Path, fake: FakeResponses) -> dict[str, str]:
    return realcli.codex_env(
        root / "cli", fake.base_url, model=MODEL, extra_toml="[tools.update_plan]\nenabled = true\n"
    )


@pytest.fixture(scope="module")
def harness(root: Path, cli_env: dict[str, str]) -> Iterator[Harness]:
    assert BINARY is not None
    h = Harness(root / "daemon", daemon_env(cli_env), agent_config("codex", BINARY, OPTIONS))
    yield h
    h.stop()


@pytest.fixture(scope="module")
def strict(root: Path, cli_env: dict[str, str]) -> Iterator[tuple[Harness, Path]]:
    """A daemon with a 3 s idle timeout whose codex binary is a symlink a test can delete."""
    assert BINARY is not None
    link = symlink_to(BINARY, root / "bin" / "codex")
    config = agent_config("codex", str(link), "idle_timeout = 3\n" + OPTIONS)
    h = Harness(root / "strict", daemon_env(cli_env), config)
    yield h, link
    h.stop()


def user(marker: str) -> Callable[[RecordedRequest], bool]:
    """Answer only the model call for a user message carrying ``marker``."""
    return lambda r: marker in r.view.last_user_text and not r.view.last_is_tool_result


def after(text: str) -> Callable[[RecordedRequest], bool]:
    """Answer the model call that follows a tool result containing ``text``."""
    return lambda r: r.view.last_is_tool_result and text in "".join(r.view.tool_results[-1:])


async def test_plain_answer_streams_deltas_and_reasoning_then_a_second_turn_resumes(
    harness: Harness, fake: FakeResponses, project: Path
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
        session, info = await create(c, "codex", project)
        assert info["agent"] == "codex" and realcli.VERSIONS["codex"] in info["version"]
        image = {"name": "dot.png", "mime": "image/png", "data": PNG}
        first = await run_turn(c, session, "PLAIN-1 say hello", attachments=[image])
        texts = deltas(first)
        assert len(texts) >= 2 and len({b["id"] for b in texts}) == 1
        assert text_of(first) == "Hello! Streaming in several pieces."
        assert text_of(first, "thinking") == "The user greets me."
        usage = of(first, "usage")[-1]
        assert usage["input_tokens"] > 0 and usage["context_size"]
        end = of(first, "session_end")[-1]
        assert end["reason"] == "completed" and end["agent_session_id"]
        assert fake.agent_requests[-1].contains(PNG)  # the image reached the model

        second = await run_turn(c, session, "PLAIN-2 and again")
        assert text_of(second) == "Second answer."
        assert of(second, "session_end")[-1]["agent_session_id"] == end["agent_session_id"]
        assert fake.agent_requests[-1].contains("Hello! Streaming in several pieces.")
        models = (await c.request("models.list", agent="codex"))["models"]
        assert MODEL in [m["id"] for m in models]
        usage_now = (await c.request("usage.get", session=session))["usage"]
        assert usage_now["input_tokens"] > usage["input_tokens"]


async def test_tool_call_runs_in_the_project_and_returns_its_output(
    harness: Harness, fake: FakeResponses, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        CallTool("exec_command", {"cmd": "ls"}, when=user("TOOL-1")),
        Reply(text="I listed the files.", when=after("README.md")),
    )
    async with harness.client() as c:
        session, _ = await create(c, "codex", project)
        frames = await run_turn(c, session, "TOOL-1 list the files")
    assert_tool_calls_paired(frames)
    running, done = of(frames, "tool_call")
    assert running["name"] == "shell" and running["input"]["command"] == "ls"
    assert running["input"]["cwd"] == str(project) and done["status"] == "done"
    (result,) = of(frames, "tool_result")
    assert "README.md" in result["content"] and "notes.txt" in result["content"]
    assert text_of(frames) == "I listed the files."


async def test_a_patch_arrives_as_diffs_matching_the_files_after_approval(
    harness: Harness, fake: FakeResponses, project: Path
) -> None:
    patch = (
        "*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+there\n"
        "*** Add File: fresh.txt\n+brand new\n*** End Patch\n"
    )
    fake.clear_script()
    fake.script(
        CallTool("apply_patch", {"input": patch}, when=user("EDIT-1")),
        Reply(text="Edited.", when="tool_result"),
    )
    asked: list[dict[str, Any]] = []

    def approve(request: dict[str, Any]) -> str:
        asked.append(request)
        return "allow"

    async with harness.client() as c:
        session, _ = await create(c, "codex", project)
        frames = await run_turn(c, session, "EDIT-1 edit the notes", answer=approve)
    assert_tool_calls_paired(frames)
    assert [r["title"] for r in asked] == ["Apply changes to fresh.txt, notes.txt?"]
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
    harness: Harness, fake: FakeResponses, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        CallTool("exec_command", {"cmd": "touch denied.txt"}, when=user("DENY-1")),
        Reply(text="OK, I did not create it.", when="tool_result"),
    )
    async with harness.client() as c:
        session, _ = await create(c, "codex", project)
        frames = await run_turn(c, session, "DENY-1 create denied.txt", answer="deny")
    assert_tool_calls_paired(frames)
    (request,) = of(frames, "permission_request")
    assert request["title"] == "Run `touch denied.txt`?"
    final = [b for b in of(frames, "tool_call") if b["status"] != "running"]
    assert final[0]["status"] == "error" and of(frames, "tool_result")[0]["is_error"]
    assert not (project / "denied.txt").exists()
    assert text_of(frames) == "OK, I did not create it."


async def test_update_plan_becomes_a_plan(
    harness: Harness, fake: FakeResponses, project: Path
) -> None:
    steps = [
        {"step": "Edit notes", "status": "in_progress"},
        {"step": "Report back", "status": "pending"},
    ]
    fake.clear_script()
    fake.script(
        CallTool("update_plan", {"explanation": "two steps", "plan": steps}, when=user("PLAN-1")),
        Reply(text="Planned.", when="tool_result"),
    )
    async with harness.client() as c:
        session, _ = await create(c, "codex", project)
        frames = await run_turn(c, session, "PLAN-1 plan it")
    (plan,) = of(frames, "plan")
    assert [(e["content"], e["status"]) for e in plan["entries"]] == [
        ("Edit notes", "in_progress"),
        ("Report back", "pending"),
    ]
    assert text_of(frames) == "Planned."


async def test_interrupt_mid_turn(harness: Harness, fake: FakeResponses, project: Path) -> None:
    fake.clear_script()
    fake.script(
        Reply(
            text="This is a long answer " * 20,
            chunks=20,
            stall_after=5,
            stall=60,
            when=user("STOP-1"),
        ),
        Reply(text="Still here.", when=user("STOP-2")),
    )
    async with harness.client() as c:
        session, _ = await create(c, "codex", project)
        await c.request("session.send", session=session, text="STOP-1 write a lot")
        await wait_for_block(c, session, lambda b: b["type"] == "text" and bool(b["text"]))
        started = asyncio.get_running_loop().time()
        await c.request("session.interrupt", session=session)
        frames = await finish_turn(c, session, timeout=30)
        assert asyncio.get_running_loop().time() - started < 10
        fake.release()
        assert of(frames, "session_end")[-1]["reason"] == "interrupted"
        assert not [e for e in of(frames, "error") if e["code"] == "interrupt_forced"]
        after_turn = await run_turn(c, session, "STOP-2 are you there")
        assert text_of(after_turn) == "Still here."


async def test_sigkill_mid_turn_ends_the_turn_and_the_next_turn_resumes(
    harness: Harness, fake: FakeResponses, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        Reply(text="Remember KILL-42.", when=user("KILL-0")),
        Reply(
            text="I will be killed " * 20, chunks=20, stall_after=5, stall=60, when=user("KILL-1")
        ),
        Reply(text="Back again.", when=user("KILL-2")),
    )
    async with harness.client() as c:
        session, _ = await create(c, "codex", project)
        first = await run_turn(c, session, "KILL-0 remember")
        sid = of(first, "session_end")[-1]["agent_session_id"]
        assert not harness.wait_no_children(BINARY or "")  # per turn: nothing between turns
        await c.request("session.send", session=session, text="KILL-1 talk")
        await wait_for_block(c, session, lambda b: b["type"] == "text" and bool(b["text"]))
        (pid,) = harness.child_pids(BINARY or "")
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
        assert fake.agent_requests[-1].contains("Remember KILL-42.")


async def test_daemon_restart_then_a_turn_resumes_the_thread(
    harness: Harness, fake: FakeResponses, project: Path
) -> None:
    fake.clear_script()
    fake.script(
        Reply(text="Noted RESTART-7.", when=user("RESTART-1")),
        Reply(text="Resumed after restart.", when=user("RESTART-2")),
    )
    async with harness.client() as c:
        session, _ = await create(c, "codex", project)
        first = await run_turn(c, session, "RESTART-1 note this")
        sid = of(first, "session_end")[-1]["agent_session_id"]
    harness.restart()
    async with harness.client() as c:
        listed = await c.request("sessions.list", include_external=False)
        mine = next(s for s in listed["sessions"] if s["session"] == session)
        assert mine["agent_session_id"] == sid and mine["state"] == "idle"
        await c.request("session.subscribe", session=session, after_seq=mine["last_seq"])
        frames = await run_turn(c, session, "RESTART-2 where were we")
    assert text_of(frames) == "Resumed after restart."
    assert of(frames, "session_end")[-1]["agent_session_id"] == sid
    assert fake.agent_requests[-1].contains("Noted RESTART-7.")


async def test_unknown_stored_session_resets_once_then_answers(
    harness: Harness, fake: FakeResponses, project: Path
) -> None:
    fake.clear_script()
    fake.script(Reply(text="Fresh start.", when=user("RESET-1")))
    async with harness.client() as c:
        session, _ = await create(c, "codex", project, resume=UNKNOWN_SESSION)
        frames = await run_turn(c, session, "RESET-1 hello")
        (reset,) = [b for b in of(frames, "system") if b["code"] == "session_reset"]
        assert reset["level"] == "warn" and UNKNOWN_SESSION in reset["text"]
        assert text_of(frames) == "Fresh start."
        end = of(frames, "session_end")[-1]
        assert end["reason"] == "completed"
        assert end["agent_session_id"] not in (None, UNKNOWN_SESSION)
        listed = await c.request("sessions.list", include_external=False)
        mine = next(s for s in listed["sessions"] if s["session"] == session)
        assert mine["agent_session_id"] == end["agent_session_id"]


async def test_a_model_that_stalls_past_the_idle_timeout(
    strict: tuple[Harness, Path], fake: FakeResponses, project: Path
) -> None:
    h, _ = strict
    fake.clear_script()
    fake.script(Reply(text="too late", delay=60, when=user("STALL-1")))
    async with h.client() as c:
        session, _ = await create(c, "codex", project)
        started = asyncio.get_running_loop().time()
        frames = await run_turn(c, session, "STALL-1 hello", timeout=60)
        took = asyncio.get_running_loop().time() - started
        fake.release()
        (error,) = of(frames, "error")
        assert error["code"] == "timeout" and error["detail"] == "idle_timeout"
        assert of(frames, "session_end")[-1]["reason"] == "timeout"
        assert 3 <= took < 30
        assert await c.request("ping") == {}
    for _ in range(50):  # the stalled app-server was stopped
        if not h.child_pids(BINARY or ""):
            break
        await asyncio.sleep(0.1)
    assert not h.child_pids(BINARY or "")


async def test_a_missing_binary_is_a_clear_error(
    strict: tuple[Harness, Path], fake: FakeResponses, project: Path
) -> None:
    h, link = strict
    async with h.client() as c:
        session, _ = await create(c, "codex", project)
        link.unlink()  # the CLI disappears (uninstalled, moved)
        frames = await run_turn(c, session, "MISSING-1 hello", timeout=30)
        (error,) = of(frames, "error")
        assert error["code"] == "binary_missing" and str(link) in error["message"]
        assert of(frames, "session_end")[-1]["reason"] == "error"
        failed = await c.call("session.create", agent="codex", cwd=str(project))
        assert failed["t"] == "err" and failed["code"] == "agent_unavailable"
        assert str(link) in failed["message"]
        check = await c.request("agents.check", agent="codex")
        assert check["status"] == "fail"
        assert any(x["code"] == "binary_missing" for x in check["checks"])
        assert await c.request("ping") == {}
