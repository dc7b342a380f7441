"""Agent modes over ACP with the real Gemini CLI against the fake Gemini server: plan mode does
not write, ``autoEdit`` (switched live with ``session/set_mode``) writes without asking.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import realcli
from tests.fakes import CallTool, FakeChat, FakeGemini, Reply
from tests.harness import (
    Harness,
    after_tool,
    daemon_env,
    detected,
    make_project,
    of,
    run_turn,
    toml_string,
    user,
)

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
    config = f'[agents.gemini]\nbinary = {toml_string(BINARY)}\nmodel = "{realcli.GEMINI_MODEL}"\n'
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
        created = await c.request("session.create", agent="gemini", cwd=str(project), mode="plan")
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


QWEN = realcli.qwen_bin()


@pytest.fixture(scope="module")
def qwen_fake() -> Iterator[FakeChat]:
    with FakeChat() as srv:
        yield srv


@pytest.fixture(scope="module")
def qwen_harness(
    tmp_path_factory: pytest.TempPathFactory, qwen_fake: FakeChat
) -> Iterator[Harness]:
    if QWEN is None:
        pytest.skip(realcli.missing_reason("qwen"))
    root = tmp_path_factory.mktemp("acp-modes-qwen")
    env = realcli.qwen_env(root / "cli", qwen_fake.base_url)
    command = ", ".join(toml_string(a) for a in (QWEN, "--acp"))
    config = f'[acp.qwen]\ncommand = [{command}]\ndisplay_name = "Qwen Code"\n'
    h = Harness(root / "daemon", daemon_env(env), config)
    yield h
    h.stop()


async def test_an_acp_agent_without_declared_modes_lists_and_switches_the_ones_it_reports(
    qwen_harness: Harness, qwen_fake: FakeChat, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "project")
    planned, done = project / "planned.txt", project / "yolo.txt"
    qwen_fake.script(
        CallTool("write_file", {"file_path": str(planned), "content": "p\n"}, when=user("QW-PLAN")),
        Reply(text="Planned only.", when=after_tool("QW-PLAN")),
        CallTool("write_file", {"file_path": str(done), "content": "y\n"}, when=user("QW-YOLO")),
        Reply(text="Written.", when=after_tool("QW-YOLO")),
    )
    asked: list[dict[str, Any]] = []

    def refuse(request: dict[str, Any]) -> str:
        asked.append(request)
        return next(o["id"] for o in request["options"] if o["kind"] == "reject_once")

    async with qwen_harness.client() as c:
        assert (await detected(c, "qwen"))["modes"] == []  # known once a session ran
        bad = await c.call("session.create", agent="qwen", cwd=str(project), mode="plan")
        assert bad["t"] == "err" and bad["code"] == "bad_request"
        created = await c.request("session.create", agent="qwen", cwd=str(project))
        session = created["session"]["session"]
        modes = [m["id"] for m in (await detected(c, "qwen"))["modes"]]
        assert {"plan", "default", "yolo"} <= set(modes)
        await c.request("session.subscribe", session=session, after_seq=0)
        assert await c.request("session.mode", session=session, mode="plan") == {
            "mode": "plan",
            "live": True,
        }
        await run_turn(c, session, "QW-PLAN write planned.txt", answer=refuse, timeout=120)
        assert not planned.exists()
        assert await c.request("session.mode", session=session, mode="yolo") == {
            "mode": "yolo",
            "live": True,
        }
        asked.clear()
        frames = await run_turn(c, session, "QW-YOLO write yolo.txt", answer=refuse, timeout=120)
        assert done.read_text() == "y\n"
        assert asked == [] and not of(frames, "permission_request")


HERMES = realcli.hermes_bin()


@pytest.fixture(scope="module")
def hermes_fake() -> Iterator[FakeChat]:
    with FakeChat() as srv:
        yield srv


@pytest.fixture(scope="module")
def hermes_harness(
    tmp_path_factory: pytest.TempPathFactory, hermes_fake: FakeChat
) -> Iterator[Harness]:
    if HERMES is None:
        pytest.skip(realcli.missing_reason("hermes"))
    root = tmp_path_factory.mktemp("acp-modes-hermes")
    env = realcli.hermes_env(root / "cli", hermes_fake.base_url)
    config = f"[agents.hermes]\nbinary = {toml_string(HERMES)}\n"
    h = Harness(root / "daemon", daemon_env(env), config)
    yield h
    h.stop()


async def test_hermes_default_asks_then_accept_edits_writes_without_asking(
    hermes_harness: Harness, hermes_fake: FakeChat, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "project")
    refused, accepted = project / "refused.txt", project / "accepted.txt"
    hermes_fake.script(
        CallTool("write_file", {"path": str(refused), "content": "r\n"}, when=user("HM-ASK")),
        Reply(text="Not written.", when=after_tool("HM-ASK")),
        CallTool("write_file", {"path": str(accepted), "content": "a\n"}, when=user("HM-ACC")),
        Reply(text="Written.", when=after_tool("HM-ACC")),
    )
    asked: list[dict[str, Any]] = []

    def refuse(request: dict[str, Any]) -> str:
        asked.append(request)
        return next(o["id"] for o in request["options"] if o["kind"] == "reject_once")

    async with hermes_harness.client() as c:
        entry = await detected(c, "hermes")
        assert [m["id"] for m in entry["modes"]] == ["default", "accept_edits", "dont_ask"]
        created = await c.request("session.create", agent="hermes", cwd=str(project))
        session = created["session"]["session"]
        await c.request("session.subscribe", session=session, after_seq=0)
        await run_turn(c, session, "HM-ASK write refused.txt", answer=refuse, timeout=120)
        assert asked and not refused.exists()
        switched = await c.request("session.mode", session=session, mode="accept_edits")
        assert switched == {"mode": "accept_edits", "live": True}
        asked.clear()
        frames = await run_turn(c, session, "HM-ACC write accepted.txt", answer=refuse, timeout=120)
        assert accepted.read_text() == "a\n"
        assert asked == [] and not of(frames, "permission_request")
