"""OpenCode and Kilo modes with the real ``opencode serve`` / ``kilo serve`` against the fake
Chat Completions server: in ``plan`` the agent does not write; switched to ``build`` (from the
next turn) the same write runs without a permission request.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import realcli_session
from tests.fakes import CallTool, FakeChat, Reply
from tests.harness import Harness, after_tool, make_project, of, run_turn, user

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(300)]


cli, fake, harness = realcli_session.module_fixtures("opencode", "kilo")


async def test_plan_does_not_write_then_build_writes_without_asking(
    cli: str, harness: Harness, fake: FakeChat, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "project")
    planned, built = project / "planned.txt", project / "built.txt"

    fake.script(
        CallTool("write", {"filePath": str(planned), "content": "p\n"}, when=user("OC-PLAN")),
        Reply(text="Plan only.", when=after_tool("OC-PLAN")),
        CallTool("write", {"filePath": str(built), "content": "built\n"}, when=user("OC-BUILD")),
        Reply(text="Built.", when=after_tool("OC-BUILD")),
    )
    asked = realcli_session.Asked(kind="reject_once")

    async with harness.client() as c:
        session, obj = await realcli_session.create_in_mode(c, cli, project, "plan")
        assert obj["mode"] == "plan"
        frames = await run_turn(c, session, "OC-PLAN write it", answer=asked, timeout=180)
        assert not planned.exists()
        assert of(frames, "session_end")[-1]["reason"] == "completed"
        assert any("OC-PLAN" in r.view.last_user_text for r in fake.agent_requests)
        switched = await c.request("session.mode", session=session, mode="build")
        assert switched == {"mode": "build", "live": False}
        asked.clear()
        frames = await run_turn(c, session, "OC-BUILD write it", answer=asked, timeout=180)
        assert built.read_text() == "built\n"
        assert asked == [] and not of(frames, "permission_request")
