"""Agent modes with the real Claude Code CLI against the fake Anthropic server: the mode changes
what the agent does. Plan mode does not write; accept-edits writes without a permission request;
``session.mode`` switches the running process live (``set_permission_mode``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import realcli
from tests.fakes import CallTool, FakeAnthropic, Reply
from tests.harness import Harness, agent_config, daemon_env, of, run_turn, user
from tests.wsclient import Client, RequestFailed

BINARY = realcli.claude_bin()
MODEL = "claude-sonnet-4-5"
pytestmark = [
    pytest.mark.realcli,
    pytest.mark.timeout(240),
    pytest.mark.skipif(BINARY is None, reason=realcli.missing_reason("claude")),
]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as srv:
        yield srv


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory, fake: FakeAnthropic) -> Iterator[Harness]:
    assert BINARY is not None
    root = tmp_path_factory.mktemp("claude-modes")
    env = realcli.claude_env(root / "cli", fake.base_url, cwd=root / "cli" / "work")
    config = agent_config("claude", BINARY, f'model = "{MODEL}"\n')
    h = Harness(root / "daemon", daemon_env(env), config)
    yield h
    h.stop()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    (path / "README.md").write_text("# modes\n")
    return path.resolve()


async def create(c: Client, project: Path, mode: str | None) -> tuple[str, dict[str, Any]]:
    fields: dict[str, Any] = {"agent": "claude", "cwd": str(project)}
    if mode is not None:
        fields["mode"] = mode
    result = await c.request("session.create", **fields)
    session = result["session"]["session"]
    await c.request("session.subscribe", session=session, after_seq=result["session"]["last_seq"])
    return session, result["session"]


def write_step(path: Path, marker: str) -> CallTool:
    return CallTool("Write", {"file_path": str(path), "content": f"{marker}\n"}, when=user(marker))


async def test_agents_list_has_claude_permission_modes(harness: Harness) -> None:
    async with harness.client() as c:
        agents = (await c.request("agents.list"))["agents"]
        claude = next(a for a in agents if a["agent"] == "claude")
        ids = [m["id"] for m in claude["modes"]]
        assert ids == ["default", "acceptEdits", "plan", "dontAsk", "bypassPermissions"]
        assert all(m["label"] and m["description"] for m in claude["modes"])
        with pytest.raises(RequestFailed) as err:
            await c.request("session.create", agent="claude", cwd="/tmp", mode="yolo")
        assert err.value.frame["code"] == "bad_request" and "plan" in err.value.frame["message"]


async def test_plan_mode_does_not_write_then_accept_edits_writes_without_asking(
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    planned, accepted = project / "planned.txt", project / "accepted.txt"
    fake.clear_script()
    fake.script(
        write_step(planned, "MODE-PLAN"),
        Reply(text="I am in plan mode.", when="tool_result"),
    )
    asked: list[dict[str, Any]] = []

    def answer(request: dict[str, Any]) -> str:
        asked.append(request)
        return "allow"

    async with harness.client() as c:
        session, obj = await create(c, project, "plan")
        assert obj["mode"] == "plan"
        frames = await run_turn(c, session, "MODE-PLAN write planned.txt", answer=answer)
        assert not planned.exists()
        assert asked == [] and not of(frames, "permission_request")
        assert of(frames, "tool_result")[0]["is_error"] is True
        assert "Plan mode is on" in fake.agent_requests[-1].view.tool_results[-1]
        # Live switch: the process that ran the plan-mode turn is still the one running.
        switched = await c.request("session.mode", session=session, mode="acceptEdits")
        assert switched == {"mode": "acceptEdits", "live": True}
        listed = await c.request("sessions.list", include_external=False)
        assert next(s for s in listed["sessions"] if s["session"] == session)["mode"] == (
            "acceptEdits"
        )
        fake.clear_script()
        fake.script(
            write_step(accepted, "MODE-ACCEPT"),
            Reply(text="Written.", when="tool_result"),
        )
        frames = await run_turn(c, session, "MODE-ACCEPT write accepted.txt", answer=answer)
        assert not of(frames, "agent_info")  # the same process, switched live
        assert accepted.read_text() == "MODE-ACCEPT\n"
        assert asked == [] and not of(frames, "permission_request")
        notes = [b for b in of(frames, "system") if b.get("code") == "mode"]
        assert notes == [] or notes[0]["data"]["live"] is True


async def test_default_mode_asks_before_the_same_write(
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    target = project / "asked.txt"
    fake.clear_script()
    fake.script(write_step(target, "MODE-DEFAULT"), Reply(text="Done.", when="tool_result"))
    async with harness.client() as c:
        session, obj = await create(c, project, None)
        assert obj["mode"] is None
        frames = await run_turn(c, session, "MODE-DEFAULT write asked.txt", answer="deny")
        assert len(of(frames, "permission_request")) == 1
        assert not target.exists()


async def test_an_approved_plan_leaves_plan_mode_and_the_session_follows(
    harness: Harness, fake: FakeAnthropic, project: Path
) -> None:
    target = project / "after-plan.txt"
    fake.clear_script()
    fake.script(
        CallTool("ExitPlanMode", {"plan": "1. write after-plan.txt"}, when=user("MODE-EXIT")),
        CallTool(
            "Write",
            {"file_path": str(target), "content": "planned then done\n"},
            when=lambda r: (
                r.view.last_is_tool_result
                and "approved exiting plan mode" in r.view.tool_results[-1]
            ),
        ),
        Reply(text="Done.", when="tool_result"),
    )
    asked: list[str] = []

    def answer(request: dict[str, Any]) -> str:
        asked.append(request["title"])
        return "allow"

    async with harness.client() as c:
        session, _ = await create(c, project, "plan")
        frames = await run_turn(c, session, "MODE-EXIT plan, then write", answer=answer)
        # Claude's default mode asks before the write; the daemon no longer refuses it
        assert asked == ["Allow ExitPlanMode?", "Allow Write: after-plan.txt?"]
        assert target.read_text() == "planned then done\n"
        notes = [b for b in of(frames, "system") if b.get("code") == "mode"]
        assert notes and notes[0]["data"] == {"mode": "default", "by_agent": True}
        listed = await c.request("sessions.list", include_external=False)
        assert next(s for s in listed["sessions"] if s["session"] == session)["mode"] == "default"
