"""OpenCode and Kilo modes with the real ``opencode serve`` / ``kilo serve`` against the fake
Chat Completions server: in ``plan`` the agent does not write; switched to ``build`` (from the
next turn) the same write runs without a permission request.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import realcli
from tests.fakes import CallTool, FakeChat, Reply
from tests.harness import Harness, agent_toml, daemon_env, make_project, of, run_turn, user

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(300)]


@pytest.fixture(scope="module", params=["opencode", "kilo"])
def cli(request: pytest.FixtureRequest) -> str:
    name = str(request.param)
    if realcli.cli_bin(name) is None:
        pytest.skip(realcli.missing_reason(name))
    return name


@pytest.fixture(scope="module")
def fake(cli: str) -> Iterator[FakeChat]:
    with FakeChat() as srv:
        yield srv


@pytest.fixture(scope="module")
def harness(
    cli: str, tmp_path_factory: pytest.TempPathFactory, fake: FakeChat
) -> Iterator[Harness]:
    binary = realcli.cli_bin(cli)
    assert binary is not None
    root = tmp_path_factory.mktemp(f"{cli}-modes")
    make = realcli.opencode_env if cli == "opencode" else realcli.kilo_env
    env = make(root / "cli", fake.base_url)
    xdg = {k: v for k, v in env.items() if k.startswith("XDG_")}
    h = Harness(
        root / "daemon", daemon_env(env), agent_toml(cli, binary, env=xdg, model="fake/fake-model")
    )
    yield h
    h.stop()


async def test_plan_does_not_write_then_build_writes_without_asking(
    cli: str, harness: Harness, fake: FakeChat, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "project")
    planned, built = project / "planned.txt", project / "built.txt"

    def after(marker: str) -> Any:
        return lambda r: r.view.last_is_tool_result and marker in r.view.last_user_text

    fake.script(
        CallTool("write", {"filePath": str(planned), "content": "p\n"}, when=user("OC-PLAN")),
        Reply(text="Plan only.", when=after("OC-PLAN")),
        CallTool("write", {"filePath": str(built), "content": "built\n"}, when=user("OC-BUILD")),
        Reply(text="Built.", when=after("OC-BUILD")),
    )
    asked: list[dict[str, Any]] = []

    def answer(request: dict[str, Any]) -> str:
        asked.append(request)
        return next(o["id"] for o in request["options"] if o["kind"] == "reject_once")

    async with harness.client() as c:
        created = await c.request("session.create", agent=cli, cwd=str(project), mode="plan")
        session = created["session"]["session"]
        assert created["session"]["mode"] == "plan"
        await c.request("session.subscribe", session=session, after_seq=0)
        frames = await run_turn(c, session, "OC-PLAN write it", answer=answer, timeout=180)
        assert not planned.exists()
        assert of(frames, "session_end")[-1]["reason"] == "completed"
        assert any("OC-PLAN" in r.view.last_user_text for r in fake.agent_requests)
        switched = await c.request("session.mode", session=session, mode="build")
        assert switched == {"mode": "build", "live": False}
        asked.clear()
        frames = await run_turn(c, session, "OC-BUILD write it", answer=answer, timeout=180)
        assert built.read_text() == "built\n"
        assert asked == [] and not of(frames, "permission_request")
