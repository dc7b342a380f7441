"""OpenCode end to end: the real ``opencode serve`` behind the adapter, driven through a real
daemon over WebSocket against the fake Chat Completions server. One fake server and one daemon
serve each agent; each bridge session starts one server process.

Every test runs twice: against ``opencode serve`` and against Kilo's ``kilo serve`` (an OpenCode
fork with the same server), with Kilo's own names for the binary, the server password and the
config directories. The shared-session tests build on each other, in file order, per agent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests import realcli, realcli_session
from tests.fakes import CallTool, FakeChat, Reply, Step
from tests.harness import (
    Frames,
    Harness,
    assert_tool_calls_paired,
    create,
    deltas,
    finish_turn,
    kill_agent,
    make_project,
    of,
    run_turn,
    user,
)
from tests.realcli_session import CliHarness
from tests.wsclient import Client, text_of

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(300)]
UNKNOWN = "ses_doesnotexist000000000000"
#: OpenCode allows bash in the project; ``touch`` asks, to test permissions.
PERMISSION = {"permission": {"bash": {"*": "allow", "touch *": "ask"}}}


cli, fake, harness = realcli_session.module_fixtures("opencode", "kilo", config=PERMISSION)


@pytest.fixture(scope="module")
def binary(cli: str) -> str:
    return realcli_session.binary_or_skip(cli)


@pytest.fixture(scope="module")
def shared(cli: str, harness: CliHarness, tmp_path_factory: pytest.TempPathFactory) -> Shared:
    """One bridge session (one server) that the next tests take turns in, to save start-ups."""
    project = make_project(tmp_path_factory.mktemp(f"{cli}-shared") / "project")

    async def make() -> str:
        async with harness.client() as c:
            session, info = await create(c, cli, project)
            assert info["agent"] == cli and info["version"] == realcli.VERSIONS[cli]
            assert info["capabilities"]["permissions"] and info["model"] == "fake/fake-model"
            return session

    return Shared(harness, asyncio.run(make()), project)


class Shared:
    def __init__(self, harness: CliHarness, session: str, project: Path) -> None:
        self.harness = harness
        self.session = session
        self.project = project
        self.agent_session_id: str | None = None

    async def turn(self, prompt: str, *steps: Step) -> Frames:
        """A turn on ``prompt`` in the shared session, the model scripted with ``steps``."""
        self.harness.fake.rescript(*steps)
        async with self.harness.client() as c:
            await attach(c, self.session)
            return await run_turn(c, self.session, prompt, timeout=180)


async def attach(c: Client, session: str) -> None:
    await c.request("session.subscribe", session=session, after_seq=10**9)  # live events only


async def test_streamed_answer_with_reasoning_and_usage(
    harness: Harness, fake: FakeChat, shared: Shared
) -> None:
    first = await shared.turn(
        "OC-1 hello",
        Reply(text="Streaming from the server.", thinking="Think.", chunks=4, when=user("OC-1")),
    )
    assert len(deltas(first)) >= 2 and text_of(first) == "Streaming from the server."
    assert text_of(first, "thinking") == "Think."
    assert of(first, "usage")[-1]["input_tokens"] > 0
    assert of(first, "usage")[-1]["cost_usd"] is not None
    end = of(first, "session_end")[-1]
    assert end["agent_session_id"].startswith("ses_") and end["reason"] == "completed"
    shared.agent_session_id = end["agent_session_id"]


async def test_tool_call_runs_in_the_project(
    harness: Harness, fake: FakeChat, shared: Shared
) -> None:
    listing = {"command": "ls && echo oc-tool-ran", "description": "List"}
    call = CallTool("bash", listing, when=user("OC-TOOL"))
    tool = await shared.turn("OC-TOOL list", *realcli_session.then_reply(call, "Listed."))
    assert_tool_calls_paired(tool)
    result = of(tool, "tool_result")[0]
    assert "README.md" in result["content"] and "oc-tool-ran" in result["content"]
    assert text_of(tool) == "Listed."


async def test_todos_become_a_plan(harness: Harness, fake: FakeChat, shared: Shared) -> None:
    todos = [
        {"content": "Read the notes", "status": "completed", "priority": "high"},
        {"content": "Change them", "status": "in_progress", "priority": "high"},
    ]
    call = CallTool("todowrite", {"todos": todos}, when=user("OC-PLAN"))
    plan = await shared.turn("OC-PLAN plan it", *realcli_session.then_reply(call, "Planned."))
    entries = of(plan, "plan")[-1]["entries"]
    assert [(e["content"], e["status"]) for e in entries] == [
        ("Read the notes", "completed"),
        ("Change them", "in_progress"),
    ]


async def test_permission_requests_go_to_the_client(
    harness: Harness, fake: FakeChat, shared: Shared
) -> None:
    fake.rescript(
        CallTool(
            "bash", {"command": "touch approved.txt", "description": "Make"}, when=user("OC-ALLOW")
        ),
        Reply(text="Made it.", when="tool_result"),
        CallTool(
            "bash", {"command": "touch refused.txt", "description": "Make"}, when=user("OC-DENY")
        ),
        Reply(text="Refused.", when="tool_result"),
    )
    project = shared.project
    async with harness.client() as c:
        await attach(c, shared.session)
        allowed = await run_turn(
            c, shared.session, "OC-ALLOW make a file", answer="once", timeout=180
        )
        request = of(allowed, "permission_request")[0]
        assert "touch approved.txt" in request["title"]
        assert request["tool_call_id"] == of(allowed, "tool_call")[0]["id"]
        assert [o["id"] for o in request["options"]] == ["once", "always", "reject"]
        assert (project / "approved.txt").exists() and text_of(allowed) == "Made it."

        denied = await run_turn(c, shared.session, "OC-DENY make another", answer="reject")
        assert_tool_calls_paired(denied)
        assert not (project / "refused.txt").exists()
        assert of(denied, "tool_call")[-1]["status"] == "error"


async def test_edit_arrives_as_a_diff_matching_the_file(
    harness: Harness, fake: FakeChat, shared: Shared
) -> None:
    notes = shared.project / "notes.txt"
    change = {"filePath": str(notes), "oldString": "world", "newString": "there"}
    call = CallTool("edit", change, when=user("OC-EDIT"))
    edit = await shared.turn("OC-EDIT change notes", *realcli_session.then_reply(call, "Edited."))
    assert_tool_calls_paired(edit)
    diff = of(edit, "diff")[0]
    assert notes.read_text() == "hello\nthere\n"
    assert diff["path"] == str(notes) and diff["new_text"] == notes.read_text()
    assert diff["old_text"] == "hello\nworld\n" and "+there" in diff["unified"]


async def test_a_new_server_resumes_the_session_with_its_history(
    cli: str, harness: Harness, fake: FakeChat, shared: Shared
) -> None:
    sid = shared.agent_session_id
    assert sid is not None, "runs after test_streamed_answer_with_reasoning_and_usage"
    fake.rescript(Reply(text="I remember.", when=user("OC-BACK")))
    async with harness.client() as c:
        await c.request("session.close", session=shared.session)  # its server stops
        again, _ = await create(c, cli, shared.project, resume=sid)
        back = await run_turn(c, again, "OC-BACK still there?", timeout=180)
        assert text_of(back) == "I remember."
        assert of(back, "session_end")[-1]["agent_session_id"] == sid
        assert not [b for b in of(back, "system") if b["code"] == "session_reset"]
        assert fake.agent_requests[-1].contains("Streaming from the server.")  # the history
        await c.request("session.close", session=again)


async def test_unknown_session_resets_then_interrupt_then_the_server_dies_mid_turn(
    cli: str, binary: str, harness: Harness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        Reply(text="Fresh session.", when=user("OC-RESET")),
        Reply(text="slow " * 20, chunks=20, stall_after=3, stall=60, when=user("OC-STOP")),
        Reply(text="dying " * 20, chunks=20, stall_after=3, stall=60, when=user("OC-DIE")),
        Reply(text="Back again.", when=user("OC-AFTER")),
    )
    async with harness.client() as c:
        session, fresh, end = await realcli_session.reset_turn(
            c, cli, project, "OC-RESET hello", unknown=UNKNOWN, timeout=180
        )
        assert text_of(fresh) == "Fresh session."
        sid = end["agent_session_id"]

        await realcli_session.send_until_streaming(c, session, "OC-STOP talk")
        await c.request("session.interrupt", session=session)
        fake.release()  # the server notices the abort when the stream moves again
        stopped = await finish_turn(c, session, timeout=60)
        assert of(stopped, "session_end")[-1]["reason"] == "interrupted"

        await realcli_session.send_until_streaming(c, session, "OC-DIE talk")
        await kill_agent(harness, binary)
        await realcli_session.killed_turn(c, fake, session)

        again = await run_turn(c, session, "OC-AFTER hello", timeout=180)  # a new server
        assert text_of(again) == "Back again."
        assert of(again, "session_end")[-1]["agent_session_id"] == sid
        await c.request("session.close", session=session)
