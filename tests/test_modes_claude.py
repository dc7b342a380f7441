"""Agent modes with the real Claude Code CLI against the fake Anthropic server: the mode changes
what the agent does. Plan mode does not write; accept-edits writes without a permission request;
``session.mode`` switches the running process live (``set_permission_mode``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import realcli_session
from tests.fakes import CallTool, FakeAnthropic, Reply
from tests.harness import of, run_turn, user
from tests.realcli_session import CliHarness
from tests.wsclient import RequestFailed

pytestmark = realcli_session.suite_marks("claude", timeout=240)


cli, fake, harness = realcli_session.module_fixtures("claude")


def write_step(path: Path, marker: str) -> CallTool:
    return CallTool("Write", {"file_path": str(path), "content": f"{marker}\n"}, when=user(marker))


async def test_agents_list_has_claude_permission_modes(harness: CliHarness) -> None:
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
    harness: CliHarness, fake: FakeAnthropic, project: Path
) -> None:
    planned, accepted = project / "planned.txt", project / "accepted.txt"
    fake.rescript(
        write_step(planned, "MODE-PLAN"),
        Reply(text="I am in plan mode.", when="tool_result"),
    )
    asked = realcli_session.Asked("allow")

    async with harness.client() as c:
        session, obj = await realcli_session.create_in_mode(c, "claude", project, "plan")
        assert obj["mode"] == "plan"
        frames = await asked.unasked_turn(c, session, "MODE-PLAN write planned.txt")
        assert not planned.exists()
        assert of(frames, "tool_result")[0]["is_error"] is True
        assert "Plan mode is on" in fake.agent_requests[-1].view.tool_results[-1]
        # Live switch: the process that ran the plan-mode turn is still the one running.
        switched = await c.request("session.mode", session=session, mode="acceptEdits")
        assert switched == {"mode": "acceptEdits", "live": True}
        listed = await c.request("sessions.list", include_external=False)
        assert next(s for s in listed["sessions"] if s["session"] == session)["mode"] == (
            "acceptEdits"
        )
        fake.rescript(
            write_step(accepted, "MODE-ACCEPT"),
            Reply(text="Written.", when="tool_result"),
        )
        frames = await asked.unasked_turn(c, session, "MODE-ACCEPT write accepted.txt")
        assert not of(frames, "agent_info")  # the same process, switched live
        assert accepted.read_text() == "MODE-ACCEPT\n"
        notes = [b for b in of(frames, "system") if b.get("code") == "mode"]
        assert notes == [] or notes[0]["data"]["live"] is True


async def test_default_mode_asks_before_the_same_write(
    harness: CliHarness, fake: FakeAnthropic, project: Path
) -> None:
    target = project / "asked.txt"
    fake.rescript(write_step(target, "MODE-DEFAULT"), Reply(text="Done.", when="tool_result"))
    async with harness.client() as c:
        session, obj = await realcli_session.create_in_mode(c, "claude", project, None)
        assert obj["mode"] is None
        frames = await run_turn(c, session, "MODE-DEFAULT write asked.txt", answer="deny")
        assert len(of(frames, "permission_request")) == 1
        assert not target.exists()


async def test_an_approved_plan_leaves_plan_mode_and_the_session_follows(
    harness: CliHarness, fake: FakeAnthropic, project: Path
) -> None:
    target = project / "after-plan.txt"
    fake.rescript(
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
    asked = realcli_session.Asked("allow")

    async with harness.client() as c:
        session, _ = await realcli_session.create_in_mode(c, "claude", project, "plan")
        frames = await run_turn(c, session, "MODE-EXIT plan, then write", answer=asked)
        # Claude's default mode asks before the write; the daemon no longer refuses it
        assert asked.titles == ["Allow ExitPlanMode?", "Allow Write: after-plan.txt?"]
        assert target.read_text() == "planned then done\n"
        notes = [b for b in of(frames, "system") if b.get("code") == "mode"]
        assert notes and notes[0]["data"] == {"mode": "default", "by_agent": True}
        listed = await c.request("sessions.list", include_external=False)
        assert next(s for s in listed["sessions"] if s["session"] == session)["mode"] == "default"
