"""Agent modes over ACP with the real Gemini CLI against the fake Gemini server: plan mode does
not write, ``autoEdit`` (switched live with ``session/set_mode``) writes without asking.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import realcli
from tests.fakes import CallTool, FakeGemini, Reply
from tests.test_acp_realcli import after_tool, detected, toml_string
from tests.test_claude_harness import Harness, daemon_env, of, run_turn
from tests.test_pi_e2e import make_project, user

BINARY = realcli.gemini_bin()
pytestmark = [
    pytest.mark.realcli,
    pytest.mark.timeout(240),
    pytest.mark.skipif(BINARY is None, reason=realcli.missing_reason("gemini")),
]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGemini]:
    srv = FakeGemini().start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory, fake: FakeGemini) -> Iterator[Harness]:
    assert BINARY is not None
    root = tmp_path_factory.mktemp("acp-modes")
    env = realcli.gemini_env(root / "cli", fake.base_url)
    config = (
        f"[agents.gemini]\nbinary = {toml_string(BINARY)}\n"
        f'model = "{realcli.GEMINI_MODEL}"\n'
    )
    h = Harness(root / "daemon", daemon_env(env), config)
    yield h
    h.stop()


async def test_gemini_plan_mode_does_not_write_then_auto_edit_writes_without_asking(
    harness: Harness, fake: FakeGemini, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "project")
    planned, accepted = project / "planned.txt", project / "accepted.txt"
    fake.script(
        CallTool(
            "write_file",
            {"file_path": str(planned), "content": "planned\n"},
            when=user("MODE-PLAN"),
        ),
        Reply(text="Not in plan mode.", when=after_tool("MODE-PLAN")),
        CallTool(
            "write_file",
            {"file_path": str(accepted), "content": "accepted\n"},
            when=user("MODE-EDIT"),
        ),
        Reply(text="Written.", when=after_tool("MODE-EDIT")),
    )
    asked: list[dict[str, Any]] = []

    def answer(request: dict[str, Any]) -> str:
        asked.append(request)
        return next(o["id"] for o in request["options"] if o["kind"] == "allow_once")

    async with harness.client() as c:
        entry = await detected(c, "gemini")
        assert [m["id"] for m in entry["modes"]] == ["default", "autoEdit", "yolo", "plan"]
        created = await c.request(
            "session.create", agent="gemini", cwd=str(project), mode="plan"
        )
        session = created["session"]["session"]
        assert created["session"]["mode"] == "plan"
        await c.request("session.subscribe", session=session, after_seq=0)
        frames = await run_turn(c, session, "MODE-PLAN write planned.txt", answer=answer)
        assert not planned.exists()
        assert asked == [] and not of(frames, "permission_request")
        assert of(frames, "session_end")[-1]["reason"] == "completed"

        switched = await c.request("session.mode", session=session, mode="autoEdit")
        assert switched == {"mode": "autoEdit", "live": True}
        frames = await run_turn(c, session, "MODE-EDIT write accepted.txt", answer=answer)
        assert not of(frames, "agent_info")  # the same process, switched live
        assert accepted.read_text() == "accepted\n"
        assert asked == [] and not of(frames, "permission_request")
        listed = await c.request("sessions.list", include_external=False)
        assert next(s for s in listed["sessions"] if s["session"] == session)["mode"] == (
            "autoEdit"
        )
