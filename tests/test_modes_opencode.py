"""OpenCode and Kilo modes with the real ``opencode serve`` / ``kilo serve`` against the fake
Chat Completions server: in ``plan`` the agent does not write; switched to ``build`` (from the
next turn) the same write runs without a permission request.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import realcli_session
from tests.fakes import FakeChat
from tests.harness import Harness, of, run_turn

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(300)]


cli, fake, harness = realcli_session.module_fixtures("opencode", "kilo")


async def test_plan_does_not_write_then_build_writes_without_asking(
    cli: str, harness: Harness, fake: FakeChat, project: Path
) -> None:
    planned, built = project / "planned.txt", project / "built.txt"

    writes = [("OC-PLAN", planned, "p\n", "Plan only."), ("OC-BUILD", built, "built\n", "Built.")]
    fake.script(*realcli_session.write_steps("write", "filePath", *writes))
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
        await asked.unasked_turn(c, session, "OC-BUILD write it", timeout=180)
        assert built.read_text() == "built\n"
