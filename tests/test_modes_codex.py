"""Codex modes (its approval presets) with the real ``codex app-server`` against the fake
Responses server: ``read-only`` asks before a patch (and writes nothing when refused); switched
to ``full-access`` (from the next turn) the same patch is applied without a question.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import realcli
from tests.fakes import CallTool, FakeResponses, Reply
from tests.harness import Harness, agent_config, daemon_env, of, run_turn, user

BINARY = realcli.codex_bin()
pytestmark = [
    pytest.mark.realcli,
    pytest.mark.timeout(240),
    pytest.mark.skipif(BINARY is None, reason=realcli.missing_reason("codex")),
]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeResponses]:
    with FakeResponses() as srv:
        yield srv


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory, fake: FakeResponses) -> Iterator[Harness]:
    assert BINARY is not None
    root = tmp_path_factory.mktemp("codex-modes")
    env = realcli.codex_env(root / "cli", fake.base_url, model=realcli.CODEX_MODEL)
    h = Harness(root / "daemon", daemon_env(env), agent_config("codex", BINARY))
    yield h
    h.stop()


def patch(name: str) -> str:
    return f"*** Begin Patch\n*** Add File: {name}\n+{name}\n*** End Patch\n"


async def test_read_only_asks_then_full_access_applies_without_asking(
    harness: Harness, fake: FakeResponses, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# modes\n")
    fake.clear_script()
    fake.script(
        CallTool("apply_patch", {"input": patch("ro.txt")}, when=user("CX-RO")),
        Reply(text="Not allowed.", when="tool_result"),
        CallTool("apply_patch", {"input": patch("full.txt")}, when=user("CX-FULL")),
        Reply(text="Applied.", when="tool_result"),
    )
    asked: list[dict[str, Any]] = []

    def refuse(request: dict[str, Any]) -> str:
        asked.append(request)
        return "deny"

    async with harness.client() as c:
        agents = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
        assert [m["id"] for m in agents["codex"]["modes"]] == ["auto", "read-only", "full-access"]
        created = await c.request(
            "session.create", agent="codex", cwd=str(project.resolve()), mode="read-only"
        )
        session = created["session"]["session"]
        await c.request("session.subscribe", session=session, after_seq=0)
        await run_turn(c, session, "CX-RO add ro.txt", answer=refuse)
        assert len(asked) == 1 and not (project / "ro.txt").exists()
        switched = await c.request("session.mode", session=session, mode="full-access")
        assert switched == {"mode": "full-access", "live": False}
        asked.clear()
        frames = await run_turn(c, session, "CX-FULL add full.txt", answer=refuse)
        assert asked == [] and not of(frames, "permission_request")
        assert (project / "full.txt").read_text() == "full.txt\n"
