"""Codex modes (its approval presets) with the real ``codex app-server`` against the fake
Responses server: ``read-only`` asks before a patch (and writes nothing when refused); switched
to ``full-access`` (from the next turn) the same patch is applied without a question.
"""

from __future__ import annotations

from pathlib import Path

from tests import realcli_session
from tests.fakes import CallTool, FakeResponses, Reply
from tests.harness import run_turn, user
from tests.realcli_session import CliHarness

pytestmark = realcli_session.suite_marks("codex", timeout=240)


cli, fake, harness = realcli_session.module_fixtures("codex")


def patch(name: str) -> str:
    return f"*** Begin Patch\n*** Add File: {name}\n+{name}\n*** End Patch\n"


async def test_read_only_asks_then_full_access_applies_without_asking(
    harness: CliHarness, fake: FakeResponses, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# modes\n")
    fake.rescript(
        CallTool("apply_patch", {"input": patch("ro.txt")}, when=user("CX-RO")),
        Reply(text="Not allowed.", when="tool_result"),
        CallTool("apply_patch", {"input": patch("full.txt")}, when=user("CX-FULL")),
        Reply(text="Applied.", when="tool_result"),
    )
    asked = realcli_session.Asked("deny")

    async with harness.client() as c:
        agents = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
        assert [m["id"] for m in agents["codex"]["modes"]] == ["auto", "read-only", "full-access"]
        session, _ = await realcli_session.create_in_mode(
            c, "codex", project.resolve(), "read-only"
        )
        await run_turn(c, session, "CX-RO add ro.txt", answer=asked)
        assert len(asked) == 1 and not (project / "ro.txt").exists()
        switched = await c.request("session.mode", session=session, mode="full-access")
        assert switched == {"mode": "full-access", "live": False}
        await asked.unasked_turn(c, session, "CX-FULL add full.txt")
        assert (project / "full.txt").read_text() == "full.txt\n"
